"""``router store copy``: a SQLite data directory into a PostgreSQL database.

What it copies: ``host.sqlite`` (every table of the host's store, rows in
insertion order, the messages' versions as they are: the live view's
resume points), ``turns.sqlite`` (the delivery record), ``usage.jsonl``
(the turn records; a line that is not a JSON object is skipped, as a reader
skips it), the notifications' tables of both files (:mod:`router.notify.record`:
events, receipts, the browsers' push subscriptions) and ``devices.sqlite``
(the paired devices, their credentials' hashes and revocations: a phone
paired before the move stays paired). A file the directory lacks is left
out.

The notifications' events sit in two files in a SQLite directory (an
event lives where the change that made it was written) and in one table
in PostgreSQL: the two files' events are merged in the order they were
made (``at``, then the file, then the file's own order) and numbered
anew, so the outbox sends what is still open oldest first, as before.

Rules:

- The source is opened as a router opens it: its file locks taken (a router
  still running on it makes the copy refused: ``store-busy``,
  ``deliveries-busy``) and an older schema migrated first.
- The target is refused (``store-not-empty``) when any of its router tables
  holds a row, unless ``replace``: then the rows of each record are deleted
  and copied in the same transaction, so copying again gives the same
  database (the copy is idempotent), and a failure leaves that record as
  it was.
- Each record is one transaction; the five (host, deliveries,
  notifications, turn records, devices) are five transactions. A copy that fails half-way leaves the records before it
  copied: copy again with ``replace``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from router.store.db import Database, StoreTarget
from router.errors import Refusal
from router.host import Store
from router.notify import NOTIFY_TABLES, install as install_notify
from router.plugins.usage import JsonlRecords, TableRecords
from router.record.whole import HOST_FILE, RECORDS_FILE, TURNS_FILE
from router.remote import DEVICES_FILE, DeviceStore
from router.turns.delivery_log import DeliveryLog

__all__ = ["copy_record"]

#: The turn records' table (:class:`router.plugins.usage.TableRecords`).
RECORD_TABLES = ("turn_records",)
#: The paired devices' table (:mod:`router.remote.devices`).
DEVICE_TABLES = ("devices",)


def copy_record(source: Path, target: StoreTarget, *, replace: bool = False) -> dict[str, int]:
    """Copy the data directory ``source`` into ``target`` (see the module
    docstring); the rows copied, by table."""
    if target.kind != "postgresql":
        raise Refusal("bad-copy-target", f"the copy goes into a PostgreSQL database, not {target}; give postgresql://…")
    host, turns, records = source / HOST_FILE, source / TURNS_FILE, source / RECORDS_FILE
    devices = source / DEVICES_FILE
    if not (host.exists() or turns.exists() or records.exists() or devices.exists()):
        raise Refusal("no-store", f"{source} holds no record ({HOST_FILE}, {TURNS_FILE}, {RECORDS_FILE}, "
                      f"{DEVICES_FILE}); check --from")
    counts: dict[str, int] = {}
    with Store(target) as into_store, DeliveryLog(target) as into_log:
        install_notify(into_log.database)
        into_records = TableRecords(target.location)
        into_devices = DeviceStore.open(target, source)
        try:
            if not replace:
                _refuse_unless_empty(target, [
                    (into_store.database, Store.TABLES), (into_log.database, DeliveryLog.TABLES),
                    (into_log.database, tuple(NOTIFY_TABLES)), (into_records.database, RECORD_TABLES),
                    (into_devices.database, DEVICE_TABLES),
                ])
            notices: list[dict[str, list[tuple[object, ...]]]] = []
            if host.exists():
                with Store(host, create=False) as store:
                    counts |= _copy_tables(store.database, into_store.database, Store.TABLES)
                    notices.append(_notify_rows(store.database))
            if turns.exists():
                with DeliveryLog(turns) as log:
                    counts |= _copy_tables(log.database, into_log.database, DeliveryLog.TABLES)
                    notices.append(_notify_rows(log.database))
            counts |= _copy_notices(notices, into_log.database)
            if records.exists():
                counts["turn_records"] = _copy_records(JsonlRecords(records), into_records.database)
            if devices.exists():
                from_devices = DeviceStore.open(None, source)
                try:
                    counts |= _copy_tables(from_devices.database, into_devices.database, DEVICE_TABLES)
                finally:
                    from_devices.close()
        finally:
            into_devices.close()
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


def _notify_rows(db: Database) -> dict[str, list[tuple[object, ...]]]:
    """The notifications' rows of one SQLite file, by table, in the order
    written (none when no router with notifications ran on it)."""
    rows: dict[str, list[tuple[object, ...]]] = {table: [] for table in NOTIFY_TABLES}
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'notify_events'").fetchone() is None:
        return rows
    for table, columns in NOTIFY_TABLES.items():
        rows[table] = [tuple(row) for row in db.execute(
            f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall()]
    return rows


def _copy_notices(files: Sequence[dict[str, list[tuple[object, ...]]]], into: Database) -> dict[str, int]:
    """The notifications' rows of ``files`` (host's, then the delivery
    record's) into their one set of tables in one transaction, the
    target's rows deleted first; events numbered anew in the order they
    were made (see the module docstring)."""
    seq, at = NOTIFY_TABLES["notify_events"].index("seq"), NOTIFY_TABLES["notify_events"].index("at")
    merged = sorted(((event[at], index, event[seq]), event) for index, rows in enumerate(files)
                    for event in rows["notify_events"])
    events = [(*event[:seq], number, *event[seq + 1:]) for number, (_, event) in enumerate(merged, start=1)]
    tables = {"notify_events": events,
              "notify_receipts": [row for rows in files for row in rows["notify_receipts"]],
              "notify_subscriptions": [row for rows in files for row in rows["notify_subscriptions"]]}
    with into.transaction():
        for table in reversed(NOTIFY_TABLES):
            into.execute(f"DELETE FROM {table}")
        for table, columns in NOTIFY_TABLES.items():
            into.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                             tables[table])
    return {table: len(rows) for table, rows in tables.items()}


def _copy_records(source: JsonlRecords, into: Database) -> int:
    from wire.json import dumps

    lines = [(dumps(record),) for record in source.read()]
    with into.transaction():
        for table in RECORD_TABLES:
            into.execute(f"DELETE FROM {table}")
        into.executemany("INSERT INTO turn_records (record) VALUES (?)", lines)
    return len(lines)
