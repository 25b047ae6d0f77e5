"""PostgreSQL blinking under running ``router serve`` processes (real
processes, a private PostgreSQL of this test's own, since it is restarted):

- its backends terminated (``pg_terminate_backend``), then one router
  stopped (SIGSTOP) past its lease with its connections dead, then
  continued: it meets the lost connections as it gains leases again;
- a fast restart with the server down past the retry budget, and an
  immediate restart;

while a sender keeps sending with event ids and resends the same event id
on every 503. Asserted: no router exits; the 503s of the outage carry
``store-unavailable``; every event is answered once in the end; the record
holds each event's operation once, done, and each session's echo turns are
1..n with no gap and no repeat (nothing lost, nothing doubled).
"""

from __future__ import annotations

import itertools
import signal
from pathlib import Path

import httpx
import pytest
import trio

from tests.cluster.processes import LEASE_TTL, Member, cluster, deliver, make_sessions, record_check
from tests.support import postgres as pg_support
from tests.support.polling import until

SESSIONS = ["s0", "s1", "s2", "s3"]
#: The routers' retry budget here (seconds): short, so an outage a little
#: longer than it shows its 503s without a long test.
BUDGET = 1.5
#: The event id of the delivery made while PostgreSQL is down.
PROBE = "probe-outage"


class Sender:
    """Sends ``hi <event>`` to the routers in turn; a 503 or a dropped
    connection is resent, with the same event id, to the next router."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.clients = {m.name: m.client(timeout=60) for m in members}
        self.turn = itertools.count()
        self.codes: dict[str, int] = {}
        self.answered: dict[str, str] = {}
        self.sent = 0

    async def send(self, event_id: str, session: str) -> None:
        while True:
            member = self.members[next(self.turn) % len(self.members)]
            try:
                status, body = await deliver(member, self.clients[member.name], session, event_id, f"hi {event_id}")
            except httpx.HTTPError:
                status, body = 0, None
            if status == 200 and isinstance(body, dict) and (body.get("reply") or {}).get("status") == "done":
                self.answered[event_id] = body["reply"]["text"]
                return
            code = body.get("error") if isinstance(body, dict) else f"status-{status}"
            assert status in (0, 503), (event_id, status, body)
            self.codes[str(code)] = self.codes.get(str(code), 0) + 1
            await trio.sleep(0.2)

    async def run(self, stop: trio.Event) -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            self.sent += 1
            await self.send(f"e{n}", SESSIONS[n % len(SESSIONS)])


async def wait_for(condition, *, timeout: float) -> None:  # noqa: ANN001
    with trio.fail_after(timeout):
        await until(condition, step=0.05)


async def _restart(cluster_: pg_support.Cluster, mode: str, down: float) -> None:
    # On this thread: the server dies with the thread that started it
    # (``setpriv --pdeathsig``), and a worker thread ends when idle.
    cluster_.shut_down(mode)
    await trio.sleep(down)
    cluster_.restart()


@pytest.mark.skipif(pg_support.missing() is not None, reason=str(pg_support.missing()))
async def test_routers_outlive_postgresql_restarts_and_terminated_backends(tmp_path: Path) -> None:
    # Durable (PostgreSQL's defaults): with the throwaway settings
    # (synchronous_commit off) an immediate shutdown loses the last commits
    # the routers were told had landed, which no router can make up for.
    server = pg_support.Cluster(durable=True).start()  # on this thread: see _restart
    try:
        store = server.create_database()
        database = store.rsplit("/", 1)[1]
        make_sessions(store, SESSIONS)
        env = {"ROUTER_STORE_RETRY_BUDGET": str(BUDGET)}
        async with cluster(tmp_path, store, routers=2, env=env) as (members, _daemon):
            sender = Sender(members)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop)
                await wait_for(lambda: len(sender.answered) >= 2, timeout=60)

                # Backends terminated, then one router stalled past its lease:
                # it wakes on dead connections while it gains leases again.
                assert server.terminate_backends(database) > 0
                members[1].process.send_signal(signal.SIGSTOP)
                await trio.sleep(LEASE_TTL + 2)
                members[1].process.send_signal(signal.SIGCONT)
                mark = len(sender.answered)
                await wait_for(lambda: len(sender.answered) >= mark + 2, timeout=60)

                # Down past the retry budget: 503s, then back. The sender's
                # one request in flight may be waiting for its turn's outcome
                # through the whole outage (answered 200 after it, rightly),
                # so a new delivery is made while the server is down: its
                # admission meets the outage.
                server.shut_down("fast")
                nursery.start_soon(sender.send, PROBE, SESSIONS[0])
                await trio.sleep(2 * BUDGET)
                server.restart()
                mark = len(sender.answered)
                await wait_for(lambda: len(sender.answered) >= mark + 2, timeout=90)
                await _restart(server, "immediate", 0.5)
                mark = len(sender.answered)
                await wait_for(lambda: len(sender.answered) >= mark + 2, timeout=90)
                stop.set()
            for client in sender.clients.values():
                await client.aclose()
            for member in members:
                assert member.alive, f"{member.name} exited: {member.log()[-3000:]}"
                assert "Traceback" not in member.log() or "store-unavailable" in member.log(), member.log()[-3000:]
        assert sender.codes.get("store-unavailable", 0) > 0, sender.codes
        assert set(sender.codes) <= {"store-unavailable", "status-0", "no-answer", "lease-lost",
                                     "holder-unreachable", "host-not-running", "link-closed"}, sender.codes
        record = record_check(store, SESSIONS)
        events = {f"e{n}" for n in range(sender.sent)}
        assert set(sender.answered) == events | {PROBE}
        for session in SESSIONS:
            ops = record[session]["operations"]
            turns = record[session]["turns"]
            assert all(status == "done" for status in ops.values()), (session, ops)
            assert turns == list(range(1, len(turns) + 1)), (session, turns)  # no gap, no repeat
        assert sum(len(record[s]["turns"]) for s in SESSIONS) == len(events) + 1
    finally:
        server.stop()
