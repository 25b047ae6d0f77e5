"""A short run of ``bench/stream_load.py`` (real processes: a replay daemon,
``router serve``, a viewer per session over ``GET /sessions/<id>/live``, a
bare client): the table prints, and no reader lost, reordered or doubled an
event. Timing is never asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_tiny_run_prints_the_table_with_nothing_lost_reordered_or_doubled():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "stream_load.py"), "--sessions", "2", "--duration", "1",
         "--modes", "pace,full", "--pace", "20"],
        cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    at = next(index for index, line in enumerate(lines) if line.startswith("sessions"))
    header = re.split(r"\s{2,}", lines[at].strip())
    rows = [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[at + 2:] if line.strip()]
    assert [(row["mode"], row["reader"]) for row in rows] == [
        ("pace", "bare client"), ("pace", "router"), ("full", "bare client"), ("full", "router")]
    for row in rows:
        assert (row["lost"], row["reordered"], row["doubled"]) == ("0", "0", "0"), row
        assert int(row["events"].replace(",", "")) > 0, row
        assert row["p99 ms"] != "nan" and row["events/s"] != "0", row
