"""router.plugins.watched: a value kept while its files keep their identity."""

from __future__ import annotations

import os
from pathlib import Path

from router.plugins.watched import COARSE_CLOCK_NS, Watched, WatchedStatistics, identity, settled


def test_identity_of_a_file_absent_and_present(tmp_path: Path) -> None:
    path = tmp_path / "f"
    assert identity(path) == "absent"
    path.write_text("one")
    first = identity(path)
    path.write_text("three")  # in place, another size
    assert identity(path) != first
    same_size = identity(path)
    replacement = tmp_path / "g"
    replacement.write_text("THREE")
    os.replace(replacement, path)  # renamed over: another inode
    assert identity(path) != same_size


def test_a_file_written_within_the_coarse_clock_is_not_kept() -> None:
    began = 10 * COARSE_CLOCK_NS
    old, recent = began - COARSE_CLOCK_NS - 1, began - COARSE_CLOCK_NS
    assert settled([(1, 2, old, old), "absent"], began)
    assert not settled([(1, 2, recent, old)], began)  # mtime too recent
    assert not settled([(1, 2, old, recent)], began)  # ctime too recent
    assert not settled(["unreadable"], began)


async def test_get_reads_again_only_when_a_file_changed(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("1")
    watched = Watched(lambda: [path], lambda: path.read_text(), coarse_ns=0)
    assert [await watched.get() for _ in range(5)] == ["1"] * 5
    assert watched.statistics() == WatchedStatistics(calls=5, reads=1)
    path.write_text("22")
    assert await watched.get() == "22"
    path.unlink()
    assert watched.kept() is None
    assert watched.statistics().reads == 2


async def test_a_recent_file_is_read_on_every_call(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("1")
    watched = Watched(lambda: [path], lambda: path.read_text(), coarse_ns=10**18)  # always "recent"
    for _ in range(3):
        assert await watched.get() == "1"
    assert watched.statistics() == WatchedStatistics(calls=3, reads=3)
