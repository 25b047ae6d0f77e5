"""The cost of a turn's end as the turn records grow: prints a table.

    .venv/bin/python bench/usage_records.py [--sizes 100,10000,100000] [--turns 20]

A turn's end (``PluginLayer.end_turn``) appends the turn's record to
``usage.jsonl`` and asks the limit checks whether the session must stop,
handing them the turn records. Each row starts from a data directory holding
``N`` records already (written straight to the file) and times ``--turns``
turn ends of the echo route on the default settings (both usage sources,
both limit checks), in this process, with no daemon: the median is shown,
in milliseconds.

Two settings:

- **no limits**: the defaults (both checks on, no limit set);
- **a limit**: a token limit on the instance whose ``since`` is before every
  record, so every record counts and the checks must see them all.

Two readers:

- **before**: the whole file read and parsed at every turn's end, and every
  record handed to every check (what the router did before the records were
  read incrementally; kept here, as a record store, to compare);
- **after**: :class:`router.plugins.usage.JsonlRecords`, which reads only
  the lines appended since its last read and hands the checks only the
  records that can count for a limit.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wire.json import dumps  # noqa: E402

import router.plugins.limit_checks as limits_module  # noqa: E402
from router.plugins import JsonlRecords, MemoryLedger, PluginLayer, SettingsDir  # noqa: E402
from router.plugins.usage import read_json_lines  # noqa: E402

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


class WholeFileRecords(JsonlRecords):
    """The reader as it was: the whole file, every time."""

    def read(self) -> list[dict[str, Any]]:
        return read_json_lines(self.path)

    def since(self, start: dt.datetime | None) -> list[dict[str, Any]]:
        return self.read()


class LayerBefore(PluginLayer):
    """The layer as it was: every record to every check, limits or none,
    each check's copy made by ``copy.deepcopy``."""

    async def _counted_records(self, limits: Any) -> list[dict[str, Any]]:
        return await trio.to_thread.run_sync(self.records.read)


def write_history(path: Path, count: int) -> None:
    with open(path, "w") as f:
        for n in range(count):
            at = (START + dt.timedelta(seconds=n)).isoformat().replace("+00:00", "Z")
            f.write(dumps({"session": f"s{n % 50}", "instance": "default", "harness": "echo",
                           "provider": "echo", "model": "echo", "account": None, "at": at,
                           "usage": {"input": 10, "output": 20, "cache_creation": 0,
                                     "cache_read": 0}, "source": "frames"}) + "\n")


async def time_turn_ends(directory: Path, count: int, reader: type, limit: bool, turns: int) -> float:
    settings = SettingsDir(directory / "settings")
    if limit:
        document = settings.ensure("limits.json")
        since = (START - dt.timedelta(days=1)).isoformat().replace("+00:00", "Z")
        settings.update("limits.json", document.revision, lambda value: (
            {"limits": {"tokens": {"instances": {"default": {"limit": 10**15, "since": since}}}}}, {}))
    path = directory / "usage.jsonl"
    write_history(path, count)
    before = reader is WholeFileRecords
    layer = (LayerBefore if before else PluginLayer)(
        settings=settings, records=reader(path), deps={"ledger": MemoryLedger()},
        log=lambda entry: None)
    copying = limits_module._copy_args
    if before:
        limits_module._copy_args = copy.deepcopy
    await layer.reload()
    launch = await layer.launch("default", session="s0")
    assert not hasattr(launch, "code"), launch
    costs = []
    try:
        for _ in range(turns):
            bracket = await layer.begin_turn(launch)
            begun = time.perf_counter()
            _, stop = await layer.end_turn(bracket)
            costs.append(time.perf_counter() - begun)
            assert stop is None, stop
    finally:
        limits_module._copy_args = copying
    return statistics.median(costs) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,10000,100000")
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"{'records':>8}  {'limits':<9}  {'before ms':>10}  {'after ms':>9}  {'ratio':>6}")
    for limit in (False, True):
        for size in sizes:
            row = []
            for reader in (WholeFileRecords, JsonlRecords):
                # The old reader at 100,000 records takes seconds a turn.
                turns = args.turns if reader is JsonlRecords or size <= 10_000 else 3
                with tempfile.TemporaryDirectory() as directory:
                    row.append(trio.run(time_turn_ends, Path(directory), size, reader, limit, turns))
            before, after = row
            label = "a limit" if limit else "no limits"
            print(f"{size:>8}  {label:<9}  {before:>10.2f}  {after:>9.2f}  {before / after:>5.0f}x")


if __name__ == "__main__":
    main()
