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
https://github.com/pgjones/hypercorn/issues/203, "H11 Got data when expected EOF", open). It is
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

Closing connections
-------------------

Quart-Trio answers a request in two tasks of one nursery: one sends the
response, the other waits in ``receive()``. The response's last send runs
Hypercorn's whole end of the exchange inside the app's task: it hands
``http.disconnect`` to the waiting task (a checkpoint), then closes the
connection (``Connection: close``, HTTP/1.0) or marks it idle to restart the
keep-alive timer. The waiting task, woken by ``http.disconnect``, cancels
the nursery, and the cancellation lands in that close or restart: the socket
is never closed and the idle timer never restarted, so every connection
stays open for as long as the client likes (a raw ASGI app has no such
nursery and closes). :class:`_Connection` runs those two events (``Closed``,
``Updated``) shielded, so they finish whatever the app's task is told.

A peer that closes an idle connection ends it at once (Hypercorn would
wait for its idle timer, a task of the connection, to run out first).

Around that, what each listener allows (:class:`ConnectionLimits`, counted
by a :class:`ConnectionGate`): a connection with no request in progress
(before its first, between two) is closed after ``idle_timeout`` seconds
(Hypercorn's keep-alive timer); at most ``max_connections`` are served at
once, and one past that is answered ``503 too-many-connections`` and closed.

Upgrades are not served: a WebSocket handshake is answered ``400
bad-upgrade`` before the app sees it (Quart would run the request's
``before_request`` without a request and log a traceback), and an ``Upgrade:
h2c`` or an HTTP/2 preface is not honoured (:class:`_H11Only`: the request
is served in HTTP/1.1, as a server that declines an upgrade does; the
preface is refused by the app, no route is ``PRI *``).

This reaches into Hypercorn's connection class (``TCPServer``, its
``protocol``, ``send_lock`` and ``_read_data``, and ``H11Protocol``'s
``_check_protocol``), which is not its public API: a test runs the killing
inputs against both servers, and ``tests/api/test_edge.py`` the closing, so
a Hypercorn that changes them fails there, not in production.
"""

from __future__ import annotations

import logging
import socket
from functools import partial
from typing import Any, Final

import attrs
import h11
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app

from router.errors import Refusal
from wire.json import dumps

__all__ = ["ConnectionGateStatistics", "ConnectionGate", "ConnectionLimits", "serve_on_socket"]


@attrs.frozen(kw_only=True)
class ConnectionLimits:
    """What one listener allows (docs/turns.md, "Connections")."""

    #: Seconds a connection may sit with no request in progress (before its
    #: first, between two) before the server closes it. Hypercorn's
    #: ``keep_alive_timeout`` default, and under the 60 s browsers keep an
    #: idle connection (Chromium's), so a page rarely reuses a closed one.
    idle_timeout: float = 5.0
    #: Connections served at once; one more is answered 503
    #: ``too-many-connections`` and closed. Ours: a page holds two or three
    #: (its fetches and two live streams), so this is hundreds of pages, and
    #: a quarter of the usual 1,024 descriptors a process may open.
    max_connections: int = 256

    def __attrs_post_init__(self) -> None:
        if not self.idle_timeout > 0 or self.max_connections < 1:
            raise ValueError(f"{self!r}: a positive idle timeout and at least one connection")


#: How long a refused connection is read (and what it sent dropped) after
#: the refusal, so the close does not reset the refusal away: a socket
#: closed with unread bytes sends RST, and the peer may lose the answer.
_REFUSAL_LINGER: Final = 1.0


@attrs.frozen
class ConnectionGateStatistics:
    """A :class:`ConnectionGate`'s connections: open now, served, refused past
    the limit, and the limit."""

    open: int
    served: int
    refused: int
    max_connections: int


class ConnectionGate:
    """The connections of one listener, counted against its limits."""

    def __init__(self, limits: ConnectionLimits | None = None) -> None:
        self.limits = limits or ConnectionLimits()
        self.open = 0
        self.refused = 0
        self.served = 0

    def __repr__(self) -> str:
        return f"<ConnectionGate {self.open}/{self.limits.max_connections} open, {self.refused} refused>"

    def statistics(self) -> ConnectionGateStatistics:
        return ConnectionGateStatistics(open=self.open, served=self.served, refused=self.refused,
                                        max_connections=self.limits.max_connections)
    def take(self) -> bool:
        """Count a new connection in; False when the listener is full."""
        if self.open >= self.limits.max_connections:
            self.refused += 1
            return False
        self.open += 1
        self.served += 1
        return True

    def release(self) -> None:
        self.open -= 1

    def refusal(self) -> bytes:
        """The whole answer to a connection past the limit."""
        body = dumps(Refusal(
            "too-many-connections",
            f"this server already holds the {self.limits.max_connections} connections it serves at "
            "once; close an idle one, or retry in a few seconds",
        ).to_json()).encode()
        return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nretry-after: %d\r\nconnection: close\r\n\r\n"
                % (len(body), max(1, round(self.limits.idle_timeout)))) + body


class _H11Only(H11Protocol):
    """Hypercorn's HTTP/1.1, without its h2c upgrade or HTTP/2 preface
    switch: the request is served in HTTP/1.1 (see the module docstring)."""

    async def _check_protocol(self, event: h11.Request) -> None:
        return None


class _Connection(TCPServer):
    """Hypercorn's connection, with the send race of pgjones/hypercorn#203
    closed, its close and idle timer shielded from the app's cancellation,
    and HTTP/1.1 only (see the module docstring)."""

    async def _read_data(self) -> None:
        # The protocol was just made (and initiated, which HTTP/1.1 does
        # nothing for); no byte has been read: swap in ours.
        wrapper = self.protocol
        wrapper.protocol = _H11Only(wrapper.app, wrapper.config, wrapper.context, wrapper.task_group, wrapper.state,
                                    wrapper.ssl, wrapper.client, wrapper.server, wrapper.send)
        await super()._read_data()
        # The peer closed (or the read failed): the connection ends now.
        # Hypercorn would wait here for its idle timer to run out (the
        # timer is a task of the connection's task group), holding the
        # socket up to ``idle_timeout`` after the peer had gone.
        with trio.CancelScope(shield=True):
            await self.idle_task.stop()

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, (Closed, Updated)):
            # Often sent from inside the app's task as Quart-Trio cancels it
            # (the module docstring): closing and the idle timer finish.
            with trio.CancelScope(shield=True):
                await super().protocol_send(event)
            return
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
_BAD_HOST_BODY: Final = dumps(Refusal("bad-host", "the Host header is not a host name").to_json()).encode()


#: The answer to an upgrade (a WebSocket handshake): this server speaks
#: plain HTTP/1.1 only.
_BAD_UPGRADE_BODY: Final = dumps(Refusal(
    "bad-upgrade", "this server takes no WebSocket or other upgrade; send plain HTTP/1.1 requests",
).to_json()).encode()


def _refuse_bad_hosts(app: Any) -> Any:
    """``app``, behind a check of the ``Host`` header as Werkzeug's URL map
    makes it (lower case, the port apart, IDNA): a Host it cannot encode
    (a label over 63 octets, bytes that are not a name) raises ``BadHost``
    while Quart builds the request context, before any handler or error
    handler runs, and Hypercorn logs that as a crash and answers 500. Here
    it is a 400 with the servers' refusal body, and nothing is logged."""

    async def checked(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            # Refused before the app (and its token and Host checks): the
            # answer says nothing, and nothing is logged.
            await send({
                "type": "websocket.http.response.start",
                "status": 400,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", b"%d" % len(_BAD_UPGRADE_BODY)), (b"connection", b"close")],
            })
            await send({"type": "websocket.http.response.body", "body": _BAD_UPGRADE_BODY})
            return
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


async def _refuse_connection(gate: ConnectionGate, stream: trio.SocketStream) -> None:
    """Answer a connection past the limit, let its request drain, close."""
    with trio.move_on_after(_REFUSAL_LINGER):
        await stream.send_all(gate.refusal())
        await stream.send_eof()
        while await stream.receive_some(65536):
            pass


async def _serve_connection(
    app: Any, config: Config, context: WorkerContext, state: dict, log: logging.Logger, gate: ConnectionGate,
    stream: trio.SocketStream,
) -> None:
    """One connection, contained: nothing it raises reaches the listener."""
    taken = gate.take()
    try:
        if taken:
            await _Connection(app, config, context, ConnectionState(dict(state)), stream)
        else:
            await _refuse_connection(gate, stream)
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the peer went away: nothing to say
    except* Exception:
        log.exception("an HTTP connection failed; it was closed, and the server goes on")
    finally:
        if taken:
            gate.release()
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def serve_on_socket(
    app: Any,
    sock: socket.socket | None,
    *,
    logger: str,
    certfile: str | None = None,
    keyfile: str | None = None,
    gate: ConnectionGate | None = None,
    accepted: trio.abc.Listener[Any] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``sock`` (bound, listening, non-blocking) until
    cancelled; ``task_status.started()`` once connections are accepted.
    With ``accepted`` (and ``sock`` None), the connections come from that
    listener instead (accepted elsewhere: the private socket's front,
    :mod:`router.api.front`).
    ``gate`` counts the connections against its limits (default:
    :class:`ConnectionLimits`'s).

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
    gate = gate or ConnectionGate()
    config = Config()
    config.errorlog = logging.getLogger(logger)
    config.accesslog = None
    config.certfile, config.keyfile = certfile, keyfile
    config.alpn_protocols = ["http/1.1"]
    config.keep_alive_timeout = gate.limits.idle_timeout
    asgi = wrap_app(_refuse_bad_hosts(app), 0, "asgi")
    #: What the app's lifespan startup keeps, copied into each connection (as Hypercorn does).
    state: dict = {}
    context = WorkerContext(None)
    listener: Any = accepted if accepted is not None else trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    if config.ssl_enabled:
        listener = trio.SSLListener(listener, config.create_ssl_context(), https_compatible=True)
    handler = partial(_serve_connection, asgi, config, context, state, logging.getLogger(logger), gate)
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
