"""The host's record's schema: each step, SQLite and PostgreSQL side by side.

``STEPS[n]`` (a :class:`router.store.db.Step`) takes the record from version
``n`` to ``n + 1`` (``PRAGMA user_version`` on SQLite, the ``host`` row of
``router_schema`` on PostgreSQL): its SQLite function, then its PostgreSQL
twin, next to each other, so a step added is written for both at once.
The tables and columns each step makes are described in
:mod:`router.host.store`'s docstring.

PostgreSQL has the same tables in its types: times and counters are
``BIGINT`` (ms since the epoch do not fit an ``INTEGER``), figures ``DOUBLE
PRECISION`` (SQLite's ``REAL`` is 8 bytes; PostgreSQL's is 4). Where SQLite
reads its implicit ``rowid`` (insertion order), the table has a ``rowid``
identity column. Keys compared as ordered text (session and operation ids)
are ``COLLATE "C"``: byte order, as SQLite orders them, whatever the
database's locale.
"""

from __future__ import annotations

from typing import Any, Final

from router.store.db import Database, Step

__all__ = ["MIGRATIONS", "OPEN_TERM", "PG_MIGRATIONS", "SCHEMA_VERSION", "STEPS"]

#: The partial index of a session's open operations (schema v8), as both
#: dialects write it. A query uses it only when its ``WHERE`` holds this very
#: term, literals and all (SQLite's rule for a partial index; PostgreSQL's
#: planner proves the same): ``store.operations.all`` writes it so.
OPEN_TERM: Final = "status IN ('queued', 'running')"


# --------------------------------------------------------------------------- step 1

def _migrate_to_1(db: Any) -> None:
    db.execute(
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            parent TEXT,
            ordinal INTEGER NOT NULL,
            generation INTEGER NOT NULL DEFAULT 1,
            cursor_runtime TEXT,
            cursor_seq INTEGER NOT NULL DEFAULT 0,
            settings TEXT NOT NULL DEFAULT '{}',
            handoff TEXT,
            open_runtime TEXT,
            open_seq INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE operations (
            session TEXT NOT NULL REFERENCES sessions(id),
            id TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            generation INTEGER NOT NULL,
            input TEXT NOT NULL,
            when_busy TEXT NOT NULL CHECK (when_busy IN ('followUp', 'steer')),
            status TEXT NOT NULL
                CHECK (status IN ('queued', 'running', 'done', 'unanswered')),
            outcome TEXT,
            delivered TEXT,
            handoff TEXT,
            created_at INTEGER NOT NULL,
            started_at INTEGER,
            settled_at INTEGER,
            PRIMARY KEY (session, id)
        )"""
    )
    db.execute("CREATE INDEX operations_open ON operations (status, session, ordinal)")
    db.execute("CREATE INDEX operations_order ON operations (session, ordinal)")
    db.execute(
        """CREATE TABLE messages (
            session TEXT NOT NULL,
            generation INTEGER NOT NULL,
            id TEXT NOT NULL,
            position INTEGER NOT NULL,
            operation_id TEXT,
            data TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (session, generation, id)
        )"""
    )
    db.execute("CREATE UNIQUE INDEX messages_order ON messages (session, generation, position)")
    db.execute(
        """CREATE TABLE entries (
            session TEXT NOT NULL,
            generation INTEGER NOT NULL,
            position INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session, generation, position)
        )"""
    )


def _pg_to_1(db: Database) -> None:
    db.execute(
        """CREATE TABLE sessions (
            id TEXT COLLATE "C" PRIMARY KEY,
            parent TEXT,
            ordinal BIGINT NOT NULL,
            generation BIGINT NOT NULL DEFAULT 1,
            cursor_runtime TEXT,
            cursor_seq BIGINT NOT NULL DEFAULT 0,
            settings TEXT NOT NULL DEFAULT '{}',
            handoff TEXT,
            open_runtime TEXT,
            open_seq BIGINT NOT NULL DEFAULT 0,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE operations (
            session TEXT COLLATE "C" NOT NULL REFERENCES sessions(id),
            id TEXT COLLATE "C" NOT NULL,
            ordinal BIGINT NOT NULL,
            generation BIGINT NOT NULL,
            input TEXT NOT NULL,
            when_busy TEXT NOT NULL CHECK (when_busy IN ('followUp', 'steer')),
            status TEXT NOT NULL
                CHECK (status IN ('queued', 'running', 'done', 'unanswered')),
            outcome TEXT,
            delivered TEXT,
            handoff TEXT,
            created_at BIGINT NOT NULL,
            started_at BIGINT,
            settled_at BIGINT,
            PRIMARY KEY (session, id)
        )"""
    )
    db.execute("CREATE INDEX operations_open ON operations (status, session, ordinal)")
    db.execute("CREATE INDEX operations_order ON operations (session, ordinal)")
    db.execute(
        """CREATE TABLE messages (
            rowid BIGINT GENERATED ALWAYS AS IDENTITY,
            session TEXT COLLATE "C" NOT NULL,
            generation BIGINT NOT NULL,
            id TEXT COLLATE "C" NOT NULL,
            position BIGINT NOT NULL,
            operation_id TEXT,
            data TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            PRIMARY KEY (session, generation, id)
        )"""
    )
    db.execute("CREATE UNIQUE INDEX messages_order ON messages (session, generation, position)")
    db.execute(
        """CREATE TABLE entries (
            session TEXT COLLATE "C" NOT NULL,
            generation BIGINT NOT NULL,
            position BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session, generation, position)
        )"""
    )


# --------------------------------------------------------------------------- step 2

def _migrate_to_2(db: Any) -> None:
    # Usage figures came after the first schema; the step is kept separate so
    # the migration path is exercised by the tests (tests/host/test_store.py).
    db.execute(
        """CREATE TABLE usage (
            session TEXT NOT NULL,
            runtime TEXT NOT NULL,
            seq INTEGER NOT NULL,
            operation_id TEXT,
            input_tokens REAL,
            output_tokens REAL,
            cost_usd REAL,
            raw TEXT NOT NULL,
            at INTEGER NOT NULL,
            PRIMARY KEY (session, runtime, seq)
        )"""
    )
    db.execute("CREATE INDEX usage_at ON usage (at)")
    db.execute("CREATE INDEX usage_operation ON usage (session, operation_id)")


def _pg_to_2(db: Database) -> None:
    db.execute(
        """CREATE TABLE usage (
            session TEXT COLLATE "C" NOT NULL,
            runtime TEXT NOT NULL,
            seq BIGINT NOT NULL,
            operation_id TEXT COLLATE "C",
            input_tokens DOUBLE PRECISION,
            output_tokens DOUBLE PRECISION,
            cost_usd DOUBLE PRECISION,
            raw TEXT NOT NULL,
            at BIGINT NOT NULL,
            PRIMARY KEY (session, runtime, seq)
        )"""
    )
    db.execute("CREATE INDEX usage_at ON usage (at)")
    db.execute("CREATE INDEX usage_operation ON usage (session, operation_id)")


# --------------------------------------------------------------------------- step 3

def _migrate_to_3(db: Any) -> None:
    # Submission order is global (``ordinal``); without this index every
    # submit found the next ordinal by scanning the whole operations table.
    db.execute("CREATE INDEX operations_ordinal ON operations (ordinal)")


def _pg_to_3(db: Database) -> None:
    db.execute("CREATE INDEX operations_ordinal ON operations (ordinal)")


# --------------------------------------------------------------------------- step 4

def _migrate_to_4(db: Any) -> None:
    # ``(session, runtime, seq)`` was the usage key, so the usage of a new
    # container that reused a runtime id (frames numbered from 1 again) was
    # dropped as a duplicate. The cursor already applies each frame once;
    # the table is rebuilt without the key (SQLite cannot drop a key).
    db.execute("ALTER TABLE usage RENAME TO usage_v3")
    db.execute(
        """CREATE TABLE usage (
            session TEXT NOT NULL,
            runtime TEXT NOT NULL,
            seq INTEGER NOT NULL,
            operation_id TEXT,
            input_tokens REAL,
            output_tokens REAL,
            cost_usd REAL,
            raw TEXT NOT NULL,
            at INTEGER NOT NULL
        )"""
    )
    columns = "session, runtime, seq, operation_id, input_tokens, output_tokens, cost_usd, raw, at"
    db.execute(f"INSERT INTO usage ({columns}) SELECT {columns} FROM usage_v3 ORDER BY rowid")
    db.execute("DROP TABLE usage_v3")  # its indexes go with it
    db.execute("CREATE INDEX usage_at ON usage (at)")
    db.execute("CREATE INDEX usage_operation ON usage (session, operation_id)")


def _pg_to_4(db: Database) -> None:
    # See _migrate_to_4; PostgreSQL drops a key in place.
    db.execute("ALTER TABLE usage DROP CONSTRAINT usage_pkey")


# --------------------------------------------------------------------------- step 5

def _migrate_to_5(db: Any) -> None:
    # Frames the host could not parse or apply, passed so the session goes
    # on (a daemon replays a kept frame on every connection until it is
    # acknowledged): the record says which, and why.
    db.execute(
        """CREATE TABLE skipped_frames (
            session TEXT NOT NULL,
            runtime TEXT NOT NULL,
            seq INTEGER NOT NULL,
            reason TEXT NOT NULL,
            text TEXT NOT NULL,
            at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX skipped_frames_session ON skipped_frames (session)")


def _pg_to_5(db: Database) -> None:
    db.execute(
        """CREATE TABLE skipped_frames (
            rowid BIGINT GENERATED ALWAYS AS IDENTITY,
            session TEXT COLLATE "C" NOT NULL,
            runtime TEXT NOT NULL,
            seq BIGINT NOT NULL,
            reason TEXT NOT NULL,
            text TEXT NOT NULL,
            at BIGINT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX skipped_frames_session ON skipped_frames (session)")


# --------------------------------------------------------------------------- step 6

def _migrate_to_6(db: Any) -> None:
    # The live view resumes a container session across a restart from the
    # last change a reader saw: each message carries the session's change
    # counter as of its last change (backfilled in insertion order, which
    # rowid keeps). Triggers keep it, so every writer of ``messages`` keeps
    # it without knowing.
    db.execute("ALTER TABLE messages ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE messages SET version = rowid")
    db.execute("CREATE INDEX messages_version ON messages (session, version)")
    bump = (
        "UPDATE messages SET version = (SELECT MAX(version) + 1 FROM messages WHERE session = NEW.session)"
        " WHERE rowid = NEW.rowid"
    )
    db.execute(f"CREATE TRIGGER messages_version_insert AFTER INSERT ON messages BEGIN {bump}; END")
    db.execute(
        "CREATE TRIGGER messages_version_update AFTER UPDATE OF data ON messages"
        f" WHEN OLD.data IS NOT NEW.data BEGIN {bump}; END"
    )


def _pg_to_6(db: Database) -> None:
    # See _migrate_to_6. A row trigger that runs BEFORE the write sets the
    # version on the row itself; it sees the rows an INSERT ... SELECT wrote
    # before this one, so a fork numbers its copies one after another, as
    # SQLite's AFTER trigger does.
    db.execute("ALTER TABLE messages ADD COLUMN version BIGINT NOT NULL DEFAULT 0")
    db.execute("UPDATE messages SET version = rowid")
    db.execute("CREATE INDEX messages_version ON messages (session, version)")
    db.execute(
        """CREATE FUNCTION messages_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.version := (SELECT COALESCE(MAX(version), 0) + 1 FROM messages WHERE session = NEW.session);
            RETURN NEW;
        END $$"""
    )
    db.execute(
        "CREATE TRIGGER messages_version_insert BEFORE INSERT ON messages"
        " FOR EACH ROW EXECUTE FUNCTION messages_version_bump()"
    )
    db.execute(
        "CREATE TRIGGER messages_version_update BEFORE UPDATE OF data ON messages"
        " FOR EACH ROW WHEN (OLD.data IS DISTINCT FROM NEW.data) EXECUTE FUNCTION messages_version_bump()"
    )


# --------------------------------------------------------------------------- step 7

def _migrate_to_7(db: Any) -> None:
    # One host drives a daemon per session: each session's
    # endpoint and its launcher's view of it. NULL everywhere for the
    # sessions of older files: they keep the host's default endpoint. The
    # same statements serve PostgreSQL (its twin below).
    for column in ("daemon_url", "daemon_token", "daemon_runtime", "daemon_container", "launcher", "harness",
                   "launcher_state", "launcher_reason"):
        db.execute(f"ALTER TABLE sessions ADD COLUMN {column} TEXT")


# --------------------------------------------------------------------------- step 8

def _migrate_to_8(db: Any) -> None:
    # Nothing a delivery reads may cost more as history grows.
    # A session's open operations were found by walking every operation it
    # ever had (``operations_order``, status filtered row by row): this
    # partial index holds only the open ones. And the ``frames`` usage
    # source reads the usage recorded after a mark, its rowid
    # (``store.usage.after``): an index on ``session`` (SQLite appends
    # the rowid to every index) answers that from the mark on, where
    # ``usage_operation`` made it sum every event the session ever had.
    db.execute(f"CREATE INDEX operations_session_open ON operations (session, ordinal) WHERE {OPEN_TERM}")
    db.execute("CREATE INDEX usage_session ON usage (session)")


def _pg_to_8(db: Database) -> None:
    # See _migrate_to_8. PostgreSQL's usage rows have no rowid: an identity
    # column numbers them (the existing ones in an arbitrary order, which no
    # mark can name: a mark lives for one turn, in memory). Appends hold the
    # record's lock, so rows commit in rowid order.
    db.execute(f"CREATE INDEX operations_session_open ON operations (session, ordinal) WHERE {OPEN_TERM}")
    db.execute("ALTER TABLE usage ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY")
    db.execute("CREATE INDEX usage_session ON usage (session, rowid)")


# --------------------------------------------------------------------------- the steps

#: The schema steps, both dialects side by side (step 7 is portable:
#: ``ALTER TABLE ... ADD COLUMN ... TEXT`` on both).
STEPS: Final[tuple[Step, ...]] = (
    Step(sqlite=_migrate_to_1, postgresql=_pg_to_1),
    Step(sqlite=_migrate_to_2, postgresql=_pg_to_2),
    Step(sqlite=_migrate_to_3, postgresql=_pg_to_3),
    Step(sqlite=_migrate_to_4, postgresql=_pg_to_4),
    Step(sqlite=_migrate_to_5, postgresql=_pg_to_5),
    Step(sqlite=_migrate_to_6, postgresql=_pg_to_6),
    Step(sqlite=_migrate_to_7, postgresql=_migrate_to_7),
    Step(sqlite=_migrate_to_8, postgresql=_pg_to_8),
)
#: The version this code writes.
SCHEMA_VERSION: Final = len(STEPS)
#: Each dialect's halves, one for one (``MIGRATIONS[n]`` is given anything
#: with ``execute``: a ``sqlite3`` connection or a :class:`~router.store.db.Database`);
#: what the tests build a record of an older version with.
MIGRATIONS: Final = tuple(step.sqlite for step in STEPS)
PG_MIGRATIONS: Final = tuple(step.postgresql for step in STEPS)
