"""Mod link load benchmark: prints a table.

    .venv/bin/python bench/modlink.py [--calls 2000] [--events 50000] [--links 100] [--idle 10]
    .venv/bin/python bench/modlink.py --against /tmp/modlink-main [--rounds 3] ...   # before/after, one run
    .venv/bin/python bench/modlink.py --only-calls --profile PATH                     # cProfile of the link alone

1. Call latency: ``link.call("session.model")`` to the typed result, with the
   simulator answering at once, over the real socket (p50, p99). Reference,
   same process and socket: a bare ``GET /healthz`` round trip.
2. Event ingestion: ``step`` events posted in batches of 100 (the mod's
   ``flush`` batches what queued while a post was out) and one by one, with
   one subscriber reading every event; events per second accepted.
3. Idle links: N links in this process, each with a poll held open by a client
   process (which polls again the moment a hold ends, as the mod does). CPU of
   this process over an idle window (must be near zero: no busy polling), and
   memory per link (resident set growth divided by N).

``--against CHECKOUT`` runs the same measures on this tree and on
``CHECKOUT`` (an export of another revision: its ``router`` and ``wire`` are
imported instead of this tree's), each in a fresh process, alternating for
``--rounds`` rounds, and prints both with the median of the rounds.
``--profile PATH`` writes a cProfile (CPU time) of this process over the
timed calls with the simulator in its own process: the link alone.

Everything runs on this machine's loopback only (Unix sockets in a temporary
private directory), bounded in count and time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
import time
from pathlib import Path
from typing import Any

# The tree measured first (``--tree``, given by ``--against`` to its child
# processes; else this repository), so the script runs from a checkout
# without an install.
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv else str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, _TREE)

import httpx  # noqa: E402
import trio  # noqa: E402

from router.modlink import ModLink  # noqa: E402
from router.modlink.sim import ModSimulator  # noqa: E402
from wire.json import dumps  # noqa: E402
from wire.mod import MOD_INSTANCE_HEADER, MOD_URL_BASE  # noqa: E402


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def bench_calls(env: dict[str, str], calls: int, *, sim_process: bool = False, profile: str | None = None) -> dict[str, Any]:
    """``sim_process``: the simulator runs in a process of its own, as the
    real mod runs in Claude Code's, so this process does only the link's
    side of each call. ``profile``: cProfile (CPU time) over the timed
    calls, written to that path."""
    name = "bench-calls-apart" if sim_process else "bench-calls"
    link = ModLink(name, env=env)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run)
        if sim_process:
            child = await trio.lowlevel.open_process(
                [sys.executable, __file__, "--run-sim", name, "--tree", _TREE], env={**os.environ, **env}
            )
            # Until the simulator's hello arrived (a state change, polled).
            while link.state.claude_version is None:
                await trio.sleep(0.05)
        else:
            child = None
            sim = ModSimulator(name, env=env, snapshot_interval=0)
            await nursery.start(sim.run)
        for _ in range(50):  # warm up
            await link.call("session.model", deadline=10)
        latencies = []
        profiler = cProfile.Profile(time.process_time) if profile else None
        if profiler is not None:
            profiler.enable()
        cpu = _cpu_seconds()
        for _ in range(calls):
            start = time.perf_counter()
            await link.call("session.model", deadline=10)
            latencies.append(time.perf_counter() - start)
        cpu = _cpu_seconds() - cpu
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        reference = []
        transport = httpx.AsyncHTTPTransport(uds=link.path)
        async with httpx.AsyncClient(transport=transport, base_url=MOD_URL_BASE) as client:
            for _ in range(calls):
                start = time.perf_counter()
                await client.get("/healthz")
                reference.append(time.perf_counter() - start)
        if child is not None:
            child.kill()
            await child.wait()
        nursery.cancel_scope.cancel()
    return {
        "p50": statistics.median(latencies) * 1000,
        "p99": _percentile(latencies, 0.99) * 1000,
        "p90": _percentile(latencies, 0.90) * 1000,
        "cpu_ms": cpu / calls * 1000,
        "ref_p50": statistics.median(reference) * 1000,
        "ref_p99": _percentile(reference, 0.99) * 1000,
    }


async def bench_events(env: dict[str, str], total: int, batch: int) -> float:
    link = ModLink(f"bench-events-{batch}", env=env)
    step = {
        "kind": "step",
        "turnId": "t",
        "index": 0,
        "model": "claude-sonnet-4-5",
        "parts": [{"type": "text", "text": "Some streamed text of a plausible length for one snapshot. " * 4}],
        "done": False,
    }
    body = dumps({"events": [step] * batch}).encode()
    received = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run)
        subscription = link.events(capacity=total + 1)

        async def read() -> None:
            nonlocal received
            async for _ in subscription:
                received += 1

        nursery.start_soon(read)
        transport = httpx.AsyncHTTPTransport(uds=link.path)
        async with httpx.AsyncClient(transport=transport, base_url=MOD_URL_BASE) as client:
            start = time.perf_counter()
            for _ in range(total // batch):
                response = await client.post("/events", content=body, headers={MOD_INSTANCE_HEADER: "bench"})
                assert response.status_code == 200
            while received < (total // batch) * batch:
                await trio.sleep(0)
            elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return (total // batch) * batch / elapsed



def _polls_waiting(link: Any) -> int:
    """A link's long polls waiting: ``statistics()`` is an attrs object
    today and was a dict before (an ``--against`` tree may be older)."""
    stats = link.statistics()
    return stats["polls_waiting"] if isinstance(stats, dict) else stats.polls_waiting

async def bench_idle(env: dict[str, str], count: int, idle: float) -> dict[str, Any]:
    # Run first, in a fresh process, so the heap has no freed arenas for the
    # links to reuse; tracemalloc counts Python's own allocations besides.
    before = _rss_kib()
    tracemalloc.start()
    links = [ModLink(f"bench-idle-{n}", env=env) for n in range(count)]
    async with trio.open_nursery() as nursery:
        for link in links:
            await nursery.start(link.run)
        after_bind = _rss_kib()
        traced_bind = tracemalloc.get_traced_memory()[0]
        paths = "\n".join(link.path for link in links)
        client = await trio.lowlevel.open_process(
            [sys.executable, __file__, "--hold-polls", "--tree", _TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert client.stdin is not None and client.stdout is not None
        await client.stdin.send_all(paths.encode() + b"\n")
        await client.stdin.aclose()
        # Wait until every link holds a poll: an event per link, not a timing.
        while sum(_polls_waiting(link) for link in links) < count:
            await trio.sleep(0.05)
        held = _rss_kib()
        traced_held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        cpu_start, wall_start = _cpu_seconds(), time.perf_counter()
        expired_start = sum(link.polls_expired for link in links)
        await trio.sleep(idle)
        cpu = _cpu_seconds() - cpu_start
        wall = time.perf_counter() - wall_start
        expired = sum(link.polls_expired for link in links) - expired_start
        waiting = sum(_polls_waiting(link) for link in links)
        client.kill()
        await client.wait()
        nursery.cancel_scope.cancel()
    return {
        "cpu_percent": 100 * cpu / wall,
        "expired_polls": expired,
        "waiting_at_end": waiting,
        "kib_per_link_bound": (after_bind - before) / count,
        "kib_per_link_held": (held - before) / count,
        "traced_kib_per_link_bound": traced_bind / 1024 / count,
        "traced_kib_per_link_held": traced_held / 1024 / count,
    }


async def hold_polls() -> None:
    """The client side of the idle benchmark: one held poll per socket path
    read from stdin, polling again as soon as a hold ends."""
    paths = [line.strip() for line in sys.stdin if line.strip()]

    async def poller(path: str) -> None:
        transport = httpx.AsyncHTTPTransport(uds=path)
        async with httpx.AsyncClient(transport=transport, base_url=MOD_URL_BASE, timeout=60) as client:
            while True:
                await client.post("/requests", content=b"", headers={MOD_INSTANCE_HEADER: "idle"})

    async with trio.open_nursery() as nursery:
        for path in paths:
            nursery.start_soon(poller, path)


async def run_sim(session: str) -> None:
    """The simulator alone (``--run-sim``), answering at once, until killed."""
    sim = ModSimulator(session, env=os.environ, snapshot_interval=0)
    await sim.run()


async def main(args: argparse.Namespace) -> None:
    base = tempfile.mkdtemp(prefix="mlb-", dir="/tmp")
    os.chmod(base, 0o700)
    env = {"XDG_RUNTIME_DIR": base}
    try:
        idle = None if args.only_calls else await bench_idle(env, args.links, args.idle)
        calls = await bench_calls(env, args.calls)
        apart = await bench_calls(env, args.calls, sim_process=True, profile=args.profile)
        if idle is not None:
            batched = await bench_events(env, args.events, 100)
            single = await bench_events(env, max(args.events // 20, 100), 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps({"calls": calls, "apart": apart, "idle": idle,
                          "events": None if idle is None else {"batched": batched, "single": single}}))
        return
    print_rows(_rows(calls, apart, idle, None if idle is None else (batched, single), args))


def _rows(calls: dict, apart: dict, idle: dict | None, events: tuple[float, float] | None, args: argparse.Namespace) -> list[tuple[str, str]]:
    rows = [
        ("call latency p50 (session.model, sim answers at once)", f"{calls['p50']:.2f} ms"),
        ("call latency p99", f"{calls['p99']:.2f} ms"),
        ("  reference: GET /healthz round trip p50 / p99", f"{calls['ref_p50']:.2f} / {calls['ref_p99']:.2f} ms"),
        ("  this process's CPU per call (link and simulator)", f"{calls['cpu_ms']:.2f} ms"),
        ("call latency p50 / p90, the simulator in its own process", f"{apart['p50']:.2f} / {apart['p90']:.2f} ms"),
        ("call latency p99, the simulator in its own process", f"{apart['p99']:.2f} ms"),
        ("  this process's CPU per call (the link alone)", f"{apart['cpu_ms']:.2f} ms"),
    ]
    if idle is not None and events is not None:
        batched, single = events
        rows += [
            ("event ingestion, batches of 100, one subscriber", f"{batched:,.0f} events/s"),
            ("event ingestion, one event per post", f"{single:,.0f} events/s"),
            (f"{args.links} idle links, each with a held poll: CPU", f"{idle['cpu_percent']:.2f} % of one core over {args.idle:g} s"),
            ("  polls that ran their 5 s hold out in that window", f"{idle['expired_polls']}"),
            ("  polls held at the end of the window", f"{idle['waiting_at_end']}"),
            ("memory per link, bound, no client: RSS / Python heap", f"{idle['kib_per_link_bound']:.0f} / {idle['traced_kib_per_link_bound']:.0f} KiB"),
            ("memory per link, poll held: RSS / Python heap", f"{idle['kib_per_link_held']:.0f} / {idle['traced_kib_per_link_held']:.0f} KiB"),
        ]
    return rows


def print_rows(rows: list[tuple[str, str]], heading: str = "value") -> None:
    width = max(len(name) for name, _ in rows)
    print(f"{'measure'.ljust(width)}  {heading}")
    print(f"{'-' * width}  {'-' * 30}")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def _median_of(results: list[dict]) -> dict:
    """The median, key by key, of the rounds' results (nested dicts)."""
    first = results[0]
    if not isinstance(first, dict):
        return statistics.median(results) if isinstance(first, (int, float)) else first
    return {key: _median_of([r[key] for r in results]) for key in first}


def against(args: argparse.Namespace) -> None:
    """This tree and ``args.against``, each in fresh processes, alternating."""
    trees = {"this tree": _TREE, "against": os.path.abspath(args.against)}
    passed = [a for a in sys.argv[1:] if a not in ("--against", args.against)]
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for round_number in range(args.rounds):
        for name, tree in trees.items():
            command = [sys.executable, __file__, *passed, "--json", "--tree", tree]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_number + 1}: {name} done ({os.getloadavg()[0]:.1f} load)", file=sys.stderr)
    for name, tree in trees.items():
        merged = _median_of(results[name])
        events = None if merged["events"] is None else (merged["events"]["batched"], merged["events"]["single"])
        print(f"\n{name}: {tree} (median of {args.rounds} rounds)")
        print_rows(_rows(merged["calls"], merged["apart"], merged["idle"], events, args))
    print("\nper round, the link alone, this tree / against: p50, p99 ms; CPU ms per call")
    for mine, theirs in zip(results["this tree"], results["against"]):
        a, b = mine["apart"], theirs["apart"]
        print(f"  {a['p50']:.2f}/{b['p50']:.2f}  {a['p99']:.2f}/{b['p99']:.2f}  {a['cpu_ms']:.2f}/{b['cpu_ms']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--links", type=int, default=100)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    parser.add_argument("--profile", metavar="PATH", help="cProfile the link alone over the timed calls (CPU time) into PATH")
    parser.add_argument("--against", metavar="CHECKOUT", help="also measure this export of another revision, alternating")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --against (each tree once per round)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--only-calls", action="store_true", help="only the call latency rows")
    parser.add_argument("--hold-polls", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-sim", metavar="SESSION", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.run_sim:
        trio.run(run_sim, parsed.run_sim)
    elif parsed.hold_polls:
        trio.run(hold_polls)
    elif parsed.against:
        against(parsed)
    else:
        trio.run(main, parsed)
