"""Finding every router of this user on this machine, and asking them.

:func:`survey` lists the sockets in the local directory
(:func:`router.board.local.local_directory`) and asks every router at once,
each under its own deadline (``GET /router``, then ``GET
/sessions?scope=router``, its own sessions, through the ``cli`` channel). What each socket turns out to be:

- **reached**: it answered both; its sessions go on the board, each with
  the router that holds it;
- **gone**: the connect was refused, so nothing listens on that file and
  nothing ever will (a router killed with SIGKILL leaves exactly that; a
  live router's socket only gets its name once it listens, see
  :mod:`router.board.local`). It is removed, and is no concern of anyone's;
- **skipped**: it did not answer within the deadline (a router that hangs,
  or is stopped), or answered with a refusal or something that is not the
  router's API. It is reported, never waited for past the deadline, and
  never removed: it may be alive.

The directory is checked as the routers check it (``router._unix``): a
directory that is not a real directory of this user's with mode 0700 is
refused (``unsafe-directory``) and nothing in it is asked, since a socket
in a directory others can write to may be anyone's. A socket file that is
not this user's is skipped too. A missing directory is an empty board.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any, Final, Mapping

import attrs
import trio

from router._httpx import unix_transport
from router._unix import check_private_directory, listener_gone, remove_if_bound
from router.board.paths import INFO_ROUTE, LOCAL_HOST, SOCKET_SUFFIX, local_directory
from router.errors import Refusal, is_code
from wire.json import JsonError, loads

__all__ = ["ANSWER_TIMEOUT", "BASE_URL", "Board", "CLI_CHANNEL", "NO_ROUTER", "OWN_SESSIONS_ROUTE", "Reached", "UNSHARED_SESSIONS_ROUTE", "Skipped", "holder", "read_answer",
           "reached", "router_sockets", "survey"]

log = logging.getLogger("router.board")

#: How long a router has to answer a survey (ours: a live router answers
#: from memory and one store read; this leaves room on a loaded machine and
#: keeps a hung router from holding a person's command up for long).
ANSWER_TIMEOUT: Final = 5.0
#: The header that names the channel a request comes through, and ours
#: (``router.api.app.CHANNEL_HEADER``; the CLI's channel is ``cli``).
CLI_CHANNEL: Final = {"x-router-channel": "cli"}
#: A router's own sessions, without the other routers' (a router lists
#: the whole board at ``GET /sessions``; asking that of each would recurse).
OWN_SESSIONS_ROUTE: Final = "/sessions?scope=router"
#: A router's own sessions but those of its cluster's shared record, which
#: a router of the same cluster lists already (every router of a cluster
#: lists every session of the record).
UNSHARED_SESSIONS_ROUTE: Final = "/sessions?scope=unshared"
#: What a client names a router's socket by, as a URL.
BASE_URL: Final = f"http://{LOCAL_HOST}"


@attrs.frozen
class Reached:
    """A router that answered: who it is (``GET /router``) and its
    sessions (``GET /sessions``)."""

    info: dict[str, Any]
    sessions: list[dict[str, Any]]

    @property
    def name(self) -> str:
        return str(self.info.get("name"))

    @property
    def socket(self) -> str:
        return str(self.info.get("socket"))


@attrs.frozen
class Skipped:
    """A socket whose router did not answer as a router: why, as a refusal."""

    socket: str
    refusal: Refusal

    @property
    def name(self) -> str:
        return os.path.basename(self.socket)[: -len(SOCKET_SUFFIX)]


@attrs.frozen
class Board:
    """Every router found: those that answered, those skipped, and the dead
    sockets removed."""

    directory: str
    reached: list[Reached] = attrs.field(factory=list)
    skipped: list[Skipped] = attrs.field(factory=list)
    removed: list[str] = attrs.field(factory=list)

    def sessions(self) -> list[dict[str, Any]]:
        """Every session of every router that answered, with ``router`` (who
        holds it), routers in name order. A session of a cluster
        (``clustered``: every router of the cluster lists it, naming the
        router holding its lease, docs/cluster.md) is listed once, as the
        first router listing it names it."""
        out, seen = [], set()
        for router in self.reached:
            for session in router.sessions:
                if not session.get("clustered"):
                    out.append({**session, "router": router.info})
                elif session.get("id") not in seen:
                    seen.add(session.get("id"))
                    out.append(session)
        return out

    def holders(self, session: str) -> list[Reached]:
        """The routers that list ``session``, one per session: of a
        cluster's session (every router of the cluster lists the one
        session), the first router listing it, since any router of the
        cluster delivers to its holder; and each router listing a session
        of that id of its own."""
        out, cluster_seen = [], False
        for router in self.reached:
            listed = [item for item in router.sessions if item.get("id") == session]
            if not listed:
                continue
            if all(item.get("clustered") for item in listed):
                if cluster_seen:
                    continue
                cluster_seen = True
            out.append(router)
        return out


def router_sockets(directory: str) -> list[str]:
    """The router sockets in ``directory``, by name; ``[]`` when it does not
    exist. Raises a :class:`~router.errors.Refusal` (``unsafe-directory``)
    when it is not a private directory of this user's."""
    try:
        check_private_directory(directory)
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not name.endswith(SOCKET_SUFFIX):
            continue  # a `.binding` file, or nothing of ours
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue  # removed since the listing
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
            log.warning("skipped %s: not a socket of this user's", path)
            continue
        found.append(path)
    return found


async def survey(env: Mapping[str, str], *, timeout: float = ANSWER_TIMEOUT, exclude: str | None = None,
                 unshared: frozenset[str] = frozenset()) -> Board:
    """Ask every router of this user (see the module docstring), but the
    one at the socket ``exclude`` (a router surveying the others); those at
    the sockets ``unshared`` (of the surveying router's cluster) for their
    sessions outside the cluster only. Raises a
    :class:`~router.errors.Refusal` (``unsafe-directory``) only."""
    directory = str(local_directory(env))
    board = Board(directory=directory)
    answers: dict[str, Reached | Skipped | None] = {}

    async def ask(path: str) -> None:
        answers[path] = await _ask(path, timeout, UNSHARED_SESSIONS_ROUTE if path in unshared else OWN_SESSIONS_ROUTE)

    sockets = [path for path in router_sockets(directory) if path != exclude]  # refused before anything is asked
    async with trio.open_nursery() as nursery:
        for path in sockets:
            nursery.start_soon(ask, path, name=f"survey {os.path.basename(path)}")
    for path in sorted(answers):
        answer = answers[path]
        if answer is None:
            board.removed.append(path)
        elif isinstance(answer, Reached):
            board.reached.append(answer)
        else:
            board.skipped.append(answer)
    return board


async def _ask(path: str, timeout: float, route: str = OWN_SESSIONS_ROUTE) -> Reached | Skipped | None:
    """One router's answer, a skip, or None once its dead socket is removed."""
    import httpx

    try:
        before = os.lstat(path)
    except FileNotFoundError:
        return None
    name = os.path.basename(path)[: -len(SOCKET_SUFFIX)]
    with trio.move_on_after(timeout):
        try:
            async with httpx.AsyncClient(transport=unix_transport(path), base_url=BASE_URL,
                                         headers=CLI_CHANNEL, timeout=None) as client:
                info = await _get(client, INFO_ROUTE, name)
                sessions = await _get(client, route, name)
        except httpx.HTTPError as exc:
            if listener_gone(path):
                log.info("removed %s: nothing listens on it (its router is gone)", path)
                remove_if_bound(path, before)
                return None
            return Skipped(path, Refusal("cannot-connect", f"router {name} ({path}) cannot be reached: {exc}"))
        except Refusal as refused:
            return Skipped(path, refused)
        return reached(path, info, sessions)
    return Skipped(path, Refusal("no-answer", f"router {name} ({path}) did not answer within {timeout:g} s; "
                                 "it may be hung or stopped (it was left alone)"))


async def _get(client: Any, route: str, name: str) -> Any:
    response = await client.get(route)
    return read_answer(name, route, response.status_code, response.content)


def read_answer(name: str, route: str, status: int, content: bytes) -> Any:
    """The JSON a router answered ``GET route`` with, or a
    :class:`~router.errors.Refusal`: the router's own when it refused with a
    code (``channel-off`` ...), ``not-a-router`` for anything else that is
    not a 200 with JSON. Raises nothing else, whatever ``content`` is."""
    try:
        body = loads(content.decode("utf-8"))
    except (UnicodeDecodeError, JsonError, RecursionError):
        raise Refusal("not-a-router", f"router {name} answered GET {route} with no JSON") from None
    if status != 200:
        error = body.get("error") if type(body) is dict else None
        if is_code(error) and type(body.get("message")) is str:
            raise Refusal(error, f"router {name}: {body['message']}")
        raise Refusal("not-a-router", f"router {name} answered GET {route} {status}")
    return body


def reached(path: str, info: Any, sessions: Any) -> Reached | Skipped:
    """The router at ``path`` from its two answers (any JSON values): on
    the board, or skipped ``not-a-router`` when they are not a router's."""
    if type(info) is not dict or type(sessions) is not dict or type(sessions.get("sessions")) is not list:
        return Skipped(path, Refusal("not-a-router", f"{path} answered, but not as a router does"))
    # Its name and socket are the file's: what a client reached it by.
    name = os.path.basename(path)[: -len(SOCKET_SUFFIX)]
    return Reached(info={**info, "name": name, "socket": path},
                   sessions=[item for item in sessions["sessions"] if type(item) is dict])


#: The refusals of :func:`holder` that mean "no router to ask" (the CLI's
#: connection errors) rather than "the routers said no".
NO_ROUTER: Final = frozenset({"no-router", "unknown-router", "unsafe-directory", "cannot-connect", "no-answer",
                              "not-a-router"})


async def holder(env: Mapping[str, str], session: str, *, router: str | None = None,
                 timeout: float = ANSWER_TIMEOUT) -> tuple[Reached, Board]:
    """The router that holds ``session``, and the board it was picked from.
    ``router`` names the router to use instead of looking (its name, as
    ``router sessions`` shows it). Raises a :class:`~router.errors.Refusal`:
    ``no-router`` (none of this user's runs), ``unknown-session`` (none
    lists it), ``ambiguous-session`` (several do: name one), or, for a named
    router, ``unknown-router`` and what :func:`survey` skips a router for."""
    if router is not None:
        return await _named(env, router, timeout)
    board = await survey(env, timeout=timeout)
    found = board.holders(session)
    if len(found) == 1:
        return found[0], board
    if not board.reached and not board.skipped:
        raise Refusal("no-router", f"no router of yours is running (none in {board.directory}); start one with "
                      "`router serve`, or give --url", directory=board.directory)
    if not found:
        unasked = f"; {len(board.skipped)} router(s) did not answer, and may hold it" if board.skipped else ""
        raise Refusal("unknown-session", f"no router of yours holds a session {session!r}{unasked}; "
                      "`router sessions` lists them", session=session,
                      skipped=[{"router": each.name, "error": each.refusal.code, "message": each.refusal.message}
                               for each in board.skipped])
    names = ", ".join(each.name for each in found)
    raise Refusal("ambiguous-session", f"{len(found)} routers hold a session {session!r} ({names}); "
                  "name the one you mean with --router NAME", session=session, routers=[each.name for each in found])


async def _named(env: Mapping[str, str], name: str, timeout: float) -> tuple[Reached, Board]:
    from router.board.paths import socket_path

    directory = str(local_directory(env))
    path = str(socket_path(env, name))
    if os.sep in name or path not in router_sockets(directory):
        raise Refusal("unknown-router", f"no router named {name!r} is running (no {path}); `router sessions` "
                      "names them", router=name)
    answer = await _ask(path, timeout)
    if answer is None:
        raise Refusal("unknown-router", f"router {name!r} is gone (nothing listens on {path})", router=name)
    if isinstance(answer, Skipped):
        raise answer.refusal
    return answer, Board(directory=directory, reached=[answer])
