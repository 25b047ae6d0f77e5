"""The host's store: schema, migration, records, refusals. The tests that
take the ``store`` fixture run on both backends (SQLite, PostgreSQL); the
ones that open files themselves are SQLite's."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterator

import pytest
import trio

from router.host.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Refused,
    Store,
    StoreMisuse,
)
from tests.host.statements import HISTORY_TABLES, V7_ROWS, check_v7_migrated, statements
from tests.support.postgres import postgres, postgres_url, store_url  # noqa: F401  (fixtures)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """conftest.py's store (SQLite), here on each backend in turn."""
    with Store(store_url) as opened:
        yield opened


class Clock:
    def __init__(self, start: int = 1_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def test_a_new_store_has_the_current_schema_in_wal_mode(store_path: Path) -> None:
    with Store(store_path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.sessions.get("root") is None


def test_an_old_store_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db.execute(
        "INSERT INTO sessions (id, ordinal, created_at, updated_at) VALUES ('s', 1, 0, 0)"
    )
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.sessions.require("s").generation == 1
        # The step added the usage table.
        store.usage.record("s", None, "r", 1, {"type": "usage", "inputTokens": 3})
        assert store.usage.records()[0].input_tokens == 3


def old_store(path: Path, version: int) -> sqlite3.Connection:
    """A file at schema ``version`` holding the session ``s``, still open
    (commit and close it)."""
    db = sqlite3.connect(path)
    for step in MIGRATIONS[:version]:
        step(db)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute("INSERT INTO sessions (id, ordinal, created_at, updated_at) VALUES ('s', 1, 0, 0)")
    return db


def test_usage_kept_under_the_old_frame_key_survives_the_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    db = old_store(path, 3)
    db.execute(
        "INSERT INTO usage (session, runtime, seq, operation_id, input_tokens, output_tokens, cost_usd, raw, at)"
        " VALUES ('s', 'r', 4, 'a', 10, 2, 0.5, '{}', 1000)"
    )
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        # The same frame key again (a container that reused the id) counts.
        store.usage.record("s", "a", "r", 4, {"type": "usage", "inputTokens": 1})
        [record] = store.usage.records()
        assert (record.input_tokens, record.output_tokens, record.cost_usd, record.events) == (11, 2, 0.5, 2)


def test_a_submit_finds_the_next_ordinal_without_scanning_the_operations(store_path: Path) -> None:
    with Store(store_path) as store:
        plan = store._db.execute(
            "EXPLAIN QUERY PLAN SELECT COALESCE(MAX(ordinal), 0) + 1 FROM operations"
        ).fetchall()
    # Without its own index SQLite walks all of (session, ordinal): 14 ms a
    # submit at 200,000 operations, against microseconds through this one.
    assert any("operations_ordinal" in row[-1] for row in plan), plan


def test_a_store_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(Refused) as caught:
        Store(path)
    assert caught.value.code == "store-too-new"


def test_a_second_host_on_one_store_is_refused_and_a_reader_is_not(store_path: Path) -> None:
    with Store(store_path) as first:
        first.sessions.create("s")
        with pytest.raises(Refused) as caught:
            Store(store_path)
        assert caught.value.code == "store-busy"
        with Store(store_path, exclusive=False) as reader:
            assert reader.sessions.require("s").id == "s"
    with Store(store_path) as again:  # the lock went with the first
        assert again.sessions.get("s") is not None


def test_a_missing_store_is_refused_when_it_may_not_be_created(tmp_path: Path) -> None:
    with pytest.raises(Refused) as caught:
        Store(tmp_path / "nothing.db", create=False)
    assert caught.value.code == "no-store"
    assert not (tmp_path / "nothing.db").exists()


def test_a_file_that_is_not_a_store_is_refused_and_left_unlocked(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, but a file someone named with --store\n" * 100)
    for _ in range(2):  # the first refusal released the file: refused the same way again
        with pytest.raises(Refused) as caught:
            Store(path)
        assert caught.value.code == "bad-store" and str(path) in caught.value.message
    with pytest.raises(Refused) as caught:
        Store(path, exclusive=False, create=False)
    assert caught.value.code == "bad-store"
    with pytest.raises(Refused) as caught:
        Store(tmp_path / "no such directory" / "host.db")
    assert caught.value.code == "bad-store"


def test_sessions_are_created_once_and_listed_in_order(store: Store) -> None:
    record, created = store.sessions.create("b", settings={"model": "m"})
    assert created and record.generation == 1 and record.settings == {"model": "m"}
    assert record.cursor_runtime is None and record.cursor_seq == 0
    again, created = store.sessions.create("b", settings={"model": "other"})
    assert not created and again.settings == {"model": "m"}
    store.sessions.create("a")
    assert [s.id for s in store.sessions.all()] == ["b", "a"]
    with pytest.raises(Refused) as caught:
        store.sessions.require("nope")
    assert caught.value.code == "unknown-session"


def test_closing_waits_for_a_transaction_another_thread_is_running(store_path: Path) -> None:
    # Closing SQLite under a running statement crashes the interpreter
    # (seen once as a segfault in the fault tests, when a store was closed
    # while a host's worker thread still applied a frame). close() waits for
    # the transaction; a later one is refused, never run on a closed file.
    store = Store(store_path)
    store.sessions.create("s")
    inside, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def slow_transaction() -> None:
        with store.transaction():
            inside.set()
            release.wait(10)
            outcome.append(store.sessions.get("s").id)

    worker = threading.Thread(target=slow_transaction)
    worker.start()
    assert inside.wait(10)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # still waiting: the transaction has the store
    release.set()
    worker.join(10)
    closer.join(10)
    assert outcome == ["s"] and not closer.is_alive()
    with pytest.raises(StoreMisuse):
        store.sessions.get("s")
    store.close()  # closing twice is harmless


def test_an_empty_session_id_is_refused(store: Store) -> None:
    # The daemon closes a socket for an empty id with 4003 ("unauthorized"),
    # which would read as a wrong token; the store refuses it up front.
    with pytest.raises(Refused) as refused:
        store.sessions.create("")
    assert refused.value.code == "bad-session-id"
    store.sessions.create("parent")
    with pytest.raises(Refused):
        store.sessions.fork("", "parent")
    assert [record.id for record in store.sessions.all()] == ["parent"]


def test_enqueue_is_idempotent_on_the_key(store: Store) -> None:
    store.sessions.create("s")
    first, accepted = store.operations.enqueue("s", "op", "hello", "steer")
    assert accepted and first.status == "queued" and first.input == "hello"
    assert first.when_busy == "steer" and first.generation == 1
    second, accepted = store.operations.enqueue("s", "op", "something else")
    assert not accepted and second == first
    with pytest.raises(Refused) as caught:
        store.operations.enqueue("nope", "op", "x")
    assert caught.value.code == "unknown-session"
    with pytest.raises(Refused):
        store.operations.enqueue("s", "op2", "x", "later")  # type: ignore[arg-type]


def test_operation_transitions(store: Store) -> None:
    store.sessions.create("s")
    store.operations.enqueue("s", "a", "x")
    store.operations.set_delivered("s", "a", "r1")
    assert not store.operations.requeue("s", "a")  # not running
    assert store.operations.start("s", "a") and not store.operations.start("s", "a")
    assert store.operations.get("s", "a").status == "running"
    assert store.operations.requeue("s", "a")
    requeued = store.operations.get("s", "a")
    assert requeued.status == "queued" and requeued.delivered is None
    assert store.operations.settle("s", "a", {"status": "done", "text": "t"})
    assert not store.operations.settle("s", "a", {"status": "unanswered", "reason": "late"})
    settled = store.operations.get("s", "a")
    assert settled.status == "done" and settled.outcome == {"status": "done", "text": "t"}
    assert not store.operations.settle("s", "missing", {"status": "done", "text": ""})
    assert store.operations.open_sessions() == []


def test_messages_are_replaced_in_place_per_generation(store: Store) -> None:
    store.sessions.create("s")
    store.messages.put("s", 1, {"id": "m1", "role": "user", "parts": []})
    store.messages.put("s", 1, {"id": "m2", "role": "assistant", "parts": []})
    store.messages.put("s", 1, {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "v2"}]})
    store.messages.put("s", 2, {"id": "m1", "role": "user", "parts": []})
    assert [m["id"] for m in store.messages.all("s")] == ["m1", "m2"]
    assert store.messages.all("s")[0]["parts"] == [{"type": "text", "text": "v2"}]
    assert [m["id"] for m in store.messages.all("s", 2)] == ["m1"]


def test_reset_opens_a_new_generation_and_is_refused_while_busy(store: Store) -> None:
    store.sessions.create("s")
    store.messages.put("s", 1, {"id": "m", "role": "user", "parts": []})
    store.entries.append("s", 1, [{"turn": 1}])
    store.operations.enqueue("s", "a", "x")
    with pytest.raises(Refused) as caught:
        store.sessions.reset("s", None)
    assert caught.value.code == "session-busy" and "abort" in caught.value.message
    store.operations.settle("s", "a", {"status": "done", "text": ""})
    assert store.sessions.reset("s", "note") == 2
    record = store.sessions.require("s")
    assert record.generation == 2 and record.handoff == "note"
    assert store.messages.all("s") == [] and store.entries.all("s") == []
    assert store.entries.all("s", 1) == [{"turn": 1}]
    assert store.sessions.take_handoff("s") == "note" and store.sessions.take_handoff("s") is None


def test_fork_continues_the_parent_current_generation(store: Store) -> None:
    store.sessions.create("p", settings={"model": "m"})
    store.messages.put("p", 1, {"id": "old", "role": "user", "parts": []})
    store.entries.append("p", 1, [{"turn": 1}])
    store.sessions.reset("p", None)
    store.messages.put("p", 2, {"id": "new", "role": "user", "parts": []})
    store.entries.append("p", 2, [{"turn": 1, "text": "a"}, {"turn": 2, "text": "b"}])
    child = store.sessions.fork("c", "p")
    assert child.parent == "p" and child.generation == 1 and child.settings == {"model": "m"}
    assert [m["id"] for m in store.messages.all("c")] == ["new"]
    assert store.entries.all("c") == [{"turn": 1, "text": "a"}, {"turn": 2, "text": "b"}]
    with pytest.raises(Refused) as caught:
        store.sessions.fork("c", "p")
    assert caught.value.code == "session-exists"
    with pytest.raises(Refused) as caught:
        store.sessions.fork("d", "missing")
    assert caught.value.code == "unknown-session"


def test_usage_records_sum_per_operation_and_filter_by_time(store_path: Path) -> None:
    clock = Clock()
    with Store(store_path, clock=clock) as store:
        store.sessions.create("s")
        store.sessions.create("t")
        store.usage.record("s", "a", "r", 1, {"type": "usage", "inputTokens": 10, "outputTokens": 2})
        clock.now = 2_000
        store.usage.record("s", "a", "r", 5, {"type": "usage", "inputTokens": 1, "costUsd": 0.5})
        store.usage.record("t", "b", "r", 1, {"type": "usage", "outputTokens": "lots"})
        clock.now = 3_000
        store.usage.record("s", None, "r", 9, {"type": "usage", "costUsd": 0.25})
        records = store.usage.records()
        assert [(r.session, r.operation_id) for r in records] == [("s", "a"), ("t", "b"), ("s", None)]
        a = records[0]
        assert (a.input_tokens, a.output_tokens, a.cost_usd, a.events) == (11, 2, 0.5, 2)
        assert (a.first_at, a.last_at) == (1_000, 2_000)
        assert records[1].output_tokens is None  # not a number: not counted
        assert [r.operation_id for r in store.usage.records("s")] == ["a", None]
        recent = store.usage.records(since=2_000)
        assert [(r.operation_id, r.input_tokens) for r in recent] == [("a", 1), ("b", None), (None, None)]


def test_a_failed_transaction_leaves_nothing(store: Store) -> None:
    store.sessions.create("s")
    with pytest.raises(ZeroDivisionError):
        with store.transaction():
            store.operations.enqueue("s", "a", "x")
            1 / 0
    assert store.operations.get("s", "a") is None


def test_entering_the_store_from_two_threads_is_flagged(store: Store) -> None:
    inside = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with store.transaction():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    try:
        assert inside.wait(10)
        with pytest.raises(StoreMisuse):
            store.sessions.get("x")
    finally:
        release.set()
        worker.join()
    assert store.sessions.get("x") is None


async def test_async_calls_run_one_at_a_time_in_worker_threads(store: Store) -> None:
    store.sessions.create("s")
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def enqueue(store: Store, i: int) -> None:
        seen.append(threading.get_ident())
        store.operations.enqueue("s", f"op{i}", str(i))

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(store.transact, enqueue, i)
    assert loop_thread not in seen
    assert len(await store.call(store.operations.all)) == 20


def test_a_v4_store_gains_the_skipped_frames_table(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    db = old_store(path, 4)
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version() == SCHEMA_VERSION >= 5
        assert store.skipped_frames.all("s") == []
        # A lone surrogate (JSON from JavaScript) is kept as SQLite can hold it.
        store.skipped_frames.add("s", "r", 7, "it does not parse: why", '{"seq":7,"x":"\ud800"}' + "y" * 5000)
        [skipped] = store.skipped_frames.all("s")
    assert (skipped.session, skipped.runtime, skipped.seq, skipped.reason) == ("s", "r", 7, "it does not parse: why")
    assert skipped.text.startswith('{"seq":7,"x":"?"}') and len(skipped.text) == 2000


def test_a_savepoint_undoes_its_part_alone(store: Store) -> None:
    store.sessions.create("s")
    with store.transaction():
        with pytest.raises(ValueError):
            with store.savepoint():
                store.messages.put("s", 1, {"id": "gone", "role": "user", "parts": [], "createdAt": 1}, None)
                raise ValueError("undo this part")
        store.messages.put("s", 1, {"id": "kept", "role": "user", "parts": [], "createdAt": 1}, None)
    assert [message["id"] for message in store.messages.all("s")] == ["kept"]
    with pytest.raises(StoreMisuse):
        with store.savepoint():
            pass  # outside a transaction


# --------------------------------------------------------------------------- history (schema 8)

def _plans(store: Store, work) -> dict[str, list[str]]:
    """Each statement ``work(store)`` ran and its query plan."""
    execute = store._db.execute
    return {sql: [row[-1] for row in execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()]
            for sql, params in statements(store, work)}


def _turn(store: Store, i: int) -> None:
    """What one delivery to a container session writes and reads in the
    host's store (the host's path: submit, hand over, frames, settle)."""
    store.operations.enqueue("s", f"op{i}", "hi")
    store.operations.start("s", f"op{i}")
    store.operations.set_delivered("s", f"op{i}", "rt")
    store.operations.all(session="s", statuses=("queued", "running"))
    store.messages.put("s", 1, {"id": f"u{i}", "role": "user"}, f"op{i}")
    store.messages.put("s", 1, {"id": f"a{i}", "role": "assistant"}, f"op{i}")
    store.entries.append("s", 1, [{"n": i}])
    store.usage.record("s", f"op{i}", "rt", i, {"type": "usage", "inputTokens": 2, "outputTokens": 3})
    store.operations.settle("s", f"op{i}", {"status": "done", "text": "ok"})
    store.usage.after("s", store.usage.after("s").mark - 1)
    store.messages.log("s", store.messages.log("s", 10**9).version - 2)
    store.messages.versions("s", [f"a{i}"])


def test_no_read_of_a_turn_walks_the_history(store_path: Path) -> None:
    # Nothing a delivery does may cost more as history grows: every
    # statement of a turn finds its rows through an index that starts at
    # them, and none scans a table that grows with every turn. (The two
    # named here read the session's whole history before schema 8: the
    # open operations through ``operations_order``, row by row, and the
    # usage through ``usage_operation``, every event.)
    with Store(store_path) as store:
        store.sessions.create("s")
        for i in range(200):
            _turn(store, i)
        plans = _plans(store, lambda s: _turn(s, 200))
    assert plans
    for sql, plan in plans.items():
        for step in plan:
            assert not any(step.startswith(f"SCAN {table}") for table in HISTORY_TABLES), (sql, plan)
    open_reads = [plan for sql, plan in plans.items() if "FROM operations WHERE session" in sql and "status IN" in sql]
    assert open_reads and all(any("operations_session_open" in step for step in plan) for plan in open_reads)
    usage_reads = [plan for sql, plan in plans.items() if "FROM usage" in sql]
    assert len(usage_reads) == 2
    assert all(any("usage_session" in step and "rowid>?" in step for step in plan) for plan in usage_reads[1:])
    assert any("COVERING INDEX usage_session" in step for step in usage_reads[0])


def test_usage_after_sums_the_events_after_a_mark(store: Store) -> None:
    store.sessions.create("s")
    store.sessions.create("t")
    assert store.usage.after("s") == store.usage.after("s", 0)  # no events: the mark 0
    assert store.usage.after("s", 0).events == 0
    store.usage.record("s", "a", "r", 1, {"type": "usage", "inputTokens": 10, "outputTokens": 2})
    mark = store.usage.after("s").mark
    store.usage.record("t", "b", "r", 1, {"type": "usage", "inputTokens": 99})  # another session's
    store.usage.record("s", "a", "r", 2, {"type": "usage", "inputTokens": 1.5})
    store.usage.record("s", None, "r", 3, {"type": "usage", "outputTokens": "lots"})  # not a figure
    after = store.usage.after("s", mark)
    assert (after.events, after.input_tokens, after.output_tokens) == (2, 1.5, None)
    assert after.mark > mark
    again = store.usage.after("s", after.mark)  # nothing new: the same mark, nothing summed
    assert (again.mark, again.events, again.input_tokens) == (after.mark, 0, None)
    assert store.usage.after("t", 0).input_tokens == 99


def test_a_v7_store_gains_the_history_indexes(tmp_path: Path) -> None:
    path = tmp_path / "v7.db"
    db = sqlite3.connect(path)
    for step in MIGRATIONS[:7]:
        step(db)
    db.execute("PRAGMA user_version = 7")
    for sql in V7_ROWS:
        db.execute(sql)
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version() == SCHEMA_VERSION >= 8
        indexes = {row[0] for row in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"operations_session_open", "usage_session"} <= indexes
        check_v7_migrated(store)


def test_repr_runs_no_query(tmp_path: Path) -> None:
    with Store(tmp_path / "repr.db") as store:
        executed: list[str] = []
        store.database.raw.set_trace_callback(executed.append)
        assert repr(store) == f"<Store {str(tmp_path / 'repr.db')!r} v{SCHEMA_VERSION}>"
        assert executed == []


def test_the_repositories_tell_the_change_hook_inside_the_transaction_that_writes_it(store: Store) -> None:
    told: list[tuple[str, dict, bool]] = []
    store.on_change = lambda db, what, record: told.append((what, record, db.in_transaction))
    store.sessions.create("s")
    store.operations.enqueue("s", "a", "hi")
    store.operations.enqueue("s", "b", "hi")
    assert store.operations.settle("s", "a", {"status": "done", "text": "answer"})
    assert store.operations.settle_record("s", "b", {"status": "unanswered", "reason": "gone"}) is not None
    assert not store.operations.settle("s", "a", {"status": "done", "text": "again"})  # settled already: no change
    store.sessions.set_daemon("s", state="running")
    store.sessions.set_daemon("s", state="unreachable", reason="no image")
    assert told == [("turn-ended", {"session": "s", "operation": "a", "text": "answer"}, True),
                    ("unreachable", {"session": "s", "reason": "no image"}, True)]
    assert store.usage.writes("s") == 0
    store.usage.record("s", "a", "rt", 1, {"type": "usage", "inputTokens": 1})
    assert store.usage.writes("s") == 1 and store.usage.after("s", 0).events == 1
