"""``router.store.db.migrate`` with a component named: the tables of a
component that lives in another record's database (the notifications', in
the delivery record's), its version in that database's ``router_schema``
row, the record's own version untouched; inside an open transaction (a
worker's group commit) the steps join it. On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.notify import record as notify_record
from router.store.db import Database, PgDatabase, SqliteDatabase, Step, migrate
from tests.support.postgres import postgres, postgres_url, store_url  # noqa: F401  (fixtures)

OWN = (Step.portable("CREATE TABLE own_rows (n INTEGER)"),)
GUEST = (Step.portable("CREATE TABLE guest_rows (n INTEGER)"), Step.portable("CREATE INDEX guest_n ON guest_rows (n)"))


def _open(where: str) -> Database:
    return PgDatabase(where, "own") if where.startswith("postgresql:") else SqliteDatabase(Path(where), "own")


def _tables(db: Database) -> set[str]:
    if db.dialect == "sqlite":
        rows = db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')").fetchall()
    else:
        rows = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' UNION "
                          "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def test_a_components_version_is_its_own_row_beside_the_records(store_url: str) -> None:
    db = _open(store_url)
    try:
        migrate(db, OWN, too_new=lambda version: RuntimeError(f"own v{version}"))
        migrate(db, GUEST, too_new=lambda version: RuntimeError(f"guest v{version}"), component="guest")
        assert (db.schema_version(), db.schema_version("guest")) == (1, 2)
        assert {"own_rows", "guest_rows", "guest_n", "router_schema"} <= _tables(db)
        migrate(db, GUEST, too_new=lambda version: RuntimeError(f"guest v{version}"), component="guest")  # no-op
        with pytest.raises(RuntimeError, match="guest v2"):  # newer than these steps
            migrate(db, GUEST[:1], too_new=lambda version: RuntimeError(f"guest v{version}"), component="guest")
        migrate(db, GUEST[:1], too_new=None, component="guest")  # None: left alone
        assert (db.schema_version(), db.schema_version("guest")) == (1, 2)
    finally:
        db.close()


def test_inside_an_open_transaction_the_steps_join_it(store_url: str) -> None:
    db = _open(store_url)
    try:
        db.begin()
        migrate(db, GUEST, too_new=None, component="guest")
        assert db.in_transaction and db.schema_version("guest") == 2
        db.rollback()  # the group commit's transaction rolled back: nothing of it stays
        assert db.schema_version("guest") == 0 and "guest_rows" not in _tables(db)
    finally:
        db.close()


def test_the_notifications_tables_are_installed_once(store_url: str) -> None:
    db = _open(store_url)
    try:
        notify_record.install(db)
        notify_record.install(db)
        assert db.schema_version(notify_record.COMPONENT) == len(notify_record.STEPS)
        assert set(notify_record.NOTIFY_TABLES) <= _tables(db)
        assert db.schema_version() == 0  # the record's own version is not the notifications'
    finally:
        db.close()
