"""Test hosts for a daemon process: a protocol client over trio-websocket,
and a raw WebSocket client over wsproto for faults.

:class:`Host` is what the interop scenarios use: it sends host messages,
reads daemon messages, waits for conditions (never for a time), and records
the transcript of what it received, so the same scenario run against both
daemons can be compared message by message.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import trio
import wsproto
import wsproto.events as wse
from trio_websocket import ConnectionClosed, open_websocket_url

from tests.support.daemons import Daemon

#: Every wait in these tests ends by this deadline: a hung daemon fails the
#: test instead of hanging it. Generous: it is never the expected path.
WAIT: float = 20.0


def mask(value: Any) -> Any:
    """A daemon message with what legitimately differs between runs
    replaced: ``createdAt`` timestamps; and the echo adapter's ``rerun``
    capability, which ours declares and the reference's does not
    (docs/container-protocol.md, "Where we differ")."""
    if isinstance(value, dict):
        return {
            k: "<ms>" if k == "createdAt" else [c for c in v if c != "rerun"] if k == "capabilities" else mask(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


class Host:
    """One session socket, as a host uses it."""

    def __init__(self, ws: Any, name: str) -> None:
        self.ws = ws
        self.name = name
        #: Every message received, parsed, in order.
        self.received: list[dict] = []

    async def send(self, message: dict | str | bytes) -> None:
        if isinstance(message, dict):
            message = json.dumps(message, separators=(",", ":"))
        await self.ws.send_message(message)

    async def recv(self) -> dict:
        with trio.fail_after(WAIT):
            text = await self.ws.get_message()
        message = json.loads(text)
        self.received.append(message)
        return message

    async def until(self, predicate: Callable[[dict], bool]) -> list[dict]:
        """Receive until a message matches; returns everything received,
        that message last."""
        got = []
        while True:
            message = await self.recv()
            got.append(message)
            if predicate(message):
                return got

    async def hello(self) -> dict:
        message = await self.recv()
        assert message["type"] == "hello", message
        return message

    async def replay(self, after: int = 0) -> list[dict]:
        """Send ``replay`` and receive up to ``caught-up``: the frames."""
        await self.send({"type": "replay", "after": after})
        got = await self.until(lambda m: m["type"] == "caught-up")
        return got[:-1]

    async def open(self, generation: int = 1, restore: list | None = None, settings: dict | None = None) -> None:
        await self.send({"type": "open", "generation": generation, "settings": settings or {}, "restore": restore or []})

    async def prompt(self, operation_id: str, text: Any, when_busy: str = "followUp") -> None:
        await self.send({"type": "prompt", "operationId": operation_id, "input": text, "whenBusy": when_busy})

    async def frame(self, kind: str, operation_id: str | None = None) -> list[dict]:
        """Receive until a frame of ``kind`` (for ``operation_id``)."""
        return await self.until(
            lambda m: m["type"] == "frame"
            and m["frame"]["kind"] == kind
            and (operation_id is None or m["frame"].get("operationId") == operation_id)
        )

    async def settled(self, operation_id: str) -> dict:
        """Receive until ``operation_id`` settles; returns its outcome."""
        got = await self.frame("settle", operation_id)
        return got[-1]["frame"]["outcome"]

    async def closed(self) -> tuple[int, str | None]:
        """Receive until the daemon closes the socket; its code and reason."""
        with trio.fail_after(WAIT):
            while True:
                try:
                    text = await self.ws.get_message()
                except ConnectionClosed as exc:
                    return exc.reason.code, exc.reason.reason
                self.received.append(json.loads(text))


@asynccontextmanager
async def connect(daemon: Daemon, session: str, *, token: str | None = None, name: str = "host") -> AsyncIterator[Host]:
    """A host connected to ``session`` (with the daemon's token unless
    another is given). Closes the socket at the end."""
    headers = [(b"x-cf-harness-token", (daemon.token if token is None else token).encode())]
    async with open_websocket_url(
        daemon.session_url(session),
        extra_headers=headers,
        max_message_size=2**27,
        connect_timeout=WAIT,
        disconnect_timeout=WAIT,
    ) as ws:
        yield Host(ws, name)


def frames_of(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m["type"] == "frame"]


def seqs(messages: list[dict]) -> list[int]:
    return [m["seq"] for m in frames_of(messages)]


# --------------------------------------------------------------------------- raw


class RawSocket:
    """A WebSocket client with its bytes in the test's hands: wsproto on a
    TCP stream. It can send anything, and drop the connection without a
    close frame."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.events: list[wse.Event] = []
        self.accepted: bool | None = None

    @classmethod
    async def open(cls, port: int, path: str, token: str | None, *, handshake: bool = True) -> "RawSocket":
        with trio.fail_after(WAIT):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        raw = cls(stream)
        if handshake:
            headers = [] if token is None else [(b"x-cf-harness-token", token.encode())]
            await raw.send_bytes(raw.ws.send(wse.Request(host="127.0.0.1", target=path, extra_headers=headers)))
            await raw.next_event(lambda e: isinstance(e, (wse.AcceptConnection, wse.RejectConnection)))
        return raw

    async def send_bytes(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_text(self, text: str) -> None:
        await self.send_bytes(self.ws.send(wse.Message(data=text)))

    async def next_event(self, predicate: Callable[[wse.Event], bool] = lambda e: True) -> wse.Event | None:
        """The next event matching, or None at EOF."""
        with trio.fail_after(WAIT):
            while True:
                for event in self.ws.events():
                    self.events.append(event)
                    if isinstance(event, wse.AcceptConnection):
                        self.accepted = True
                    if predicate(event):
                        return event
                data = await self.stream.receive_some(65536)
                if not data:
                    return None
                self.ws.receive_data(data)

    async def text(self) -> dict | None:
        """The next text message (whole), parsed; None when the socket ends."""
        parts = []
        while True:
            event = await self.next_event(lambda e: isinstance(e, (wse.TextMessage, wse.CloseConnection)))
            if event is None or isinstance(event, wse.CloseConnection):
                return None
            parts.append(event.data)
            if event.message_finished:
                return json.loads("".join(parts))

    async def close_code(self) -> int | None:
        """Read to the daemon's close frame; its code (None: dropped)."""
        event = await self.next_event(lambda e: isinstance(e, wse.CloseConnection))
        return None if event is None else event.code

    async def drop(self) -> None:
        """Close the TCP connection without a close frame."""
        await self.stream.aclose()


def masked_frame_bytes(payload: bytes, *, opcode: int = 0x1, fin: bool = True, length: int | None = None, mask_key: bytes = b"\x01\x02\x03\x04") -> bytes:
    """A client frame built by hand (``length`` may lie)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    body = bytes(b ^ mask_key[i % 4] for i, b in enumerate(payload))
    return head + mask_key + body

