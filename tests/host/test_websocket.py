"""The host's WebSocket client (router/_websocket.py) against wsproto's
server side over an in-memory stream pair: the frames it writes by hand,
what it does with the daemon's pings, closes, fragments and sizes."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from router._websocket import (
    ABNORMAL_CLOSURE,
    MESSAGE_TOO_BIG,
    WebSocket,
    HandshakeFailed,
    WebSocketClosed,
    client_text_frame,
)


def _server_reads(data: bytes) -> list[object]:
    """What a wsproto server makes of ``data`` after a handshake."""
    server = WSConnection(ConnectionType.SERVER)
    client = WSConnection(ConnectionType.CLIENT)
    server.receive_data(client.send(Request(host="h", target="/")))
    request = next(server.events())
    assert isinstance(request, Request)
    client.receive_data(server.send(AcceptConnection()))
    server.receive_data(data)
    return list(server.events())


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=70_000) | st.sampled_from(["", "x" * 125, "x" * 126, "y" * 65_535, "z" * 65_536]))
def test_a_hand_framed_text_is_what_a_server_reads(text: str) -> None:
    events = _server_reads(client_text_frame(text, os.urandom(4)))
    received = "".join(event.data for event in events if isinstance(event, TextMessage))
    assert received == text
    assert all(isinstance(event, TextMessage) for event in events)
    assert events[-1].message_finished


def test_a_frame_is_masked() -> None:
    frame = client_text_frame("hello", b"\x01\x02\x03\x04")
    assert frame[1] & 0x80  # the mask bit
    assert b"hello" not in frame


class Server:
    """A wsproto server on one end of a memory stream pair."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.SERVER)

    async def accept(self) -> None:
        while True:
            self.ws.receive_data(await self.stream.receive_some(65536))
            for event in self.ws.events():
                if isinstance(event, Request):
                    await self.stream.send_all(self.ws.send(AcceptConnection()))
                    return

    async def send(self, event: object) -> None:
        await self.stream.send_all(self.ws.send(event))  # type: ignore[arg-type]

    async def events(self) -> list[object]:
        while True:
            data = await self.stream.receive_some(65536)
            self.ws.receive_data(data or None)
            events = list(self.ws.events())
            if events:
                return events


async def _pair(nursery: trio.Nursery, max_message_size: int = 1 << 20) -> tuple[WebSocket, Server]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    server = Server(server_stream)
    nursery.start_soon(server.accept)
    ws = await WebSocket.connect(client_stream, "h", "/s", max_message_size=max_message_size)
    return ws, server


async def test_messages_of_one_read_come_together_and_a_batch_goes_as_one_write(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)
    await server.stream.send_all(
        server.ws.send(Message(data="one")) + server.ws.send(Message(data="two")) + server.ws.send(Message(data=b"3"))
    )
    assert await ws.receive() == ["one", "two", b"3"]
    await ws.send_messages(["a", "b" * 200, "c" * 70_000])
    got, part = [], ""
    while len(got) < 3:
        for event in await server.events():
            if isinstance(event, TextMessage):  # wsproto hands a long one out in pieces
                part += event.data
                if event.message_finished:
                    got.append(part)
                    part = ""
    assert got == ["a", "b" * 200, "c" * 70_000]


async def test_a_fragmented_message_is_one_message(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)
    await server.send(Message(data="par", message_finished=False))
    await server.send(Message(data="ts", message_finished=True))
    assert await ws.receive() == ["parts"]


async def test_the_daemons_ping_is_answered_and_our_pong_noted(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)
    await server.send(Ping(payload=b"p"))
    await server.send(Message(data="after"))
    assert await ws.receive() == ["after"]
    assert any(isinstance(event, Pong) and event.payload == b"p" for event in await server.events())
    await ws.ping()
    assert ws.awaiting_pong
    ping = next(event for event in await server.events() if isinstance(event, Ping))
    await server.send(ping.response())
    await server.send(Message(data="x"))
    assert await ws.receive() == ["x"]
    assert not ws.awaiting_pong


async def test_the_daemons_close_is_answered_and_raised_with_its_code(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)
    await server.send(CloseConnection(code=4003, reason="bad token"))
    with pytest.raises(WebSocketClosed) as caught:
        await ws.receive()
    assert (caught.value.code, caught.value.reason) == (4003, "bad token")
    assert any(isinstance(event, CloseConnection) and event.code == 4003 for event in await server.events())
    with pytest.raises(WebSocketClosed):
        await ws.send_message("late")


async def test_a_lost_connection_is_an_abnormal_closure(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)
    await server.stream.aclose()
    with pytest.raises(WebSocketClosed) as caught:
        await ws.receive()
    assert caught.value.code == ABNORMAL_CLOSURE


async def test_a_message_over_the_limit_closes_with_1009(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery, max_message_size=100)
    await server.send(Message(data="x" * 60, message_finished=False))
    await server.send(Message(data="x" * 60, message_finished=True))
    with pytest.raises(WebSocketClosed) as caught:
        await ws.receive()
    assert caught.value.code == MESSAGE_TOO_BIG
    assert any(isinstance(event, CloseConnection) and event.code == MESSAGE_TOO_BIG for event in await server.events())


async def test_messages_put_back_come_first(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)
    ws.unread(["kept"])
    assert await ws.receive() == ["kept"]
    await server.send(Message(data="next"))
    assert await ws.receive() == ["next"]


async def test_our_close_waits_for_the_answer_when_nobody_reads(nursery: trio.Nursery) -> None:
    ws, server = await _pair(nursery)

    async def answer() -> None:
        for event in await server.events():
            if isinstance(event, CloseConnection):
                await server.send(event.response())

    nursery.start_soon(answer)
    await ws.aclose(timeout=5)
    assert ws.closed is not None and ws.closed.code == 1000


async def test_a_refused_upgrade_is_a_handshake_failure() -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()

    async def refuse() -> None:
        await server_stream.receive_some(65536)
        await server_stream.send_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(refuse)
        with pytest.raises(HandshakeFailed):
            await WebSocket.connect(client_stream, "h", "/s", max_message_size=100)


async def test_our_close_leaves_the_answer_to_the_reader_task(nursery: trio.Nursery) -> None:
    """With a reader task (the link's, away sending a ping or waiting for
    room), a close we start must not read the socket itself: trio refuses
    a second reader of one stream."""
    ws, server = await _pair(nursery)
    ws.reader_task = True
    closed = trio.Event()

    async def close() -> None:
        await ws.aclose(timeout=60)
        closed.set()

    nursery.start_soon(close)
    ours = next(event for event in await server.events() if isinstance(event, CloseConnection))
    await server.send(ours.response())
    await trio.testing.wait_all_tasks_blocked()
    assert not closed.is_set()
    with pytest.raises(WebSocketClosed):
        await ws.receive()  # the reader task reads the answer
    await closed.wait()


async def test_wide_characters_count_at_their_width_in_memory(nursery: trio.Nursery) -> None:
    """40 characters under a 100-byte limit, but one of them takes 4 bytes
    in a ``str``, so the joined text would take 160: refused as it arrives."""
    ws, server = await _pair(nursery, max_message_size=100)
    await server.send(Message(data="x" * 39, message_finished=False))
    await server.send(Message(data="\U0001f600", message_finished=True))
    with pytest.raises(WebSocketClosed) as caught:
        await ws.receive()
    assert caught.value.code == MESSAGE_TOO_BIG


async def test_an_unfragmented_message_over_the_limit_is_refused_before_it_is_whole(nursery: trio.Nursery) -> None:
    """One frame of 4 MiB against a 64 KiB limit: refused once what arrived
    passes the limit, with no more than a read's worth past it kept."""
    ws, server = await _pair(nursery, max_message_size=65536)
    frame = server.ws.send(Message(data="x" * (4 << 20)))
    nursery.start_soon(server.stream.send_all, frame)
    with pytest.raises(WebSocketClosed) as caught:
        await ws.receive()
    assert caught.value.code == MESSAGE_TOO_BIG
    assert ws.buffered == 0  # nothing of it kept once refused


# --------------------------------------------------------------------------- the reader's split


def _peer(role: ConnectionType):
    """A wsproto connection of the other end, open (no handshake needed to frame)."""
    from wsproto.connection import Connection

    return Connection(ConnectionType.SERVER if role is ConnectionType.CLIENT else ConnectionType.CLIENT)


def _reader(role: ConnectionType, max_size: int = 1 << 30) -> WebSocket:
    from wsproto.connection import Connection

    return WebSocket(trio.testing.MemorySendStream(), Connection(role), max_message_size=max_size,
                     client=role is ConnectionType.CLIENT)


_MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(["text", "bytes", "ping"]),
        st.text(max_size=300) | st.sampled_from(["", "é" * 40_000, "x" * 65_530, "y" * 70_000]),
        st.integers(min_value=1, max_value=3),  # fragments
    ),
    max_size=8,
)


@settings(max_examples=80, deadline=None)
@given(_MESSAGES, st.lists(st.integers(min_value=1, max_value=90_000), max_size=6),
       st.sampled_from([ConnectionType.CLIENT, ConnectionType.SERVER]))
def test_the_reader_hands_over_what_wsproto_reads(messages, cuts, role) -> None:
    """Frames read by hand (plain ones) or by wsproto (fragments, control
    frames, large frames), with the bytes cut anywhere: the same messages,
    in order, as wsproto alone reads."""
    from wsproto.events import BytesMessage

    peer = _peer(role)
    wire, expected = b"", []
    for kind, text, pieces in messages:
        if kind == "ping":
            wire += peer.send(Ping(payload=b"p"))
            continue
        data = text if kind == "text" else text.encode()
        size = max(1, len(data) // pieces)
        parts = [data[i: i + size] for i in range(0, len(data), size)] or [data]
        for n, part in enumerate(parts):
            event = TextMessage if kind == "text" else BytesMessage
            wire += peer.send(event(data=part, message_finished=n == len(parts) - 1))
        expected.append(data)
    chunks, at = [], 0
    for cut in sorted(cuts):
        chunks.append(wire[at:cut])
        at = max(at, cut)
    chunks.append(wire[at:])

    async def read() -> list:
        ws = _reader(role)
        got = []
        for chunk in chunks:
            if chunk:
                got += await ws._take(chunk)
        assert ws.closed is None
        return got

    assert trio.run(read) == expected


@pytest.mark.parametrize("role", [ConnectionType.CLIENT, ConnectionType.SERVER])
async def test_a_text_frame_that_is_not_utf8_fails_the_connection_1007(role) -> None:
    header = bytes((0x81, 0x82)) + b"\0\0\0\0" if role is ConnectionType.SERVER else bytes((0x81, 0x02))
    ws = _reader(role)
    assert await ws._take(header + b"\xff\xfe") == []
    assert ws.closed is not None and ws.closed.code == 1007


@pytest.mark.parametrize("role", [ConnectionType.CLIENT, ConnectionType.SERVER])
async def test_a_frame_masked_the_wrong_way_fails_the_connection_1002(role) -> None:
    wrong = bytes((0x81, 0x02)) + b"hi" if role is ConnectionType.SERVER else bytes((0x81, 0x82)) + b"\0\0\0\0hi"
    ws = _reader(role)
    assert await ws._take(wrong) == []
    assert ws.closed is not None and ws.closed.code == 1002


async def test_a_whole_message_over_the_limit_read_by_hand_closes_1009() -> None:
    ws = _reader(ConnectionType.CLIENT, max_size=10)
    with pytest.raises(WebSocketClosed) as closed:
        await ws._take(_peer(ConnectionType.CLIENT).send(TextMessage(data="x" * 11)))
    assert closed.value.code == MESSAGE_TOO_BIG
