"""``router store copy``: a SQLite data directory into a PostgreSQL database.

What it copies: ``host.sqlite`` (every table of the host's store, rows in
insertion order, the messages' versions as they are: the live view's
resume points), ``turns.sqlite`` (the delivery record) and ``usage.jsonl``
(the turn records; a line that is not a JSON object is skipped, as a reader
skips it). A file the directory lacks is left out.

Rules:

- The source is opened as a router opens it: its file locks taken (a router
  still running on it makes the copy refused: ``store-busy``,
  ``deliveries-busy``) and an older schema migrated first.
- The target is refused (``store-not-empty``) when any of its router tables
  holds a row, unless ``replace``: then the rows of each record are deleted
  and copied in the same transaction, so copying again gives the same
  database (the copy is idempotent), and a failure leaves that record as
  it was.
- Each record is one transaction; the three are three transactions (three
  connections). A copy that fails half-way leaves the records before it
  copied: copy again with ``replace``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from router.store.db import Database, StoreTarget
from router.errors import Refusal
from router.host import Store
from router.plugins.usage import JsonlRecords, TableRecords
from router.record.whole import HOST_FILE, RECORDS_FILE, TURNS_FILE
from router.turns.delivery_log import DeliveryLog

__all__ = ["copy_record"]

#: The turn records' table (:class:`router.plugins.usage.TableRecords`).
RECORD_TABLES = ("turn_records",)


def copy_record(source: Path, target: StoreTarget, *, replace: bool = False) -> dict[str, int]:
    """Copy the data directory ``source`` into ``target`` (see the module
    docstring); the rows copied, by table."""
    if target.kind != "postgresql":
        raise Refusal("bad-copy-target", f"the copy goes into a PostgreSQL database, not {target}; give postgresql://…")
    host, turns, records = source / HOST_FILE, source / TURNS_FILE, source / RECORDS_FILE
    if not (host.exists() or turns.exists() or records.exists()):
        raise Refusal("no-store", f"{source} holds no record ({HOST_FILE}, {TURNS_FILE}, {RECORDS_FILE}); check --from")
    counts: dict[str, int] = {}
    with Store(target) as into_store, DeliveryLog(target) as into_log:
        into_records = TableRecords(target.location)
        try:
            if not replace:
                _refuse_unless_empty(target, [
                    (into_store.database, Store.TABLES), (into_log.database, DeliveryLog.TABLES),
                    (into_records.database, RECORD_TABLES),
                ])
            if host.exists():
                with Store(host, create=False) as store:
                    counts |= _copy_tables(store.database, into_store.database, Store.TABLES)
            if turns.exists():
                with DeliveryLog(turns) as log:
                    counts |= _copy_tables(log.database, into_log.database, DeliveryLog.TABLES)
            if records.exists():
                counts["turn_records"] = _copy_records(JsonlRecords(records), into_records.database)
        finally:
            into_records.close()
    return counts


def _refuse_unless_empty(target: StoreTarget, records: Sequence[tuple[Database, Sequence[str]]]) -> None:
    for db, tables in records:
        for table in tables:
            if db.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]:
                raise Refusal(
                    "store-not-empty",
                    f"{target} already holds a record (its {table} table has rows); copy into an empty "
                    "database, or pass --replace to replace what it holds",
                )


def _columns(db: Database, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})").fetchall()]


def _copy_tables(source: Database, into: Database, tables: Sequence[str]) -> dict[str, int]:
    """Every row of ``tables`` from a SQLite record into its PostgreSQL
    twin, in one transaction of each, the target's rows deleted first.
    The messages' version triggers are off while their rows go in: the
    versions are copied, not made anew."""
    counts: dict[str, int] = {}
    # The source's transaction (it only reads) keeps what it reads one
    # snapshot; the target's commits first, then the source's, empty.
    with source.transaction(), into.transaction():
        # The target's transaction waits while the source's rows are read
        # (seconds, for a big file): exempt from the idle limit a router's
        # connections have (docs/store.md, "A stalled router").
        into.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        for table in reversed(tables):  # the ones others refer to last
            into.execute(f"DELETE FROM {table}")
        for table in tables:
            columns = ", ".join(_columns(source, table))
            rows = source.execute(f"SELECT {columns} FROM {table} ORDER BY rowid").fetchall()
            if table == "messages":
                into.execute("ALTER TABLE messages DISABLE TRIGGER USER")
            into.executemany(
                f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' for _ in columns.split(', '))})", rows
            )
            if table == "messages":
                into.execute("ALTER TABLE messages ENABLE TRIGGER USER")
            counts[table] = len(rows)
    return counts


def _copy_records(source: JsonlRecords, into: Database) -> int:
    from wire.json import dumps

    lines = [(dumps(record),) for record in source.read()]
    with into.transaction():
        for table in RECORD_TABLES:
            into.execute(f"DELETE FROM {table}")
        into.executemany("INSERT INTO turn_records (record) VALUES (?)", lines)
    return len(lines)
