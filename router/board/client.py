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

The asking is blocking, on :mod:`router._client_sync`
(:func:`survey_blocking`, :func:`holder_blocking`): one thread per router
when there are several, each under its deadline. The command line calls
these as they are; a router calls :func:`survey` and :func:`holder`, the
same in a Trio worker thread. So this module never loads httpx, and loads
neither trio, attrs nor logging until an async function of it runs: :class:`Reached`, :class:`Skipped` and
:class:`Board` are plain classes (attrs alone was a fifth of ``router
sessions``'s start-up, docs/bench.md).
"""

from __future__ import annotations

import os
import stat
from typing import Any, Final, Mapping

from router._unix import check_private_directory, listener_gone, remove_if_bound
from router.board.paths import INFO_ROUTE, LOCAL_HOST, SOCKET_SUFFIX, local_directory
from router.errors import Refusal
from wire.json import JsonError, loads

__all__ = ["ANSWER_TIMEOUT", "BASE_URL", "Board", "CLI_CHANNEL", "NO_ROUTER", "OWN_SESSIONS_ROUTE", "Reached", "UNSHARED_SESSIONS_ROUTE", "Skipped", "holder",
           "holder_blocking", "read_answer", "reached", "router_sockets", "survey", "survey_blocking"]


def _log(message: str, *args: Any, level: str = "info") -> None:
    import logging  # not at import: the command line loads this module

    getattr(logging.getLogger("router.board"), level)(message, *args)

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


class Reached:
    """A router that answered: who it is (``GET /router``) and its
    sessions (``GET /sessions``)."""

    __slots__ = ("info", "sessions")

    def __init__(self, info: dict[str, Any], sessions: list[dict[str, Any]]) -> None:
        self.info = info
        self.sessions = sessions

    def __repr__(self) -> str:
        return f"Reached(info={self.info!r}, sessions={self.sessions!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not Reached:
            return NotImplemented
        assert isinstance(other, Reached)
        return (self.info, self.sessions) == (other.info, other.sessions)

    __hash__ = None  # type: ignore[assignment]  # it holds lists

    @property
    def name(self) -> str:
        return str(self.info.get("name"))

    @property
    def socket(self) -> str:
        return str(self.info.get("socket"))


class Skipped:
    """A socket whose router did not answer as a router: why, as a refusal."""

    __slots__ = ("refusal", "socket")

    def __init__(self, socket: str, refusal: Refusal) -> None:
        self.socket = socket
        self.refusal = refusal

    def __repr__(self) -> str:
        return f"Skipped(socket={self.socket!r}, refusal={self.refusal!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not Skipped:
            return NotImplemented
        assert isinstance(other, Skipped)
        return (self.socket, self.refusal) == (other.socket, other.refusal)

    def __hash__(self) -> int:
        return hash((self.socket, self.refusal))

    @property
    def name(self) -> str:
        return os.path.basename(self.socket)[: -len(SOCKET_SUFFIX)]


class Board:
    """Every router found: those that answered, those skipped, and the dead
    sockets removed."""

    __slots__ = ("directory", "reached", "removed", "skipped")

    def __init__(self, directory: str, reached: list[Reached] | None = None, skipped: list[Skipped] | None = None,
                 removed: list[str] | None = None) -> None:
        self.directory = directory
        self.reached: list[Reached] = [] if reached is None else reached
        self.skipped: list[Skipped] = [] if skipped is None else skipped
        self.removed: list[str] = [] if removed is None else removed

    def __repr__(self) -> str:
        return (f"Board(directory={self.directory!r}, reached={self.reached!r}, skipped={self.skipped!r}, "
                f"removed={self.removed!r})")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Board:
            return NotImplemented
        assert isinstance(other, Board)
        return ((self.directory, self.reached, self.skipped, self.removed)
                == (other.directory, other.reached, other.skipped, other.removed))

    __hash__ = None  # type: ignore[assignment]  # it holds lists

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
            _log("skipped %s: not a socket of this user's", path, level="warning")
            continue
        found.append(path)
    return found


async def survey(env: Mapping[str, str], *, timeout: float = ANSWER_TIMEOUT, exclude: str | None = None,
                 unshared: frozenset[str] = frozenset(), known: Mapping[str, Reached] | None = None) -> Board:
    """:func:`survey_blocking` from Trio: the same board, asked from a
    worker thread (every router's answer comes within ``timeout`` seconds:
    the blocking client's deadlines end the thread; a cancelled survey
    leaves it to finish on its own)."""
    from functools import partial

    import trio

    return await trio.to_thread.run_sync(
        partial(survey_blocking, env, timeout=timeout, exclude=exclude, unshared=unshared, known=known),
        abandon_on_cancel=True
    )


def survey_blocking(env: Mapping[str, str], *, timeout: float = ANSWER_TIMEOUT, exclude: str | None = None,
                    unshared: frozenset[str] = frozenset(), known: Mapping[str, Reached] | None = None) -> Board:
    """Ask every router of this user (see the module docstring), but the
    one at the socket ``exclude`` (a router surveying the others); those at
    the sockets ``unshared`` (of the surveying router's cluster) for their
    sessions outside the cluster only; those at the sockets ``known`` not
    at all: their answer is the one given (a router's cluster peers'
    answers, kept until they tell of a change). Every router is asked at
    once (a thread each when there are several), each within ``timeout``
    seconds.
    Raises a :class:`~router.errors.Refusal` (``unsafe-directory``) only.

    It runs on :mod:`router._client_sync` (no trio, no httpx), for the
    command line as it is and for a router (:func:`survey`) in a thread:
    one implementation, and a ``router mcp`` that never loads httpx to
    see the board."""
    directory = str(local_directory(env))
    sockets = [path for path in router_sockets(directory) if path != exclude]  # refused before anything is asked
    answers: dict[str, Reached | Skipped | None] = {}
    if known:
        answers.update((path, known[path]) for path in sockets if path in known)
        sockets = [path for path in sockets if path not in known]

    def ask(path: str) -> None:
        answers[path] = _ask_blocking(path, timeout, UNSHARED_SESSIONS_ROUTE if path in unshared else OWN_SESSIONS_ROUTE)

    if len(sockets) == 1:
        ask(sockets[0])
    elif sockets:
        import threading

        threads = [threading.Thread(target=ask, args=(path,), name=f"survey {os.path.basename(path)}", daemon=True)
                   for path in sockets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()  # each ends within its deadline: its socket's timeouts
    return _board(directory, answers)


def _board(directory: str, answers: Mapping[str, Reached | Skipped | None]) -> Board:
    board = Board(directory=directory)
    for path in sorted(answers):
        answer = answers[path]
        if answer is None:
            board.removed.append(path)
        elif isinstance(answer, Reached):
            board.reached.append(answer)
        else:
            board.skipped.append(answer)
    return board


def _ask_blocking(path: str, timeout: float, route: str = OWN_SESSIONS_ROUTE) -> Reached | Skipped | None:
    """One router's answer (``GET /router`` and ``route``, both within
    ``timeout``), a skip, or None once its dead socket is removed."""
    import time

    from router._client_sync import request

    try:
        before = os.lstat(path)
    except FileNotFoundError:
        return None
    name = os.path.basename(path)[: -len(SOCKET_SUFFIX)]
    deadline = time.monotonic() + timeout
    answers = []
    for each in (INFO_ROUTE, route):
        try:
            response = request("GET", each, socket_path=path, headers=CLI_CHANNEL,
                               timeout=max(deadline - time.monotonic(), 0.001))
            answers.append(read_answer(name, each, response.status, response.body))
        except Refusal as refused:
            if refused.code == "no-answer":
                return _no_answer(path, name, timeout)
            if refused.code in ("cannot-connect", "bad-answer"):
                return _unreachable(path, before, name, refused.message)
            return Skipped(path, refused)  # the router's own refusal, or not-a-router
    return reached(path, *answers)


def _unreachable(path: str, before: os.stat_result, name: str, why: object) -> Skipped | None:
    """A router whose connection failed: None once its dead socket is
    removed (nothing listens on it), else skipped ``cannot-connect``."""
    if listener_gone(path):
        _log("removed %s: nothing listens on it (its router is gone)", path)
        remove_if_bound(path, before)
        return None
    return Skipped(path, Refusal("cannot-connect", f"router {name} ({path}) cannot be reached: {why}"))


def _no_answer(path: str, name: str, timeout: float) -> Skipped:
    return Skipped(path, Refusal("no-answer", f"router {name} ({path}) did not answer within {timeout:g} s; "
                                 "it may be hung or stopped (it was left alone)"))


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
        refused = Refusal.from_json(body)
        if refused is not None:
            raise Refusal(refused.code, f"router {name}: {refused.message}")
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
    """:func:`holder_blocking` from Trio, in a worker thread (as
    :func:`survey`)."""
    from functools import partial

    import trio

    return await trio.to_thread.run_sync(
        partial(holder_blocking, env, session, router=router, timeout=timeout), abandon_on_cancel=True
    )


def holder_blocking(env: Mapping[str, str], session: str, *, router: str | None = None,
                    timeout: float = ANSWER_TIMEOUT) -> tuple[Reached, Board]:
    """The router that holds ``session``, and the board it was picked from.
    ``router`` names the router to use instead of looking (its name, as
    ``router sessions`` shows it). Raises a :class:`~router.errors.Refusal`:
    ``no-router`` (none of this user's runs), ``unknown-session`` (none
    lists it), ``ambiguous-session`` (several do: name one), or, for a named
    router, ``unknown-router`` and what :func:`survey` skips a router for."""
    if router is not None:
        path = _named_socket(env, router)
        return _named_answer(env, router, path, _ask_blocking(path, timeout))
    return _picked(survey_blocking(env, timeout=timeout), session)


def _picked(board: Board, session: str) -> tuple[Reached, Board]:
    """The one router of ``board`` that holds ``session`` (see :func:`holder`)."""
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
                      skipped=[{"router": each.name, **each.refusal.to_json()} for each in board.skipped])
    names = ", ".join(each.name for each in found)
    raise Refusal("ambiguous-session", f"{len(found)} routers hold a session {session!r} ({names}); "
                  "name the one you mean with --router NAME", session=session, routers=[each.name for each in found])


def _named_socket(env: Mapping[str, str], name: str) -> str:
    """The socket of the running router ``name``; ``unknown-router`` when there is none."""
    from router.board.paths import socket_path

    directory = str(local_directory(env))
    path = str(socket_path(env, name))
    if os.sep in name or path not in router_sockets(directory):
        raise Refusal("unknown-router", f"no router named {name!r} is running (no {path}); `router sessions` "
                      "names them", router=name)
    return path


def _named_answer(env: Mapping[str, str], name: str, path: str,
                  answer: Reached | Skipped | None) -> tuple[Reached, Board]:
    if answer is None:
        raise Refusal("unknown-router", f"router {name!r} is gone (nothing listens on {path})", router=name)
    if isinstance(answer, Skipped):
        raise answer.refusal
    return answer, Board(directory=str(local_directory(env)), reached=[answer])
