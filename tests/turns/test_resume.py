"""The live view's numbering and history (sans-IO): any interleaving of
publishes and reconnects at any id yields exactly the missed suffix, or a
reset when the id is not held."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.turns.resume import LiveBatch, LiveHistory, LiveId, StreamCursor, parse_live_id
from wire.json import dumps


def _item(n: int, size: int = 0) -> dict[str, Any]:
    return {"type": "text-delta", "messageId": "m", "delta": f"{n}:" + "x" * size}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 4), st.integers(0, 300)),
        st.tuples(st.just("reconnect"), st.integers(0, 10_000), st.booleans()),
        st.tuples(st.just("restart"), st.just(0), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(ops, st.integers(1, 6), st.integers(50, 3000))
def test_any_reconnect_gets_exactly_the_missed_suffix_or_a_reset(
    steps: list[tuple[str, int, Any]], batches: int, max_bytes: int
) -> None:
    history = LiveHistory(batches=batches, max_bytes=max_bytes)
    published: list[tuple[str, int, dict[str, Any]]] = []  # (epoch, seq, item)
    counter = 0
    for op, a, b in steps:
        if op == "publish":
            items = [_item(counter + i, b) for i in range(a)]
            counter += a
            batch = history.publish(items)
            published += [(history.epoch, seq, item) for seq, item in enumerate(batch.items, batch.first)]
            assert history.bytes <= max_bytes or len(history._batches) == 1
            assert len(history._batches) <= batches
        elif op == "restart":
            history.restart()
        else:
            # A reader that saw everything up to some item (or the start).
            if published and not b:
                epoch, seq, _ = published[a % len(published)]
            else:
                epoch, seq = history.epoch, history.position - (a % (history.position + 1))
            since = LiveId(epoch, seq)
            got = history.since(parse_live_id(str(since)))
            missed = [item for e, s, item in published if e == epoch and s > seq]
            if got is None:
                # A reset only for an id this history does not hold.
                assert epoch != history.epoch or seq < history.oldest
            else:
                assert epoch == history.epoch
                flat = [item for batch in got for item in batch.items]
                assert flat == missed
                numbers = [n for batch in got for n in range(batch.first, batch.last + 1)]
                assert numbers == list(range(seq + 1, history.position + 1))


def test_the_history_keeps_its_bounds_by_count_and_bytes() -> None:
    by_count = LiveHistory(batches=3, max_bytes=10**9)
    for n in range(10):
        by_count.publish([_item(n)])
    assert by_count.oldest == 7 and by_count.since(LiveId(by_count.epoch, 6)) is None
    assert [b.first for b in by_count.since(LiveId(by_count.epoch, 7)) or []] == [8, 9, 10]
    size = len(dumps(_item(0, 100)))
    by_bytes = LiveHistory(batches=1000, max_bytes=size * 2)
    for n in range(5):
        by_bytes.publish([_item(n, 100 - len(str(n)) + 1)])
    assert by_bytes.bytes <= size * 2 and by_bytes.oldest == 3
    # One batch larger than the bound alone is still kept, as the newest.
    by_bytes.publish([_item(9, 10 * size)])
    assert by_bytes.oldest == 5 and by_bytes.since(LiveId(by_bytes.epoch, 5)) is not None


def test_ids_round_trip_and_anything_else_is_refused() -> None:
    for live_id in (LiveId("0123456789abcdef", 0), LiveId("0123456789abcdef", 42, (1, 17)), LiveId(durable=(3, 0))):
        assert parse_live_id(str(live_id)) == live_id
    for bad in (None, "", "42", "e0123.s1", "e0123456789abcdef", "e0123456789abcdef.s-1", "g1", "g1.v2.e0.s1",
                "e0123456789abcdef.s01", "e0123456789ABCDEF.s1", "x" * 500, "g1.v99999999999999999999", "\ud800"):
        assert parse_live_id(bad) is None, bad


@given(st.text(max_size=300))
def test_a_hostile_id_is_never_a_crash(text: str) -> None:
    parsed = parse_live_id(text)
    assert parsed is None or parse_live_id(str(parsed)) == parsed


def test_a_cursor_drops_what_the_reader_has_and_keeps_the_highest_durable_position() -> None:
    shown = {"id": "m1", "role": "user", "parts": []}
    cursor = StreamCursor("0123456789abcdef", (1, 5), {"m1": shown})
    batch = LiveBatch(3, ({"type": "message", "message": shown}, _item(1)), (1, 4))
    [(only_id, only)] = cursor.items(batch)
    assert only == _item(1) and parse_live_id(only_id) == LiveId("0123456789abcdef", 4, (1, 5))
    # Once matched, the same message again is new (it changed in between).
    assert len(cursor.items(LiveBatch(5, ({"type": "message", "message": shown},), (1, 9)))) == 1
    assert cursor.floor == (1, 9)
