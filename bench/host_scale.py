"""Many sessions on one host: memory per idle session, and the reconcile
after the daemon restarts. Prints a table.

    .venv/bin/python bench/host_scale.py [--sessions 1000] [--kind ours] [--top 15]

One daemon process (``--kind``: ``ours`` or ``reference``, the echo
adapter) and one host in this process, on a fresh store:

1. **Memory per idle session**: ``--sessions`` sessions are created and
   prompted once each (each link live, reconciled, its WebSocket open,
   idle). The resident set's growth and the Python heap's (``tracemalloc``)
   are divided by the count; the heap's growth is then split by the source
   file that allocated it (``--top`` files), which says whose objects hold
   the memory.
2. **Restart**: the daemon is killed and a new one started on the same port
   (a new runtime id, as a restarted container has). The time runs from the
   new daemon's first line (it listens) until every session's link is live
   again (reconnected, ``hello`` reconciled, replayed, caught up), polled
   every 50 ms (the figure is within that of the truth), and then until one
   more prompt to every session has settled.

The target (docs/bench.md): under 50 KiB per idle session, and all 1,000
reconciled and caught up within 10 s of the restart.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import trio  # noqa: E402

from host import FAST, _rss_kib  # noqa: E402
from router.host.host import Host  # noqa: E402
from router.host.link import DaemonEndpoint  # noqa: E402
from router.host.store import Store  # noqa: E402
from tests.support.daemons import spawn_daemon  # noqa: E402

#: How often the restart's wait looks at the links (ours).
POLL = 0.05


def _live(host: Host) -> int:
    # The host has no public count of live links; the bench reads its table.
    return sum(1 for link in host._links.values() if link.state == "live")


async def _prompt_all(host: Host, names: list[str], limit: int = 50) -> None:
    """Prompt every session once, at most ``limit`` at a time."""
    gate = trio.Semaphore(limit)

    async def one(name: str) -> None:
        async with gate:
            await host.session(name).prompt("again")

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)


async def main(args: argparse.Namespace) -> None:
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="host-scale-") as directory:
        async with trio.open_nursery() as outer:
            first = await outer.start(_daemon, args.kind, 0, "runtime-1")
            port = first.port
            with Store(Path(directory) / "host.db") as store:
                host = Host(store, DaemonEndpoint(first.url, first.token), FAST)
                async with trio.open_nursery() as nursery:
                    await nursery.start(host.run)
                    await host.session().prompt("warm")  # the link machinery, loaded once
                    names = [f"idle{i}" for i in range(args.sessions)]
                    gc.collect()
                    tracemalloc.start(1)
                    before = tracemalloc.take_snapshot()
                    heap_before = tracemalloc.get_traced_memory()[0]
                    rss_before = _rss_kib()
                    start = time.perf_counter()
                    for name in names:
                        session = await host.sessions.create(name)
                        await session.prompt("hello")
                    created = time.perf_counter() - start
                    gc.collect()
                    rss_after = _rss_kib()
                    heap_after = tracemalloc.get_traced_memory()[0]
                    after = tracemalloc.take_snapshot()
                    tracemalloc.stop()
                    count = args.sessions
                    rows.append((f"{count} sessions created and prompted once", f"{created:.1f} s ({_live(host)} live)"))
                    rows.append((
                        "memory per idle session: RSS / Python heap",
                        f"{(rss_after - rss_before) / count:.0f} / {(heap_after - heap_before) / 1024 / count:.0f} KiB",
                    ))
                    for stat in after.compare_to(before, "filename")[: args.top]:
                        name = stat.traceback[0].filename
                        short = name.split("site-packages/")[-1].replace(str(REPO) + "/", "")
                        rows.append((f"  heap per session: {short}", f"{stat.size_diff / 1024 / count:.1f} KiB"))
                    del before, after

                    # The restart: the old daemon goes, a new runtime takes its port.
                    first.cancel()
                    while _live(host) > 0:
                        await trio.sleep(POLL)
                    second = await outer.start(_daemon, args.kind, port, "runtime-2")
                    start = time.perf_counter()
                    with trio.fail_after(args.restart_deadline):
                        while _live(host) < count + 1:
                            await trio.sleep(POLL)
                    live_after = time.perf_counter() - start
                    await _prompt_all(host, names)
                    answered = time.perf_counter() - start
                    rows.append(("after the daemon restarts: every link live again", f"{live_after:.2f} s"))
                    rows.append(("  and one more prompt to every session settled", f"{answered:.2f} s"))
                    host.close()
                    second.cancel()
    width = max(len(name) for name, _ in rows)
    print(f"{'measure'.ljust(width)}  value")
    print(f"{'-' * width}  {'-' * 24}")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


class _Running:
    """A daemon kept by a task of its own; :meth:`cancel` stops it."""

    def __init__(self, daemon, scope: trio.CancelScope) -> None:
        self.url, self.token, self.port = daemon.url, daemon.token, daemon.port
        self._scope = scope

    def cancel(self) -> None:
        self._scope.cancel()


async def _daemon(kind: str, port: int, runtime: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    with trio.CancelScope() as scope:
        async with spawn_daemon(kind, port=port, runtime_id=runtime) as daemon:  # type: ignore[arg-type]
            task_status.started(_Running(daemon, scope))
            await trio.sleep_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--kind", default="ours", choices=("ours", "reference"))
    parser.add_argument("--top", type=int, default=15, help="heap rows, by allocating file")
    parser.add_argument("--restart-deadline", type=float, default=300.0, help="give up waiting after this many seconds")
    trio.run(main, parser.parse_args())
