"""wire/lines.py: the one newline-delimited splitter, fed in any chunks."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from wire.lines import LineSplitter

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "stream-json" / "tool.jsonl"


def test_lines_fed_byte_by_byte_come_out_whole() -> None:
    data = FIXTURE.read_bytes()
    splitter = LineSplitter(max_line=1 << 20)
    lines: list[bytes] = []
    for at in range(len(data)):
        lines += splitter.feed(data[at : at + 1])
    last = splitter.close()
    lines += [] if last is None else [last]
    assert lines == data.splitlines()


def test_an_overlong_line_is_dropped_and_the_next_come_out() -> None:
    splitter = LineSplitter(max_line=10)
    assert splitter.feed(b"short\n" + b"x" * 25) == [b"short"]
    assert splitter.dropped == 1 and splitter.buffered == 0
    assert splitter.feed(b"yyy\nafter\nlast") == [b"after"]
    assert splitter.close() == b"last"
    assert splitter.dropped == 1


def test_close_gives_nothing_for_a_dropped_or_empty_tail() -> None:
    splitter = LineSplitter(max_line=4)
    assert splitter.feed(b"ok\n") == [b"ok"]
    assert splitter.close() is None
    splitter.feed(b"toolong")
    assert splitter.close() is None and splitter.dropped == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=12), st.data())
def test_any_chunking_gives_the_lines_of_the_whole(lines: list[bytes], data: st.DataObject) -> None:
    whole = b"\n".join(line.replace(b"\n", b"") for line in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    chunks = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)])]
    splitter = LineSplitter(max_line=64)
    out: list[bytes] = []
    for chunk in chunks:
        out += splitter.feed(chunk)
    last = splitter.close()
    out += [] if last is None else [last]
    expected = whole.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()
    assert out == expected
