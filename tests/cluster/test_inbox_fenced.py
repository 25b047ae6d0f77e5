"""A delivery whose write in the session's inbox the fence refuses (the
lease ran out in the database while the router still believed it held the
session) is answered ``lease-lost`` ("resend with the same eventId", 503),
not ``internal`` (500).

The fault campaign's PostgreSQL phase (docs/reliability.md) found it: a
router whose lease had moved was sent a resend of a delivery admitted
before (its admission writes nothing then), and its inbox's first write
(the plan, ``INSERT on deliveries``) met the fence; the inbox answered
that ``internal`` with a traceback, and a sender got a 500. Here one
router of a cluster on a real PostgreSQL holds a session, a delivery is
admitted, the lease is made to run out in the database (the router's
belief lasts the lease's 60 s), and the delivery is sent.
"""

from __future__ import annotations

import logging
import secrets

import psycopg
import pytest
import trio

from router.cluster import open_node
from router.daemon import Daemon, DaemonServer
from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import DaemonEndpoint, Host, HostSettings, Store
from router.turns.core import Answered, Delivery, DeliveryUnanswered, Person
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.support.polling import until

#: A long lease: the router's rounds (every third of it) do not notice the
#: lease ran out in the database while the test delivers.
ENV = {"ROUTER_CLUSTER_LEASE_TTL": "60"}


def person(event_id: str) -> Delivery:
    return Delivery(event_id=event_id, session="s1", message=Person(text=f"hi {event_id}", message_id=event_id))


@pytest.mark.timeout(120)
async def test_a_write_the_fence_refuses_in_the_inbox_is_answered_lease_lost(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store, deliveries = Store(pg_url), DeliveryLog(pg_url)
    node = open_node(store, deliveries, env=ENV, router_id="a")
    try:
        async with trio.open_nursery() as nursery:
            token = secrets.token_hex(8)
            server = DaemonServer(Daemon(echo_adapter, "runtime-1"), token)
            await nursery.start(server.run, await trio.open_tcp_listeners(0, host="127.0.0.1"))
            endpoint = DaemonEndpoint(f"ws://127.0.0.1:{server.ports[0]}", token)
            host = Host(store, endpoint, HostSettings(), may_link=node.holds)
            registry = SessionRegistry()
            router = TurnRouter(deliveries=deliveries, registry=registry, host=host, remote=node)
            node.host, node.router, node.registry = host, router, registry
            await nursery.start(host.run)
            await nursery.start(registry.run)
            await nursery.start(node.run)

            await router.create("s1")
            with trio.fail_after(30):
                await until(lambda: node.holds("s1"), step=0.05)
            first = await router.deliver(person("e1"))
            assert isinstance(first, Answered), first

            # e2 was admitted by an earlier attempt whose answer never came
            # (its session closed under it, say): a resend is admitted
            # without a write, and the inbox's plan is its first write.
            admitted = await deliveries.call(deliveries.admit, person("e2"))
            assert admitted.new, admitted
            # The lease runs out in the database; the router still believes it holds s1.
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("UPDATE cluster_leases SET expires_at = clock_timestamp() - interval '1 second' "
                              "WHERE session = 's1'")
            assert node.holds("s1")
            reply = await router.deliver(person("e2"))
            assert isinstance(reply, DeliveryUnanswered), reply
            assert reply.code == "lease-lost", reply
            assert "resend with the same eventId" in reply.message
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "router.turns"], \
                [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            session = registry.get("s1")
            assert session is not None and session.failure is None
            nursery.cancel_scope.cancel()
    finally:
        node.close()
        deliveries.close()
        store.close()
