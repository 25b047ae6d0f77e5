"""Serving an ASGI app with Hypercorn on a socket the caller bound itself.

Both HTTP servers of the router bind their own socket before Hypercorn sees
it: the mod link checks its private directory and a stale socket first, the
API picks its port and learns it. This is the one place that hands such a
socket to Hypercorn's Trio worker.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

#: Seconds Hypercorn gives open requests (a held poll, a live stream) to
#: finish when the server is cancelled. Short: nothing here is worth waiting
#: for at shutdown. Ours.
GRACEFUL_TIMEOUT = 0.5


async def serve_on_socket(
    app: Any,
    sock: socket.socket,
    *,
    logger: str,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``sock`` (bound, listening, non-blocking) until
    cancelled; ``task_status.started()`` once Hypercorn accepts connections.
    Errors go to the logger ``logger``; there is no access log. The socket
    stays the caller's to close."""
    config = Config()
    config.errorlog = logging.getLogger(logger)
    config.accesslog = None
    config.graceful_timeout = GRACEFUL_TIMEOUT
    await worker_serve(
        wrap_app(app, 0, "asgi"),
        config,
        sockets=Sockets(secure_sockets=[], insecure_sockets=[sock], quic_sockets=[]),
        task_status=task_status,
    )
