"""The fault campaign's disk phases (docs/reliability.md): ``router serve``
(SQLite, ``token-limit`` on, so a turn's end writes and checks its record)
with its data directory on a disk that fills or slows, while a good client
sends through it, each delivery resent with its event id until answered.

- **Full** (:func:`phase_disk_full`): a 16 MB tmpfs the phase mounts
  (tests/store/test_disk_full.py's ``_mount``), filled to the last byte
  (its ``_fill``) for 0.3–2 s, then freed; one fault per fill.
- **Slow** (:func:`phase_disk_slow`): an ext4 file system on a loop device
  (``losetup``), the router's process in a cgroup (v1 ``blkio``) whose
  throttle on that device is set, for 1–3 s at a time, to 64 KiB/s and 20
  operations a second each way, then lifted; one fault per episode. The
  kernel here has no device-mapper (no ``dm-delay``): the throttle is
  the block layer's own, on the loop device, for the I/O the router's
  process submits (its writes through ``fsync`` included).

Root only (``mount``, ``losetup``, the cgroup); skipped with the reason
otherwise. The record is judged as ``router serve``'s SIGKILL phase's.
"""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from random import Random
from typing import AsyncIterator, Awaitable, Callable

import trio

from tests.support.campaign import FaultRow, _api_client, judge, rng_for
from tests.support.campaign_hostile import GoodClient

#: The routers' store retry budget here (seconds): a fill held longer is
#: answered 503 ``store-unavailable`` and resent.
BUDGET = "1"
PLUGINS = {"plugins": {"harness": ["echo"], "usage-source": ["frames"], "limit-check": ["token-limit"],
                       "channel": ["cli", "webui"]}, "options": {}}
BLKIO = Path("/sys/fs/cgroup/blkio")


async def _sending(row: FaultRow, work: Path, data: Path, rng: Random, target: int,
                   fault: Callable[[Random, trio.Process], Awaitable[None]]) -> None:
    """``router serve`` on ``data``, the good client sending to ``root``
    while ``fault`` runs ``target`` times, 0.5–2 s apart; then the record."""
    from router.host.store import Store
    from tests.api.processes import serve

    settings = work / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "plugins.json").write_text(json.dumps(PLUGINS))
    row.exits, row.stopped = 0, 0
    async with serve(work, "--data-dir", str(data), env={"ROUTER_STORE_RETRY_BUDGET": BUDGET}) as served:
        async with _api_client(served.page) as client:
            good = GoodClient(client, "root", row)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(good.run, stop)
                while row.faults < target and served.process.returncode is None:
                    await trio.sleep(rng.uniform(0.5, 2.0))
                    row.faults += 1
                    await fault(rng, served.process)
                stop.set()
        if served.process.returncode is not None:
            row.exits += 1
            row.notes.append(f"router serve exited ({served.process.returncode}): {served.log()[-400:]}")
    with Store(data / "host.sqlite", exclusive=False) as store:
        judge(row, store, "root", good.expected)


async def phase_disk_full(target: int, seed: int, work: Path) -> FaultRow:
    from tests.store.test_disk_full import _fill, _mount

    row = FaultRow("disk full: router serve on a 16 MB tmpfs")
    rng = rng_for(seed, row.phase)
    disk = work / "disk"
    why = _mount(disk, "16m")
    if why is not None:
        row.notes.append(f"skipped: {why}")
        return row

    async def fill(rng: Random, _: trio.Process) -> None:
        filler = await trio.to_thread.run_sync(_fill, disk)
        await trio.sleep(rng.uniform(0.3, 2.0))
        filler.unlink()

    try:
        await _sending(row, work, disk / "data", rng, target, fill)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    return row


@asynccontextmanager
async def _throttled_disk(work: Path) -> AsyncIterator[tuple[Path, str, Path]]:
    """An ext4 file system on a loop device, mounted at ``work/slow``, and a
    blkio cgroup of its own: (the mount, the device's ``MAJ:MIN``, the
    cgroup). Everything undone at the end."""
    image, mount, group = work / "slow.img", work / "slow", BLKIO / f"router-campaign-{os.getpid()}"
    with open(image, "wb") as out:
        out.truncate(64 << 20)
    device = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True,
                            check=True).stdout.strip()
    try:
        subprocess.run(["mkfs.ext4", "-q", device], check=True, capture_output=True)
        mount.mkdir()
        subprocess.run(["mount", device, str(mount)], check=True, capture_output=True)
        try:
            group.mkdir()
            stat = os.stat(device)
            yield mount, f"{os.major(stat.st_rdev)}:{os.minor(stat.st_rdev)}", group
        finally:
            if group.exists():
                group.rmdir()
            subprocess.run(["umount", "-l", str(mount)], check=False)
    finally:
        subprocess.run(["losetup", "-d", device], check=False)
        image.unlink(missing_ok=True)


def _throttle(group: Path, device: str, on: bool) -> None:
    for name, value in (("write_bps_device", 64 << 10), ("read_bps_device", 64 << 10),
                        ("write_iops_device", 20), ("read_iops_device", 20)):
        (group / f"blkio.throttle.{name}").write_text(f"{device} {value if on else 0}\n")


async def phase_disk_slow(target: int, seed: int, work: Path) -> FaultRow:
    row = FaultRow("slow disk: router serve on a throttled loop device")
    rng = rng_for(seed, row.phase)
    if os.geteuid() != 0 or not (BLKIO / "cgroup.procs").exists():
        row.notes.append("skipped: needs root and the cgroup v1 blkio controller")
        return row
    try:
        context = _throttled_disk(work)
        mount, device, group = await context.__aenter__()
    except (subprocess.CalledProcessError, OSError) as exc:
        row.notes.append(f"skipped: no throttled disk here ({exc})")
        return row
    try:
        async def slow(rng: Random, process: trio.Process) -> None:
            (group / "cgroup.procs").write_text(f"{process.pid}\n")
            _throttle(group, device, True)
            try:
                await trio.sleep(rng.uniform(1.0, 3.0))
            finally:
                _throttle(group, device, False)

        await _sending(row, work, mount / "data", rng, target, slow)
    finally:
        await context.__aexit__(None, None, None)
    return row
