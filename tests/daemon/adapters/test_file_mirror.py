"""The file mirror: a CLI's session files out as entries and back."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from router.daemon.adapters.process_per_turn import PIECE_BYTES, FileMirror


def write(path: Path, data: bytes, *, mode: str = "wb") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as handle:
        handle.write(data)


def test_new_files_ship_whole_and_grown_files_ship_their_new_bytes(tmp_path):
    mirror = FileMirror(tmp_path, [".cli/sessions"])
    mirror.restore([])
    log = tmp_path / ".cli/sessions/p/s.jsonl"
    write(log, b"one\n")
    (first,) = mirror.collect()
    assert first == {"kind": "file", "path": ".cli/sessions/p/s.jsonl", "offset": 0, "data": base64.b64encode(b"one\n").decode()}
    assert mirror.collect() == []
    write(log, b"two\n", mode="ab")
    (grown,) = mirror.collect()
    assert grown["offset"] == 4 and base64.b64decode(grown["data"]) == b"two\n"


def test_a_shrunk_file_ships_whole(tmp_path):
    mirror = FileMirror(tmp_path, ["state"])
    mirror.restore([])
    write(tmp_path / "state/f", b"long content")
    mirror.collect()
    write(tmp_path / "state/f", b"short")
    os.utime(tmp_path / "state/f", ns=(1, 1))
    (entry,) = mirror.collect()
    assert entry["offset"] == 0 and base64.b64decode(entry["data"]) == b"short"


def test_large_files_travel_in_pieces_and_restore_byte_for_byte(tmp_path):
    source = tmp_path / "a"
    data = os.urandom(PIECE_BYTES * 2 + 17)
    write(source / "state/big.bin", data)
    entries = FileMirror(source, ["state"]).collect()
    assert [e["offset"] for e in entries] == [0, PIECE_BYTES, 2 * PIECE_BYTES]
    target = tmp_path / "b"
    FileMirror(target, ["state"]).restore(entries)
    assert (target / "state/big.bin").read_bytes() == data


def test_restore_replaces_the_directories_and_applies_appends_in_order(tmp_path):
    write(tmp_path / "state/old.jsonl", b"from a reset session")
    entries = [
        {"kind": "file", "path": "state/s.jsonl", "offset": 0, "data": base64.b64encode(b"abc").decode()},
        {"kind": "state", "values": {"sessionId": "x"}},
        {"kind": "file", "path": "state/s.jsonl", "offset": 3, "data": base64.b64encode(b"def").decode()},
        {"kind": "file", "path": "state/s.jsonl", "offset": 2, "data": base64.b64encode(b"Z").decode()},
    ]
    mirror = FileMirror(tmp_path, ["state"])
    mirror.restore(entries)
    assert not (tmp_path / "state/old.jsonl").exists()
    assert (tmp_path / "state/s.jsonl").read_bytes() == b"abZ"
    # What was restored is not shipped again.
    assert mirror.collect() == []


def test_entries_that_would_escape_the_home_are_skipped(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    evil = [
        {"kind": "file", "path": "../outside", "offset": 0, "data": base64.b64encode(b"x").decode()},
        {"kind": "file", "path": str(tmp_path / "absolute"), "offset": 0, "data": base64.b64encode(b"x").decode()},
        {"kind": "file", "path": ".", "offset": 0, "data": ""},
        {"kind": "file", "path": "state/ok", "offset": -1, "data": ""},
        {"kind": "file", "path": "state/ok", "offset": True, "data": ""},
    ]
    FileMirror(home, ["state", "../elsewhere"]).restore(evil)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]
    assert not (home / "state" / "ok").exists()
