"""Each live item encoded once for every reader (sans-IO): batches of any
JSON items published into a view's history, read by several cursors (fresh,
with messages they already hold, with a durable floor, resumed from any id
the history holds) and written as one SSE chunk per read: the chunk is
byte for byte what one ``sse(item, id=id)`` per item gave, so every reader
gets the same items in the same order with the same ids, nothing doubled,
nothing lost."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.api.events import sse, sse_encoded
from router.turns.resume import LiveBatch, LiveHistory, LiveId, StreamCursor, parse_live_id
from wire.json import dumps, loads

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
messages = st.builds(lambda n, parts: {"id": f"m{n}", "role": "assistant", "parts": parts},
                     st.integers(0, 5), st.lists(json_values, max_size=3))
items = st.one_of(
    st.builds(lambda m: {"type": "message", "message": m}, messages),
    st.builds(lambda n, d: {"type": "text-delta", "messageId": f"m{n}", "delta": d}, st.integers(0, 5),
              st.text(max_size=30)),
    st.dictionaries(st.sampled_from(["type", "id", "x", "y"]), json_values, max_size=4),
)
batches = st.lists(
    st.tuples(st.lists(items, min_size=1, max_size=6),
              st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 50)))),
    min_size=1, max_size=12,
)


def _frames(chunk: bytes) -> list[tuple[str, Any]]:
    """``(id, data)`` of each event of an SSE chunk, as a reader parses it."""
    out = []
    for event in chunk.decode().split("\n\n")[:-1]:
        fields = dict(line.split(": ", 1) for line in event.split("\n"))
        assert set(fields) == {"id", "data"}, event
        out.append((fields["id"], loads(fields["data"])))
    return out


@settings(max_examples=100, deadline=None)
@given(batches, st.dictionaries(st.sampled_from([f"m{n}" for n in range(6)]), messages, max_size=3),
       st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 50))), st.integers(0, 80),
       st.integers(1, 4))
def test_every_reader_gets_the_items_once_in_order_as_one_encode_per_item_gave(
    published: list[tuple[list[dict[str, Any]], tuple[int, int] | None]],
    known: dict[str, dict[str, Any]],
    floor: tuple[int, int] | None,
    resume_at: int,
    reads: int,
) -> None:
    history = LiveHistory()
    known = {mid: {**message, "id": mid} for mid, message in known.items()}
    # The same reader twice: one reading the encoded text, one the items.
    encoded_reader = StreamCursor(history.epoch, floor, known)
    items_reader = StreamCursor(history.epoch, floor, known)
    made = [history.publish(batch, durable) for batch, durable in published]
    for batch in made:
        assert batch.encoded == tuple(dumps(item) for item in batch.items)

    # Read in `reads` receives (batches taken together, as a reader that
    # fell behind takes them).
    chunks, expected = [], []
    for start in range(0, len(made), reads):
        group = made[start:start + reads]
        pairs = [pair for batch in group for pair in encoded_reader.encoded(batch)]
        chunks.append(sse_encoded(pairs))
        expected.append(b"".join(sse(item, id=id) for batch in group for id, item in items_reader.items(batch)))
    assert chunks == expected
    frames = [frame for chunk in chunks for frame in _frames(chunk)]
    ids = [parse_live_id(id) for id, _ in frames]
    assert all(each is not None and each.epoch == history.epoch for each in ids)
    seqs = [each.seq for each in ids if each is not None]
    assert seqs == sorted(set(seqs))  # in order, none twice
    everything = [(seq, item) for batch in made for seq, item in enumerate(batch.items, batch.first)]
    # Nothing lost: what is not sent is exactly a message the reader held as it is.
    sent = dict(zip(seqs, [data for _, data in frames]))
    for seq, item in everything:
        if seq in sent:
            assert sent[seq] == loads(dumps(item))
        else:
            assert item["type"] == "message" and known.get(item["message"]["id"]) is not None

    # A resume from any id the history holds: the suffix, encoded the same.
    since = LiveId(history.epoch, resume_at % (history.position + 1))
    suffix = history.since(since)
    assert suffix is not None
    fresh = StreamCursor(history.epoch)
    resumed = _frames(sse_encoded([pair for batch in suffix for pair in fresh.encoded(batch)]))
    assert [(parse_live_id(id).seq, data) for id, data in resumed] == [  # type: ignore[union-attr]
        (seq, loads(dumps(item))) for seq, item in everything if seq > since.seq  # type: ignore[operator]
    ]


def test_a_batch_made_without_its_text_is_encoded_by_its_reader() -> None:
    batch = LiveBatch(1, ({"type": "text-delta", "messageId": "m", "delta": "é\n"},), (1, 2))
    cursor = StreamCursor("0123456789abcdef")
    assert sse_encoded(cursor.encoded(batch)) == sse(batch.items[0], id="e0123456789abcdef.s1.g1.v2")
