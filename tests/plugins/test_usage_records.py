"""Turn records are read incrementally: a turn's end reads the lines appended
since the last read, whatever the history. No timing is asserted: the reader's
own counts (bytes read, lines parsed) are."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.json import dumps

from router.plugins.limit_checks import counting_window
from router.plugins.usage import JsonlRecords, MemoryRecords, read_json_lines

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def record(n: int, at: str | None = None) -> dict:
    return {"session": f"s{n}", "instance": "default", "at": at or f"2026-01-01T00:00:{n % 60:02d}Z",
            "usage": {"input": n, "output": 0, "cache_creation": 0, "cache_read": 0}}


def line(value: object) -> bytes:
    return (dumps(value) + "\n").encode()


def history(path: Path, count: int) -> None:
    with open(path, "wb") as f:
        for n in range(count):
            f.write(line(record(n)))


@pytest.mark.parametrize("count", [10, 5_000])
def test_a_read_after_an_append_costs_the_new_line_only(tmp_path: Path, count: int) -> None:
    path = tmp_path / "usage.jsonl"
    history(path, count)
    records = JsonlRecords(path)
    assert len(records.read()) == count
    for turn in range(3):
        before = records.statistics()
        records.append(record(count + turn))
        assert len(records.read()) == count + turn + 1
        after = records.statistics()
        assert after.lines_parsed - before.lines_parsed == 1
        assert after.bytes_read - before.bytes_read == len(line(record(count + turn)))
        assert after.rereads == 0


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    history(path, 2)
    records = JsonlRecords(path)
    whole = line(record(7))
    with open(path, "ab") as f:
        f.write(whole[:10])
    assert len(records.read()) == 2
    with open(path, "ab") as f:
        f.write(whole[10:])
    assert records.read()[-1] == record(7)
    assert records.statistics().rereads == 0


def test_another_writer_appending_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    mine, theirs = JsonlRecords(path), JsonlRecords(path)
    mine.append(record(1))
    assert len(mine.read()) == 1
    theirs.append(record(2))
    mine.append(record(3))
    assert [r["session"] for r in mine.read()] == ["s1", "s2", "s3"]


def test_a_file_replaced_shrunk_or_rewritten_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    history(path, 5)
    records = JsonlRecords(path)
    assert len(records.read()) == 5
    # Replaced (another inode), by a longer file.
    replacement = tmp_path / "new.jsonl"
    history(replacement, 8)
    os.replace(replacement, path)
    assert len(records.read()) == 8
    # Shrunk in place.
    with open(path, "r+b") as f:
        f.truncate(len(line(record(0))) * 2)
    assert len(records.read()) == 2
    # Rewritten in place, as long as before, but other lines.
    path.write_bytes(line({"session": "x", "pad": "y" * 200}) + line(record(9)))
    assert [r["session"] for r in records.read()] == ["x", "s9"]
    # Removed.
    path.unlink()
    assert records.read() == []
    assert records.statistics().rereads == 4


def test_bad_lines_are_skipped_as_before(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    deep = "[" * 200 + "]" * 200
    path.write_bytes(b"not json\n[1]\n" + deep.encode() + b"\n\xff\xfe\n" + line(record(1))
                     + b"{" + b"x" * (2 << 20) + b"\n" + line(record(2)))
    records = JsonlRecords(path)
    assert records.read() == [record(1), record(2)] == read_json_lines(path)


def test_a_long_line_without_its_newline_is_not_spun_on(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    path.write_bytes(line(record(1)) + b"x" * (3 << 20))
    records = JsonlRecords(path)
    assert records.read() == [record(1)]
    assert records.read() == [record(1)]
    with open(path, "ab") as f:
        f.write(b"\n" + line(record(2)))
    assert records.read() == [record(1), record(2)]


chunks = st.lists(st.binary(max_size=40) | st.sampled_from([line(record(3)), b"\n", b"{}\n"]),
                  max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=chunks)
def test_reading_as_it_grows_equals_reading_it_whole(tmp_path: Path, pieces: list[bytes]) -> None:
    path = tmp_path / f"u{abs(hash(tuple(pieces)))}.jsonl"
    path.write_bytes(b"")
    records = JsonlRecords(path)
    for piece in pieces:
        with open(path, "ab") as f:
            f.write(piece)
        assert records.read() == read_json_lines(path)
    path.unlink()


def test_since_answers_the_records_that_can_count(tmp_path: Path) -> None:
    rows = [record(1, "2026-01-01T00:00:00Z"), record(2, "2026-01-03T00:00:00Z"),
            record(3, "not a time"), record(4, "2026-01-02T00:00:00Z")]
    path = tmp_path / "usage.jsonl"
    path.write_bytes(b"".join(line(r) for r in rows))
    for store in (JsonlRecords(path), MemoryRecords(rows)):
        start = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
        assert sorted(r["session"] for r in store.since(start)) == ["s2", "s3", "s4"]
        assert [r["session"] for r in store.since(None)] == ["s1", "s2", "s3", "s4"]
        assert [r["session"] for r in store.read()] == ["s1", "s2", "s3", "s4"]


def test_the_counting_window() -> None:
    assert counting_window({}) == (False, None)
    limits = {"tokens": {"instances": {
        "a": {"limit": 1, "since": "2026-01-02T00:00:00Z"},
        "b": {"limit": 1, "since": "2026-01-01T00:00:00Z"}}}}
    assert counting_window(limits) == (True, T0)
    limits["tokens"]["instances"]["c"] = {"limit": 1}
    assert counting_window(limits) == (True, None)


# --------------------------------------------------------------------------- the layer


async def _turn_ends(settings_dir: Path, data: Path, count: int, limits: dict | None, tree: Path):
    from router.plugins.layer import PluginLayer
    from router.plugins.settings import SettingsDir
    from router.plugins.usage import MemoryLedger

    from .conftest import write_module

    write_module(tree, "limit-check", "counter", """
        INTERFACE_VERSION = 2
        import threading
        SEEN = []
        ON_MAIN = []
        def may_launch(args):
            ON_MAIN.append(threading.current_thread() is threading.main_thread())
            return {"allow": True}
        def must_stop(args):
            ON_MAIN.append(threading.current_thread() is threading.main_thread())
            SEEN.append(len(args["records"]))
            return {"stop": False}
        def report(args): return []
    """)
    (settings_dir / "plugins.json").write_text(dumps(
        {"plugins": {"harness": ["echo"], "usage-source": ["frames"], "limit-check": ["counter"]}}))
    if limits is not None:
        (settings_dir / "limits.json").write_text(dumps({"limits": limits}))
    path = data / "usage.jsonl"
    history(path, count)
    records = JsonlRecords(path)
    layer = PluginLayer(settings=SettingsDir(settings_dir), records=records, root=str(tree),
                        deps={"ledger": MemoryLedger()}, log=lambda e: None)
    assert (await layer.reload()).refused == ()
    launch = await layer.launch("default", session="s-1")
    parsed = []
    for _ in range(3):
        before = records.statistics().lines_parsed
        await layer.end_turn(await layer.begin_turn(launch))
        parsed.append(records.statistics().lines_parsed - before)
    module = layer.loader.module("limit-check", "counter").module
    # The checks are asked in a worker thread, never on the loop.
    assert module.ON_MAIN == [False] * 4
    return parsed, module.SEEN


@pytest.mark.parametrize("count", [20, 3_000])
async def test_without_limits_a_turns_end_reads_no_records(
    settings_dir: Path, tmp_path: Path, tree: Path, count: int
) -> None:
    """No limit is set: no record can count, so none is read or handed over."""
    parsed, seen = await _turn_ends(settings_dir, tmp_path, count, None, tree)
    assert parsed == [0, 0, 0]
    assert seen == [0, 0, 0]


@pytest.mark.parametrize("count", [20, 3_000])
async def test_a_turns_end_parses_the_new_line_only(
    settings_dir: Path, tmp_path: Path, tree: Path, count: int
) -> None:
    """Whatever the history: the first turn's end reads it (the index is
    new), every later one parses its own record's line and no other."""
    limits = {"tokens": {"instances": {"default": {"limit": 10**9, "since": "2026-06-01T00:00:00Z"}}}}
    parsed, seen = await _turn_ends(settings_dir, tmp_path, count, limits, tree)
    assert parsed == [1, 1, 1]  # the launch read the history; each end, its own line


async def test_with_a_limit_the_checks_get_the_records_since_it(
    settings_dir: Path, tmp_path: Path, tree: Path
) -> None:
    # history() stamps records within the first minute of 2026-01-01; the
    # limit counts from 00:00:30, so half of 60 records count, plus each turn's.
    limits = {"tokens": {"instances": {"default": {"limit": 10**9, "since": "2026-01-01T00:00:30Z"}}}}
    parsed, seen = await _turn_ends(settings_dir, tmp_path, 60, limits, tree)
    assert parsed == [1, 1, 1]
    assert seen == [31, 32, 33]
