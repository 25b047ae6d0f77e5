"""The cluster's statements against a real PostgreSQL: leases on the
database's clock, the fencing check and its lock, membership, the inbox and
its notifications."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
import trio

from router.cluster import pg
from router.store.db import PgDatabase

#: A short lease for the expiry tests (seconds of the database's clock).
SHORT = 0.3


@pytest.fixture
def conn(pg_url: str):
    with psycopg.connect(pg_url, autocommit=True) as connection:
        pg.ensure_schema(connection)
        yield connection


def expire(seconds: float = SHORT) -> None:
    """Wait until a lease of ``seconds`` has expired on the database's
    clock (same machine: its clock is ours)."""
    time.sleep(seconds + 0.1)


def test_one_holder_and_the_number_grows_on_every_new_holder(conn) -> None:
    pg.ensure_sessions(conn, ["s1", "s2"])
    pg.ensure_sessions(conn, ["s1"])  # already in: unchanged
    assert pg.acquire(conn, "a", ["s1", "s2"], 30) == {"s1": 1, "s2": 1}
    assert pg.acquire(conn, "b", ["s1", "s2"], 30) == {}
    assert pg.acquire(conn, "a", ["s1"], 30) == {"s1": 1}  # own, live: same number
    assert pg.renew(conn, "a", {"s1": 1, "s2": 1}, SHORT) == {"s1", "s2"}
    expire()
    assert pg.renew(conn, "a", {"s1": 1}, 30) == set()  # expired: lost, never renewed back
    assert pg.acquire(conn, "b", ["s1"], 30) == {"s1": 2}
    assert pg.acquire(conn, "a", ["s2"], 30) == {"s2": 2}  # own but expired: a new number
    leases, now = pg.leases(conn)
    assert [(lease.session, lease.holder, lease.fencing, lease.live(now)) for lease in leases] == [
        ("s1", "b", 2, True), ("s2", "a", 2, True)]


def test_release_hands_back_at_once_and_the_next_holder_moves_the_number(conn) -> None:
    pg.ensure_sessions(conn, ["s"])
    assert pg.acquire(conn, "a", ["s"], 30) == {"s": 1}
    assert pg.release(conn, "b", {"s": 1}) == set()
    assert pg.release(conn, "a", {"s": 1}) == {"s"}
    assert pg.acquire(conn, "b", ["s"], 30) == {"s": 2}


def test_a_late_write_is_refused_and_recorded(conn) -> None:
    pg.ensure_sessions(conn, ["s"])
    assert pg.acquire(conn, "a", ["s"], SHORT) == {"s": 1}
    with conn.transaction():
        pg.fence(conn, "s", "a", 1)  # live: passes
    expire()
    assert pg.acquire(conn, "b", ["s"], 30) == {"s": 2}
    with pytest.raises(pg.LeaseLost) as caught:
        with conn.transaction():
            conn.execute("CREATE TABLE IF NOT EXISTS scratch (v int)")
            conn.execute("INSERT INTO scratch VALUES (1)")
            pg.fence(conn, "s", "a", 1, what="frame batch")
    assert caught.value.code == "lease-lost"
    assert conn.execute("SELECT to_regclass('scratch')").fetchone() == (None,)  # rolled back whole
    pg.record_refusal(conn, caught.value)
    assert pg.refusals(conn, "a") == [{"session": "s", "holder": "a", "fencing": 1, "what": "frame batch"}]
    with pytest.raises(pg.LeaseLost):
        with conn.transaction():
            pg.fence(conn, "s", "a", None)  # never held


def test_a_fenced_write_in_flight_is_ordered_before_the_takeover(conn, pg_url: str) -> None:
    """The check's share lock: an expired lease whose write passed the
    check is not taken while that write is open (the acquire skips the
    locked row, it never waits: no deadlock), and is taken after."""
    pg.ensure_sessions(conn, ["s"])
    assert pg.acquire(conn, "a", ["s"], SHORT) == {"s": 1}
    with psycopg.connect(pg_url, autocommit=True) as other:
        with conn.transaction():
            pg.fence(conn, "s", "a", 1)
            expire()
            assert pg.acquire(other, "b", ["s"], 30) == {}  # the write is in flight
        assert pg.acquire(other, "b", ["s"], 30) == {"s": 2}


def test_membership_and_leave(conn) -> None:
    pg.heartbeat(conn, "a", api_url="http://a", socket="/a.sock")
    pg.heartbeat(conn, "b")
    assert [router["id"] for router in pg.live_routers(conn, 30)] == ["a", "b"]
    pg.ensure_sessions(conn, ["s1", "s2"])
    pg.acquire(conn, "a", ["s1", "s2"], 30)
    assert pg.leave(conn, "a") == 2
    assert [router["id"] for router in pg.live_routers(conn, 30)] == ["b"]
    assert pg.acquire(conn, "b", ["s1", "s2"], 30) == {"s1": 2, "s2": 2}
    time.sleep(SHORT + 0.1)
    assert pg.live_routers(conn, SHORT) == []


def test_the_inbox_answers_each_event_id_once(conn) -> None:
    pg.ensure_sessions(conn, ["s"])
    assert pg.post(conn, "e1", "s", '{"text":"hi"}', "a")
    assert not pg.post(conn, "e1", "s", '{"text":"other"}', "c")  # a resend: the first stands
    assert pg.pending_for(conn, "b") == []  # b holds nothing yet
    fencing = pg.acquire(conn, "b", ["s"], 30)["s"]
    assert pg.pending_for(conn, "b") == [("e1", "s", '{"text":"hi"}')]
    assert pg.reply_of(conn, "e1") == ("s", None)
    assert pg.answer(conn, "e1", '{"ok":1}', "b", fencing) == '{"ok":1}'
    assert pg.answer(conn, "e1", '{"ok":2}', "b", fencing) == '{"ok":1}'
    assert pg.reply_of(conn, "e1") == ("s", '{"ok":1}')
    assert pg.pending_for(conn, "b") == []
    pg.post(conn, "e2", "s", "{}", "a")
    with pytest.raises(pg.LeaseLost):
        pg.answer(conn, "e2", "{}", "c", 7)  # not the holder: refused
    assert pg.reply_of(conn, "e2") == ("s", None)


async def test_the_listener_wakes_on_post_and_answer(pg_url: str) -> None:
    db = pg.ClusterDatabase(pg_url)
    try:
        await db.call(pg.ensure_schema)
        await db.call(pg.ensure_sessions, ["s"])
        fencing = (await db.call(pg.acquire, "b", ["s"], 30))["s"]
        async with trio.open_nursery() as nursery:
            listener = await nursery.start(pg.Listener(pg_url).run)
            posted = listener.event(pg.INBOX_CHANNEL)
            answered = listener.event(pg.REPLY_CHANNEL, "e1")
            other = listener.event(pg.REPLY_CHANNEL, "e2")
            await db.call(pg.post, "e1", "s", "{}", "a")
            with trio.fail_after(30):
                await posted.wait()
            await db.call(pg.answer, "e1", "{}", "b", fencing)
            with trio.fail_after(30):
                await answered.wait()
            assert not other.is_set()
            assert listener.received == 2
            nursery.cancel_scope.cancel()
    finally:
        db.close()


async def test_the_listener_redials_and_wakes_everyone(pg_url: str) -> None:
    async with trio.open_nursery() as nursery:
        listener = await nursery.start(pg.Listener(pg_url, retry=0.05).run)
        waiting = listener.event(pg.REPLY_CHANNEL, "never")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()")
        with trio.fail_after(30):
            await waiting.wait()  # woken by the loss, to look again
            while listener.connections < 2:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


def _record(conn) -> None:
    """Tables shaped as the record's (a session column), fenced."""
    conn.execute("CREATE TABLE sessions (id text PRIMARY KEY, cursor bigint NOT NULL DEFAULT 0)")
    conn.execute("CREATE TABLE operations (session text, id text, status text, PRIMARY KEY (session, id))")
    assert pg.install_fences(conn) == ["sessions", "operations"]
    assert pg.install_fences(conn) == ["sessions", "operations"]  # idempotent


def _as(conn, holder: str, numbers: dict[str, int], idle_limit: float = 30) -> None:
    sql, params = pg.fence_settings(holder, numbers, idle_limit)
    conn.execute(sql.replace("?", "%s"), params)


def test_the_trigger_fences_every_row_write_of_the_record(conn) -> None:
    _record(conn)
    with conn.transaction():  # a router creates a session it does not hold: its lease row, free
        _as(conn, "a", {})
        conn.execute("INSERT INTO sessions (id) VALUES ('s')")
        conn.execute("INSERT INTO operations VALUES ('s', 'o1', 'queued')")  # never driven: may queue
    assert pg.leases(conn)[0][0].fencing == 0
    assert pg.acquire(conn, "b", ["s"], SHORT) == {"s": 1}
    with conn.transaction():
        _as(conn, "b", {"s": 1})
        conn.execute("UPDATE sessions SET cursor = 5 WHERE id = 's'")
        conn.execute("UPDATE operations SET status = 'running'")
    for who, numbers in (("a", {}), ("a", {"s": 1}), ("b", {"s": 0})):
        with pytest.raises(psycopg.Error) as caught:
            with conn.transaction():
                _as(conn, who, numbers)
                conn.execute("UPDATE operations SET status = 'done'")
        refused = pg.lease_lost_of(caught.value)
        assert refused is not None and refused.code == "lease-lost"
        assert refused.data["session"] == "s" and refused.data["holder"] == who
    expire()
    with pytest.raises(psycopg.Error) as caught:  # b stalled past its expiry: its late write is refused
        with conn.transaction():
            _as(conn, "b", {"s": 1})
            conn.execute("DELETE FROM operations")
    assert pg.lease_lost_of(caught.value) is not None
    pg.record_refusal(conn, pg.lease_lost_of(caught.value))
    assert pg.refusals(conn, "b") == [{"session": "s", "holder": "b", "fencing": 1, "what": "DELETE on operations"}]
    assert conn.execute("SELECT status FROM operations").fetchall() == [("running",)]
    assert conn.execute("SELECT cursor FROM sessions").fetchall() == [(5,)]
    with conn.transaction():  # outside the cluster (no router set): unfenced
        conn.execute("UPDATE sessions SET cursor = 6")
    assert pg.lease_lost_of(ValueError("x")) is None


def test_a_resend_opens_a_reply_that_was_not_final(conn) -> None:
    pg.ensure_sessions(conn, ["s"])
    fencing = pg.acquire(conn, "b", ["s"], 30)["s"]
    pg.post(conn, "e", "s", "{}", "a")
    assert pg.answer(conn, "e", "try-again", "b", fencing, final=False) == "try-again"
    assert pg.reply_of(conn, "e") == ("s", "try-again")
    assert pg.post(conn, "e", "s", "{}", "a")  # the resend: open again
    assert pg.pending_for(conn, "b") == [("e", "s", "{}")]
    assert pg.answer(conn, "e", "done", "b", fencing) == "done"
    assert not pg.post(conn, "e", "s", "{}", "a")  # final: stands
    assert pg.reply_of(conn, "e") == ("s", "done")


def test_a_router_stopped_inside_a_transaction_loses_it_and_the_lease_moves(conn, pg_url: str) -> None:
    """A transaction left idle past its limit (its router stopped) is
    ended by the database: its locks go, the lease can be taken, and the
    stopped router's write never lands."""
    _record(conn)
    conn.execute("INSERT INTO sessions (id) VALUES ('s')")
    assert pg.acquire(conn, "a", ["s"], SHORT) == {"s": 1}
    with psycopg.connect(pg_url, autocommit=True) as stalled:
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            with stalled.transaction():
                _as(stalled, "a", {"s": 1}, idle_limit=0.2)
                stalled.execute("UPDATE sessions SET cursor = 99")  # passed the fence
                with psycopg.connect(pg_url, autocommit=True) as other:
                    deadline = time.monotonic() + 30
                    while not (taken := pg.acquire(other, "b", ["s"], 30)):  # skipped while the write is open
                        assert time.monotonic() < deadline
                        time.sleep(0.1)
                    assert taken == {"s": 2}
                stalled.execute("SELECT 1")  # it wakes: the transaction is gone
        assert stalled.broken  # and the connection: the store dials again (router/store/db.py)
    assert conn.execute("SELECT cursor FROM sessions").fetchall() == [(0,)]


def test_renew_renews_a_lease_whose_row_is_locked_now_once_the_lock_is_gone(pg_url: str, conn) -> None:
    # The round's one statement skips a row locked now (a write of that
    # session committing); the lease is renewed after, waiting for it.
    pg.ensure_sessions(conn, ["r1", "r2", "r3"])
    held = pg.acquire(conn, "a", ["r1", "r2", "r3"], 30)
    renewed: list[set[str]] = []
    with psycopg.connect(pg_url) as writer:  # a transaction holding r2's row
        writer.execute("SELECT 1 FROM cluster_leases WHERE session = 'r2' FOR SHARE")
        thread = threading.Thread(target=lambda: renewed.append(pg.renew(conn, "a", held, 30)))
        thread.start()
        deadline = time.monotonic() + 30
        while not renewed and time.monotonic() < deadline:
            waiting = writer.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if waiting and waiting[0] > 0:
                break
            time.sleep(0.01)
        writer.commit()
        thread.join(30)
    assert renewed == [{"r1", "r2", "r3"}]
    assert pg.renew(conn, "b", held, 30) == set()  # another router's: nothing


async def test_a_write_of_a_sessions_record_notifies_the_board_with_its_id(pg_url: str, conn) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS sessions (id text PRIMARY KEY, note text)")
    conn.execute("CREATE TABLE IF NOT EXISTS operations (session text, id text, status text)")
    # A record whose board trigger an older router installed (one empty
    # notification per statement): replaced by the row trigger.
    conn.execute("CREATE OR REPLACE FUNCTION cluster_board_notify() RETURNS trigger LANGUAGE plpgsql AS "
                 "$f$ BEGIN PERFORM pg_notify('cluster_board', ''); RETURN NULL; END $f$")
    conn.execute("CREATE TRIGGER cluster_board AFTER INSERT OR UPDATE OR DELETE ON sessions "
                 "FOR EACH STATEMENT EXECUTE FUNCTION cluster_board_notify()")
    assert pg.install_board_notify(conn) == ["sessions", "operations"]
    assert pg.install_board_notify(conn) == ["sessions", "operations"]  # idempotent
    triggers = conn.execute("SELECT tgname, tgrelid::regclass::text FROM pg_trigger WHERE tgname LIKE 'cluster_board%' "
                            "ORDER BY 2").fetchall()
    assert triggers == [("cluster_board_row", "operations"), ("cluster_board_row", "sessions")]
    named: list[str] = []
    async with trio.open_nursery() as nursery:
        listener = await nursery.start(pg.Listener(pg_url).run)
        listener.tap(pg.BOARD_CHANNEL, named.append)
        changed = listener.event(pg.BOARD_CHANNEL, "b3")
        with conn.transaction():
            conn.execute("INSERT INTO sessions (id) VALUES ('b1'), ('b2')")
            conn.execute("UPDATE sessions SET note = 'x' WHERE id = 'b1'")  # b1 again: folded into one
        conn.execute("INSERT INTO operations (session, id, status) VALUES ('b3', 'o1', 'queued')")
        with trio.fail_after(30):
            await changed.wait()
        nursery.cancel_scope.cancel()
    assert named == ["b1", "b2", "b3"]


def _version(connection) -> int | None:
    row = connection.execute("SELECT version FROM router_schema WHERE component = 'cluster'").fetchone()
    return None if row is None else row[0]


def test_a_new_database_takes_every_schema_step(conn) -> None:
    assert _version(conn) == len(pg.STEPS)
    pg.ensure_schema(conn)  # up to date: nothing to do
    assert _version(conn) == len(pg.STEPS)


def test_a_database_from_before_the_versions_is_upgraded_in_place(pg_url: str) -> None:
    from router.errors import Refusal

    with psycopg.connect(pg_url, autocommit=True) as connection:
        # The tables as a router made them when the cluster's schema had no
        # version: step 1's statements, and no row in router_schema.
        for statement in pg.STEPS[0].postgresql:
            connection.execute(statement)
        pg.ensure_sessions(connection, ["kept"])
        assert pg.acquire(connection, "a", ["kept"], 30) == {"kept": 1}
        pg.ensure_schema(connection)
        assert _version(connection) == len(pg.STEPS)
        leases, _ = pg.leases(connection)
        assert [(lease.session, lease.holder, lease.fencing) for lease in leases] == [("kept", "a", 1)]
        # A database a newer router took further is refused, not touched.
        connection.execute("UPDATE router_schema SET version = %s WHERE component = 'cluster'", (len(pg.STEPS) + 1,))
        with pytest.raises(Refusal) as refused:
            pg.ensure_schema(connection)
        assert refused.value.code == "cluster-too-new"


def _backend(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


async def test_the_cluster_database_is_a_store_database_dialled_again_after_a_lost_connection(pg_url: str) -> None:
    db = pg.ClusterDatabase(pg_url)
    try:
        first = await db.call(_backend)
        assert isinstance(db.db, PgDatabase) and db.db.component == pg.COMPONENT
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        second = await db.call(_backend)  # met the loss, run again whole on a new connection
        assert second != first and db.retries == 1 and db.db.reconnects == 1
    finally:
        db.close()
    assert db.db is None
