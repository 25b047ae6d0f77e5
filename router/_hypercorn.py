"""Serving an ASGI app with Hypercorn on a socket the caller bound itself.

The router's Hypercorn servers bind their own socket before Hypercorn sees
it: the board's local server checks its private directory and a stale
socket first, the API picks its port and learns it. This is the one place
that hands such a socket to Hypercorn. (The mod link and the daemon answer
with small h11 servers of their own: docs/modlink.md, docs/bench.md.)

Theory of operation
-------------------

Hypercorn's Trio worker (``hypercorn.trio.run.worker_serve``) runs every
connection (a ``hypercorn.trio.tcp_server.TCPServer``) in one nursery with
the listener, so an exception that escapes one connection ends the server
and every other connection with it.
Hostile HTTP does make one escape (Hypercorn 0.18, h11 0.16; upstream
pgjones/hypercorn issue 203, "H11 Got data when expected EOF", open). It is
a race on one connection: the request head is complete, so the app answers
at once, and its task closes the connection (``TCPServer._close`` sends EOF,
outside the connection's send lock) while the reading task meets the bad
rest of the request (a body shorter than its ``Content-Length`` and then
EOF, bytes after a ``Connection: close`` request) and Hypercorn writes its
400 on the same stream. trio's conflict detector raises
``BusyResourceError`` in that second send, which Hypercorn does not catch.
``GET /healthz`` with ``Content-Length: 2``, one body byte and a close ends
the server within a few tries.

Two things here, at two depths:

- :class:`_Connection` mends the race where it happens: a send that finds
  the stream busy can only be meeting that EOF (every other send holds the
  send lock), so the connection is closing and the bytes could not go
  anyway; it is treated as a send to a closed stream, which Hypercorn
  already handles (its ``Closed`` event).
- :func:`serve_on_socket` serves the listener itself (what ``worker_serve``
  does, without multiprocessing, QUIC or a shutdown trigger; TLS as it does) and
  contains each connection: whatever escapes one (a bug, ours or
  Hypercorn's) is logged with its traceback and ends that connection only.
  The fuzzer in ``tests/modlink/test_hostile_http.py`` pins the inputs.

This reaches into Hypercorn's connection class (``TCPServer``, its
``protocol`` and ``send_lock``), which is not its public API: a test runs
the killing inputs against both servers, so a Hypercorn that changes them
fails there, not in production.
"""

from __future__ import annotations

import logging
import socket
from functools import partial
from typing import Any, Final

import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app

__all__ = ["serve_on_socket"]


class _Connection(TCPServer):
    """Hypercorn's connection, with the send race of pgjones/hypercorn#203
    closed (see the module docstring)."""

    async def protocol_send(self, event: Event) -> None:
        if not isinstance(event, RawData):
            await super().protocol_send(event)
            return
        # Hypercorn's own write, under its send lock, shielded as there.
        async with self.send_lock:
            try:
                with trio.CancelScope(shield=True):
                    await self.stream.send_all(event.data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                # Busy: only the EOF of a closing connection sends without
                # the lock, so this connection is closing and the bytes
                # cannot go; as for a dead peer, it is closed.
                await self.protocol.handle(Closed())


#: The answer to a ``Host`` that is not a host name (both servers' refusal
#: shape: ``{"error": code, "message": sentence}``).
_BAD_HOST_BODY: Final = b'{"error":"bad-host","message":"the Host header is not a host name"}'


def _refuse_bad_hosts(app: Any) -> Any:
    """``app``, behind a check of the ``Host`` header as Werkzeug's URL map
    makes it (lower case, the port apart, IDNA): a Host it cannot encode
    (a label over 63 octets, bytes that are not a name) raises ``BadHost``
    while Quart builds the request context, before any handler or error
    handler runs, and Hypercorn logs that as a crash and answers 500. Here
    it is a 400 with the servers' refusal body, and nothing is logged."""

    async def checked(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = next((value for name, value in scope["headers"] if name == b"host"), b"")
            try:
                host.decode("latin-1").lower().partition(":")[0].encode("idna")
            except UnicodeError:
                await send({
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_BAD_HOST_BODY))],
                })
                await send({"type": "http.response.body", "body": _BAD_HOST_BODY})
                return
        await app(scope, receive, send)

    return checked


async def _serve_connection(
    app: Any, config: Config, context: WorkerContext, state: dict, log: logging.Logger, stream: trio.SocketStream
) -> None:
    """One connection, contained: nothing it raises reaches the listener."""
    try:
        await _Connection(app, config, context, ConnectionState(dict(state)), stream)
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the peer went away: nothing to say
    except* Exception:
        log.exception("an HTTP connection failed; it was closed, and the server goes on")
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def serve_on_socket(
    app: Any,
    sock: socket.socket,
    *,
    logger: str,
    certfile: str | None = None,
    keyfile: str | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``sock`` (bound, listening, non-blocking) until
    cancelled; ``task_status.started()`` once connections are accepted.

    Errors go to the logger ``logger``; there is no access log. The socket
    stays the caller's to close. Error handling: one connection's failure
    is logged and ends that connection, never the server. Resource handling:
    the app's lifespan startup runs before ``started``; cancelling ends the
    listener and every connection at once (open requests, a held poll or a
    live stream, get no grace: ``worker_serve``'s graceful timeout only ever
    applied to its own shutdown trigger, never to a cancelled server).

    TLS: with ``certfile`` and ``keyfile`` the listener is wrapped as
    Hypercorn's Trio worker wraps its secure sockets (a ``trio.SSLListener``
    over the context ``Config.create_ssl_context`` makes; HTTP/1.1 only over
    ALPN); a client that fails the handshake is dropped by Hypercorn's
    connection (``TCPServer.run``) and never reaches the app.
    """
    config = Config()
    config.errorlog = logging.getLogger(logger)
    config.accesslog = None
    config.certfile, config.keyfile = certfile, keyfile
    config.alpn_protocols = ["http/1.1"]
    asgi = wrap_app(_refuse_bad_hosts(app), 0, "asgi")
    #: What the app's lifespan startup keeps, copied into each connection (as Hypercorn does).
    state: dict = {}
    context = WorkerContext(None)
    listener: Any = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    if config.ssl_enabled:
        listener = trio.SSLListener(listener, config.create_ssl_context(), https_compatible=True)
    handler = partial(_serve_connection, asgi, config, context, state, logging.getLogger(logger))
    async with trio.open_nursery() as lifespan_nursery:
        handling = Lifespan(asgi, config, state)
        await lifespan_nursery.start(handling.handle_lifespan)
        await handling.wait_for_startup()
        try:
            async with trio.open_nursery() as connections:
                await connections.start(partial(trio.serve_listeners, handler, [listener], handler_nursery=connections))
                task_status.started()
        finally:
            # Idle keep-alive connections watch this to close themselves.
            await context.terminated.set()
