"""One WebSocket for both ends of the container protocol, without a task.

The host dials (:meth:`WebSocket.connect`), the daemon's front accepts
(:meth:`WebSocket.accept`, from the request head its HTTP loop already
read); from then on both ends are the same object. trio-websocket gives
every connection a reader task and a message channel (about 8–10 KiB of an
idle session's heap) and wakes a task per message. Here the reading is done
by whoever calls :meth:`receive` (the session link's reader, the daemon's
connection task), every complete message a read of the socket brings at
once, and the sending by whoever calls :meth:`send_messages` (the link's
driver, the daemon's outbox writer), every message of a batch framed into
one ``send_all``. Why wsproto under our own class and not trio-websocket's
public API: ``docs/bench.md``, "One WebSocket".

wsproto does the opening handshake (RFC 6455 §4.1), parses what the peer
sends (§5.2, fragments, control frames, UTF-8; a frame that breaks the RFC
fails the connection, §7.1.7) and frames the control frames we send (pong,
ping, close); the text frames we send are framed here (§5.2; a client's
masked, §5.3: a fresh key from ``os.urandom`` per frame; a server's not),
the same bytes wsproto writes (tests hold them to it), since wsproto
builds one bytes object per frame through several layers of Python.

A message larger than ``max_message_size`` closes the connection with 1009
as it arrives. The client counts what the joined text will take in memory
(characters times the widest, ``wide``); the daemon counts characters,
never more than the UTF-8 bytes the reference (npm ``agents@0.32.0``)
counts, so everything the reference accepts is accepted.

Every send goes through one lock (a pong and a batch must not interleave
on the stream). A send that does not finish (cancelled, or the stream
broke) leaves a frame half written: the socket is then *broken* and every
later send and receive raises :class:`WebSocketClosed` (1006), so the
connection ends rather than write garbage after it.
"""

from __future__ import annotations

import math
import os
import struct
from typing import Final, Sequence

import trio
from wsproto import ConnectionState, ConnectionType
from wsproto.connection import Connection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.handshake import H11Handshake
from wsproto.utilities import ProtocolError

__all__ = ["HandshakeFailed", "WebSocket", "WebSocketClosed", "client_text_frame", "text_frame"]

#: Bytes asked of the socket per read: trio-websocket's ``receive_buffer_size``
#: as the host used it (64 KiB).
RECEIVE_SIZE: Final = 65536
#: The largest frame read here rather than by wsproto (``WebSocket._split``):
#: one read's worth. A larger one is handed to wsproto as it arrives, so a
#: message over the limit is refused before it is all held.
PLAIN_FRAME_MAX: Final = RECEIVE_SIZE
#: The largest answer head to an upgrade (h11's default for an incomplete event).
MAX_ANSWER_HEAD: Final = 16 * 1024
#: The close code of a connection that ended without a close frame
#: (RFC 6455 §7.4.1: "abnormal closure", never sent on the wire).
ABNORMAL_CLOSURE: Final = 1006
#: The close code for a message over the size limit (RFC 6455 §7.4.1).
MESSAGE_TOO_BIG: Final = 1009
#: The payload of our pings (any; a pong echoes it, §5.5.3).
PING_PAYLOAD: Final = b"router"

_HEADER_SHORT = struct.Struct("!BB")
_HEADER_16 = struct.Struct("!BBH")
_HEADER_64 = struct.Struct("!BBQ")
#: FIN and the text opcode (§5.2), and the mask bit of the length byte.
_FIN_TEXT: Final = 0x81
_MASKED: Final = 0x80


class WebSocketClosed(Exception):
    """The WebSocket closed: the peer's close ``code`` and ``reason``, or
    :data:`ABNORMAL_CLOSURE` when the connection ended without one."""

    def __init__(self, code: int | None, reason: str | None = None, *, side: str = "peer") -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason
        #: Who ended it: ``peer`` (its close frame), ``ours`` (a message
        #: over the limit, or a send after we began closing), ``network``
        #: (no close frame).
        self.side = side

    def __str__(self) -> str:
        return f"code {self.code}" + (f": {self.reason}" if self.reason else "")


class HandshakeFailed(Exception):
    """The upgrade did not happen: the daemon did not accept it (a status,
    or bad HTTP), or a request the server cannot accept."""


def text_frame(text: str) -> bytes:
    """One unfragmented text frame as a server sends it (RFC 6455 §5.2:
    FIN, opcode 1, no mask; lengths over 125 in 16 or 64 bits). What
    wsproto writes for ``TextMessage`` on a connection without extensions,
    at a tenth of the cost."""
    payload = text.encode("utf-8")
    size = len(payload)
    if size < 126:
        return _HEADER_SHORT.pack(_FIN_TEXT, size) + payload
    if size < 65536:
        return _HEADER_16.pack(_FIN_TEXT, 126, size) + payload
    return _HEADER_64.pack(_FIN_TEXT, 127, size) + payload


def client_text_frame(text: str, key: bytes) -> bytes:
    """One unfragmented text frame as a client sends it: FIN, opcode 1,
    the length in 7, 16 or 64 bits with the mask bit, ``key`` (4 bytes),
    and the payload XORed with the key repeated (§5.3), done as one
    integer XOR (C speed, any length)."""
    payload = text.encode()
    size = len(payload)
    if size < 126:
        header = _HEADER_SHORT.pack(_FIN_TEXT, _MASKED | size)
    elif size < 65536:
        header = _HEADER_16.pack(_FIN_TEXT, _MASKED | 126, size)
    else:
        header = _HEADER_64.pack(_FIN_TEXT, _MASKED | 127, size)
    mask = (key * (size // 4 + 1))[:size]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(size, "big")
    return header + key + masked


def _frame_head(buffer: bytearray, pos: int, end: int) -> tuple[int, int, int, int] | None:
    """The frame at ``pos``: its first byte, its mask bit, where its payload
    starts and the payload's length (RFC 6455 §5.2); None until the whole
    header is in."""
    if end - pos < 2:
        return None
    first, second = buffer[pos], buffer[pos + 1]
    length, start = second & 0x7F, pos + 2
    if length == 126:
        if end - pos < 4:
            return None
        length, start = int.from_bytes(buffer[pos + 2: pos + 4], "big"), pos + 4
    elif length == 127:
        if end - pos < 10:
            return None
        length, start = int.from_bytes(buffer[pos + 2: pos + 10], "big"), pos + 10
    masked = second & 0x80
    return first, masked, start + (4 if masked else 0), length


def _plain_message(buffer: bytearray, opcode: int, masked: int, start: int, length: int) -> str | bytes | None:
    """A plain frame's message: its payload unmasked (§5.3, one integer
    XOR), decoded when text; None for text that is not UTF-8."""
    payload = bytes(buffer[start: start + length])
    if masked and length:
        mask = (bytes(buffer[start - 4: start]) * (length // 4 + 1))[:length]
        payload = (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(length, "big")
    if opcode == 2:
        return payload
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None  # wsproto fails it (1007)


class WebSocket:
    """One open WebSocket over ``stream`` (after :meth:`connect` or
    :meth:`accept`). ``client``: our frames are masked.

    ``receive`` is for one task at a time (the reader), ``send_messages``,
    ``ping`` and ``aclose`` for any (they take the send lock)."""

    __slots__ = (
        "_stream", "_conn", "_lock", "_backlog", "_parts", "_size", "_width", "_max_size", "_client", "_wide",
        "_broken", "_closed", "_peer_closed", "_reading", "reader_task", "awaiting_pong", "_buffer", "_owed",
        "_fragmented", "_pending",
    )

    def __init__(self, stream: trio.abc.Stream, conn: Connection, *, max_message_size: int, client: bool = True,
                 wide: bool = True) -> None:
        self._stream = stream
        self._conn = conn
        self._lock = trio.Lock()
        self._client = client
        #: Count a text's size as characters times the widest (else characters).
        self._wide = wide
        #: Messages received and not yet handed out (see :meth:`unread`).
        self._backlog: list[str | bytes] = []
        #: The fragments of a message being received, and their size.
        self._parts: list[str | bytes] = []
        self._size = 0
        #: The widest character of the text being received, in bytes.
        self._width = 1
        self._max_size = max_message_size
        self._broken = False
        #: How it closed, once it did (every later call raises it).
        self._closed: WebSocketClosed | None = None
        #: Set when the peer's close arrived (a close we started waits on it).
        self._peer_closed: trio.Event | None = None
        #: A task waits in :meth:`receive` (trio refuses a second reader of
        #: the stream; a close we start then lets that one read the answer).
        self._reading = False
        #: A task of its own reads this socket (the link's reader, the
        #: daemon's connection task): a close we start leaves the reading
        #: of the answer to it, even while it is elsewhere (sending a ping,
        #: waiting for room), since trio refuses two readers of one stream.
        self.reader_task = False
        #: A ping of ours is unanswered.
        self.awaiting_pong = False
        #: Received bytes not yet split into frames (``_split``), the bytes
        #: of the current frame still owed to wsproto, whether wsproto is
        #: inside a fragmented message, and bytes that came with the
        #: handshake.
        self._buffer = bytearray()
        self._owed = 0
        self._fragmented = False
        self._pending = b""

    def __repr__(self) -> str:
        role = "client" if self._client else "server"
        return f"<WebSocket {role} {self._conn.state.name}{' broken' if self._broken else ''}>"

    @classmethod
    async def connect(
        cls,
        stream: trio.abc.Stream,
        host: str,
        target: str,
        *,
        extra_headers: Sequence[tuple[bytes, bytes]] = (),
        max_message_size: int,
    ) -> WebSocket:
        """The opening handshake on ``stream``, as the client; raises
        :class:`HandshakeFailed` when the daemon does not switch protocols,
        and the stream's errors."""
        handshake = H11Handshake(ConnectionType.CLIENT)
        await stream.send_all(handshake.send(Request(host=host, target=target, extra_headers=list(extra_headers))))
        buffer = b""
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_ANSWER_HEAD:
                    raise HandshakeFailed("the upgrade's answer has no end")
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    raise HandshakeFailed("the daemon closed the socket during the upgrade")
                buffer += data
                continue
            # Only the head goes to wsproto: the frames after it are read
            # by our reader (``_split``), from their first byte.
            head, buffer = buffer[: end + 4], buffer[end + 4:]
            try:
                handshake.receive_data(head)
            except ProtocolError as error:
                raise HandshakeFailed(f"the upgrade's answer is not HTTP: {error}") from None
            for event in handshake.events():
                if isinstance(event, AcceptConnection):
                    assert handshake.connection is not None
                    ws = cls(stream, handshake.connection, max_message_size=max_message_size)
                    ws._pending = buffer
                    return ws
                if isinstance(event, (RejectConnection, RejectData)):
                    status = getattr(event, "status_code", None)
                    raise HandshakeFailed(f"the daemon refused the upgrade (status {status})")

    @classmethod
    async def accept(cls, stream: trio.abc.Stream, head: bytes, rest: bytes = b"", *,
                     max_message_size: int) -> WebSocket:
        """The opening handshake as the server, from a request ``head``
        already read off ``stream`` (``rest``: bytes that followed it, the
        peer's first frames): the 101 is written, and the connection is
        open. Raises :class:`HandshakeFailed` for a head wsproto does not
        take as an upgrade, and the stream's errors."""
        handshake = H11Handshake(ConnectionType.SERVER)
        try:
            handshake.receive_data(head)
            request = next((event for event in handshake.events() if isinstance(event, Request)), None)
        except ProtocolError as error:
            raise HandshakeFailed(f"the upgrade request is not one: {error}") from None
        if request is None:
            raise HandshakeFailed("the upgrade request is not complete")
        await stream.send_all(handshake.send(AcceptConnection()))
        assert handshake.connection is not None
        ws = cls(stream, handshake.connection, max_message_size=max_message_size, client=False, wide=False)
        ws._pending = rest
        return ws

    @property
    def remote(self) -> str:
        """The peer's address, for names in logs."""
        sock = getattr(self._stream, "socket", None)
        try:
            return str(sock.getpeername()) if sock is not None else "a stream"
        except OSError:
            return "a closed socket"

    @property
    def closed(self) -> WebSocketClosed | None:
        return self._closed

    @property
    def holding(self) -> bool:
        """Whether the next :meth:`receive` may return without reading the
        socket (messages put back, bytes that came with the handshake), and
        so without a scheduler step; every read of the socket is one."""
        return bool(self._backlog or self._pending)

    @property
    def buffered(self) -> int:
        """Characters (or bytes) of a message received in part and held."""
        return sum(len(part) for part in self._parts)

    # ------------------------------------------------------------------ receiving

    def unread(self, messages: list[str | bytes]) -> None:
        """Put ``messages`` back: the next :meth:`receive` returns them first."""
        self._backlog = messages + self._backlog

    async def receive(self) -> list[str | bytes]:
        """The next complete messages: every one that the next read of the
        socket completes (at least one). Answers the peer's pings, and
        notes the pongs of ours. Raises :class:`WebSocketClosed` when the
        WebSocket closes (the peer's close is answered first)."""
        if self._backlog:
            messages, self._backlog = self._backlog, []
            return messages
        while True:
            if self._closed is not None:
                raise self._closed
            if self._pending:
                data, self._pending = self._pending, b""
            else:
                self._reading = True
                try:
                    data = await self._stream.receive_some(RECEIVE_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
                    self._lost(f"the connection broke: {error}")
                    continue
                finally:
                    self._reading = False
                if not data:
                    self._lost("the peer closed the connection without a close frame")
                    continue
            messages = await self._take(data)
            if messages:
                return messages

    async def _take(self, data: bytes) -> list[str | bytes]:
        """The messages ``data`` completes, in order: plain frames read
        here, the rest through wsproto (see :meth:`_split`)."""
        messages: list[str | bytes] = []
        for plain, item in self._split(data):
            if self._closed is not None:
                break  # nothing after a close
            if plain:
                if self._too_large(item):
                    del item, messages  # not kept by the traceback
                    await self._too_big()
                messages.append(item)
            else:
                self._conn.receive_data(item)  # type: ignore[arg-type]
                messages += await self._handle_events()
        return messages

    def _split(self, data: bytes) -> list[tuple[bool, str | bytes]]:
        """``data`` cut at frame boundaries: ``(True, message)`` for a
        plain frame read here (final, no reserved bits, text or binary,
        masked as the peer must, the shortest length encoding, at most
        :data:`PLAIN_FRAME_MAX` bytes, text that is UTF-8, outside a
        fragmented message), ``(False, bytes)`` for the bytes of any other
        frame, which wsproto reads (control frames, fragments, large frames
        as they arrive, and everything RFC 6455 refuses, which wsproto
        fails). wsproto is only ever given whole frames from their first
        byte, or the rest of the one it was given the start of, so its
        buffer is empty whenever a frame is read here."""
        buffer = self._buffer
        buffer += data
        out: list[tuple[bool, str | bytes]] = []
        pos, end = 0, len(buffer)
        while pos < end:
            if self._owed:
                take = min(self._owed, end - pos)
                out.append((False, bytes(buffer[pos: pos + take])))
                pos += take
                self._owed -= take
                continue
            head = _frame_head(buffer, pos, end)
            if head is None:
                break  # the rest of a header is still to come
            first, masked, start, length = head
            if self._plain(first, masked, start - pos, length):
                if end - start < length:
                    break  # the rest of a plain frame is still to come
                message = _plain_message(buffer, first & 0x0F, masked, start, length)
                if message is not None:
                    out.append((True, message))
                    pos = start + length
                    continue
            self._note_fragment(first)
            self._owed = start - pos + length
        del buffer[:pos]
        return out

    def _plain(self, first: int, masked: int, head: int, length: int) -> bool:
        """Whether a frame is read here (see :meth:`_split`): ``head`` is
        its header's size, which is the shortest for ``length`` or not."""
        shortest = head - (4 if masked else 0) == (2 if length < 126 else 4 if length < 65536 else 10)
        return (
            (first & 0xF0) == 0x80 and (first & 0x0F) in (1, 2) and masked == (0 if self._client else 0x80)
            and shortest and length <= PLAIN_FRAME_MAX and not self._fragmented
        )

    def _note_fragment(self, first: int) -> None:
        """Whether wsproto is now inside a fragmented message, after the
        frame whose first byte is ``first``."""
        opcode, final = first & 0x0F, first & 0x80
        if opcode in (1, 2):
            self._fragmented = not final
        elif opcode == 0 and final:
            self._fragmented = False

    def _too_large(self, message: str | bytes) -> bool:
        """Whether a whole message read here is over the size limit,
        counted as the pieces wsproto hands over are (:meth:`_over_limit`)."""
        size = len(message)
        if self._wide and type(message) is str and not message.isascii():
            widest = ord(max(message))
            size *= 1 if widest < 0x100 else 2 if widest < 0x10000 else 4
        return size > self._max_size

    async def _handle_events(self) -> list[str | bytes]:
        """What wsproto read: the messages it completed, in order; a ping
        answered, a pong noted, the peer's close answered (reading stops)."""
        messages: list[str | bytes] = []
        for event in self._conn.events():
            kind = type(event)
            if kind is TextMessage or kind is BytesMessage:
                if self._over_limit(event):  # type: ignore[arg-type]
                    del event  # not kept by the traceback
                    await self._too_big()
                message = self._piece(event)  # type: ignore[arg-type]
                if message is not None:
                    messages.append(message)
            elif kind is Ping:
                if self._conn.state is ConnectionState.OPEN:  # else we are closing: no pong
                    await self._send_all(self._conn.send(event.response()))  # type: ignore[union-attr]
            elif kind is Pong:
                self.awaiting_pong = False
            elif kind is CloseConnection:
                await self._peer_close(event)  # type: ignore[arg-type]
                break
        return messages

    def _over_limit(self, event: TextMessage | BytesMessage) -> bool:
        """Count a piece of a message wsproto read; whether the message is
        now over the size limit. The running size is counted as each piece
        arrives (before anything is joined or parsed): characters times the
        widest character so far (1, 2 or 4 bytes: what the joined ``str``
        will take), or bytes."""
        data = event.data
        self._size += len(data)
        if self._wide and type(event) is TextMessage and data and not data.isascii():
            widest = ord(max(data))  # type: ignore[arg-type]
            self._width = max(self._width, 1 if widest < 0x100 else 2 if widest < 0x10000 else 4)
        return self._size * self._width > self._max_size

    def _piece(self, event: TextMessage | BytesMessage) -> str | bytes | None:
        """Keep a piece of a message (counted by :meth:`_over_limit`); the
        whole message once its last piece came, else None."""
        data = event.data
        if event.message_finished and not self._parts:
            self._size, self._width = 0, 1
            return data
        self._parts.append(data)
        if not event.message_finished:
            return None
        parts, self._parts, self._size, self._width = self._parts, [], 0, 1
        return "".join(parts) if type(event) is TextMessage else b"".join(parts)  # type: ignore[arg-type]

    async def _peer_close(self, event: CloseConnection) -> None:
        self._closed = WebSocketClosed(event.code, event.reason or None)
        if self._peer_closed is not None:
            self._peer_closed.set()
        if self._conn.state is ConnectionState.REMOTE_CLOSING:
            try:
                await self._send_all(self._conn.send(event.response()))
            except WebSocketClosed:
                pass  # the close stands; the answer could not go out

    async def _too_big(self) -> None:
        # Dropped at once: the exception raised below outlives this socket
        # (the link keeps its last error, and its traceback these frames),
        # and it must not keep what was received of the message.
        self._parts, self._size, self._width, self._backlog = [], 0, 1, []
        # The server's reason is the reference daemon's (npm agents@0.32.0).
        reason = f"a message over {self._max_size} bytes" if self._client else "message too big"
        if self._conn.state is ConnectionState.OPEN:
            try:
                await self._send_all(self._conn.send(CloseConnection(code=MESSAGE_TOO_BIG, reason=reason)))
            except WebSocketClosed:
                pass
        self._closed = WebSocketClosed(MESSAGE_TOO_BIG, reason, side="ours")
        raise self._closed

    def _lost(self, reason: str) -> None:
        self._broken = True
        if self._closed is None:
            self._closed = WebSocketClosed(ABNORMAL_CLOSURE, reason, side="network")
        if self._peer_closed is not None:
            self._peer_closed.set()

    # ------------------------------------------------------------------ sending

    async def _send_all(self, data: bytes) -> None:
        async with self._lock:
            if self._broken:
                raise self._closed or WebSocketClosed(ABNORMAL_CLOSURE, "the socket broke", side="network")
            finished = False
            try:
                await self._stream.send_all(data)
                finished = True
            except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
                self._lost(f"the connection broke while sending: {error}")
                raise self._closed from None  # type: ignore[misc]
            finally:
                if not finished:
                    self._broken = True  # half a frame may be on the wire

    async def send_messages(self, texts: Sequence[str]) -> None:
        """Send each text as one message, all in one write. Raises
        :class:`WebSocketClosed` once either side began closing."""
        if self._closed is not None:
            raise self._closed
        if self._conn.state is not ConnectionState.OPEN:
            raise WebSocketClosed(ABNORMAL_CLOSURE, "the WebSocket is closing", side="ours")
        if self._client:
            keys = os.urandom(4 * len(texts))
            frames = [client_text_frame(text, keys[4 * n: 4 * n + 4]) for n, text in enumerate(texts)]
        else:
            frames = [text_frame(text) for text in texts]
        await self._send_all(frames[0] if len(frames) == 1 else b"".join(frames))

    async def send_message(self, text: str) -> None:
        await self.send_messages((text,))

    async def ping(self) -> None:
        """Send a ping; :attr:`awaiting_pong` until its pong is received (by
        :meth:`receive`)."""
        if self._closed is not None:
            raise self._closed
        self.awaiting_pong = True
        await self._send_all(self._conn.send(Ping(payload=PING_PAYLOAD)))

    async def aclose(self, code: int = 1000, reason: str | None = None, *, timeout: float = math.inf) -> None:
        """The close handshake (``code``, ``reason``), waiting up to
        ``timeout`` for the peer's answer (read by a task in :meth:`receive`,
        if one is; else here), then the stream closed. At once when the
        caller is cancelled."""
        try:
            with trio.move_on_after(timeout):
                if self._closed is None and self._conn.state is ConnectionState.OPEN:
                    self._peer_closed = trio.Event()
                    await self._send_all(self._conn.send(CloseConnection(code=code, reason=reason)))
                    if self._reading or self.reader_task:
                        await self._peer_closed.wait()
                    else:
                        while self._closed is None:
                            await self.receive()
        except WebSocketClosed:
            pass
        finally:
            await trio.aclose_forcefully(self._stream)
