"""The HTTP API server: Hypercorn serving the Quart-Trio app on 127.0.0.1.

Usage (a component of the main job)::

    api = ApiServer(router, layer, port=8765, token=token)
    url = await nursery.start(api.run)   # "http://127.0.0.1:8765"
    api.page_url                         # "http://127.0.0.1:8765/?token=..."

Every route but ``GET /`` and ``GET /healthz`` takes ``Authorization:
Bearer <token>`` (:mod:`router.board.access`); ``board`` makes
``GET /sessions`` the whole local board and forwards to its holders.

Every TCP request passes the remote gate (:mod:`router.remote.gate`): an
``Origin`` that is not the router's own is refused. With ``reach`` (a
:class:`router.remote.Reach`: ``router serve --listen``, ``--behind-proxy``)
the gate also takes a local proxy's headers and a paired device's
credential, and each listen address is bound and served too, over TLS
unless a local proxy terminates it.

Resource handling: :meth:`ApiServer.run` binds the port (``0`` picks one),
serves until cancelled, and closes the socket on every exit. Cancelling it
ends every open live stream. ``limits`` bound the connections
(:class:`router._hypercorn.ConnectionLimits`: an idle one is closed after
its timeout, one past the cap is refused 503). Error handling: a port that cannot be bound
raises ``OSError`` before ``started``.
"""

from __future__ import annotations

import logging
import socket
from functools import partial
from typing import Any

import trio

from router._hypercorn import ConnectionGate, ConnectionLimits, serve_on_socket
from router.api.app import ApiConfig, make_app
from router.api.context import of as current_of
from router.board.service import LocalBoard
from router.plugins.layer import PluginLayer
from router.turns.router import TurnRouter

__all__ = ["ApiServer", "DEFAULT_PORT", "LOOPBACK"]

log = logging.getLogger("router.api")

#: ``router serve``'s default port (ours).
DEFAULT_PORT = 8765
#: The API listens on loopback only: it is the person's own machine's door.
LOOPBACK = "127.0.0.1"


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
        self.limits = limits
        self.connections = ConnectionGate(limits)
        self.app = make_app(router, layer, config or ApiConfig(), lambda: self._hosts, token=token, board=board,
                            worktrees=worktrees)
        self.reach = reach
        from router.remote import make_blueprint

        self.app.register_blueprint(make_blueprint(lambda: self.reach))

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

    def statistics(self) -> dict[str, Any]:
        return {"url": self.url, "connections": self.connections.statistics(),
                "streams": current_of(self.app).streams.statistics()}


async def _close_when_cancelled(sock: socket.socket) -> None:
    """Own a listen socket: closed when the server's nursery ends."""
    try:
        await trio.sleep_forever()
    finally:
        sock.close()
