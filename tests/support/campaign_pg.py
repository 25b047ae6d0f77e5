"""The fault campaign's PostgreSQL phase (docs/reliability.md): the database
blinks under three ``router serve`` sharing one private PostgreSQL, in both
cluster modes.

Three routers on one database (``ROUTER_STORE_RETRY_BUDGET`` short, so an
outage longer than it shows its 503s), twelve container sessions, a limit
plug-in on (``token-limit`` over the ``frames`` source: a turn's end writes
and checks its record, where a dropped connection used to stop the
session). In the ``shared daemon`` mode every router dials one ``router
daemon --adapter echo``; in the ``own daemons`` mode (the default cluster
mode) each router runs its in-process daemon, so a session that moves
continues on another daemon from the record. Senders deliver throughout
(:func:`tests.support.campaign._cluster_send`: a 503, a dropped connection
or another refusal is resent with the same event id to a random router; a
session found stopped is counted and resumed), while one fault at a time,
0.5–2 s apart (the first four one of each kind, then drawn):

- ``fast``: a fast shutdown (SIGINT), down 0.2–3 s, started again;
- ``immediate``: an immediate shutdown (SIGQUIT: no checkpoint, the next
  start recovers from the WAL), down 0.1–1 s, started again;
- ``terminate``: every backend of the database ended
  (``pg_terminate_backend``);
- ``terminate+stop``: the same, then one router stopped (SIGSTOP) for 1.5–2.5
  leases and continued: it wakes on dead connections while it gains leases
  again (where ``router serve`` used to exit).

The server runs with PostgreSQL's durable defaults: with the throwaway
settings an immediate shutdown loses commits the routers were told had
landed (tests/store/test_pg_faults.py). A router that exits is counted
(``exits``), noted with its log's end and started again, so the phase goes
on; the record is then judged as the cluster's phase judges it
(:func:`tests.support.campaign.judge_cluster`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from random import Random
from typing import Any

import trio

from tests.support.campaign import (
    CLUSTER_SESSIONS,
    PHASE_DEADLINE,
    FaultRow,
    _cluster_run,
    judge_cluster,
    rng_for,
)

#: The phase's modes: whether the routers share one daemon.
MODES = {"shared daemon": True, "own daemons": False}
#: The routers' lease (seconds), as the cluster phase's.
LEASE = 4.0
#: The routers' store retry budget (seconds): short, so a restart down
#: longer than it is answered 503 ``store-unavailable`` and resent.
BUDGET = 1.5
#: The fault kinds, in the order the first ones come.
KINDS = ("terminate+stop", "fast", "immediate", "terminate")
#: The limit plug-in on every router: a turn's end writes its record and
#: checks it (``end_turn``), the step a blink used to stop sessions at.
PLUGINS = {"plugins": {"harness": ["echo"], "usage-source": ["frames"], "limit-check": ["token-limit"],
                       "channel": ["cli", "webui"]}, "options": {}}


class _Members:
    """The phase's three routers: the interface the cluster's sender uses
    (``live``, ``members``, ``clients``), started with the limit plug-in
    on, each on its own folder."""

    def __init__(self, work: Path, store: str, daemon_url: str | None) -> None:
        self.work, self.store, self.daemon_url = work, store, daemon_url
        self.members: dict[str, Any] = {}
        self.clients: dict[str, Any] = {}
        self.paused: set[str] = set()

    def live(self) -> list[str]:
        return sorted(name for name, member in self.members.items() if member.alive and name not in self.paused)

    async def start(self, name: str) -> None:
        from tests.cluster.processes import TOKEN, start_member

        self.paused.add(name)
        settings = self.work / name / "settings"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "plugins.json").write_text(json.dumps(PLUGINS))
        env = {"ROUTER_STORE_RETRY_BUDGET": str(BUDGET), "ROUTER_DAEMON_TOKEN": TOKEN}
        member = await start_member(self.work / name, name, self.store, self.daemon_url, lease_ttl=LEASE, env=env)
        old = self.clients.pop(name, None)
        if old is not None:
            await old.aclose()
        self.members[name], self.clients[name] = member, member.client(timeout=PHASE_DEADLINE)
        self.paused.discard(name)

    async def exited(self, row: FaultRow) -> None:
        """Count, note and start again every router that exited by itself
        (the phase never kills one)."""
        for name, member in list(self.members.items()):
            if not member.alive and name not in self.paused:
                row.exits = (row.exits or 0) + 1
                row.notes.append(f"{name} exited ({member.process.returncode}): {member.log()[-400:]}")
                # Kept beside the next start's log (which starts afresh).
                member.stderr.rename(member.stderr.with_name(f"serve-exited-{row.exits}.stderr"))
                await self.start(name)

    async def aclose(self) -> None:
        from tests.api.processes import stop

        with trio.CancelScope(shield=True):
            for name, member in self.members.items():
                if member.alive:
                    member.process.send_signal(18)  # SIGCONT, in case it was left stopped
                    await stop(member.process)
                await self.clients[name].aclose()


async def _faults(server: Any, database: str, row: FaultRow, rng: Random, routers: _Members, target: int,
                  until: float) -> None:
    """One fault at a time (the module docstring's kinds). The server is
    stopped and started on this thread: its parent-death signal follows
    the thread that started it (tests/support/postgres.py). None begun
    after ``until``."""
    while row.faults < target and trio.current_time() < until:
        await trio.sleep(rng.uniform(0.5, 2.0))
        await routers.exited(row)
        kind = KINDS[row.faults] if row.faults < len(KINDS) else rng.choice(KINDS)
        row.faults += 1
        row.kinds[kind] = row.kinds.get(kind, 0) + 1
        if kind in ("fast", "immediate"):
            server.shut_down(kind)
            await trio.sleep(rng.uniform(0.2, 3.0) if kind == "fast" else rng.uniform(0.1, 1.0))
            server.restart()
            continue
        await trio.to_thread.run_sync(server.terminate_backends, database)
        if kind == "terminate+stop":
            name = rng.choice(routers.live())
            routers.paused.add(name)
            routers.members[name].process.send_signal(19)  # SIGSTOP
            await trio.sleep(LEASE * rng.uniform(1.5, 2.5))  # past its lease: taken over
            routers.members[name].process.send_signal(18)  # SIGCONT
            routers.paused.discard(name)
    await routers.exited(row)


async def phase_postgres(mode: str, target: int, seed: int, work: Path) -> FaultRow:
    """The module docstring's phase in ``mode`` (a key of :data:`MODES`)."""
    from tests.cluster.processes import TOKEN, make_sessions
    from tests.support.daemons import spawn_daemon
    from tests.support.postgres import Cluster, missing

    row = FaultRow(f"PostgreSQL restarts: 3 routers, {mode}")
    why = missing()
    if why is not None:
        row.notes.append(f"skipped: {why}")
        return row
    rng = rng_for(seed, row.phase)
    row.exits, row.stopped = 0, 0
    server = Cluster(durable=True).start()
    try:
        url = server.create_database()
        database = url.rsplit("/", 1)[1]
        sessions = [f"p{i:02d}" for i in range(CLUSTER_SESSIONS)]
        await trio.to_thread.run_sync(make_sessions, url, sessions)
        expected: dict[str, str] = {}
        answers: dict[str, str] = {}
        async with contextlib.AsyncExitStack() as stack:
            daemon_url = None
            if MODES[mode]:
                daemon = await stack.enter_async_context(spawn_daemon("ours", token=TOKEN, runtime_id="campaign-pg"))
                daemon_url = daemon.url
            routers = _Members(work, url, daemon_url)
            try:
                async with trio.open_nursery() as starting:
                    for i in range(3):
                        starting.start_soon(routers.start, f"r{i}")

                async def inject(row: FaultRow, rng: Random, routers: _Members, target: int, until: float) -> None:
                    await _faults(server, database, row, rng, routers, target, until)

                await _cluster_run(row, rng, routers, target, sessions, expected, answers, inject, LEASE * 2)
                await routers.exited(row)
            finally:
                await routers.aclose()
        row.operations = len(expected)
        await trio.to_thread.run_sync(judge_cluster, row, url, sessions, expected, answers)
    finally:
        server.stop()
    return row
