"""Host benchmark: prints a table.

    .venv/bin/python bench/host.py [--frames 20000] [--ops 400] [--sessions 50] [--idle 200]
                                   [--kinds reference,ours]

1. Apply: frames applied per second into the store by the sans-IO core,
   through ``Store.transact`` (one worker-thread hop per transaction), echo-
   shaped frames (start, text-delta, message, persist, settle per operation):
   one session with batches of 1, 32 and 512 frames per transaction, and 100
   sessions applying batches of 32 concurrently. No sockets. Reference line:
   the same frames applied by the core directly (no thread hop), batch 32.
2. End to end, per daemon: operations per second through host and daemon
   (one session, operations submitted at once and run one at a time by the
   daemon; and ``--sessions`` sessions at once), and the latency of one
   prompt (submit and wait, p50 / p99).
3. Replay, per daemon: a bare client has the daemon run 2,000 echo turns
   (10,000 frames, the daemon's whole keep) without acknowledging any; then a
   host whose store knows those operations connects: time from ``run`` to
   the last frame applied (health check, dial, ``hello``, reconcile, replay
   of 10,000 frames in batches).
4. Memory per idle session, per daemon: resident-set growth of a fresh
   process after ``--idle`` sessions each prompted once (link live,
   reconciled, idle), divided by their number, and the Python heap's share.

``--ratio N --against CHECKOUT`` runs only the ratio rounds, for this tree
and each checkout (say, an export of main) in turn, each round in a process
of its own with that tree's router and daemon, and prints one table: the
before and after of a change, under the same noise.

Everything runs on this machine's loopback; daemons are real processes.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

# The repository first, so the script runs from a checkout without an install;
# ``--tree CHECKOUT`` (what ``--against`` runs) puts that checkout's first
# instead, so its router (and its test daemon) is what this script measures.
REPO = Path(__file__).resolve().parent.parent
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else str(REPO)
sys.path.insert(0, _TREE)

import trio  # noqa: E402
from trio_websocket import open_websocket_url  # noqa: E402

from router.host.host import Host, HostSettings  # noqa: E402
from router.host.link import DaemonEndpoint  # noqa: E402
from router.host.reconcile import ConnectionRules  # noqa: E402
from router.host.store import Store  # noqa: E402
from tests.support.daemons import spawn_daemon  # noqa: E402
from wire.container import CONTAINER_TOKEN_HEADER, FrameMessage, Hello, converter  # noqa: E402
from wire.json import dumps  # noqa: E402


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# --------------------------------------------------------------------------- 1. apply


def echo_frames(operation_ids: list[str], first_seq: int = 1) -> list[FrameMessage]:
    """The frames the echo adapter makes for these operations."""
    frames = []
    seq = first_seq
    for op in operation_ids:
        text = f"echo: a prompt of ordinary length for {op} (turn 1)"
        message = {
            "id": f"{op}:assistant",
            "role": "assistant",
            "parts": [{"type": "text", "text": text}],
            "operationId": op,
            "createdAt": 1_790_000_000_000,
        }
        bodies = [
            {"kind": "start", "operationId": op},
            {"kind": "event", "operationId": op, "event": {"type": "text-delta", "messageId": message["id"], "delta": text}},
            {"kind": "event", "operationId": op, "event": {"type": "message", "message": message}},
            {"kind": "persist", "entries": [{"turn": 1, "text": text}]},
            {"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": text}},
        ]
        for body in bodies:
            frames.append(converter.structure({"type": "frame", "seq": seq, "frame": body}, FrameMessage))
            seq += 1
    return frames


def hello(session: str, runtime: str = "bench") -> Hello:
    return converter.structure(
        {
            "type": "hello", "protocol": 1, "runtimeId": runtime, "session": session,
            "adapter": {"id": "echo", "version": "1", "capabilities": ["steer"]},
            "open": 1, "lastSeq": 0, "operations": [],
        },
        Hello,
    )  # fmt: skip


def prepared(store: Store, session: str, operations: int) -> tuple[ConnectionRules, list[FrameMessage]]:
    ids = [f"{session}-op{i}" for i in range(operations)]
    with store.transaction():
        store.sessions.create(session)
        for op in ids:
            store.operations.enqueue(session, op, f"a prompt for {op}")
            store.operations.set_delivered(session, op, "bench")
    core = ConnectionRules(session)
    with store.transaction():
        core.hello(store, hello(session))
    return core, echo_frames(ids)


async def bench_apply_one(directory: Path, frames: int, batch: int) -> float:
    with Store(directory / f"one-{batch}.db") as store:
        core, stream = prepared(store, "s", frames // 5)
        start = time.perf_counter()
        for at in range(0, len(stream), batch):
            await store.transact(core.receive, stream[at : at + batch])
        elapsed = time.perf_counter() - start
        assert store.sessions.require("s").cursor_seq == len(stream)
    return len(stream) / elapsed


def bench_apply_direct(directory: Path, frames: int, batch: int) -> float:
    with Store(directory / f"direct-{batch}.db") as store:
        core, stream = prepared(store, "s", frames // 5)
        start = time.perf_counter()
        for at in range(0, len(stream), batch):
            with store.transaction():
                core.receive(store, stream[at : at + batch])
        elapsed = time.perf_counter() - start
    return len(stream) / elapsed


async def bench_apply_many(directory: Path, frames: int, sessions: int, batch: int) -> float:
    with Store(directory / "many.db") as store:
        work = [prepared(store, f"s{i}", max(1, frames // sessions // 5)) for i in range(sessions)]
        total = sum(len(stream) for _, stream in work)

        async def one(core: ConnectionRules, stream: list[FrameMessage]) -> None:
            for at in range(0, len(stream), batch):
                await store.transact(core.receive, stream[at : at + batch])

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for core, stream in work:
                nursery.start_soon(one, core, stream)
        elapsed = time.perf_counter() - start
    return total / elapsed


# --------------------------------------------------------------------------- 2. end to end

FAST = HostSettings(reconnect_base=0.05, reconnect_cap=1.0)


async def bench_end_to_end(kind: str, directory: Path, ops: int, sessions: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with spawn_daemon(kind) as daemon:  # type: ignore[arg-type]
        with Store(directory / f"e2e-{kind}.db") as store:
            host = Host(store, DaemonEndpoint(daemon.url, daemon.token), FAST)
            async with trio.open_nursery() as nursery:
                await nursery.start(host.run)
                root = host.session()
                for _ in range(20):  # warm up: link live, caches warm
                    await root.prompt("warm")
                latencies = []
                for i in range(200):
                    start = time.perf_counter()
                    await root.prompt(f"latency {i}")
                    latencies.append(time.perf_counter() - start)
                out["p50"] = statistics.median(latencies) * 1000
                out["p99"] = _percentile(latencies, 0.99) * 1000

                one = await host.sessions.create("one")
                await one.prompt("warm")
                start = time.perf_counter()
                for i in range(ops):
                    await one.submit(f"op {i}", operation_id=f"o{i}")
                for i in range(ops):
                    await one.wait(f"o{i}")
                out["one"] = ops / (time.perf_counter() - start)

                out["many"] = await _host_rate(host, "m", ops, sessions)
                host.close()
    return out


# --------------------------------------------------------------------------- 2b. host / bare client

RATIO_ACK_EVERY = 32  # as bench/daemon.py's client


async def _bare_session(daemon: Any, name: str, ops: int, go: trio.Event, ready: list[int]) -> None:
    """A bare client on one session: open, replay, then pipeline ``ops``
    prompts and read until all settled, acking every 32 frames."""
    headers = [(CONTAINER_TOKEN_HEADER.encode(), daemon.token.encode())]
    async with open_websocket_url(daemon.session_url(name), extra_headers=headers, max_message_size=1 << 26) as ws:
        await ws.get_message()  # hello
        await ws.send_message('{"type":"open","generation":1,"settings":{},"restore":[]}')
        await ws.send_message('{"type":"replay","after":0}')
        while '"caught-up"' not in await ws.get_message():
            pass
        ready.append(1)
        await go.wait()

        async def send() -> None:
            for i in range(ops):
                await ws.send_message(
                    '{"type":"prompt","operationId":"%s-%d","input":"op %d","whenBusy":"followUp"}' % (name, i, i))

        frames = settled = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            while settled < ops:
                text = await ws.get_message()
                if text.startswith('{"type":"frame"'):
                    frames += 1
                    settled += '"kind":"settle"' in text
                    if frames % RATIO_ACK_EVERY == 0:
                        await ws.send_message('{"type":"ack","seq":%s}' % json.loads(text)["seq"])
            nursery.cancel_scope.cancel()


async def _bare_rate(daemon: Any, tag: str, ops: int, sessions: int) -> float:
    go, ready = trio.Event(), []
    per = max(1, ops // sessions)
    async with trio.open_nursery() as nursery:
        for i in range(sessions):
            nursery.start_soon(_bare_session, daemon, f"{tag}-{i}", per, go, ready)
        while len(ready) < sessions:
            await trio.sleep(0.01)
        start = time.perf_counter()
        go.set()
    return per * sessions / (time.perf_counter() - start)


#: The host's CPU per operation (seconds) of each ``_host_rate`` round.
HOST_CPU_PER_OP: list[float] = []


async def _host_rate(host: Host, tag: str, ops: int, sessions: int) -> float:
    many = [await host.sessions.create(f"{tag}-{i}") for i in range(sessions)]
    for session in many:
        await session.prompt("warm")
    per = max(1, ops // sessions)

    async def drive(session: Any) -> None:
        for i in range(per):
            await session.submit(f"op {i}", operation_id=f"o{i}")
        for i in range(per):
            await session.wait(f"o{i}")

    start, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as tasks:
        for session in many:
            tasks.start_soon(drive, session)
    # This process's CPU (every thread: the store's writer too) per
    # operation: steadier than the rate on a shared machine.
    HOST_CPU_PER_OP.append((time.process_time() - cpu) / (per * sessions))
    return per * sessions / (time.perf_counter() - start)


async def bench_ratio(kind: str, directory: Path, ops: int, sessions: int, rounds: int) -> list[tuple[float, float]]:
    """(host, bare) operations/s against one daemon process, alternating."""
    out = []
    async with spawn_daemon(kind) as daemon:  # type: ignore[arg-type]
        with Store(directory / f"ratio-{kind}.db") as store:
            host = Host(store, DaemonEndpoint(daemon.url, daemon.token), FAST)
            async with trio.open_nursery() as nursery:
                await nursery.start(host.run)
                for r in range(rounds):
                    bare = await _bare_rate(daemon, f"bare{r}", ops, sessions)
                    hosted = await _host_rate(host, f"host{r}", ops, sessions)
                    out.append((hosted, bare))
                host.close()
    return out


# --------------------------------------------------------------------------- 3. replay

REPLAY_TURNS = 2_000  # x 5 frames = 10,000: the daemon's whole keep


async def bench_replay(kind: str, directory: Path) -> dict[str, float]:
    session = "replay"
    async with spawn_daemon(kind, runtime_id="replay-runtime") as daemon:  # type: ignore[arg-type]
        headers = [(CONTAINER_TOKEN_HEADER.encode(), daemon.token.encode())]
        async with open_websocket_url(daemon.session_url(session), extra_headers=headers, max_message_size=1 << 26) as ws:
            json.loads(await ws.get_message())  # hello
            await ws.send_message(dumps({"type": "open", "generation": 1, "settings": {}, "restore": []}))
            await ws.send_message(dumps({"type": "replay", "after": 0}))
            for i in range(REPLAY_TURNS):
                await ws.send_message(
                    dumps({"type": "prompt", "operationId": f"r{i}", "input": f"turn {i}", "whenBusy": "followUp"})
                )
            last = 0
            while last < REPLAY_TURNS * 5:  # every frame produced, none acknowledged
                message = json.loads(await ws.get_message())
                if message["type"] == "frame":
                    last = message["seq"]
        with Store(directory / f"replay-{kind}.db") as store:
            with store.transaction():
                store.sessions.create(session)
                for i in range(REPLAY_TURNS):
                    store.operations.enqueue(session, f"r{i}", f"turn {i}")
                    store.operations.set_delivered(session, f"r{i}", daemon.runtime_id)
                store.sessions.set_cursor(session, daemon.runtime_id, 0)
            host = Host(store, DaemonEndpoint(daemon.url, daemon.token), FAST)
            async with trio.open_nursery() as nursery:
                start = time.perf_counter()
                await nursery.start(host.run)
                await host.session(session).wait(f"r{REPLAY_TURNS - 1}")
                elapsed = time.perf_counter() - start
                host.close()
            record = store.sessions.require(session)
            assert record.cursor_seq == REPLAY_TURNS * 5, record
            assert len(store.entries.all(session)) == REPLAY_TURNS
    return {"seconds": elapsed, "frames": REPLAY_TURNS * 5}


# --------------------------------------------------------------------------- 4. memory


async def memory_child(kind: str, count: int, directory: str) -> None:
    """Run in a fresh process: print RSS and heap growth per idle session."""
    async with spawn_daemon(kind) as daemon:  # type: ignore[arg-type]
        with Store(Path(directory) / f"memory-{kind}.db") as store:
            host = Host(store, DaemonEndpoint(daemon.url, daemon.token), FAST)
            async with trio.open_nursery() as nursery:
                await nursery.start(host.run)
                await host.session().prompt("warm")  # the link machinery, loaded once
                extra = await host.sessions.create("extra")
                await extra.prompt("warm")
                gc.collect()
                tracemalloc.start()
                heap_before = tracemalloc.get_traced_memory()[0]
                rss_before = _rss_kib()
                for i in range(count):
                    session = await host.sessions.create(f"idle{i}")
                    await session.prompt("hello")
                gc.collect()
                rss_after = _rss_kib()
                heap_after = tracemalloc.get_traced_memory()[0]
                live = sum(1 for link in host._links.values() if link.state == "live")
                print(
                    json.dumps(
                        {
                            "rss_kib": (rss_after - rss_before) / count,
                            "heap_kib": (heap_after - heap_before) / 1024 / count,
                            "live": live,
                        }
                    )
                )
                host.close()


def bench_memory(kind: str, count: int, directory: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--memory-child", kind, "--idle", str(count), "--dir", str(directory)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- --against


def ratio_against(args: argparse.Namespace) -> None:
    """``--ratio`` for this tree and each ``--against`` checkout, one round
    of each in turn (each in a process of its own, with its own daemon), so
    all meet the same noise; prints a table."""
    trees = [("this tree", str(REPO))] + [(f"@ {checkout}", checkout) for checkout in args.against]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, tree in trees:
            done = subprocess.run(
                [sys.executable, __file__, "--tree", tree, "--ratio-child", "--kinds", args.kinds,
                 "--ratio", str(args.ratio), "--ops", str(args.ops)],
                check=True, capture_output=True, text=True,
            )
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| tree | host / bare client ops/s, per round | host CPU per operation, ms |")
    print("|---|---|---|")
    for name, rounds in results.items():
        ratios = ", ".join(f"{r['host']:,.0f} / {r['bare']:,.0f} = {r['host'] / r['bare']:.2f}x" for r in rounds)
        cpus = ", ".join(f"{r['cpu'] * 1e3:.2f}" for r in rounds)
        print(f"| {name} | {ratios} | {cpus} |")


async def ratio_child(args: argparse.Namespace) -> None:
    kind = [kind for kind in args.kinds.split(",") if kind][0]
    with tempfile.TemporaryDirectory(prefix="router-bench-host-") as scratch:
        ((hosted, bare),) = await bench_ratio(kind, Path(scratch), args.ops, args.ratio, 1)
    print(json.dumps({"host": hosted, "bare": bare, "cpu": HOST_CPU_PER_OP[-1]}))


# --------------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> None:
    kinds = [kind for kind in args.kinds.split(",") if kind]
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="router-bench-host-") as scratch:
        directory = Path(scratch)
        for batch in (1, 32, 512):
            rate = await bench_apply_one(directory, args.frames, batch)
            rows.append((f"apply, one session, {batch} frame(s) per transaction", f"{rate:,.0f} frames/s"))
        rate = await bench_apply_many(directory, args.frames, 100, 32)
        rows.append(("apply, 100 sessions at once, 32 per transaction", f"{rate:,.0f} frames/s"))
        rate = bench_apply_direct(directory, args.frames, 32)
        rows.append(("  reference: the core alone, no thread hop, 32 per transaction", f"{rate:,.0f} frames/s"))
        for kind in kinds:
            if args.ratio:
                del HOST_CPU_PER_OP[:]
                pairs = await bench_ratio(kind, directory, args.ops, args.ratio, args.rounds)
                for (hosted, bare), cpu in zip(pairs, HOST_CPU_PER_OP):
                    rows.append((f"[{kind}] {args.ratio} sessions: host / bare client, ops/s",
                                 f"{hosted:,.0f} / {bare:,.0f} = {hosted / bare:.2f}x"))
                    rows.append((f"[{kind}]   the host process's CPU per operation", f"{cpu * 1e3:.2f} ms"))
                if args.ratio_only:
                    continue
            e2e = await bench_end_to_end(kind, directory, args.ops, args.sessions)
            rows.append((f"[{kind}] prompt latency, submit + wait, p50 / p99", f"{e2e['p50']:.2f} / {e2e['p99']:.2f} ms"))
            rows.append((f"[{kind}] operations, one session, {args.ops} submitted at once", f"{e2e['one']:,.0f} ops/s"))
            rows.append((f"[{kind}] operations, {args.sessions} sessions at once", f"{e2e['many']:,.0f} ops/s"))
            replay = await bench_replay(kind, directory)
            rows.append(
                (
                    f"[{kind}] replay of {replay['frames']:,} kept frames after a reconnect",
                    f"{replay['seconds']:.2f} s ({replay['frames'] / replay['seconds']:,.0f} frames/s)",
                )
            )
            memory = bench_memory(kind, args.idle, directory)
            rows.append(
                (
                    f"[{kind}] memory per idle session ({args.idle}, {memory['live']} live): RSS / Python heap",
                    f"{memory['rss_kib']:.0f} / {memory['heap_kib']:.0f} KiB",
                )
            )
    width = max(len(name) for name, _ in rows)
    print(f"{'measure'.ljust(width)}  value")
    print(f"{'-' * width}  {'-' * 34}")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--ops", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--kinds", default="reference,ours")
    parser.add_argument("--ratio", type=int, default=0, metavar="SESSIONS",
                        help="also: host against a bare client of the same daemon, on SESSIONS sessions, alternating")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --ratio")
    parser.add_argument("--ratio-only", action="store_true", help="with --ratio: skip the end-to-end, replay and memory rows")
    parser.add_argument("--against", metavar="CHECKOUT", action="append", default=[],
                        help="with --ratio: only the ratio rounds, for this tree and each CHECKOUT alternating")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--ratio-child", action="store_true", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.ratio_child:
        trio.run(ratio_child, parsed)
    elif parsed.ratio and parsed.against:
        ratio_against(parsed)
    elif parsed.memory_child:
        trio.run(memory_child, parsed.memory_child, parsed.idle, parsed.dir)
    else:
        trio.run(main, parsed)
