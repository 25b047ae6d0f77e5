"""The PostgreSQL backend of the records, where it differs from SQLite's:
many routers on one database, a router killed mid-transaction, the schema
steps, the fencing hook, the --store value, ``router store copy``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router import cli
from router.store.db import IDLE_IN_TRANSACTION_LIMIT, PgDatabase, StoreTarget, parse_target, redact
from router.errors import Refusal
from router.host.store import PG_MIGRATIONS, SCHEMA_VERSION, Refused, Store
from router.plugins.usage import JsonlRecords, TableRecords
from router.turns.core import Delivery, Person, Proceed
from router.turns.delivery_log import PG_MIGRATIONS as TURNS_MIGRATIONS, DeliveryLog
from router.turns.delivery_log import SCHEMA_VERSION as TURNS_VERSION
from tests.host.statements import V7_ROWS, check_v7_migrated, statements
from tests.support.postgres import postgres, postgres_url  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parent.parent.parent


def test_two_stores_on_one_database_see_each_others_writes(postgres_url: str) -> None:
    with Store(postgres_url) as one, Store(postgres_url) as two:
        one.sessions.create("a")
        two.sessions.create("b")
        two.operations.enqueue("a", "op", "hi")
        assert [s.id for s in one.sessions.all()] == ["a", "b"]
        assert one.operations.get("a", "op") is not None and one.operations.open_sessions() == ["a"]
        one.messages.put("a", 1, {"id": "m", "text": "1"})
        two.messages.put("a", 1, {"id": "m", "text": "2"})
        assert one.messages.log("a").messages == [(2, {"id": "m", "text": "2"})]


def test_many_routers_writing_at_once_number_in_one_order(postgres_url: str) -> None:
    # The ordinals come from MAX(ordinal) + 1: right only while a record's
    # transactions go one at a time across every connection (the lock).
    stores = [Store(postgres_url) for _ in range(3)]
    try:
        stores[0].sessions.create("s")

        def submit(store: Store, n: int) -> None:
            for i in range(30):
                store.operations.enqueue("s", f"{n}-{i}", "x")

        threads = [threading.Thread(target=submit, args=(store, n)) for n, store in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ordinals = [op.ordinal for op in stores[1].operations.all(session="s")]
        assert ordinals == list(range(1, 91))
    finally:
        for store in stores:
            store.close()


KILLED_MID_TRANSACTION = """
import os, signal, sys
from router.host.store import Store
store = Store(sys.argv[1])
store.sessions.create("s")
store.operations.enqueue("s", "committed", "kept")
with store.transaction():
    store.operations.enqueue("s", "uncommitted", "lost")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_router_killed_mid_transaction_loses_nothing_committed(postgres_url: str) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED_MID_TRANSACTION, postgres_url], cwd=REPO, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    with Store(postgres_url) as store:  # the lock went with the dead connection's transaction
        assert [op.id for op in store.operations.all(session="s")] == ["committed"]
        store.operations.enqueue("s", "after", "x")
        assert [op.ordinal for op in store.operations.all(session="s")] == [1, 2]


STOPPED_MID_TRANSACTION = """
import os, signal, sys
from router.host.store import Store
store = Store(sys.argv[1])
store.sessions.create("s")
with store.transaction():
    store.operations.enqueue("s", "stalled", "lost")
    print("in", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # holds the record's write lock, idle, until continued
    store.operations.enqueue("s", "late", "lost")
print("committed", flush=True)
"""


def test_a_router_stopped_mid_transaction_holds_the_record_only_until_the_idle_limit(postgres_url: str) -> None:
    # A router stopped (SIGSTOP) inside a transaction keeps its connection
    # open: without the server's idle limit every other router's writes
    # (and the store reads of its board) would wait for as long as it is
    # stopped. Past the limit the server ends that transaction: the others
    # go on, and the stopped one's writes, when it continues, fail.
    child = subprocess.Popen([sys.executable, "-c", STOPPED_MID_TRANSACTION, postgres_url], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "in\n", child.stderr
        with Store(postgres_url) as store:
            done = threading.Event()

            def write() -> None:
                store.operations.enqueue("s", "other", "kept")
                done.set()

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            # A bound far past the limit for a loaded machine, not a figure.
            assert done.wait(60 + IDLE_IN_TRANSACTION_LIMIT), "a write waited on a stopped router's transaction"
            child.send_signal(signal.SIGCONT)
            out, err = child.communicate(timeout=60)
            assert child.returncode != 0 and "committed" not in out, (out, err)
            assert "idle-in-transaction" in err, err
            assert [op.id for op in store.operations.all(session="s")] == ["other"]
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
            child.wait()


def _raw(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def test_an_older_database_is_migrated_step_by_step(postgres_url: str) -> None:
    # A database written at version 3 (before the usage key was dropped),
    # holding a session and a message.
    db = PgDatabase(postgres_url, "host")
    db.begin()
    for step in PG_MIGRATIONS[:3]:
        step(db)
    db.set_schema_version(3)
    db.execute("INSERT INTO sessions (id, ordinal, created_at, updated_at) VALUES ('s', 1, 0, 0)")
    db.execute(
        "INSERT INTO messages (session, generation, id, position, data, created_at, updated_at)"
        " VALUES ('s', 1, 'm', 1, '{\"id\":\"m\"}', 0, 0)"
    )
    db.execute("COMMIT")
    db.close()
    with Store(postgres_url) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.messages.log("s").messages == [(1, {"id": "m"})]
        store.usage.record("s", None, "r", 1, {"inputTokens": 1})
        store.usage.record("s", None, "r", 1, {"inputTokens": 2})  # the old key would refuse it
        assert store.usage.records()[0].input_tokens == 3


def test_a_database_newer_than_the_code_is_refused(postgres_url: str) -> None:
    with Store(postgres_url), DeliveryLog(postgres_url):
        pass
    with _raw(postgres_url) as db:
        db.execute("UPDATE router_schema SET version = version + 1")
    with pytest.raises(Refused) as caught:
        Store(postgres_url)
    assert caught.value.code == "store-too-new"
    with pytest.raises(Refusal) as refused:
        DeliveryLog(postgres_url)
    assert refused.value.code == "deliveries-too-new"


def test_the_delivery_record_migrates_from_its_first_version(postgres_url: str) -> None:
    with _raw(postgres_url) as db:
        for statement in TURNS_MIGRATIONS[0]:
            db.execute(statement)
        db.execute("CREATE TABLE router_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        db.execute("INSERT INTO router_schema VALUES ('turns', 1)")
    with DeliveryLog(postgres_url) as log:
        assert log.database.schema_version() == TURNS_VERSION
        assert log.stops() == {} and log.asks_of("s") == []


def test_a_missing_store_is_refused_when_it_may_not_be_created(postgres_url: str) -> None:
    with pytest.raises(Refused) as caught:
        Store(postgres_url, create=False)
    assert caught.value.code == "no-store"


def test_a_server_that_is_not_there_is_a_bad_store(postgres: object) -> None:
    url = "postgresql://postgres:secret@127.0.0.1:1/nothing"
    for opening in (Store, DeliveryLog, TableRecords):
        with pytest.raises(Refusal) as caught:
            opening(url)
        assert caught.value.code == "bad-store" and "secret" not in caught.value.message


def test_a_fence_runs_in_every_transaction_and_refuses_the_write(postgres_url: str) -> None:
    with Store(postgres_url) as store, DeliveryLog(postgres_url) as log:
        store.sessions.create("s")
        fenced: list[str] = []

        def fence(db: object) -> None:
            fenced.append(getattr(db, "component"))
            if len(fenced) > 1:
                raise Refusal("stale-lease", "this router lost the session's lease")

        store.database.fences.append(fence)
        log.database.fences.append(fence)
        store.operations.enqueue("s", "first", "x")
        with pytest.raises(Refusal):
            store.operations.enqueue("s", "second", "x")
        with pytest.raises(Refusal):
            log.admit(Delivery(event_id="e", session="s", message=Person(text="hi", message_id=None)))
        assert fenced == ["host", "host", "turns"]
        store.database.fences.clear()
        log.database.fences.clear()
        assert [op.id for op in store.operations.all()] == ["first"]
        assert log.get("e") is None


async def test_a_fenced_record_fences_single_calls_too(postgres_url: str) -> None:
    with DeliveryLog(postgres_url) as log:
        seen: list[str] = []
        log.database.fences.append(lambda db: seen.append("fenced"))
        admitted = await log.call(log.admit, Delivery(event_id="e", session="s", message=Person(text="hi", message_id=None)))
        assert isinstance(admitted, Proceed) and seen == ["fenced"]


def test_turn_records_are_read_incrementally_across_routers(postgres_url: str) -> None:
    one, two = TableRecords(postgres_url), TableRecords(postgres_url)
    try:
        one.append({"at": "2026-12-01T10:00:00Z", "n": 1})
        two.append({"at": "2026-12-01T11:00:00Z", "n": 2})
        assert [r["n"] for r in one.read()] == [1, 2]
        one.append({"at": "not a time", "n": 3})
        import datetime as dt

        assert [r["n"] for r in two.since(dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.timezone.utc))] == [3, 2]
        assert two.statistics().rows_read == 3
        assert [r["n"] for r in two.read()] == [1, 2, 3] and two.statistics().rows_read == 3
    finally:
        one.close()
        two.close()


# --------------------------------------------------------------------------- --store values

@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.builds(lambda tail: "postgresql://" + tail, st.text(max_size=60)))
def test_any_store_value_is_a_target_or_a_refusal(text: str) -> None:
    try:
        target = parse_target(text)
    except Refusal as refused:
        assert refused.code in ("bad-store-url", "no-postgres-driver")
        return
    assert isinstance(target, StoreTarget) and target.location
    if target.kind == "postgresql":
        assert text.lower().startswith(("postgresql://", "postgres://"))


@settings(max_examples=200, deadline=None)
@given(password=st.text(st.characters(categories=("L", "N")), min_size=1, max_size=20))
def test_a_password_never_shows(password: str) -> None:
    url = f"postgresql://router:{password}@db.example:5432/router"
    shown = redact(url)
    assert f":{password}@" not in shown and shown == "postgresql://router:***@db.example:5432/router"
    assert str(parse_target(url)) == shown


def test_store_values_name_their_backend() -> None:
    assert parse_target("/var/lib/router") == StoreTarget("sqlite", "/var/lib/router")
    assert parse_target("sqlite:///var/lib/router") == StoreTarget("sqlite", "/var/lib/router")
    assert parse_target("sqlite:data") == StoreTarget("sqlite", "data")
    assert parse_target("postgres://u@h/db").kind == "postgresql"
    for bad in ("", "sqlite:", "mysql://h/db", "postgresql://h:notaport/db", "a\x00b"):
        with pytest.raises(Refusal) as caught:
            parse_target(bad)
        assert caught.value.code == "bad-store-url", bad


# --------------------------------------------------------------------------- router store copy

def a_data_dir(root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    with Store(data / "host.sqlite") as store:
        store.sessions.create("a")
        store.sessions.create("b", parent="a", settings={"model": "m"})
        store.operations.enqueue("a", "op1", "hi")
        store.operations.settle("a", "op1", {"status": "done", "text": "echo: hi"})
        store.messages.put("a", 1, {"id": "m1", "text": "one"}, "op1")
        store.messages.put("a", 1, {"id": "m2", "text": "two"})
        store.messages.put("a", 1, {"id": "m1", "text": "one, again"}, "op1")
        store.entries.append("a", 1, [{"turn": 1}, {"turn": 2}])
        store.usage.record("a", "op1", "r", 3, {"inputTokens": 2, "costUsd": 0.25})
        store.skipped_frames.add("a", "r", 4, "it does not parse", "{")
    with DeliveryLog(data / "turns.sqlite") as log:
        log.admit(Delivery(event_id="e1", session="a", message=Person(text="hi", message_id="m")))
        log.put_ask({"id": "k1", "session": "a", "state": "open", "tool": "Bash"})
    records = JsonlRecords(data / "usage.jsonl")
    records.append({"at": "2026-12-01T10:00:00Z", "session": "a", "usage": None})
    with open(data / "usage.jsonl", "ab") as f:
        f.write(b"a torn line\n")
    return data


def test_a_data_dir_copies_into_postgresql_whole(tmp_path: Path, postgres_url: str, capsys) -> None:
    data = a_data_dir(tmp_path)
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert "messages: 2 rows" in out and "turn_records: 1 rows" in out
    with Store(data / "host.sqlite") as source, Store(postgres_url) as copied:
        assert copied.dump(timestamps=True) == source.dump(timestamps=True)
        assert copied.messages.log("a", since=0).messages == source.messages.log("a", since=0).messages
        copied.messages.put("a", 1, {"id": "m3"})  # the versions go on from the copied ones
        assert copied.messages.log("a").version == source.messages.log("a").version + 1
    with DeliveryLog(postgres_url) as log:
        assert [e.event_id for e in log.entries()] == ["e1"] and log.asks_of("a")[0]["id"] == "k1"
    records = TableRecords(postgres_url)
    try:
        assert records.read() == [{"at": "2026-12-01T10:00:00Z", "session": "a", "usage": None}]
    finally:
        records.close()
    capsys.readouterr()
    assert cli.main(["transcript", "--store", postgres_url, "--session", "a"]) == 0  # a reader of the database
    assert [m["id"] for m in json.loads(capsys.readouterr().out)] == ["m1", "m2", "m3"]


def test_a_copy_slower_than_the_idle_limit_still_lands(tmp_path: Path, postgres_url: str, monkeypatch,
                                                       capsys) -> None:
    # The copy's target transaction waits while the source is read: it is
    # exempt from the idle limit every router connection has.
    import router.store.db
    import router.record.copy as copy

    data = a_data_dir(tmp_path)
    monkeypatch.setattr(router.store.db, "IDLE_IN_TRANSACTION_LIMIT", 0.2)
    columns = copy._columns

    def slow_columns(db: object, table: str) -> list[str]:
        time.sleep(0.6)  # the target's transaction sits idle past the (patched) limit
        return columns(db, table)

    monkeypatch.setattr(copy, "_columns", slow_columns)
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 0, capsys.readouterr().err
    with Store(data / "host.sqlite") as source, Store(postgres_url) as copied:
        assert copied.dump(timestamps=True) == source.dump(timestamps=True)


def test_a_copy_is_refused_into_a_record_unless_replacing_and_then_idempotent(
    tmp_path: Path, postgres_url: str, capsys
) -> None:
    data = a_data_dir(tmp_path)
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 0
    with Store(postgres_url) as copied:
        first = copied.dump(timestamps=True)
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 2
    assert "store-not-empty" in capsys.readouterr().err
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url, "--replace"]) == 0
    with Store(postgres_url) as copied:
        assert copied.dump(timestamps=True) == first


def test_a_copy_from_a_running_router_or_nowhere_is_refused(tmp_path: Path, postgres_url: str, capsys) -> None:
    data = a_data_dir(tmp_path)
    with Store(data / "host.sqlite"):  # a router still has it open
        assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 2
    assert "store-busy" in capsys.readouterr().err
    assert cli.main(["store", "copy", "--from", str(tmp_path / "nothing"), "--to", postgres_url]) == 2
    assert "no-store" in capsys.readouterr().err
    assert cli.main(["store", "copy", "--from", str(data), "--to", str(tmp_path / "other")]) == 2
    assert "bad-copy-target" in capsys.readouterr().err


def test_a_connection_the_server_dropped_is_opened_again(postgres_url: str) -> None:
    with Store(postgres_url) as store, DeliveryLog(postgres_url) as log, _raw(postgres_url) as admin:
        store.sessions.create("s")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'router'")
        with pytest.raises(psycopg.OperationalError):
            store.operations.enqueue("s", "lost", "x")  # the write that met the loss fails, and is not kept
        store.operations.enqueue("s", "after", "x")
        with pytest.raises(psycopg.OperationalError):
            log.get("e")
        assert log.get("e") is None
        assert [op.id for op in store.operations.all()] == ["after"]
        assert store.database.reconnects == 1 and log.database.reconnects == 1


def test_router_limits_reads_the_turn_records_of_a_database(tmp_path: Path, postgres_url: str, capsys) -> None:
    records = TableRecords(postgres_url)
    try:
        records.append({"instance": "default", "account": "max", "at": "2099-01-01T00:00:00Z",
                        "usage": {"input": 1, "output": 2, "cache_creation": 3, "cache_read": 4}})
    finally:
        records.close()
    settings = ["--settings", str(tmp_path / "settings")]
    assert cli.main(["limits", *settings, "--json"]) == 0
    revision = json.loads(capsys.readouterr().out)["revision"]
    patch = tmp_path / "patch.json"
    patch.write_text(json.dumps({"revision": revision, "limits": {"tokens": {"instances": {"default": {"limit": 1000}}}}}))
    assert cli.main(["limits", "set", *settings, "--file", str(patch)]) == 0
    capsys.readouterr()
    assert cli.main(["limits", *settings, "--records", postgres_url, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["report"]
    assert entry["status"] == "counted" and entry["count"] == 10, entry  # the one record, read from the table
    assert cli.main(["limits", *settings, "--records", "postgresql://postgres@127.0.0.1:1/none"]) == 2
    assert "bad-store" in capsys.readouterr().err


def test_a_database_the_user_may_not_write_is_a_bad_store(postgres_url: str) -> None:
    role = "reader_" + postgres_url.rsplit("/", 1)[1]  # roles are the cluster's: one per test database
    with _raw(postgres_url) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    url = postgres_url.replace("postgres@", f"{role}@")
    for opening in (Store, DeliveryLog, TableRecords):
        with pytest.raises(Refusal) as caught:
            opening(url)
        assert caught.value.code == "bad-store" and "permission denied" in caught.value.message, caught.value


async def test_a_fence_that_refuses_a_batch_answers_every_caller_with_its_refusal(postgres_url: str) -> None:
    import trio

    with Store(postgres_url) as store, DeliveryLog(postgres_url) as log:
        await store.call(store.sessions.create, "s")

        def refuse(db: object) -> None:
            raise Refusal("stale-lease", "this router lost the session's lease")

        store.database.fences.append(refuse)
        log.database.fences.append(refuse)
        codes: list[str] = []

        async def write(n: int) -> None:
            for calling in (store.call(store.operations.enqueue, "s", f"op{n}", "x"),
                            log.call(log.admit, Delivery(event_id=f"e{n}", session="s",
                                                         message=Person(text="hi", message_id=None)))):
                try:
                    await calling
                except Refusal as refused:
                    codes.append(refused.code)

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(write, n)
        assert codes == ["stale-lease"] * 16
        store.database.fences.clear()
        log.database.fences.clear()
        assert await store.call(store.operations.all) == [] and await log.call(log.entries) == []


def test_a_v7_database_gains_the_history_indexes_and_its_reads_use_them(postgres_url: str) -> None:
    # A database at version 7 with usage rows (no rowid yet) and operations.
    db = PgDatabase(postgres_url, "host")
    db.begin()
    for step in PG_MIGRATIONS[:7]:
        step(db)
    db.set_schema_version(7)
    for sql in V7_ROWS:
        db.execute(sql)
    db.execute("COMMIT")
    db.close()
    with Store(postgres_url) as store:
        assert store.schema_version() == SCHEMA_VERSION >= 8
        check_v7_migrated(store)
        reads = statements(store, lambda s: (s.operations.all(session="s", statuses=("queued", "running")),
                                             s.usage.after("s", 1)))
        execute = store._db.execute
        with store.transaction():
            # On tables this small a sequential scan is cheapest; without it the
            # planner shows which index the statement can use as it is written.
            execute("SET LOCAL enable_seqscan = off")
            plans = {sql: " ".join(row[0] for row in execute(f"EXPLAIN {sql}", params).fetchall())
                     for sql, params in reads}
    [open_plan] = [plan for sql, plan in plans.items() if "FROM operations" in sql]
    [usage_plan] = [plan for sql, plan in plans.items() if "FROM usage" in sql]
    assert "operations_session_open" in open_plan, open_plan
    assert "usage_session" in usage_plan, usage_plan
