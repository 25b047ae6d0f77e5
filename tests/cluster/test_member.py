"""Cluster members in one process over a real PostgreSQL: the spread, the
inbox answering every delivery exactly once across the members, a member
that dies in the middle, and one that joins.

Each member's handler writes the delivery into a record of its own
(``applied``, keyed by event id) under its lease: the fencing check in the
same transaction, so a member that lost the lease cannot write, and the key
answers a redelivery from the record (as the router's delivery log does).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import trio

from router.cluster import fair_share, hysteresis, pg
from router.cluster.member import ClusterMember, ClusterSettings

FAST = ClusterSettings(lease_ttl=4.0, renew_every=0.5, router_ttl=4.0, inbox_poll=1.0, reply_poll=1.0, margin=1.0)


def _setup(conn: Any) -> None:
    pg.ensure_schema(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS applied (event_id text PRIMARY KEY, session text, holder text, "
                 "fencing bigint, handled int NOT NULL DEFAULT 1)")


def _apply(conn: Any, event_id: str, session: str, holder: str, fencing: int | None) -> str:
    with conn.transaction():
        pg.fence(conn, session, holder, fencing, what=f"delivery {event_id}")
        conn.execute("INSERT INTO applied (event_id, session, holder, fencing) VALUES (%s, %s, %s, %s) "
                     "ON CONFLICT (event_id) DO UPDATE SET handled = applied.handled + 1", (event_id, session, holder,
                                                                                          fencing))
        row = conn.execute("SELECT holder, fencing FROM applied WHERE event_id = %s", (event_id,)).fetchone()
    return json.dumps({"event": event_id, "by": row[0], "fencing": row[1]})


class Node:
    """One member with its own pool, the handler, and its scope."""

    def __init__(self, url: str, name: str, settings: ClusterSettings = FAST) -> None:
        self.db = pg.ClusterDatabase(url)
        self.member = ClusterMember(self.db, url, name, settings=settings)
        self.scope = trio.CancelScope()
        #: The deliveries asked of this member now (cut when it dies).
        self.attempts: set[trio.CancelScope] = set()

    def kill(self) -> None:
        """Die at once: no clean leave (its leases expire), its relays cut."""
        self.scope.cancel()
        for attempt in list(self.attempts):
            attempt.cancel()

    async def handler(self, event_id: str, session: str, body: str) -> tuple[str, bool]:
        return await self.db.call(_apply, event_id, session, self.member.id, self.member.fencing(session)), True

    async def deliver(self, event_id: str, session: str) -> str:
        """As a router does: serve it here when held, else relay it."""
        if self.member.holds(session):
            try:
                return (await self.handler(event_id, session, "{}"))[0]
            except pg.LeaseLost:
                pass
        return await self.member.relay(event_id, session, "{}")

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.member.run)
                    await nursery.start(self.member.serve_inbox, self.handler)
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self.db.close()


async def _held_by(db: pg.ClusterDatabase) -> dict[str, str | None]:
    leases, now = await db.call(pg.leases)
    return {lease.session: lease.holder if lease.live(now) else None for lease in leases}


async def _until(predicate: Any, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.1)


@pytest.mark.timeout(240)
async def test_three_members_answer_every_delivery_once_through_a_death_and_a_join(pg_url: str) -> None:
    sessions = [f"s{i:02d}" for i in range(30)]
    probe = pg.ClusterDatabase(pg_url)
    await probe.call(_setup)
    await probe.call(pg.ensure_sessions, sessions)
    nodes = [Node(pg_url, name) for name in ("a", "b", "c")]
    rng = random.Random(19)

    def limit(routers: int) -> int:
        share = fair_share(len(sessions), routers)
        return share + hysteresis(share)

    replies: dict[str, str] = {}

    async def spread_ok(members: list[str]) -> bool:
        held = await _held_by(probe)
        counts = {name: list(held.values()).count(name) for name in members}
        return all(holder in members for holder in held.values()) and max(counts.values()) <= limit(len(members))

    async def send(event_id: str, session: str) -> None:
        # A sender that resends to another router when the one it asked dies.
        while True:
            node = rng.choice([node for node in nodes if not node.scope.cancel_called])
            with trio.CancelScope() as attempt:
                node.attempts.add(attempt)
                try:
                    reply = await node.deliver(event_id, session)
                finally:
                    node.attempts.discard(attempt)
            if not attempt.cancelled_caught:
                replies.setdefault(event_id, reply)
                assert replies[event_id] == reply
                return

    try:
        async with trio.open_nursery() as nursery:
            for node in nodes:
                await nursery.start(node.run)
            await _until(lambda: spread_ok(["a", "b", "c"]))
            async with trio.open_nursery() as senders:
                for i in range(150):
                    senders.start_soon(send, f"e{i}", rng.choice(sessions))
                    await trio.sleep(0.01)
                    if i == 60:
                        # a dies (no clean leave: its leases expire).
                        victim = [s for s, h in (await _held_by(probe)).items() if h == "a"]
                        nodes[0].kill()
            # Every session of the dead member is driven by the others.
            await _until(lambda: spread_ok(["b", "c"]))
            assert victim
            # A router joins and gets sessions back.
            nodes.append(Node(pg_url, "d"))
            await nursery.start(nodes[-1].run)

            async def d_has_some() -> bool:
                return list((await _held_by(probe)).values()).count("d") >= 8

            await _until(d_has_some)
            for i in range(150, 200):
                await send(f"e{i}", rng.choice(sessions))
            for node in nodes[1:]:
                await node.member.aclose()
            nursery.cancel_scope.cancel()
        rows = await probe.call(lambda conn: conn.execute("SELECT event_id, handled FROM applied").fetchall())
        assert sorted(row[0] for row in rows) == sorted(f"e{i}" for i in range(200))
        assert set(replies) == {f"e{i}" for i in range(200)}
        # Nothing written by a member without the lease.
        for event_id, reply in replies.items():
            assert json.loads(reply)["event"] == event_id
    finally:
        probe.close()


async def test_a_member_that_stops_renewing_loses_its_links_before_the_database_expiry(pg_url: str) -> None:
    """The belief runs out ``margin`` before the database's expiry: the
    owner is told ``lost`` while the database still has the lease (so no
    other router drives the session yet)."""
    probe = pg.ClusterDatabase(pg_url)
    await probe.call(_setup)
    await probe.call(pg.ensure_sessions, ["s"])
    told: list[tuple[str, Any]] = []

    class Owner:
        def gained(self, session: str, fencing: int) -> None:
            told.append(("gained", fencing))

        def lost(self, session: str) -> None:
            told.append(("lost", None))

    settings = ClusterSettings(lease_ttl=3.0, renew_every=0.3, router_ttl=3.0, margin=1.5)
    db = pg.ClusterDatabase(pg_url)
    member = ClusterMember(db, pg_url, "a", owner=Owner(), settings=settings)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(member.run)
            assert told == [("gained", 1)]

            async def stalled(*args: Any) -> Any:
                await trio.sleep_forever()

            db.call = stalled  # type: ignore[method-assign]  # every round hangs from now on
            with trio.fail_after(30):
                while told[-1][0] != "lost":
                    await trio.sleep(0.05)
            leases, now = await probe.call(pg.leases)
            assert leases[0].holder == "a" and leases[0].live(now)  # the database still says a's
            assert not member.holds("s")
            nursery.cancel_scope.cancel()
    finally:
        db.close()
        probe.close()
