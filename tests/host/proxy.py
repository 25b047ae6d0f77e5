"""A TCP proxy in front of a daemon that cuts connections on cue.

It forwards bytes both ways and reads the WebSocket framing as it goes (after
the HTTP upgrade), counting data messages in one direction (``"down"``:
daemon → host, ``"up"``: host → daemon) across all its connections. When the
message numbered in ``cut_at`` (1-based) comes, it forwards half of that
message's bytes and then closes both sides of the connection at once, as a
network failure would. ``block()`` makes it drop every live connection and
refuse new ones until ``unblock()``.
"""

from __future__ import annotations

import functools
from typing import Iterable, Literal

import trio

Direction = Literal["down", "up"]


class _Cut(Exception):
    pass


class _Framing:
    """Splits a byte stream into WebSocket frames after the HTTP head."""

    def __init__(self) -> None:
        self.head_done = False
        self.upgraded = False
        self.buffer = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        """Complete pieces to forward, each with whether it ends a data
        message (text, binary or continuation frame with FIN)."""
        self.buffer += data
        out: list[tuple[bytes, bool]] = []
        if not self.head_done:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return out
            head, self.buffer = self.buffer[: end + 4], self.buffer[end + 4 :]
            self.head_done = True
            first = head.split(b"\r\n", 1)[0]
            self.upgraded = b" 101 " in first or b"/sessions/" in first
            out.append((head, False))
        if not self.upgraded:
            if self.buffer:
                out.append((self.buffer, False))
                self.buffer = b""
            return out
        while len(self.buffer) >= 2:
            b0, b1 = self.buffer[0], self.buffer[1]
            length = b1 & 0x7F
            offset = 2
            if length == 126:
                if len(self.buffer) < 4:
                    break
                length = int.from_bytes(self.buffer[2:4], "big")
                offset = 4
            elif length == 127:
                if len(self.buffer) < 10:
                    break
                length = int.from_bytes(self.buffer[2:10], "big")
                offset = 10
            if b1 & 0x80:
                offset += 4
            if len(self.buffer) < offset + length:
                break
            frame, self.buffer = self.buffer[: offset + length], self.buffer[offset + length :]
            opcode, fin = b0 & 0x0F, bool(b0 & 0x80)
            out.append((frame, fin and opcode in (0, 1, 2)))
        return out


class CuttingProxy:
    def __init__(
        self,
        target_port: int,
        *,
        cut_at: Iterable[int] = (),
        direction: Direction = "down",
        target_host: str = "127.0.0.1",
    ) -> None:
        self.target = (target_host, target_port)
        self.cut_at = set(cut_at)
        self.direction = direction
        #: Data messages seen in ``direction`` so far.
        self.messages = 0
        self.cuts = 0
        self.connections = 0
        self.port = 0
        self._blocked = False
        self._live: set[trio.CancelScope] = set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def block(self) -> None:
        """Drop every live connection and refuse new ones."""
        self._blocked = True
        for scope in list(self._live):
            scope.cancel()

    def unblock(self) -> None:
        self._blocked = False

    async def run(self, *, task_status: trio.TaskStatus[CuttingProxy] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    async def _handle(self, client: trio.SocketStream) -> None:
        if self._blocked:
            await trio.aclose_forcefully(client)
            return
        try:
            upstream = await trio.open_tcp_stream(*self.target)
        except OSError:
            await trio.aclose_forcefully(client)
            return
        self.connections += 1
        with trio.CancelScope() as scope:
            self._live.add(scope)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, upstream, "up", scope)
                    nursery.start_soon(self._pump, upstream, client, "down", scope)
            finally:
                self._live.discard(scope)
        await trio.aclose_forcefully(client)
        await trio.aclose_forcefully(upstream)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, direction: Direction, scope: trio.CancelScope
    ) -> None:
        framing = _Framing()
        counting = direction == self.direction
        try:
            while True:
                data = await source.receive_some(65536)
                if not data:
                    break
                for piece, ends_message in framing.feed(data):
                    if counting and ends_message:
                        self.messages += 1
                        if self.messages in self.cut_at:
                            self.cuts += 1
                            await sink.send_all(piece[: len(piece) // 2])
                            raise _Cut()
                    await sink.send_all(piece)
        except (_Cut, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        # One side ended (or was cut): the whole connection goes.
        scope.cancel()
