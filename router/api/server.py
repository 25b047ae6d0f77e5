"""The HTTP API served: Hypercorn serving the Quart-Trio app on 127.0.0.1
(:class:`ApiServer`) and on the router's private Unix socket
(:class:`LocalServer`); one app builder for both (:func:`build_app`).

Usage (components of the main job)::

    api = ApiServer(router, layer, port=8765, token=token)
    url = await nursery.start(api.run)   # "http://127.0.0.1:8765"
    api.page_url                         # "http://127.0.0.1:8765/?token=..."
    local = LocalServer(router, layer, env=os.environ, command="serve", data_dir=data)
    path = await nursery.start(local.run)

Every route but ``GET /`` and ``GET /healthz`` takes ``Authorization:
Bearer <token>`` (:mod:`router.board.access`); ``board`` makes
``GET /sessions`` the whole local board and forwards to its holders.

Every TCP request passes the remote gate (:mod:`router.remote.gate`): an
``Origin`` that is not the router's own is refused. With ``reach`` (a
:class:`router.remote.Reach`: ``router serve --listen``, ``--behind-proxy``)
the gate also takes a local proxy's headers and a paired device's
credential, and each listen address is bound and served too, over TLS
unless a local proxy terminates it.

The private socket (where, who may, its name: :mod:`router.board.local`)
serves the same routes, guards and channels as the TCP port, built for
``Host: localhost`` (what a client names a Unix socket by), with no token
(the private directory is the access check), plus ``GET /router``: who
this router is (:class:`router.board.local.RouterInfo`). With a ``board``
(:class:`router.board.service.LocalBoard`, shared with the TCP port) it
lists the whole board and forwards as the TCP port does, and the board
learns this router's name and socket. Without the TCP API (``router
mcp`` without ``--port``) a front answers the board survey's requests
(:mod:`router.api.front`) and the app is built (loading Quart-Trio,
Hypercorn and the routes) for the first connection it does not answer: an
embedded router that is only surveyed never loads them.

Resource handling: :meth:`ApiServer.run` binds the port (``0`` picks one),
serves until cancelled, and closes the socket on every exit. Cancelling it
ends every open live stream. ``limits`` bound the connections
(:class:`router._hypercorn.ConnectionLimits`: an idle one is closed after
its timeout, one past the cap is refused 503). Error handling: a port that cannot be bound
raises ``OSError`` before ``started``. :meth:`LocalServer.run` removes the
socket file on every exit, if it is still the one it bound (the mod link's
rule); it raises a :class:`~router.errors.Refusal` before ``started``
(``unsafe-directory``, ``socket-path-too-long``, ``bind-failed``) and binds
nothing then.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import attrs
import trio

from router._unix import MAX_SOCKET_PATH_BYTES, bind_private_socket, remove_if_bound
from router.board.local import RouterInfo, check_name, claim_name, make_local_directory, router_name, stable_name
from router.board.paths import BINDING_SUFFIX, INFO_ROUTE, LOCAL_HOST, SOCKET_SUFFIX, local_directory
from router.board.service import process_cwd
from router.errors import Refusal
from wire.json import dumps

if TYPE_CHECKING:  # Quart-Trio and Hypercorn load with the first app built (a private socket's: its first connection)
    from quart_trio import QuartTrio

    from router._hypercorn import ConnectionGateStatistics, ConnectionLimits
    from router.api.config import ApiConfig
    from router.api.front import FrontStatistics
    from router.api.streams import StreamSlotsStatistics
    from router.board.service import LocalBoard
    from router.plugins.layer import PluginLayer
    from router.turns.router import TurnRouter

__all__ = ["ApiServer", "ApiServerStatistics", "DEFAULT_PORT", "LOOPBACK", "LocalServer", "LocalServerStatistics",
           "build_app"]

log = logging.getLogger("router.api")

#: ``router serve``'s default port (ours).
DEFAULT_PORT = 8765
#: The API listens on loopback only: it is the person's own machine's door.
LOOPBACK = "127.0.0.1"


def build_app(router: Any, layer: Any, config: ApiConfig | None, allowed_hosts: Callable[[], set[str]], *,
              reach: Callable[[], Any], token: str | None = None, board: LocalBoard | None = None,
              worktrees: Any = None) -> QuartTrio:
    """The app both doors serve: :func:`router.api.app.make_app` with the
    pairing and device routes (:mod:`router.remote`; ``reach()`` is the
    router's :class:`router.remote.Reach`, or None)."""
    from router.api.app import make_app
    from router.api.config import ApiConfig
    from router.remote import install_routes

    app = make_app(router, layer, config or ApiConfig(), allowed_hosts, token=token, board=board, worktrees=worktrees)
    install_routes(app, reach)
    return app


@attrs.frozen
class ApiServerStatistics:
    """What an :class:`ApiServer` serves: its URL, its connections and its live streams."""

    url: str | None
    connections: ConnectionGateStatistics
    streams: StreamSlotsStatistics


class ApiServer:
    """The API on ``127.0.0.1:port`` (see the module docstring)."""

    def __init__(
        self,
        router: TurnRouter,
        layer: PluginLayer,
        *,
        token: str,
        port: int = DEFAULT_PORT,
        config: ApiConfig | None = None,
        board: LocalBoard | None = None,
        worktrees: Any = None,
        reach: Any = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.router = router
        self.layer = layer
        self.requested_port = port
        self.port: int | None = None
        self.token = token
        self._hosts: set[str] = set()
        #: The loopback listener's connections against ``limits`` (docs/turns.md,
        #: "Connections"); each ``--listen`` address has a gate of its own.
        from router._hypercorn import ConnectionGate

        self.limits = limits
        self.connections = ConnectionGate(limits)
        self.reach = reach
        self.app = build_app(router, layer, config, lambda: self._hosts, reach=lambda: self.reach, token=token,
                             board=board, worktrees=worktrees)

    def __repr__(self) -> str:
        return f"<ApiServer {self.url or 'not bound'}>"

    @property
    def url(self) -> str | None:
        return None if self.port is None else f"http://{LOOPBACK}:{self.port}"

    @property
    def page_url(self) -> str | None:
        """The page's URL with the token, as ``router serve`` prints it."""
        return None if self.url is None else f"{self.url}/?token={self.token}"

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, serve until cancelled; ``started(url)`` once listening."""
        from router._hypercorn import serve_on_socket

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((LOOPBACK, self.requested_port))
            sock.listen(128)
            sock.setblocking(False)
            self.port = sock.getsockname()[1]
            self._hosts = {f"{LOOPBACK}:{self.port}", f"localhost:{self.port}"}
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(serve_on_socket, self._gated("loopback"), sock, logger="router.api.http",
                                            gate=self.connections))
                if self.reach is not None:
                    self.reach.loopback_port = self.port
                    await self._serve_listen(nursery)
                log.info("API listening on %s", self.url)
                task_status.started(self.url)
        finally:
            sock.close()

    def _gated(self, listener: str) -> Any:
        """The app behind the remote gate (router.remote.gate): without a
        reach, the gate checks ``Origin`` against the loopback origins only."""
        from router.api.guards import OPEN_ROUTES
        from router.remote import OPEN_PATHS, Gate, LoopbackOrigins

        reach = self.reach if self.reach is not None else LoopbackOrigins(lambda: self.port)
        return Gate(self.app, reach, listener=listener, open_paths=lambda: OPEN_PATHS | OPEN_ROUTES)

    async def _serve_listen(self, nursery: trio.Nursery) -> None:
        """Bind every listen address (``OSError`` when one cannot be) and
        serve each behind the gate, over TLS unless a proxy terminates it."""
        from router._hypercorn import ConnectionGate, serve_on_socket

        certificates = self.reach.certificates
        tls = {} if certificates is None else {"certfile": certificates.certfile, "keyfile": certificates.keyfile}
        for each in self.reach.config.listen:
            family = socket.AF_INET6 if ":" in each.host else socket.AF_INET
            listen = socket.socket(family, socket.SOCK_STREAM)
            nursery.start_soon(_close_when_cancelled, listen)
            listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listen.bind((each.host, each.port))
            listen.listen(128)
            listen.setblocking(False)
            await nursery.start(partial(serve_on_socket, self._gated("remote"), listen, logger="router.api.http",
                                        gate=ConnectionGate(self.limits), **tls))
            log.info("API listening on %s://%s", "https" if tls else "http", each.hostport)

    def statistics(self) -> ApiServerStatistics:
        from router.api.context import of as current_of

        return ApiServerStatistics(url=self.url, connections=self.connections.statistics(),
                                   streams=current_of(self.app).streams.statistics())


@attrs.frozen
class LocalServerStatistics:
    """Where a :class:`LocalServer` listens, whether it serves, and its
    front's figures (None: no front, the TCP API serves beside it)."""

    path: str | None
    serving: bool
    front: FrontStatistics | None


class LocalServer:
    """A router's private socket (:mod:`router.board.local`; see the module docstring)::

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
        name: str | None = None,
        worktrees: Any = None,
        reach: Any = None,
    ) -> None:
        self.env = env
        self.directory = local_directory(env)
        #: Stable (given, or from the data directory) unless this router
        #: lives with its process (``router mcp``).
        self.stable = command != "mcp"
        self.name = check_name(name) if name is not None else (
            stable_name(command, data_dir) if self.stable else router_name(command))
        self.path = str(self.directory / f"{self.name}{SOCKET_SUFFIX}")
        self.info = RouterInfo(name=self.name, command=command, pid=os.getpid(), socket=self.path,
                               data_dir=str(data_dir), url=url, cwd=process_cwd())
        self.board = board
        if board is not None:
            board.info, board.socket = self.info.to_json(), self.path
        # Pairing and devices (router.remote): `router pair` and `router devices` ask here.
        self.reach = reach
        self._parts = (router, layer, config, board, worktrees)
        #: The app (None until built: at the start with the TCP API, else
        #: for the first connection the front does not answer).
        self.app: QuartTrio | None = None
        self.front: Any = None
        self.serving = False

    def _build(self) -> QuartTrio:
        """The app: the API's routes and ``GET /router`` (loads Quart-Trio)."""
        from quart import Response

        router, layer, config, board, worktrees = self._parts
        app = build_app(router, layer, config, lambda: {LOCAL_HOST}, reach=lambda: self.reach, board=board,
                        worktrees=worktrees)
        info = dumps(self.info.to_json())

        @app.get(INFO_ROUTE)
        async def who() -> Response:
            return Response(info, content_type="application/json")

        return app

    def __repr__(self) -> str:
        return f"<LocalServer {self.path} {'serving' if self.serving else 'not serving'}>"

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Check the directory, bind, serve until cancelled;
        ``started(path)`` once the socket listens under its final name."""
        binding = f"{self.path[: -len(SOCKET_SUFFIX)]}.{os.getpid()}{BINDING_SUFFIX}"
        if len(os.fsencode(binding)) > MAX_SOCKET_PATH_BYTES:
            raise Refusal(
                "socket-path-too-long",
                f"{binding} is longer than a Unix socket path may be ({MAX_SOCKET_PATH_BYTES} bytes); "
                "set XDG_RUNTIME_DIR (or ROUTER_DATA_DIR) to a shorter directory",
                path=binding,
            )
        make_local_directory(self.env)
        if self.stable:
            claim_name(self.path)
        sock = bind_private_socket(binding)
        try:
            # A link, not a rename: it fails when the name was taken since
            # the claim (two routers started with one name at once), where a
            # rename would silently take a live router's socket.
            os.link(binding, self.path)
            bound = os.stat(self.path)
        except OSError as exc:
            sock.close()
            why = "another router took the name first" if exc.errno == errno.EEXIST else exc.strerror
            raise Refusal("bind-failed", f"could not name the socket {self.path}: {why}", path=self.path) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(binding)
        self.serving = True
        try:
            async with trio.open_nursery() as nursery:
                if self.info.url is not None:  # the TCP API runs: Quart-Trio is loaded already
                    from router._hypercorn import serve_on_socket

                    self.app = self._build()
                    await nursery.start(partial(serve_on_socket, self.app, sock, logger="router.board.http"))
                else:
                    nursery.start_soon(self._front, sock, nursery)
                logging.getLogger("router.board").info("local socket %s", self.path)
                task_status.started(self.path)
        finally:
            self.serving = False
            sock.close()
            remove_if_bound(self.path, bound)

    async def _front(self, sock: socket.socket, nursery: trio.Nursery) -> None:
        """Without the TCP API (``router mcp``): the survey's requests
        answered by the front, the app built for the first other one
        (:mod:`router.api.front`)."""
        from router._http11 import accept_loop
        from router.api.front import FRONT_LIMITS, Front

        router, layer, _, board, _ = self._parts
        self.front = Front(info=self.info.to_json(), router=router, layer=layer, board=board, serve_app=self._serve_app)
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        front = self.front
        await accept_loop(listener, nursery, lambda stream: front.serve(stream, nursery),
                          logging.getLogger("router.board.http"), FRONT_LIMITS)

    async def _serve_app(self, handed: Any, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # The imports in a worker thread: the router's loop (its mod link, its
        # asks' deadlines) runs on while they load (0.3 s of CPU, seconds on a
        # loaded machine); building the app from them is quick.
        await trio.to_thread.run_sync(_import_the_app)
        from router._hypercorn import serve_on_socket

        self.app = self._build()
        await serve_on_socket(self.app, None, logger="router.board.http", accepted=handed, task_status=task_status)

    def statistics(self) -> LocalServerStatistics:
        return LocalServerStatistics(path=self.path, serving=self.serving,
                                     front=None if self.front is None else self.front.statistics())


def _import_the_app() -> None:
    """Load what the app is built from (Quart-Trio, Hypercorn, the routes)."""
    import router._hypercorn  # noqa: F401
    import router.api.app  # noqa: F401
    from router.remote import install_routes  # noqa: F401 (a face: the name loads its module)


async def _close_when_cancelled(sock: socket.socket) -> None:
    """Own a listen socket: closed when the server's nursery ends."""
    try:
        await trio.sleep_forever()
    finally:
        sock.close()
