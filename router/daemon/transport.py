"""The daemon's transport: one port, ``GET /healthz`` and ``/sessions/<id>``.

Theory of operation
-------------------

Each TCP connection is served by the shared h11 loop
(:mod:`router._http11`: the head's deadlines, keep-alive, a request h11
refuses answered 400 with its reason, as Node does):

- a plain request gets a plain answer: ``/healthz`` is ``200 ok`` with no
  token (so a wrong token looks different from a dead container), anything
  else ``404``; keep-alive works as in any HTTP/1.1 server;
- an upgrade (``Connection: upgrade`` and an ``Upgrade`` header, as Node's
  parser decides) to a path under ``/sessions/`` becomes a WebSocket
  (:class:`router._websocket.WebSocket`, the same the host dials with): its
  handshake is run from the head the loop read, and the connection's task
  serves the session. An upgrade to any other path is dropped (the
  reference destroys the socket).

Hypercorn with a raw ASGI app was measured slower for the same work
(``docs/bench.md``, "Daemon"); trio-websocket's public API slower than the
WebSocket without a task (``docs/bench.md``, "One WebSocket").

A WebSocket whose token header does not match (``hmac.compare_digest``) or
whose session id is empty or not valid percent-encoded UTF-8 is accepted and
closed at once with ``CLOSE_UNAUTHORIZED`` (4003), as the reference does. A
good one is attached to its session (:class:`~router.daemon.runner.Daemon`):
the session sends ``hello``, a newer connection for the same session closes
this one with 4001, and each text received goes to the session. A binary
message is decoded as UTF-8 with replacement characters, as the reference's
``Buffer.toString("utf8")`` does. A frame that breaks RFC 6455 (a text
frame that is not UTF-8, an unmasked or reserved-opcode frame) fails the
connection, as §7.1.7 says: wsproto reports it and the TCP connection is
closed. The reference is laxer (it decodes bad UTF-8 with replacements and
takes unmasked frames); either way no session sees such bytes.

Nothing here drops a quiet WebSocket: no idle timeout, no ping. Deadlines
apply only to HTTP heads still arriving and to close handshakes.

The connection's task is the WebSocket's reader; a writer task per
connection (the :class:`~router.daemon.runner.Outbox`'s) writes every
queued text in one ``send_all``. A connection's reader never waits for its writer (as in the reference,
which reads whatever arrives). Making it wait when the outbox is long looks
like backpressure but deadlocks with any host whose reading waits on its own
sends (a host that acks from its read loop): the daemon stops reading, the
host's ack blocks, the host stops reading, the daemon's writer blocks. The
outbox holds references to kept frames' texts, not copies, and at most a
whole replay of the session's kept frames and ``OUTBOX_SLACK`` more: past
that its host is not reading, and the connection is closed with 1011 (or
dropped after ``CLOSE_TIMEOUT`` when not even the close can be written);
the host's next connection replays what it missed.

Error handling: a peer's bytes never raise out of a connection's task (h11's
and wsproto's protocol errors answer 400 or close; a dead socket ends the
task); each connection is its own task, so one cannot take down another or a
session. Resource handling: :meth:`DaemonServer.run` owns the listeners, the
connection tasks and the :class:`Daemon`; :meth:`DaemonServer.aclose` stops
accepting, closes every WebSocket with 1001, then shuts the sessions down.
"""

from __future__ import annotations

import hmac
import logging
import re
from typing import Final, Sequence
from urllib.parse import unquote_to_bytes

import h11
import trio

from router._http11 import HttpAnswer, Exchange, HttpLimits, accept_loop, response_bytes, serve_connection
from router._websocket import HandshakeFailed, WebSocket, WebSocketClosed, text_frame
from router.daemon.runner import CLOSE_TIMEOUT, Daemon, DaemonClosed, Outbox
from wire.container import CLOSE_UNAUTHORIZED, CONTAINER_HEALTH_PATH, CONTAINER_SESSION_PATH, CONTAINER_TOKEN_HEADER

__all__ = ["DaemonServer", "MAX_MESSAGE_SIZE", "decode_session_id", "text_frame"]

log = logging.getLogger("router.daemon")

#: Largest message accepted. The reference's ``MAX_MESSAGE_BYTES`` (64 MiB,
#: runtime ``websocket.ts``) counts UTF-8 bytes; the server's WebSocket
#: (``router/_websocket.py``) counts the decoded text's characters, never
#: more than its bytes, so everything the reference accepts is accepted
#: here. Larger: closed with 1009, as there.
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
#: Largest HTTP request head. Node's default ``--max-http-header-size``
#: (16 KiB), which the reference runs with.
MAX_HEAD_BYTES: Final = 16 * 1024
#: Time for a request head to arrive in full. Node's ``http.Server``
#: ``headersTimeout`` default (60 s).
HEADERS_TIMEOUT: Final = 60.0
#: Time an idle keep-alive HTTP connection waits for its next request.
#: Node's ``keepAliveTimeout`` default (5 s).
KEEP_ALIVE_TIMEOUT: Final = 5.0
#: Time to write the 101 of a handshake whose head is already here. Ours;
#: a safety net.
HANDSHAKE_TIMEOUT: Final = 10.0
#: Largest body of a plain request, read and dropped (Node reads any; ours:
#: the reference's message limit), within ``HEADERS_TIMEOUT``.
MAX_BODY_BYTES: Final = 64 * 1024 * 1024
#: Connections served at once (Node's ``maxConnections`` is unset; ours:
#: far above a host's one per session, below the default descriptor limit).
MAX_CONNECTIONS: Final = 4096
LIMITS: Final = HttpLimits(first_wait=HEADERS_TIMEOUT, idle=KEEP_ALIVE_TIMEOUT, head=HEADERS_TIMEOUT,
                       body=HEADERS_TIMEOUT, max_head=MAX_HEAD_BYTES, max_body=MAX_BODY_BYTES,
                       connections=MAX_CONNECTIONS)
#: Close code and reason at shutdown (RFC 6455 1001 "going away"; the
#: reference's reason).
CLOSE_GOING_AWAY: Final = 1001
SHUTDOWN_REASON: Final = "shutting down"
#: The reference's reason with ``CLOSE_UNAUTHORIZED``.
UNAUTHORIZED_REASON: Final = "unauthorized"

_SESSION_PREFIX: Final = CONTAINER_SESSION_PATH.encode()
_HEALTH: Final = CONTAINER_HEALTH_PATH.encode()
_TOKEN: Final = CONTAINER_TOKEN_HEADER.encode()
_PERCENT: Final = re.compile(rb"%[0-9A-Fa-f]{2}")


def decode_session_id(raw: bytes) -> str | None:
    """The session id of a ``/sessions/`` path's rest, as JavaScript's
    ``decodeURIComponent`` decodes it, or None where that throws (a ``%``
    not followed by two hex digits, or bytes that are not UTF-8). Where the
    reference would throw out of its upgrade handler, this daemon answers
    4003."""
    if raw.count(b"%") != len(_PERCENT.findall(raw)):
        return None
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """A header's value; repeated ones joined with ``, ``, as Node joins
    them."""
    values = [value for key, value in headers if key == name]
    return b", ".join(values) if values else None


def _is_upgrade(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Node's rule (llhttp): ``Connection`` has the ``upgrade`` token and an
    ``Upgrade`` header is present."""
    connection = _header(headers, b"connection") or b""
    tokens = {token.strip().lower() for token in connection.split(b",")}
    return b"upgrade" in tokens and _header(headers, b"upgrade") is not None


def _handshake_problem(exchange: Exchange) -> str | None:
    """Why wsproto would refuse this handshake, or None: answered 400 with
    the reason, as Node's ``ws`` answers it."""
    headers = exchange.headers
    if exchange.request.method != b"GET":
        return "a WebSocket handshake must be a GET"
    if not exchange.target.isascii():
        return "the request target must be ASCII"
    if _header(headers, b"sec-websocket-version") != b"13":
        return "Sec-WebSocket-Version must be 13"
    if _header(headers, b"sec-websocket-key") is None:
        return "Sec-WebSocket-Key is missing"
    if (_header(headers, b"upgrade") or b"").lower() != b"websocket":
        return "Upgrade must be websocket"
    host = _header(headers, b"host")
    if host is None:
        return "Host is missing"
    try:
        host.decode("idna")
    except UnicodeError:
        return "Host is not a valid host name"
    return None


def _plain_text(status: int, text: str) -> HttpAnswer:
    """A ``text/plain`` answer that closes the connection (h11's reason for
    a request it refused, or ours for a handshake wsproto would refuse)."""
    return HttpAnswer(status, (text + "\n").encode(), content_type=b"text/plain", close=True)


def _bad_request(error: h11.RemoteProtocolError) -> HttpAnswer:
    return _plain_text(error.error_status_hint, str(error))


_HEALTH_OK: Final = HttpAnswer(200, b"ok", content_type=b"text/plain")
_NOT_FOUND: Final = HttpAnswer(404, b"", content_type=b"")


class DaemonServer:
    """The daemon behind one port. :meth:`run` serves until :meth:`aclose`."""

    def __init__(self, daemon: Daemon, token: str) -> None:
        self.daemon = daemon
        self._token = token.encode("utf-8")
        self._outboxes: set[Outbox] = set()
        self._accepting: trio.CancelScope | None = None
        self._connections: trio.Nursery | None = None
        self.ports: list[int] = []

    async def run(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus["DaemonServer"] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve ``listeners`` until :meth:`aclose`; ``started`` once they
        accept connections."""
        self.ports = [listener.socket.getsockname()[1] for listener in listeners]
        async with trio.open_nursery() as nursery:
            await nursery.start(self.daemon.run)
            async with trio.open_nursery() as connections:
                self._connections = connections
                async with trio.open_nursery() as accepting:
                    self._accepting = accepting.cancel_scope
                    for listener in listeners:
                        accepting.start_soon(accept_loop, listener, connections, self._handle_stream, log, LIMITS)
                    task_status.started(self)
                # Accepting has stopped; the connections end in aclose.

    async def aclose(self) -> None:
        """Stop accepting, close every WebSocket with 1001 (within
        ``CLOSE_TIMEOUT``), shut every session down, and end :meth:`run`."""
        if self._accepting is not None:
            self._accepting.cancel()
        outboxes = list(self._outboxes)
        for outbox in outboxes:
            outbox.close(CLOSE_GOING_AWAY, SHUTDOWN_REASON)
        with trio.move_on_after(CLOSE_TIMEOUT):
            for outbox in outboxes:
                await outbox.finished.wait()
        if self._connections is not None:
            self._connections.cancel_scope.cancel()
        await self.daemon.aclose()

    # ------------------------------------------------------------------ HTTP

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        await serve_connection(stream, self._handle, log, limits=LIMITS, bad_request=_bad_request)

    async def _handle(self, exchange: Exchange) -> HttpAnswer | None:
        """A plain request's answer; an upgrade's WebSocket, served to its end."""
        if _is_upgrade(exchange.headers):
            await self._upgrade(exchange)
            return None
        # As the reference: the health check is the exact URL, any method.
        return _HEALTH_OK if exchange.target == _HEALTH else _NOT_FOUND

    # ------------------------------------------------------------------ WebSocket

    async def _upgrade(self, exchange: Exchange) -> None:
        path = exchange.target.split(b"?", 1)[0].split(b"#", 1)[0]
        if not path.startswith(_SESSION_PREFIX):
            return  # as the reference: the socket is dropped
        problem = _handshake_problem(exchange)
        if problem is not None:
            await exchange.stream.send_all(response_bytes(_plain_text(400, problem), False, True))
            return
        session = decode_session_id(path[len(_SESSION_PREFIX):])
        given = _header(exchange.headers, _TOKEN)
        authorized = given is not None and hmac.compare_digest(given, self._token)
        rest = exchange.rest()
        ws = None
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            try:
                ws = await WebSocket.accept(exchange.stream, exchange.raw[: len(exchange.raw) - len(rest)], rest,
                                            max_message_size=MAX_MESSAGE_SIZE)
            except HandshakeFailed:
                return
        if ws is None:
            return
        if not (session and authorized):
            with trio.move_on_after(CLOSE_TIMEOUT):
                await ws.aclose(CLOSE_UNAUTHORIZED, UNAUTHORIZED_REASON)
            return
        async with trio.open_nursery() as nursery:
            await self._serve_session(nursery, ws, session)
            nursery.cancel_scope.cancel()

    async def _serve_session(self, nursery: trio.Nursery, ws: WebSocket, session: str) -> None:
        try:
            runner = self.daemon.session(session)
        except DaemonClosed:  # a handshake that finished during shutdown
            with trio.move_on_after(CLOSE_TIMEOUT):
                await ws.aclose(CLOSE_GOING_AWAY, SHUTDOWN_REASON)
            return
        outbox = Outbox(f"{session!r}@{ws.remote}", limit=runner.outbox_limit)
        self._outboxes.add(outbox)
        ws.reader_task = True
        nursery.start_soon(outbox.run, ws, name=f"writer {outbox.name}")
        nursery.start_soon(self._reap, nursery, outbox, name=f"reaper {outbox.name}")
        runner.attach(outbox)
        try:
            while True:
                messages = await ws.receive()
                last = len(messages) - 1
                for at, message in enumerate(messages):
                    if type(message) is bytes:
                        message = message.decode("utf-8", "replace")
                    await runner.receive(outbox, message)
                    # One scheduler step between two messages, as a reader
                    # task's channel gave: a prompt's turn starts before the
                    # next prompt is read, so a prompt that came after a
                    # turn is not steered into it for arriving in the same
                    # packet (the cluster's exact-turn tests saw it). After
                    # a read's last message the next read of the socket is
                    # that step (trio's socket calls are schedule points),
                    # unless the WebSocket holds messages that need none.
                    if at < last or ws.holding:
                        await trio.lowlevel.checkpoint()
        except WebSocketClosed:
            pass
        finally:
            runner.detach(outbox)
            outbox.close(1000, "")
            self._outboxes.discard(outbox)
        # Let the writer send what is queued and finish the close handshake.
        with trio.move_on_after(CLOSE_TIMEOUT):
            await outbox.finished.wait()

    @staticmethod
    async def _reap(nursery: trio.Nursery, outbox: Outbox) -> None:
        """Once the connection is to close (replaced, shutting down, or the
        host closed it), give the writer ``CLOSE_TIMEOUT`` to flush and
        finish the close handshake, then drop the connection: a host that
        stopped reading cannot keep a replaced connection's tasks alive."""
        await outbox.close_requested.wait()
        with trio.move_on_after(CLOSE_TIMEOUT):
            await outbox.finished.wait()
        nursery.cancel_scope.cancel()
