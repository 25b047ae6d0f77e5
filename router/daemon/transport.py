"""The daemon's transport: one port, ``GET /healthz`` and ``/sessions/<id>``.

Theory of operation
-------------------

Each TCP connection is read by h11 until one request head is complete:

- a plain request gets a plain answer: ``/healthz`` is ``200 ok`` with no
  token (so a wrong token looks different from a dead container), anything
  else ``404``; keep-alive works as in any HTTP/1.1 server;
- an upgrade (``Connection: upgrade`` and an ``Upgrade`` header, as Node's
  parser decides) to a path under ``/sessions/`` becomes a WebSocket: the
  bytes read so far (the head and whatever followed it) are replayed into
  trio-websocket through a small stream wrapper (:class:`_Replayed`), which
  runs the handshake from them as if it had read them itself. An upgrade to
  any other path is dropped (the reference destroys the socket).

trio-websocket's own server cannot answer a plain ``GET`` with 200 (its
handshake rejects anything that is not an upgrade), hence h11 in front. The
alternative, Hypercorn with a raw ASGI app, was measured slower for the
same work (``docs/bench.md``, "Daemon").

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

A connection's reader never waits for its writer (as in the reference,
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
from functools import partial
from typing import Any, Final, Sequence
from urllib.parse import unquote_to_bytes

import h11
import trio
from trio_websocket import ConnectionClosed, wrap_server_stream
from wsproto import ConnectionState
from wsproto.utilities import LocalProtocolError

from router.daemon.runner import CLOSE_TIMEOUT, Daemon, DaemonClosed, Outbox
from wire.container import CLOSE_UNAUTHORIZED, CONTAINER_HEALTH_PATH, CONTAINER_SESSION_PATH, CONTAINER_TOKEN_HEADER

__all__ = ["DaemonServer", "MAX_MESSAGE_SIZE", "decode_session_id"]

log = logging.getLogger("router.daemon")

#: Largest message accepted. The reference's ``MAX_MESSAGE_BYTES`` (64 MiB,
#: runtime ``websocket.ts``) counts UTF-8 bytes; trio-websocket counts the
#: decoded text's characters, never more than its bytes, so everything the
#: reference accepts is accepted here. Larger: closed with 1009, as there.
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
#: Bytes asked of the socket per read. trio-websocket's default is 4 KiB,
#: which makes a 64 MiB restore message take 16,384 reads. Ours.
RECEIVE_BUFFER: Final = 64 * 1024
#: Largest HTTP request head. Node's default ``--max-http-header-size``
#: (16 KiB), which the reference runs with.
MAX_HEAD_BYTES: Final = 16 * 1024
#: Time for a request head to arrive in full. Node's ``http.Server``
#: ``headersTimeout`` default (60 s).
HEADERS_TIMEOUT: Final = 60.0
#: Time an idle keep-alive HTTP connection waits for its next request.
#: Node's ``keepAliveTimeout`` default (5 s).
KEEP_ALIVE_TIMEOUT: Final = 5.0
#: Time for trio-websocket to finish a handshake whose head is already here
#: (it only replays bytes and writes the 101). Ours; a safety net.
HANDSHAKE_TIMEOUT: Final = 10.0
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


def _is_upgrade(request: h11.Request) -> bool:
    """Node's rule (llhttp): ``Connection`` has the ``upgrade`` token and an
    ``Upgrade`` header is present."""
    connection = _header(request.headers, b"connection") or b""
    tokens = {token.strip().lower() for token in connection.split(b",")}
    return b"upgrade" in tokens and _header(request.headers, b"upgrade") is not None


def _handshake_problem(request: h11.Request) -> str | None:
    """Why wsproto would refuse this handshake, or None. Checked before the
    hand-over, because trio-websocket waits forever for a handshake that
    wsproto refused."""
    if request.method != b"GET":
        return "a WebSocket handshake must be a GET"
    if not request.target.isascii():
        return "the request target must be ASCII"
    if _header(request.headers, b"sec-websocket-version") != b"13":
        return "Sec-WebSocket-Version must be 13"
    if _header(request.headers, b"sec-websocket-key") is None:
        return "Sec-WebSocket-Key is missing"
    if (_header(request.headers, b"upgrade") or b"").lower() != b"websocket":
        return "Upgrade must be websocket"
    host = _header(request.headers, b"host")
    if host is None:
        return "Host is missing"
    try:
        host.decode("idna")
    except UnicodeError:
        return "Host is not a valid host name"
    return None


class _Replayed(trio.abc.Stream):
    """``stream``, with ``prefix`` read first: trio-websocket reads the
    request head h11 already took off the socket."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


def text_frame(text: str) -> bytes:
    """One unfragmented server-to-client text frame (RFC 6455 §5.2: FIN,
    opcode 1, no mask; lengths over 125 in 16 or 64 bits). What wsproto
    writes for ``TextMessage`` on a connection without extensions (the
    daemon negotiates none), at a tenth of the cost."""
    payload = text.encode("utf-8")
    length = len(payload)
    if length < 126:
        return bytes((0x81, length)) + payload
    if length < 65536:
        return bytes((0x81, 126)) + length.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + length.to_bytes(8, "big") + payload


class _BatchingSocket:
    """A trio-websocket connection that can also write a batch of text
    messages in one go (:meth:`send_messages`): framed and written under the
    connection's own stream lock in a single ``send_all``, as
    ``send_message`` writes one.

    This reaches into trio-websocket's private ``_wsproto``, ``_stream`` and
    ``_stream_lock`` (0.12): its public API writes one message per lock,
    system call and scheduler round trip, and frames it through wsproto's
    general path; together that was a third of the daemon's time under
    load (``docs/bench.md``, "Daemon"). Where those attributes are missing
    (another version), :func:`_batching` returns the connection itself and
    the outbox writes one message at a time.
    """

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self.send_message = ws.send_message
        self.aclose = ws.aclose

    async def send_messages(self, texts: list[str]) -> None:
        ws = self._ws
        # Only while wsproto's connection is open: not after either side
        # began closing (wsproto would refuse the frames; so do we).
        if ws.closed is not None or ws._wsproto.state is not ConnectionState.OPEN:
            raise ConnectionClosed(ws.closed)
        data = b"".join([text_frame(text) for text in texts])
        async with ws._stream_lock:
            try:
                await ws._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await ws._abort_web_socket()
                raise ConnectionClosed(ws.closed) from None


def _batching(ws: Any) -> Any:
    if all(hasattr(ws, name) for name in ("_wsproto", "_stream", "_stream_lock", "_abort_web_socket")):
        return _BatchingSocket(ws)
    return ws


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
                    await accepting.start(
                        partial(trio.serve_listeners, self._handle_stream, listeners, handler_nursery=connections)
                    )
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
        try:
            async with stream:
                await self._serve_http(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # a bug: log it; this connection is gone, nothing else
            log.exception("connection task failed")

    async def _serve_http(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        buffer = bytearray()  # this request's bytes so far, for an upgrade
        timeout = HEADERS_TIMEOUT
        while True:
            request = None
            with trio.move_on_after(timeout):
                request = await self._read_request(stream, conn, buffer)
            if request is None:
                return
            if _is_upgrade(request):
                await self._upgrade(stream, conn, request, bytes(buffer))
                return
            if not await self._respond(stream, conn, request):
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
            buffer = bytearray(conn.trailing_data[0])
            timeout = KEEP_ALIVE_TIMEOUT

    async def _read_request(
        self, stream: trio.SocketStream, conn: h11.Connection, buffer: bytearray
    ) -> h11.Request | None:
        """Read one request to its end (a body is read and dropped). None on
        EOF, or after answering a malformed request with 400."""
        request = None
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(RECEIVE_BUFFER)
                    if request is None:
                        buffer += data
                    conn.receive_data(data)
                elif type(event) is h11.Request:
                    request = event
                    if not _is_upgrade(event):
                        buffer.clear()  # only an upgrade's bytes are replayed
                elif type(event) is h11.EndOfMessage or event is h11.PAUSED:
                    return request
                elif type(event) is h11.ConnectionClosed:
                    return None
                # h11.Data: a body nobody reads
        except h11.RemoteProtocolError as exc:
            await self._send_error(stream, conn, exc.error_status_hint, str(exc))
            return None

    async def _send_error(self, stream: trio.SocketStream, conn: h11.Connection, status: int, text: str) -> None:
        body = (text + "\n").encode()
        try:
            data = conn.send(h11.Response(
                status_code=status,
                headers=[("content-type", "text/plain"), ("content-length", str(len(body))), ("connection", "close")],
            ))
            data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return  # too late to answer
        await stream.send_all(data)

    async def _respond(self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request) -> bool:
        """Answer a plain request; whether the connection can take another."""
        # As the reference: the health check is the exact URL, any method.
        if request.target == _HEALTH:
            status, body, headers = 200, b"ok", [("content-type", "text/plain")]
        else:
            status, body, headers = 404, b"", []
        headers.append(("content-length", str(len(body))))
        data = conn.send(h11.Response(status_code=status, headers=headers))
        if body and request.method != b"HEAD":
            data += conn.send(h11.Data(data=body))
        data += conn.send(h11.EndOfMessage())
        await stream.send_all(data)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    # ------------------------------------------------------------------ WebSocket

    async def _upgrade(self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, prefix: bytes) -> None:
        path = request.target.split(b"?", 1)[0].split(b"#", 1)[0]
        if not path.startswith(_SESSION_PREFIX):
            return  # as the reference: the socket is dropped
        problem = _handshake_problem(request)
        if problem is not None:
            await self._send_error(stream, conn, 400, problem)
            return
        session = decode_session_id(path[len(_SESSION_PREFIX):])
        given = _header(request.headers, _TOKEN)
        authorized = given is not None and hmac.compare_digest(given, self._token)
        try:
            await self._websocket(stream, prefix, session if authorized else None)
        except* LocalProtocolError:
            # trio-websocket (0.12) answers a ping with a pong even after
            # its own close frame went out, which wsproto refuses: the host
            # pinged a connection that is closing anyway. Nothing is lost.
            pass

    async def _websocket(self, stream: trio.SocketStream, prefix: bytes, session: str | None) -> None:
        """The WebSocket's handshake from the replayed bytes, then the
        session (``None``: refused with 4003)."""
        async with trio.open_nursery() as nursery:
            ws = None
            with trio.move_on_after(HANDSHAKE_TIMEOUT):
                ws_request = await wrap_server_stream(
                    nursery,
                    _Replayed(stream, prefix),
                    max_message_size=MAX_MESSAGE_SIZE,
                    receive_buffer_size=RECEIVE_BUFFER,
                )
                ws = await ws_request.accept()
            if ws is not None:
                if session:
                    await self._serve_session(nursery, ws, session)
                else:
                    with trio.move_on_after(CLOSE_TIMEOUT):
                        await ws.aclose(CLOSE_UNAUTHORIZED, UNAUTHORIZED_REASON)
            nursery.cancel_scope.cancel()

    async def _serve_session(self, nursery: trio.Nursery, ws: Any, session: str) -> None:
        try:
            runner = self.daemon.session(session)
        except DaemonClosed:  # a handshake that finished during shutdown
            with trio.move_on_after(CLOSE_TIMEOUT):
                await ws.aclose(CLOSE_GOING_AWAY, SHUTDOWN_REASON)
            return
        outbox = Outbox(f"{session!r}@{ws.remote}", limit=runner.outbox_limit)
        self._outboxes.add(outbox)
        nursery.start_soon(outbox.run, _batching(ws), name=f"writer {outbox.name}")
        nursery.start_soon(self._reap, nursery, outbox, name=f"reaper {outbox.name}")
        runner.attach(outbox)
        try:
            while True:
                message = await ws.get_message()
                if type(message) is bytes:
                    message = message.decode("utf-8", "replace")
                await runner.receive(outbox, message)
        except ConnectionClosed:
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
