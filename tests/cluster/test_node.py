"""Routers of a cluster in one process, as the main job assembles them
(the host's store and the deliveries' record on one PostgreSQL database,
the node's fence on both, the host linking only held sessions, the turn
router relaying the others), over one in-process echo daemon: every
delivery answered exactly once, through a router's death."""

from __future__ import annotations

import random
import secrets
from typing import Any

import pytest
import trio

from router.cluster import open_node, pg
from router.daemon import Daemon, DaemonServer
from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import DaemonEndpoint, Host, HostSettings, Store
from router.turns.core import Answered, Delivery, Person
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter

ENV = {"ROUTER_CLUSTER_LEASE_TTL": "3"}


class Router:
    def __init__(self, url: str, endpoint: DaemonEndpoint, name: str) -> None:
        self.store = Store(url)
        self.deliveries = DeliveryLog(url)
        self.node = open_node(self.store, self.deliveries, env=ENV, router_id=name)
        self.host = Host(self.store, endpoint, HostSettings(on_container_lost="if-declared"), may_link=self.node.holds)
        self.registry = SessionRegistry()
        self.router = TurnRouter(deliveries=self.deliveries, registry=self.registry, host=self.host,
                                 remote=self.node)
        self.node.host, self.node.router, self.node.registry = self.host, self.router, self.registry
        self.scope = trio.CancelScope()
        self.attempts: set[trio.CancelScope] = set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.host.run)
                    await nursery.start(self.registry.run)
                    await nursery.start(self.node.run)
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self.node.close()
                self.deliveries.close()
                self.store.close()

    def kill(self) -> None:
        self.scope.cancel()
        for attempt in list(self.attempts):
            attempt.cancel()


async def _two_routers(nursery: trio.Nursery, pg_url: str) -> list[Router]:
    """An in-process echo daemon and routers ``a`` and ``b`` over it, run in ``nursery``."""
    token = secrets.token_hex(8)
    server = DaemonServer(Daemon(echo_adapter, "runtime-1"), token)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(server.run, listeners)
    endpoint = DaemonEndpoint(f"ws://127.0.0.1:{server.ports[0]}", token)
    routers = [Router(pg_url, endpoint, name) for name in ("a", "b")]
    for router in routers:
        await nursery.start(router.run)
    return routers


@pytest.mark.timeout(240)
async def test_two_routers_answer_every_delivery_once_through_a_death(pg_url: str) -> None:
    sessions = [f"c{i}" for i in range(12)]
    rng = random.Random(7)
    answers: dict[str, Any] = {}
    async with trio.open_nursery() as outer:
        routers = await _two_routers(outer, pg_url)
        for session in sessions:
            await routers[0].router.create(session)
        with trio.fail_after(60):  # spread: each holds some
            while min(len(router.node.member.held) for router in routers) < 5:
                await trio.sleep(0.1)

        async def send(event_id: str, session: str) -> None:
            while True:
                router = rng.choice([r for r in routers if not r.scope.cancel_called])
                with trio.CancelScope() as attempt:
                    router.attempts.add(attempt)
                    try:
                        reply = await router.router.deliver(Delivery(
                            event_id=event_id, session=session, message=Person(text=f"slow 300 hi {event_id}",
                                                                               message_id=event_id)))
                    finally:
                        router.attempts.discard(attempt)
                if attempt.cancelled_caught:
                    continue
                if isinstance(reply, Answered):
                    answers.setdefault(event_id, reply.answer)
                    assert answers[event_id] == reply.answer, (event_id, reply)
                    return
                await trio.sleep(0.2)  # unanswered: the sender resends

        with trio.fail_after(200):
            async with trio.open_nursery() as senders:
                for i in range(60):
                    senders.start_soon(send, f"e{i}", rng.choice(sessions))
                    await trio.sleep(0.05)
                    if i == 30:
                        routers[0].kill()
        # Every operation settled exactly once, one per event id: the
        # survivor drives what the dead one left to the end.
        probe = Store(pg_url, exclusive=False)
        try:
            with trio.fail_after(120):
                while True:
                    operations = await probe.call(probe.operations.all)
                    if {op.status for op in operations} == {"done"}:
                        break
                    await trio.sleep(0.2)
        finally:
            probe.close()
        assert sorted(op.id for op in operations) == sorted(f"e{i}" for i in range(60))
        db = pg.ClusterDatabase(pg_url)
        try:
            refused = await db.call(pg.refusals)
        finally:
            db.close()
        assert routers[1].node.takeovers >= 1  # it drove sessions with work left by the dead one
        assert all(row["holder"] == "a" for row in refused)  # only the dead one's late writes, if any
        for router in routers[1:]:
            await router.node.aclose()
        outer.cancel_scope.cancel()


@pytest.mark.timeout(240)
async def test_the_inbox_handler_never_relays_a_delivery_again(pg_url: str) -> None:
    """A delivery the inbox handed to a router that (by now) does not hold
    its session is left for the holder, not relayed through the inbox
    again: that relay would wait on its own row, and forever once the
    lease came back to this router (the row in its own hands)."""
    from router.cluster import delivery_json

    async with trio.open_nursery() as outer:
        routers = await _two_routers(outer, pg_url)
        for session in ("c0", "c1", "c2", "c3"):
            await routers[0].router.create(session)
        with trio.fail_after(60):
            while min(len(router.node.member.held) for router in routers) < 1:
                await trio.sleep(0.1)
        a, b = routers
        elsewhere = b.node.member.held.sessions()[0]
        delivery = Delivery(event_id="x1", session=elsewhere, message=Person(text="hi", message_id="m-x1"))
        with trio.fail_after(60), pytest.raises(Exception) as raised:
            await a.node.handle("x1", elsewhere, delivery_json(delivery))
        assert "lease" in str(raised.value).lower() or "hold" in str(raised.value).lower(), raised.value
        db = pg.ClusterDatabase(pg_url)
        try:
            assert await db.call(pg.reply_of, "x1") is None  # nothing posted to the inbox
        finally:
            db.close()
        for router in routers:
            await router.node.aclose()
        outer.cancel_scope.cancel()
