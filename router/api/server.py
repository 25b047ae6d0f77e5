"""The HTTP API server: Hypercorn serving the Quart-Trio app on 127.0.0.1.

Usage (a component of the main job)::

    api = ApiServer(router, layer, port=8765, token=token)
    url = await nursery.start(api.run)   # "http://127.0.0.1:8765"
    api.page_url                         # "http://127.0.0.1:8765/?token=..."

Every route but ``GET /`` and ``GET /healthz`` takes ``Authorization:
Bearer <token>`` (:mod:`router.board.access`); ``board`` makes
``GET /sessions`` the whole local board and forwards to its holders.

Resource handling: :meth:`ApiServer.run` binds the port (``0`` picks one),
serves until cancelled, and closes the socket on every exit. Cancelling it
ends every open live stream. Error handling: a port that cannot be bound
raises ``OSError`` before ``started``.
"""

from __future__ import annotations

import logging
import socket
from functools import partial
from typing import Any

import trio

from router._hypercorn import serve_on_socket
from router.api.app import ApiConfig, make_app
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
    ) -> None:
        self.router = router
        self.layer = layer
        self.requested_port = port
        self.port: int | None = None
        self.token = token
        self._hosts: set[str] = set()
        self.app = make_app(router, layer, config or ApiConfig(), lambda: self._hosts, token=token, board=board,
                            worktrees=worktrees)

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
                await nursery.start(partial(serve_on_socket, self.app, sock, logger="router.api.http"))
                log.info("API listening on %s", self.url)
                task_status.started(self.url)
        finally:
            sock.close()

    def statistics(self) -> dict[str, Any]:
        return {"url": self.url}
