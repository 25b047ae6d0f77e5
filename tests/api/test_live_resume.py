"""The live stream over HTTP: ids, ``Last-Event-ID`` resumes (from the
view's history, from the host's record), ``reset`` for an id not held, the
history's bound, the keep-alive comment, skipped frames."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import trio

from router.api.app import ApiConfig
from router.api.server import ApiServer
from router.host import FrameSkipped
from router.turns.live import container_items
from router.turns.resume import parse_live_id
from tests.api.conftest import TOKEN, Api
from tests.api.processes import serve
from tests.api.sse import SseReader, is_turn_end

LIVE = "/sessions/root/live"


def ends(operation: str) -> Any:
    return lambda event: is_turn_end(event) and event["data"]["id"] == operation


def pairs(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(event["id"], event["data"]) for event in events]


async def test_last_event_id_resumes_exactly_across_a_dropped_stream(api: Api) -> None:
    await api.send("root", {"text": "first", "eventId": "e0", "wait": True})
    async with api.client.stream("GET", LIVE) as witness_response:
        witness = SseReader(witness_response)  # stays connected throughout
        [snapshot] = await witness.until(lambda event: True)
        assert snapshot["event"] == "snapshot" and parse_live_id(snapshot["id"]) is not None
        async with api.client.stream("GET", LIVE) as dropped_response:
            dropped = SseReader(dropped_response)
            await dropped.until(lambda event: event["event"] == "snapshot")
            await api.send("root", {"text": "one", "eventId": "e1", "wait": True})
            seen = await dropped.until(ends("e1"))
        last_id = seen[-1]["id"]
        # Published while the reader is away.
        await api.send("root", {"text": "two", "eventId": "e2", "wait": True})
        await api.send("root", {"text": "three", "eventId": "e3", "wait": True})
        everything = await witness.until(ends("e3"))
        async with api.client.stream("GET", LIVE, headers={"last-event-id": last_id}) as resumed_response:
            resumed = await SseReader(resumed_response).until(ends("e3"))
    ids = [event["id"] for event in everything]
    missed = everything[ids.index(last_id) + 1 :]
    assert missed and pairs(resumed) == pairs(missed)  # in order, none lost, none twice
    assert {event["event"] for event in resumed} == {"message"}  # no reset, no snapshot
    assert "text-delta" in [event["data"]["type"] for event in resumed]
    numbers = [parse_live_id(event["id"]).seq for event in everything]  # type: ignore[union-attr]
    assert numbers == sorted(set(numbers))


async def test_a_stale_or_malformed_id_gets_a_reset_then_a_snapshot(api: Api) -> None:
    await api.send("root", {"text": "first", "eventId": "e0", "wait": True})
    for sent, code in (
        ("e0123456789abcdef.s3", "stale-event-id"),  # another epoch (a restarted view), no record position
        ("not an id", "bad-event-id"),
        ("g1.v" + "9" * 17, "stale-event-id"),  # a record position ahead of the record
        ("g7.v1", "stale-event-id"),  # a generation that is not the session's
    ):
        async with api.client.stream("GET", LIVE, headers={"last-event-id": sent}) as response:
            reader = SseReader(response)
            reset, snapshot = await reader.until(lambda event: event["event"] == "snapshot")
        assert reset["event"] == "reset" and reset["id"] is None and reset["data"]["error"] == code, sent
        assert [m["id"] for m in snapshot["data"]["messages"]] == ["e0:user", "e0:assistant"]
        assert parse_live_id(snapshot["id"]) is not None


async def test_a_record_position_resumes_with_the_messages_changed_since(api: Api) -> None:
    """What a restart leaves: an id whose epoch is gone but whose durable
    part the record still answers (the in-process form of the restart test
    below)."""
    await api.send("root", {"text": "first", "eventId": "e0", "wait": True})
    async with api.client.stream("GET", LIVE) as response:
        reader = SseReader(response)
        await reader.until(lambda event: event["event"] == "snapshot")
        await api.send("root", {"text": "one", "eventId": "e1", "wait": True})
        seen = await reader.until(ends("e1"))
    durable = parse_live_id(seen[-1]["id"])
    assert durable is not None and durable.durable is not None
    await api.send("root", {"text": "two", "eventId": "e2", "wait": True})
    other_epoch = f"e{'f' * 16}.s{durable.seq}.g{durable.durable[0]}.v{durable.durable[1]}"
    async with api.client.stream("GET", LIVE, headers={"last-event-id": other_epoch}) as response:
        reader = SseReader(response)
        caught_up = await reader.until(
            lambda event: event["data"].get("type") == "message" and event["data"]["message"]["id"] == "e2:assistant"
        )
        await api.send("root", {"text": "three", "eventId": "e3", "wait": True})
        live = await reader.until(ends("e3"))
    # No snapshot and no reset: the messages changed since the id's version,
    # as message items. The version an id carries is read back after its
    # batch is stored, so on a loaded machine it may lag one batch, and that
    # batch's messages (which the client holds; they replace by id) come
    # again first: nothing is missing, and nothing older than the id comes.
    resent = [(e["event"], e["data"]["type"], e["data"]["message"]["id"]) for e in caught_up]
    assert resent[-2:] == [("message", "message", "e2:user"), ("message", "message", "e2:assistant")]
    assert {message for _, _, message in resent[:-2]} <= {"e1:user", "e1:assistant"}, resent
    assert caught_up[-1]["data"]["message"]["parts"][0]["text"] == "echo: two (turn 3)"
    # Then the live items, without repeating what the record sent.
    # (e2's turn-end may come first: the record resume sends messages only,
    # and that item was published after the position the id names.)
    live_messages = [e for e in live if e["data"].get("type") == "message"]
    assert live_messages[0]["data"]["message"]["id"] == "e3:user"
    assert not any(e["data"].get("message", {}).get("id", "").startswith("e2") for e in live)


async def test_the_history_bound_is_honoured(api: Api) -> None:
    await api.send("root", {"text": "first", "eventId": "e0", "wait": True})
    session = api.router.registry.get("root")
    assert session is not None and session.target.hub is not None
    history = session.target.hub.history
    history.max_batches = 2
    async with api.client.stream("GET", LIVE) as response:
        reader = SseReader(response)
        [snapshot] = await reader.until(lambda event: event["event"] == "snapshot")
        # Three turns, each at least one batch of its own (each is sent after
        # the last was published): more than the two the history keeps, so
        # the snapshot's point is gone from it however e0's last items were
        # batched (with two turns they could leave it the oldest held).
        for n in (1, 2, 3):
            await api.send("root", {"text": "one", "eventId": f"e{n}", "wait": True})
            await reader.until(ends(f"e{n}"))  # the view has published all of it
    assert len(history._batches) == 2
    point = parse_live_id(snapshot["id"])
    assert point is not None and point.seq is not None and point.seq < history.oldest
    # Not held: without a record position, a reset.
    memory_only = f"e{point.epoch}.s{point.seq}"
    async with api.client.stream("GET", LIVE, headers={"last-event-id": memory_only}) as response:
        reset = await SseReader(response).next()
    assert reset["event"] == "reset" and reset["data"]["error"] == "stale-event-id"
    # With one, the record answers: the changed messages only, no deltas.
    async with api.client.stream("GET", LIVE, headers={"last-event-id": snapshot["id"]}) as response:
        reader = SseReader(response)
        caught_up = [await reader.next(), await reader.next()]
    assert [e["data"]["message"]["id"] for e in caught_up] == ["e1:user", "e1:assistant"]  # then e2's
    # Held: the items themselves, deltas included.
    inside = f"e{history.epoch}.s{history.oldest}"
    async with api.client.stream("GET", LIVE, headers={"last-event-id": inside}) as response:
        first = await SseReader(response).next()
    assert first["event"] == "message" and parse_live_id(first["id"]).seq == history.oldest + 1  # type: ignore[union-attr]


async def test_an_idle_stream_sends_a_keep_alive_comment(api: Api) -> None:
    server = ApiServer(api.router, api.server.layer, token=TOKEN, port=0, config=ApiConfig(live_keepalive=0.05))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.run)
        async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=httpx.Timeout(30.0)) as client:
            async with client.stream("GET", LIVE) as response:
                reader = SseReader(response)
                assert (await reader.next())["event"] == "snapshot"
                assert await reader.next() == {"comment": "keep-alive"}
                await api.send("root", {"text": "after", "eventId": "e9", "wait": True})
                items = await reader.until(ends("e9"))  # the stream goes on after it
        assert items[0]["data"]["message"]["id"] == "e9:user"
        nursery.cancel_scope.cancel()


async def test_skipped_frames_are_notices_live_and_in_the_snapshot(api: Api) -> None:
    [notice] = container_items(FrameSkipped(runtime_id="r1", seq=7, reason="it does not parse"))
    assert notice == {
        "type": "notice", "level": "error", "code": "frame-skipped", "seq": 7, "runtimeId": "r1",
        "message": notice["message"],
    }
    assert "frame 7 of runtime r1" in notice["message"] and "it does not parse" in notice["message"]
    await api.send("root", {"text": "first", "eventId": "e0", "wait": True})
    store = api.host.store
    await store.call(store.skipped_frames.add, "root", "r1", 7, "it does not parse", "{")
    async with api.client.stream("GET", LIVE) as response:
        snapshot = await SseReader(response).next()
    assert snapshot["data"]["notices"] == [{**notice}]


async def test_a_container_stream_resumes_across_a_restart_of_router_serve(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        async with httpx.AsyncClient(base_url=served.url, headers=served.headers, timeout=httpx.Timeout(60.0)) as client:
            await client.post("/sessions/root/messages", json={"text": "one", "eventId": "e1", "wait": True})
            async with client.stream("GET", LIVE) as response:
                reader = SseReader(response)
                await reader.until(lambda event: event["event"] == "snapshot")
                await client.post("/sessions/root/messages", json={"text": "two", "eventId": "e2", "wait": True})
                seen = await reader.until(ends("e2"))
            last_id = seen[-1]["id"]
            # Changed after the reader's last id, before the restart.
            await client.post("/sessions/root/messages", json={"text": "three", "eventId": "e3", "wait": True})
    async with serve(tmp_path, name="again") as served:
        async with httpx.AsyncClient(base_url=served.url, headers=served.headers, timeout=httpx.Timeout(60.0)) as client:
            async with client.stream("GET", LIVE, headers={"last-event-id": last_id}) as response:
                reader = SseReader(response)
                caught_up = [await reader.next(), await reader.next()]
                await client.post("/sessions/root/messages", json={"text": "four", "eventId": "e4", "wait": True})
                live = await reader.until(ends("e4"))
    assert [(e["event"], e["data"]["message"]["id"]) for e in caught_up] == [
        ("message", "e3:user"), ("message", "e3:assistant"),
    ]
    assert caught_up[1]["data"]["message"]["parts"][0]["text"] == "echo: three (turn 3)"
    ids = [e["data"]["message"]["id"] for e in live if e["data"]["type"] == "message"]
    assert ids[0] == "e4:user" and not any(re.match(r"e[123]:", mid) for mid in ids)
