"""Each router's private Unix socket: the API its TCP port serves, for this
user alone.

Every router of this user on this machine (``router serve``, each Claude
Code session's ``router mcp``) binds one socket in one shared directory, so
that ``router sessions`` and ``router send`` find them all with no URL:

- **Where.** :func:`local_directory`: ``$XDG_RUNTIME_DIR/router`` when
  ``XDG_RUNTIME_DIR`` names an absolute directory (the user's private run
  directory, emptied at logout), else ``<data dir>/run`` with the data
  directory from the environment (``$ROUTER_DATA_DIR``, else
  ``$XDG_DATA_HOME/router``, else ``~/.local/share/router``). It depends on
  the environment only, never on ``--data-dir``: every router of the user
  meets in the same one.
- **Who may.** The directory is created 0700 and checked before anything
  is bound in it (``router._unix``, the check the mod link makes): a real
  directory, owned by this user, mode 0700, else ``unsafe-directory`` and
  nothing bound. The socket itself is 0600.
- **Name.** ``<command>-<pid>-<4 hex>.sock`` (``serve-4242-a1b2.sock``):
  the router's name, which ``router sessions`` shows. Unique among live
  routers without asking anyone (the pid), and never the name of a dead
  router's stale socket (the random part), so starting never has to remove
  another's file.
- **No half-born socket.** The socket is bound at ``<name>.binding``, made
  listening, and only then renamed to ``<name>.sock`` (a Unix socket is
  reached through its file's inode, which the rename keeps). A client that
  finds a ``.sock`` whose connect is refused therefore knows nobody will
  ever listen there (the router died, SIGKILL included) and may remove it;
  before the rename it would have raced a router between ``bind`` and
  ``listen``. A SIGKILL between those two calls can leave a ``.binding``
  file; clients never read them.
- **What it serves.** The API app of :mod:`router.api.app` (the same
  routes, guards and channels as the TCP port), built for ``Host:
  localhost`` (what a client names a Unix socket by), with no token (the
  directory is the access check), plus ``GET /router``: who this router is
  (:class:`RouterInfo`). With a ``board`` (:class:`router.board.service.LocalBoard`,
  shared with the TCP port) it lists the whole board and forwards as the TCP
  port does, and the board learns this router's name and socket.

Resource handling: :meth:`LocalServer.run` removes the socket file on every
exit, if it is still the one it bound (the mod link's rule).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import attrs
import trio
from quart import Response

from router._hypercorn import serve_on_socket
from router._unix import MAX_SOCKET_PATH_BYTES, bind_private_socket, make_private_directory, remove_if_bound
from router.api.app import ApiConfig, make_app
from router.board.service import process_cwd
from router.board.paths import BINDING_SUFFIX, INFO_ROUTE, LOCAL_HOST, SOCKET_SUFFIX, local_directory, uses_runtime_dir
from router.errors import Refusal
from wire.json import dumps

__all__ = ["LocalServer", "RouterInfo", "make_local_directory", "router_name"]

log = logging.getLogger("router.board")

def make_local_directory(env: Mapping[str, str]) -> Path:
    """:func:`local_directory`, created (0700) when missing and checked:
    a :class:`~router.errors.Refusal` (``unsafe-directory``) unless it is
    a real directory of this user's with mode 0700. Under the data
    directory its parents are made as the data directory is; a missing
    ``$XDG_RUNTIME_DIR`` is not ours to make, and is refused."""
    directory = local_directory(env)
    if not uses_runtime_dir(env):
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # the check says what is wrong
    make_private_directory(str(directory))
    return directory


def router_name(command: str) -> str:
    """A new router's name: ``<command>-<pid>-<4 hex>``."""
    return f"{command}-{os.getpid()}-{secrets.token_hex(2)}"


@attrs.frozen(kw_only=True)
class RouterInfo:
    """Who a router is, as ``GET /router`` answers."""

    name: str
    command: str
    pid: int
    socket: str
    data_dir: str
    #: Its TCP API, when it serves one.
    url: str | None = None
    #: Its working directory (a ``router mcp`` runs where its Claude Code session does).
    cwd: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "command": self.command, "pid": self.pid, "socket": self.socket,
                               "dataDir": self.data_dir}
        if self.url is not None:
            out["url"] = self.url
        if self.cwd is not None:
            out["cwd"] = self.cwd
        return out


class LocalServer:
    """A router's private socket (see the module docstring)::

        local = LocalServer(router, layer, env=os.environ, command="serve", data_dir=data)
        path = await nursery.start(local.run)

    Error handling: :meth:`run` raises a :class:`~router.errors.Refusal`
    before ``started`` (``unsafe-directory``, ``socket-path-too-long``,
    ``bind-failed``) and binds nothing then.
    """

    def __init__(
        self,
        router: Any,
        layer: Any,
        *,
        env: Mapping[str, str],
        command: str,
        data_dir: Path,
        url: str | None = None,
        config: ApiConfig | None = None,
        board: Any = None,
        reach: Any = None,
    ) -> None:
        self.env = env
        self.directory = local_directory(env)
        self.name = router_name(command)
        self.path = str(self.directory / f"{self.name}{SOCKET_SUFFIX}")
        self.info = RouterInfo(name=self.name, command=command, pid=os.getpid(), socket=self.path,
                               data_dir=str(data_dir), url=url, cwd=process_cwd())
        self.board = board
        if board is not None:
            board.info, board.socket = self.info.to_json(), self.path
        self.app = make_app(router, layer, config or ApiConfig(), lambda: {LOCAL_HOST}, board=board)
        # Pairing and devices (router.remote): `router pair` and `router devices` ask here.
        self.reach = reach
        from router.remote import make_blueprint

        self.app.register_blueprint(make_blueprint(lambda: self.reach))
        info = dumps(self.info.to_json())

        @self.app.get(INFO_ROUTE)
        async def who() -> Response:
            return Response(info, content_type="application/json")

        self.serving = False

    def __repr__(self) -> str:
        return f"<LocalServer {self.path} {'serving' if self.serving else 'not serving'}>"

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Check the directory, bind, serve until cancelled;
        ``started(path)`` once the socket listens under its final name."""
        binding = self.path[: -len(SOCKET_SUFFIX)] + BINDING_SUFFIX
        if len(os.fsencode(binding)) > MAX_SOCKET_PATH_BYTES:
            raise Refusal(
                "socket-path-too-long",
                f"{binding} is longer than a Unix socket path may be ({MAX_SOCKET_PATH_BYTES} bytes); "
                "set XDG_RUNTIME_DIR (or ROUTER_DATA_DIR) to a shorter directory",
                path=binding,
            )
        make_local_directory(self.env)
        sock = bind_private_socket(binding)
        try:
            os.rename(binding, self.path)
            bound = os.stat(self.path)
        except OSError as exc:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(binding)
            raise Refusal("bind-failed", f"could not name the socket {self.path}: {exc.strerror}",
                          path=self.path) from exc
        self.serving = True
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(serve_on_socket, self.app, sock, logger="router.board.http"))
                log.info("local socket %s", self.path)
                task_status.started(self.path)
        finally:
            self.serving = False
            sock.close()
            remove_if_bound(self.path, bound)

    def statistics(self) -> dict[str, Any]:
        return {"path": self.path, "serving": self.serving}
