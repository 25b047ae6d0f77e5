"""A live reader that fell behind gets every batch waiting in one receive,
in order, numbered as one at a time would be; the SSE stream writes them
as one chunk."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio

from router.api.events import live_events, sse
from router.turns.live import LiveHub, LiveLagged
from router.turns.resume import StreamCursor, parse_live_id
from router.turns.targets import LiveStream


def _delta(text: str) -> dict:
    return {"type": "text-delta", "messageId": "m", "delta": text}


async def test_waiting_batches_come_in_one_receive_in_order() -> None:
    hub = LiveHub()
    with hub.subscribe() as subscription:
        stream = LiveStream(subscription, StreamCursor(subscription.epoch))
        for text in ("a", "b", "c"):
            hub.publish([_delta(text)])
        pairs = await stream.receive()
        assert [item["delta"] for _, item in pairs] == ["a", "b", "c"]
        assert [parse_live_id(id).seq for id, _ in pairs] == [1, 2, 3]
        assert subscription.receive_nowait() is None
        hub.publish([_delta("d")])
        assert [item["delta"] for _, item in await stream.receive()] == ["d"]
        hub.close()
        assert await stream.receive() is None


async def test_a_dropped_reader_gets_what_it_holds_then_lagged() -> None:
    hub = LiveHub(buffer=2)
    with hub.subscribe() as subscription:
        stream = LiveStream(subscription, StreamCursor(subscription.epoch))
        for text in ("a", "b", "c"):  # the third overflows the buffer of two
            hub.publish([_delta(text)])
        assert [item["delta"] for _, item in await stream.receive()] == ["a", "b"]
        try:
            await stream.receive()
        except LiveLagged as lagged:
            assert lagged.code == "live-lagged"
        else:
            raise AssertionError("a dropped reader must end lagged")


class _Router:
    """The one call ``live_events`` makes of the router."""

    def __init__(self, hub: LiveHub) -> None:
        self.hub = hub

    @asynccontextmanager
    async def live(self, session: str, since: str | None):
        with self.hub.subscribe() as subscription:
            yield LiveStream(subscription, StreamCursor(subscription.epoch), snapshot={"messages": []},
                             snapshot_id="s")


async def test_the_sse_stream_writes_waiting_items_as_one_chunk() -> None:
    hub = LiveHub()
    chunks = []
    events = live_events(_Router(hub), "s1")  # type: ignore[arg-type]
    chunks.append(await events.__anext__())  # the snapshot
    for text in ("a", "b", "c"):
        hub.publish([_delta(text)])
    chunk = await events.__anext__()
    events_in_chunk = [piece for piece in chunk.split(b"\n\n") if piece]
    assert [piece.split(b"\n")[-1] for piece in events_in_chunk] == [
        sse(_delta(text)).strip(b"\n") for text in "abc"
    ]
    assert [parse_live_id(piece.split(b"\n")[0].decode().removeprefix("id: ")).seq for piece in events_in_chunk] == [1, 2, 3]
    hub.close()
    assert b"event: closed" in await events.__anext__()
    await events.aclose()
