"""Routers of a cluster on one PostgreSQL database: deliveries per second
with one, two and three routers, where the CPU goes, and the takeover
time after a router is killed. Prints two tables.

    .venv/bin/python bench/cluster.py [--routers 1,2,3] [--sessions 30] [--senders 12]
                                      [--duration 15] [--lease 6] [--kills 3] [--durable]

For each router count it starts a private PostgreSQL 15
(tests/support/postgres.py; ``fsync``, ``synchronous_commit`` and
``full_page_writes`` off unless ``--durable``, which turns them back to the
server's defaults), one ``router daemon --adapter echo`` and that many
``router serve --store postgresql://…`` dialling it, makes ``--sessions``
container sessions, waits until the leases are spread, then runs
``--senders`` senders for ``--duration`` seconds: each posts one delivery
at a time (``POST /sessions/<s>/messages``, a new event id, without
``wait``) to a router drawn at random, so about (n-1)/n of them are
relayed through the inbox to the session's holder. CPU seconds are read
from ``/proc`` for the routers, the daemon and every PostgreSQL backend
(the postmaster's children), so the table shows the database's share.

The takeover table: with three routers, ``--kills`` times, a router
holding sessions is SIGKILLed and the time is measured until another
router's board names a live holder for every one of its sessions (the
lease's life, ``--lease`` seconds, plus a renew round, is the bound).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster.processes import board, holder_of, make_sessions, start_member  # noqa: E402
from tests.support.daemons import spawn_daemon  # noqa: E402
from tests.support.postgres import Cluster  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def postgres_cpu(postmaster: int) -> float:
    """CPU of the postmaster and all its children (backends, writers),
    live ones, plus what the dead children left in cutime/cstime."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster or int(entry.name) == postmaster:
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICKS
    return total


class Setup:
    def __init__(self, durable: bool) -> None:
        self.durable = durable

    def start_postgres(self) -> Cluster:
        postgres = Cluster()
        if self.durable:
            # Back to the server's defaults for the cost of a commit.
            original = postgres._as_server_user

            def durable(argv: list[str]) -> list[str]:
                argv = original(argv)
                for name in ("fsync", "synchronous_commit", "full_page_writes"):
                    if f"{name}=off" in argv:
                        argv[argv.index(f"{name}=off")] = f"{name}=on"
                return argv

            postgres._as_server_user = durable  # type: ignore[method-assign]
        return postgres.start()


async def _members(tmp: Path, routers: int, url: str, daemon_url: str, lease: float) -> list[Any]:
    return [await start_member(tmp / f"r{i}", f"r{i}", url, daemon_url, lease_ttl=lease) for i in range(routers)]


async def _spread(members: list[Any], sessions: list[str], names: int) -> None:
    with trio.fail_after(120):
        while True:
            entries = [e for e in await board(members[0]) if e["id"] in sessions]
            holders = {holder_of(e) for e in entries}
            if len(entries) == len(sessions) and None not in holders and len(holders) == names:
                return
            await trio.sleep(0.25)


async def load(members: list[Any], sessions: list[str], senders: int, duration: float) -> tuple[int, int, float]:
    clients = [member.client(timeout=60) for member in members]
    done = errors = 0
    rng = random.Random(1)

    async def sender(i: int) -> None:
        nonlocal done, errors
        session = sessions[i % len(sessions)]
        with trio.move_on_after(duration):
            while True:
                client = rng.choice(clients)
                response = await client.post(f"/sessions/{session}/messages",
                                             json={"text": "hi", "eventId": uuid.uuid4().hex})
                if response.status_code == 200 and response.json().get("status") == "delivered":
                    done += 1
                else:
                    errors += 1
                    print("error:", response.status_code, response.text[:200], file=sys.stderr)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for i in range(senders):
            nursery.start_soon(sender, i)
    elapsed = trio.current_time() - start
    for client in clients:
        await client.aclose()
    return done, errors, elapsed


async def one_level(setup: Setup, routers: int, args: argparse.Namespace) -> dict[str, Any]:
    postgres = setup.start_postgres()
    try:
        url = postgres.create_database()
        sessions = [f"b{i:03d}" for i in range(args.sessions)]
        make_sessions(url, sessions)
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            async with spawn_daemon("ours", token="cluster-daemon-token", runtime_id="bench") as daemon:
                members = await _members(Path(tmp), routers, url, daemon.url, args.lease)
                try:
                    await _spread(members, sessions, routers)
                    assert postgres.proc is not None
                    pids = [m.process.pid for m in members]
                    before = ([cpu_seconds(p) for p in pids], cpu_seconds(daemon.process.pid),
                              postgres_cpu(postgres.proc.pid))
                    done, errors, elapsed = await load(members, sessions, args.senders, args.duration)
                    after = ([cpu_seconds(p) for p in pids], cpu_seconds(daemon.process.pid),
                             postgres_cpu(postgres.proc.pid))
                finally:
                    for member in members:
                        member.process.send_signal(signal.SIGTERM)
                    for member in members:
                        await member.process.wait()
        routers_cpu = sum(a - b for a, b in zip(after[0], before[0]))
        return {"routers": routers, "deliveries": done, "errors": errors, "rate": done / elapsed,
                "router_cpu_ms": 1000 * routers_cpu / max(1, done),
                "daemon_cpu_ms": 1000 * (after[1] - before[1]) / max(1, done),
                "pg_cpu_ms": 1000 * (after[2] - before[2]) / max(1, done)}
    finally:
        postgres.stop()


async def takeovers(setup: Setup, args: argparse.Namespace) -> list[float]:
    postgres = setup.start_postgres()
    times = []
    try:
        url = postgres.create_database()
        sessions = [f"k{i:03d}" for i in range(args.sessions)]
        make_sessions(url, sessions)
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            async with spawn_daemon("ours", token="cluster-daemon-token", runtime_id="bench") as daemon:
                members = await _members(Path(tmp), 3, url, daemon.url, args.lease)
                try:
                    for kill in range(args.kills):
                        await _spread(members, sessions, 3)
                        entries = [e for e in await board(members[0]) if e["id"] in sessions]
                        victim_index = 1 + kill % 2
                        victim = members[victim_index]
                        victim_id = {holder_of(e) for e in entries if e["router"] and
                                     e["router"].get("pid") == victim.process.pid}.pop()
                        theirs = [e["id"] for e in entries if holder_of(e) == victim_id]
                        victim.process.send_signal(signal.SIGKILL)
                        killed = time.monotonic()
                        await victim.process.wait()
                        with trio.fail_after(120):
                            while True:
                                now = {e["id"]: holder_of(e) for e in await board(members[0])}
                                if all(now.get(s) not in (None, victim_id) for s in theirs):
                                    break
                                await trio.sleep(0.05)
                        times.append(time.monotonic() - killed)
                        members[victim_index] = await start_member(Path(tmp) / f"r{victim_index}-{kill}",
                                                                   f"r{victim_index}", url, daemon.url,
                                                                   lease_ttl=args.lease)
                finally:
                    for member in members:
                        if member.process.returncode is None:
                            member.process.send_signal(signal.SIGTERM)
                            await member.process.wait()
    finally:
        postgres.stop()
    return times


async def main(args: argparse.Namespace) -> None:
    setup = Setup(args.durable)
    print(f"PostgreSQL {'durable (fsync on)' if args.durable else 'fsync off'}; {args.sessions} sessions, "
          f"{args.senders} senders, {args.duration:.0f} s per level, lease {args.lease:g} s; "
          f"{os.cpu_count()} cores")
    print("| routers | deliveries/s | errors | router CPU ms/delivery | PostgreSQL CPU ms/delivery "
          "| daemon CPU ms/delivery | PostgreSQL share |")
    print("|---|---|---|---|---|---|---|")
    for routers in [int(each) for each in args.routers.split(",")]:
        row = await one_level(setup, routers, args)
        total = row["router_cpu_ms"] + row["pg_cpu_ms"] + row["daemon_cpu_ms"]
        print(f"| {routers} | {row['rate']:.1f} | {row['errors']} | {row['router_cpu_ms']:.2f} | "
              f"{row['pg_cpu_ms']:.2f} | {row['daemon_cpu_ms']:.2f} | {100 * row['pg_cpu_ms'] / total:.0f}% |",
              flush=True)
    if args.kills:
        times = await takeovers(setup, args)
        print()
        print("| kill | takeover (s) |")
        print("|---|---|")
        for i, each in enumerate(times, 1):
            print(f"| {i} | {each:.2f} |")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routers", default="1,2,3")
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--senders", type=int, default=12)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--durable", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    trio.run(main, parse())
