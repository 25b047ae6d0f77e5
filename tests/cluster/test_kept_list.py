"""The record's session list kept between the cluster's notifications
(``ClusterNode.kept_list`` under ``HostSessions.list``), two routers of one
cluster in one process over a real PostgreSQL: a change written by one
shows in the other's list through the notification naming the session (a
read of that session alone), a list right after a write sees it, and a
lost notification or a listener that reconnected still converge."""

from __future__ import annotations

from functools import partial
from typing import Any

import psycopg
import pytest
import trio

from router.host import DaemonEndpoint
from tests.cluster.test_node import Router

#: No daemon: nothing here opens a link (no session has work).
NOWHERE = DaemonEndpoint("ws://127.0.0.1:9", "unused")


def _member(url: str, name: str) -> Router:
    """A router of the cluster as the main job assembles its host's list."""
    member = Router(url, NOWHERE, name)
    member.host.kept_list = member.node.kept_list
    member.node.sync_timeout = 60.0  # a loaded machine's mark is never taken for a lost one here
    return member


async def _listed(member: Router) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in await member.host.sessions.list()}


async def _members(nursery: trio.Nursery, pg_url: str) -> tuple[Router, Router]:
    a, b = _member(pg_url, "a"), _member(pg_url, "b")
    for member in (a, b):
        await nursery.start(member.run)
    await a.host.sessions.create("s1")
    await a.host.sessions.create("s2")
    await _listed(b)
    return a, b


def _write(pg_url: str, sql: str) -> None:
    """A write of the record outside any router (unfenced), committed."""
    with psycopg.connect(pg_url, autocommit=True) as connection:
        connection.execute(sql)


@pytest.mark.timeout(120)
async def test_a_change_written_by_one_router_shows_in_anothers_list_by_its_notification(pg_url: str) -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _members(nursery, pg_url)
        assert {"s1", "s2"} <= set(await _listed(b))
        with trio.fail_after(60):  # a session router a holds (its writes are fenced)
            while not (held := [each for each in ("s1", "s2") if a.node.holds(each)]):
                await trio.sleep(0.05)
        before = b.node.mirror.statistics()
        # Router a writes its session's record; b's next list, right after
        # the write (its mark on the sync channel makes sure the
        # notification came first), reads that session alone.
        await a.store.call(partial(a.store.sessions.set_daemon, held[0], state="starting", launcher="test"))
        listed = await _listed(b)
        assert listed[held[0]]["daemon"]["state"] == "starting"
        after = b.node.mirror.statistics()
        assert (after.full, after.named) == (before.full, before.named + 1)
        # A session made by one router is added to the other's list, last.
        await a.host.sessions.create("s3")
        assert list(await _listed(b))[-1] == "s3"
        assert b.node.mirror.statistics().full == before.full
        nursery.cancel_scope.cancel()


@pytest.mark.timeout(120)
async def test_a_lost_notification_converges_at_the_next_full_read(pg_url: str) -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _members(nursery, pg_url)
        # A write whose notification is lost (its trigger off for it).
        _write(pg_url, "BEGIN; ALTER TABLE sessions DISABLE TRIGGER cluster_board_row; "
                       "UPDATE sessions SET launcher_state = 'starting', launcher = 'test' WHERE id = 's2'; "
                       "ALTER TABLE sessions ENABLE TRIGGER cluster_board_row; COMMIT")
        assert "daemon" not in (await _listed(b))["s2"]  # kept: nothing named it
        b.node.mirror.every = 0.2  # the safety net's period, short for the test
        with trio.fail_after(30):
            while "daemon" not in (await _listed(b))["s2"]:
                await trio.sleep(0.05)
        assert (await _listed(b))["s2"]["daemon"]["state"] == "starting"
        nursery.cancel_scope.cancel()


@pytest.mark.timeout(120)
async def test_a_listener_that_reconnected_reads_the_record_whole(pg_url: str) -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _members(nursery, pg_url)
        listener = b.node.member.listener
        connections, full = listener.connections, b.node.mirror.statistics().full
        # Every listening connection cut, and a write meanwhile: its
        # notification is gone for the listener that was away.
        _write(pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()")
        _write(pg_url, "UPDATE sessions SET launcher_state = 'starting', launcher = 'test' WHERE id = 's2'")
        with trio.fail_after(30):
            while listener.connections == connections or not listener.live:
                await trio.sleep(0.05)
        assert (await _listed(b))["s2"]["daemon"]["state"] == "starting"
        assert b.node.mirror.statistics().full == full + 1
        nursery.cancel_scope.cancel()
