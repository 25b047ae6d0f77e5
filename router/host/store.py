"""The host's durable record: one SQLite file, in WAL mode, or tables of a
PostgreSQL database (``Store("postgresql://…")``) that many routers share.

The host owns everything a session is (the daemon in the container is
disposable): the sessions, their operations, the transcript, the adapter's
persisted entries, the replay cursor and the generation. This module keeps
them in SQLite and nothing else; the rules that decide *what* to write live in
:mod:`router.host.reconcile`, and the Trio code that moves bytes lives in
:mod:`router.host.session_link`.

Theory of operation
-------------------

**One connection, one thread at a time.** A :class:`Store` owns one
``sqlite3`` connection, opened with ``check_same_thread=False``. Trio code
never calls its methods on the event loop: it goes through :meth:`Store.call`
or :meth:`Store.transact`, which run the work in a worker thread under the
store's own ``CapacityLimiter(1)``, so the loop never waits on the disk and
two threads never share the connection. A sync method entered from a second
thread while another thread is inside the store raises
:class:`StoreMisuse` instead of silently interleaving (trio's
``ConflictDetector`` idea).

**Transactions.** :meth:`Store.transaction` is ``BEGIN IMMEDIATE`` …
``COMMIT`` (``ROLLBACK`` on any exception); nested use joins the outer
transaction. Every public method runs inside one, so each call is atomic on
its own, and :meth:`Store.transact` runs a whole function (one applied frame,
or a batch of them, with the cursor) as one transaction. A worker-thread call
is not abandoned on cancellation: a Trio task that is cancelled while its
transaction runs waits for it to commit or roll back, so nothing is left
half-written. **Group commit** (:mod:`router._group_commit`): the calls and
transactions that wait while one runs go together in the next worker-thread
hop, one ``BEGIN IMMEDIATE`` … ``COMMIT`` with each in a savepoint of its own
(one that raises undoes only its own writes, and raises to its own caller);
each caller is answered after that ``COMMIT``. Many sessions' frames and
submits then share one hop and one commit.

**Durability.** WAL with ``synchronous=NORMAL`` by default: a committed
transaction survives the death of the process at any instant (the fault the
host is built for: SIGKILL), and the file is never corrupted; on power loss
the last few commits may be lost. ``synchronous="FULL"`` makes every commit
survive power loss too, at the price of an fsync per commit.

**One host per store.** :class:`Store` with ``exclusive=True`` (what the host
uses) takes a non-blocking ``flock`` on the database file for as long as it is
open, so a second host on the same file is refused (``store-busy``) instead
of fighting the first over the same sessions. Readers (``router transcript``)
open it with ``exclusive=False``. SQLite's own locks are POSIX ``fcntl``
locks, which Linux keeps apart from ``flock``.

**PostgreSQL** (docs/store.md). The same methods, SQL and threads over
:mod:`router._db`: the connection is psycopg 3's sync one, used from the
worker thread as the SQLite one is; ``BEGIN IMMEDIATE`` becomes ``BEGIN``
plus this record's advisory lock, so this record's transactions go one at
a time across every router on the database, as SQLite's writers do on a
file; ``exclusive`` and ``synchronous`` mean nothing there (no file lock:
routers share the database by design; the server's settings make a commit
durable). Every transaction begins in :meth:`router._db.Database.begin`,
which runs the fencing hook (``store.database.fences``).

Schema
------

Versioned with ``PRAGMA user_version`` (PostgreSQL: the ``host`` row of
``router_schema``); :data:`MIGRATIONS` lists the steps (:data:`PG_MIGRATIONS`
their PostgreSQL twins),
each run in its own transaction that also sets the new version. A file newer
than this code is refused (``store-too-new``); a path that cannot be opened,
or a file that is not SQLite, is refused (``bad-store``) with nothing left
open or locked. Times are milliseconds since the epoch (the wire's
``createdAt`` unit). JSON columns hold what the wire holds
(``ContainerInput``, ``ContainerSettings``, ``ContainerMessage``, outcomes,
entries), written with ``json.dumps`` (ASCII, so a lone surrogate from a
JavaScript peer survives the UTF-8 database).

``sessions``
    ``id``, ``parent`` (the session it was forked from), ``ordinal``
    (creation order), ``generation`` (the adapter session the daemon should
    have open; starts at 1, ``reset`` adds one), ``cursor_runtime`` and
    ``cursor_seq`` (the last applied frame: runtime id and seq),
    ``settings`` (JSON ``ContainerSettings``), ``handoff`` (a note for the
    next delivered prompt, set by ``reset``), ``open_runtime`` and
    ``open_seq`` (where the daemon stood when this host last sent it
    ``open``: persisted entries numbered at or below it belong to an older
    generation), ``created_at``, ``updated_at``.
``operations``
    keyed by ``(session, id)``; ``id`` is the idempotency key.
    ``ordinal`` (submission order), ``generation`` (the session's when
    submitted), ``input`` (JSON), ``when_busy``, ``status`` (``queued``,
    ``running``, ``done``, ``unanswered``), ``outcome`` (JSON, once
    settled), ``delivered`` (the runtime id it was last handed to, or
    NULL), ``handoff`` (the reset note it carries, once taken from the
    session), ``created_at``, ``started_at``, ``settled_at``.
``messages``
    the transcript, keyed by ``(session, generation, id)``; ``position``
    orders messages by first appearance, an update replaces ``data`` in
    place. ``operation_id`` is the message's operation, if any.
``entries``
    the adapter's persisted entries, ``(session, generation, position)``,
    in order; handed back in ``restore``/``open``.
``usage`` (schema version 2; version 4 dropped its key)
    one row per ``usage`` event: ``session``, ``operation_id`` (NULL for an
    event between turns), ``runtime`` and ``seq`` (the frame it came in,
    kept as provenance, not a key: a container that reuses a runtime id
    numbers its frames from 1 again, and its usage must count; a replayed
    frame is kept out by the cursor, as every other frame is), ``input_tokens``,
    ``output_tokens``, ``cost_usd`` (NULL when the adapter did not report
    the figure or reported something that is not a finite number), ``raw``
    (the whole event, JSON), ``at``. Read it with :meth:`Store.usage_records`.
``skipped_frames`` (schema version 5)
    one row per frame the host passed without applying it (it could not
    parse or apply it; see :mod:`router.host.reconcile`): ``session``,
    ``runtime``, ``seq``, ``reason``, ``text`` (its first
    :data:`SKIPPED_TEXT_CHARS` characters), ``at``. Read it with
    :meth:`Store.skipped_frames`.
``messages.version`` (schema version 6)
    a per-session counter of transcript changes: a message's ``version`` is
    set, by triggers, to one more than the session's highest whenever it is
    inserted or its ``data`` changes (a rewrite with the same data keeps
    it). The live view's resume point across a restart: the messages of a
    session changed since version ``v`` are those above it
    (:meth:`Store.message_log`, :meth:`Store.message_versions`).
``sessions`` daemon columns (schema version 7)
    each container session's own daemon: ``daemon_url`` and
    ``daemon_token`` (its endpoint; NULL: the host's default endpoint),
    ``daemon_runtime`` (the runtime id it was started with),
    ``daemon_container`` (the launcher's id for it: a container id, a
    pid), ``launcher`` (the launcher module that started it), ``harness``
    (what the daemon runs: ``echo``, ``claude-code`` ...), and
    ``launcher_state`` / ``launcher_reason`` (where its lifecycle stands,
    :mod:`router.host.lifecycle`, and why). Read as
    :attr:`SessionRecord.daemon`; written with :meth:`Store.set_daemon`.
History indexes (schema version 8)
    so that no read of a turn costs more as history grows:
    ``operations_session_open``, a partial index of each session's open
    operations (:meth:`Store.operations` writes its term), and
    ``usage_session``, the usage after a mark (:meth:`Store.usage_after`;
    on PostgreSQL over a ``rowid`` identity column added to ``usage``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Literal, Sequence, TypeVar

import attrs
import trio

from router._db import Database, PgDatabase, SqliteDatabase, Target, database_errors, is_postgres_url
from router._group_commit import Call, GroupCommit, run_in_savepoints
from router._sqlite import lock_file, release_lock
from router._transient import is_transient
from router.errors import Refusal
from wire.json import JsonValue

T = TypeVar("T")

OperationStatus = Literal["queued", "running", "done", "unanswered"]
WhenBusy = Literal["followUp", "steer"]

#: Statuses of an operation that has not settled.
OPEN_STATUSES: Final = ("queued", "running")
#: Statuses of a settled operation.
SETTLED_STATUSES: Final = ("done", "unanswered")
#: How much of a skipped frame's text the record keeps: enough to see what
#: it was, not a copy of a 64 MiB message.
SKIPPED_TEXT_CHARS: Final = 2000


@attrs.frozen(kw_only=True)
class MessageLog:
    """A session's transcript changes as :meth:`Store.message_log` reads
    them: the current ``generation``, the session's highest message
    ``version``, and ``messages`` as ``(version, message)`` pairs."""

    generation: int
    version: int
    messages: list[tuple[int, dict]]


class Refused(Refusal):
    """A refusal of the store or of the host's API: ``code`` (kebab-case),
    ``message`` (a sentence a person can act on), ``data``; see
    :class:`router.errors.Refusal`."""


class StoreMisuse(RuntimeError):
    """The store was entered from two threads at once (a bug in the caller)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _dump(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _load(text: str | None) -> JsonValue:
    return None if text is None else json.loads(text)


def _storable(text: str) -> str:
    """``text`` as SQLite can hold it: a lone surrogate (which JSON from a
    JavaScript peer may carry) becomes ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _figure(value: object) -> float | None:
    """A usage figure, or None when the adapter sent no finite number."""
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return value  # type: ignore[return-value]
    return None


# --------------------------------------------------------------------------- records

#: The daemon columns of ``sessions`` (schema v7), as :class:`DaemonRecord` names them.
DAEMON_COLUMNS: Final = ("url", "token", "runtime", "container", "launcher", "harness", "state", "reason")


@attrs.frozen(kw_only=True)
class DaemonRecord:
    """A session's own daemon, as the record has it (every field may be
    None: a session on the host's default endpoint has none set)."""

    url: str | None = None
    token: str | None = attrs.field(default=None, repr=False)
    runtime: str | None = None
    container: str | None = None
    launcher: str | None = None
    harness: str | None = None
    state: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class SessionRecord:
    id: str
    parent: str | None
    generation: int
    cursor_runtime: str | None
    cursor_seq: int
    #: The wire's ``ContainerSettings`` object.
    settings: dict
    handoff: str | None
    open_runtime: str | None
    open_seq: int
    created_at: int
    updated_at: int
    daemon: DaemonRecord = attrs.field(factory=DaemonRecord)


@attrs.frozen(kw_only=True)
class OperationRecord:
    session: str
    id: str
    ordinal: int
    generation: int
    #: The wire's ``ContainerInput``: a string or a list of parts.
    input: JsonValue
    when_busy: WhenBusy
    status: OperationStatus
    #: ``{"status": "done", "text": ...}`` or ``{"status": "unanswered", "reason": ...}``.
    outcome: dict | None
    delivered: str | None
    handoff: str | None
    created_at: int
    started_at: int | None
    settled_at: int | None

    @property
    def settled(self) -> bool:
        return self.status in SETTLED_STATUSES


@attrs.frozen(kw_only=True)
class UsageRecord:
    """Usage figures of one operation (or of a session's events between
    turns, with ``operation_id`` None), summed over its ``usage`` events."""

    session: str
    operation_id: str | None
    #: Sums; None when no event of the group reported the figure.
    input_tokens: float | None
    output_tokens: float | None
    cost_usd: float | None
    #: How many ``usage`` events were summed.
    events: int
    #: The first and last event's time, ms since the epoch.
    first_at: int
    last_at: int


@attrs.frozen(kw_only=True)
class UsageAfter:
    """A session's ``usage`` events after a mark (:meth:`Store.usage_after`):
    the new ``mark`` (the last event's rowid; the mark asked for when there
    is none after it, 0 when the session has none), how many ``events``,
    and their sums (None when no event reported the figure)."""

    mark: int
    events: int
    input_tokens: float | None
    output_tokens: float | None


@attrs.frozen(kw_only=True)
class SkippedFrame:
    """A frame the host passed without applying (it could not parse or
    apply it): where it came from, why, and the start of its text."""

    session: str
    runtime: str
    seq: int
    reason: str
    text: str
    at: int


# --------------------------------------------------------------------------- schema

def _migrate_to_1(db: sqlite3.Connection) -> None:
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


def _migrate_to_2(db: sqlite3.Connection) -> None:
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


def _migrate_to_3(db: sqlite3.Connection) -> None:
    # Submission order is global (``ordinal``); without this index every
    # submit found the next ordinal by scanning the whole operations table.
    db.execute("CREATE INDEX operations_ordinal ON operations (ordinal)")


def _migrate_to_4(db: sqlite3.Connection) -> None:
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


def _migrate_to_5(db: sqlite3.Connection) -> None:
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


def _migrate_to_6(db: sqlite3.Connection) -> None:
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


def _migrate_to_7(db: Any) -> None:
    # One host drives a daemon per session: each session's
    # endpoint and its launcher's view of it. NULL everywhere for the
    # sessions of older files: they keep the host's default endpoint. The
    # same statements serve PostgreSQL (its twin below).
    for column in ("daemon_url", "daemon_token", "daemon_runtime", "daemon_container", "launcher", "harness",
                   "launcher_state", "launcher_reason"):
        db.execute(f"ALTER TABLE sessions ADD COLUMN {column} TEXT")


#: The partial index of a session's open operations (schema v8), as both
#: dialects write it. A query uses it only when its ``WHERE`` holds this very
#: term, literals and all (SQLite's rule for a partial index; PostgreSQL's
#: planner proves the same): :meth:`Store.operations` writes it so.
_OPEN_TERM: Final = "status IN ('queued', 'running')"


def _migrate_to_8(db: Any) -> None:
    # Nothing a delivery reads may cost more as history grows.
    # A session's open operations were found by walking every operation it
    # ever had (``operations_order``, status filtered row by row): this
    # partial index holds only the open ones. And the ``frames`` usage
    # source reads the usage recorded after a mark, its rowid
    # (:meth:`Store.usage_after`): an index on ``session`` (SQLite appends
    # the rowid to every index) answers that from the mark on, where
    # ``usage_operation`` made it sum every event the session ever had.
    db.execute(f"CREATE INDEX operations_session_open ON operations (session, ordinal) WHERE {_OPEN_TERM}")
    db.execute("CREATE INDEX usage_session ON usage (session)")


#: Schema steps: ``MIGRATIONS[n]`` takes a file at version ``n`` to ``n + 1``
#: (each is given anything with ``execute``: a ``sqlite3`` connection or
#: the store's :class:`~router._db.Database`).
MIGRATIONS: Final[tuple[Callable[[Any], None], ...]] = (
    _migrate_to_1,
    _migrate_to_2,
    _migrate_to_3,
    _migrate_to_4,
    _migrate_to_5,
    _migrate_to_6,
    _migrate_to_7,
    _migrate_to_8,
)
#: The version this code writes.
SCHEMA_VERSION: Final = len(MIGRATIONS)


# --------------------------------------------------------------------------- the PostgreSQL schema
#
# The same tables, step for step (``PG_MIGRATIONS[n]`` takes a database at
# version ``n`` to ``n + 1``, and a step added to MIGRATIONS gets its twin
# here), in PostgreSQL's types: times and counters are ``BIGINT`` (ms since
# the epoch do not fit an ``INTEGER``), figures ``DOUBLE PRECISION``
# (SQLite's ``REAL`` is 8 bytes; PostgreSQL's is 4). Where SQLite reads its
# implicit ``rowid`` (insertion order), the table has a ``rowid`` identity
# column. Keys compared as ordered text (session and operation ids) are
# ``COLLATE "C"``: byte order, as SQLite orders them, whatever the
# database's locale.

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


def _pg_to_3(db: Database) -> None:
    db.execute("CREATE INDEX operations_ordinal ON operations (ordinal)")


def _pg_to_4(db: Database) -> None:
    # See _migrate_to_4; PostgreSQL drops a key in place.
    db.execute("ALTER TABLE usage DROP CONSTRAINT usage_pkey")


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


def _pg_to_8(db: Database) -> None:
    # See _migrate_to_8. PostgreSQL's usage rows have no rowid: an identity
    # column numbers them (the existing ones in an arbitrary order, which no
    # mark can name: a mark lives for one turn, in memory). Appends hold the
    # record's lock, so rows commit in rowid order.
    db.execute(f"CREATE INDEX operations_session_open ON operations (session, ordinal) WHERE {_OPEN_TERM}")
    db.execute("ALTER TABLE usage ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY")
    db.execute("CREATE INDEX usage_session ON usage (session, rowid)")


#: The PostgreSQL twins of :data:`MIGRATIONS`, one for one.
PG_MIGRATIONS: Final[tuple[Callable[[Database], None], ...]] = (
    _pg_to_1,
    _pg_to_2,
    _pg_to_3,
    _pg_to_4,
    _pg_to_5,
    _pg_to_6,
    _migrate_to_7,  # portable: ALTER TABLE ... ADD COLUMN ... TEXT
    _pg_to_8,
)
assert len(PG_MIGRATIONS) == len(MIGRATIONS), "every schema step has its PostgreSQL twin"


# --------------------------------------------------------------------------- the store

class Store:
    """The durable record. See the module docstring.

    ``TABLES``: its tables, each after the ones its rows refer to.

    Resource handling: opening takes the file lock (when ``exclusive``) and
    migrates the schema; :meth:`close` (or ``with Store(...)``) releases both.
    Error handling: refusals are :class:`Refused` with a code;
    ``sqlite3`` errors pass through (a transaction that raises is rolled
    back).
    """

    TABLES: Final = ("sessions", "operations", "messages", "entries", "usage", "skipped_frames")

    def __init__(
        self,
        path: str | os.PathLike[str] | Target,
        *,
        exclusive: bool = True,
        create: bool = True,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self._clock = clock
        #: Told of a change a notification is made of (a turn that ended, a
        #: daemon that became unreachable), inside the transaction that
        #: writes it: ``(database, what, record)`` (:class:`router.notify.record.Notices`).
        self.on_change: Callable[[Database, str, dict[str, Any]], None] | None = None
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self._lock_fd: int | None = None
        self._owner: int | None = None
        self._depth = 0
        self._closed = False
        #: The schema version when the store opened (``__repr__`` reads it; no query).
        self._opened_version = 0
        #: Held by the thread in a transaction, and by close().
        self._guard = threading.Lock()
        self._group = GroupCommit(self._run_batch, trio.CapacityLimiter(1))
        target = path if isinstance(path, Target) else None
        if target is None and isinstance(path, str) and is_postgres_url(path):
            target = Target("postgresql", path)
        if target is not None and target.kind == "postgresql":
            self.path = None
            self.location = str(target)
            self._open_postgres(target.location, create=create)
            return
        self.path = Path(path.location if isinstance(path, Target) else path)
        #: Where the record is, as messages name it (a PostgreSQL URL without its password).
        self.location = str(self.path)
        if not create and not self.path.exists():
            raise Refused("no-store", f"there is no store at {self.path}; check --store")
        if exclusive:
            try:
                self._lock_fd = lock_file(self.path)
            except OSError as error:
                raise self._bad_store(error.strerror or str(error)) from None
            if self._lock_fd is None:
                raise Refused(
                    "store-busy",
                    f"another host has the store {self.path} open; stop it or use another store",
                )
        try:
            self._db: Database = SqliteDatabase(self.path, "host", synchronous=synchronous)
        except BaseException as error:
            self._unlock()
            if isinstance(error, (sqlite3.Error, OSError)):
                raise self._cannot_open(error) from None
            raise
        try:
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException as error:
            self.close()  # the connection, and the file lock with it
            if isinstance(error, (sqlite3.DatabaseError, OSError)):
                raise self._cannot_open(error) from None
            raise

    def _open_postgres(self, url: str, *, create: bool) -> None:
        """The PostgreSQL side of ``__init__``: no file lock (routers share
        the database by design; the cluster's leases say who drives which
        session), foreign keys always on, the same migrations."""
        self._db = PgDatabase(url, "host")  # a server it cannot reach: bad-store
        try:
            if not create and self._db.schema_version() == 0:
                raise Refused("no-store", f"there is no store in {self.location}; check --store")
            self._migrate()
        except BaseException as error:
            self.close()
            if isinstance(error, database_errors()):
                raise self._bad_store(str(error).strip()) from None
            raise

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    @property
    def database(self) -> Database:
        """The connection, for the fencing hook (``database.fences``) and
        the copy command; use it only from the store's worker thread."""
        return self._db

    def _cannot_open(self, error: BaseException) -> Refused:
        """The refusal of a file that cannot be opened: ``store-unavailable``
        when the disk is full or failing (:mod:`router._transient`: free
        space and start again), else ``bad-store``."""
        if is_transient(error):
            return Refused("store-unavailable", f"the store {self.location} cannot be opened or written now "
                           f"({str(error).strip()}): its disk is full or failing; free space on it and start again")
        return self._bad_store(str(error))

    def _bad_store(self, reason: str) -> Refused:
        return Refused(
            "bad-store", f"{self.location} cannot be used as a store ({reason}); check --store"
        )

    # ---------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Close the file and drop the lock. Waits for a transaction another
        thread is running to end first: closing SQLite under a running
        statement crashes the interpreter. A transaction begun after the
        close is refused (:class:`StoreMisuse`). Closing twice is harmless."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            self._db.close()
            self._unlock()

    def _unlock(self) -> None:
        release_lock(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        # No I/O here: the version is the one this store migrated to (or
        # found) when it opened; `schema_version()` asks the database.
        return f"<Store {self.location!r} v{self._opened_version}>"

    # ---------------------------------------------------------------- threads

    async def call(self, fn: Callable[..., T], *args: Any, retry: bool = True) -> T:
        """Run ``fn(*args)`` (a method of this store, or a function that uses
        it) in a worker thread, one at a time, in a group commit with the
        calls waiting beside it. Not abandoned on cancellation. Run again
        whole after a transient failure (:mod:`router._transient`);
        ``store-unavailable`` past the budget. ``fn`` is then one
        transaction (each method of the store is), or transactions each
        safe to run again."""
        return await self._group.call(functools.partial(fn, *args), retry=retry)

    async def transact(self, fn: Callable[..., T], *args: Any, retry: bool = True) -> T:
        """Run ``fn(self, *args)`` as one transaction in a worker thread (in
        a group commit: a savepoint of the batch's transaction). With
        ``retry`` (the default) run again whole after a transient failure:
        ``fn`` must change nothing but the record; a function that changes
        state of its own passes ``retry=False`` and hears
        ``store-unavailable`` at once."""
        return await self._group.call(functools.partial(self._in_transaction, fn, args), retry=retry)

    def _in_transaction(self, fn: Callable[..., T], args: tuple) -> T:
        with self.transaction():
            return fn(self, *args)

    def _run_batch(self, batch: list[Call]) -> None:
        """In the worker thread: one group commit (see the module docstring)."""
        if len(batch) == 1:  # nothing to group: the call's own transactions
            batch[0].run()
            return
        try:
            with self.transaction():
                run_in_savepoints(self._db, batch)
        except Exception as exc:  # no COMMIT: no call of the batch is kept
            for call in batch:
                call.fail(exc)

    @property
    def group_commits(self) -> tuple[int, int]:
        """Calls made through :meth:`call` and :meth:`transact`, and the
        batches (thread hops and commits) that ran them."""
        return self._group.calls, self._group.batches

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Store]:
        """One transaction; nested use (same thread) joins the outer one."""
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        if not self._guard.acquire(blocking=False):
            raise StoreMisuse("the store was entered from two threads at once; use Store.call")
        if self._closed:
            self._guard.release()
            raise StoreMisuse(f"the store {self.location} is closed; stop its host before closing it")
        self._owner, self._depth = me, 1
        try:
            self._db.begin()
            try:
                yield self
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()
        finally:
            self._owner, self._depth = None, 0
            self._guard.release()

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[Store]:
        """Inside a transaction, a part undone on its own when it raises
        (the transaction goes on): SQLite's ``SAVEPOINT``."""
        if self._owner != threading.get_ident():
            raise StoreMisuse("a savepoint is taken inside a transaction of this thread")
        self._db.execute("SAVEPOINT part")
        try:
            yield self
        except BaseException as error:
            if is_transient(error):  # the database failed, the transaction with it: no part to undo
                raise
            self._db.execute("ROLLBACK TO part")
            self._db.execute("RELEASE part")
            raise
        self._db.execute("RELEASE part")

    def _q(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._db.execute(sql, params)

    def now(self) -> int:
        return self._clock()

    # ---------------------------------------------------------------- schema

    def schema_version(self) -> int:
        return self._db.schema_version()

    def _migrate(self) -> None:
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise Refused(
                "store-too-new",
                f"the store {self.location} has schema version {version}, newer than this "
                f"router's {SCHEMA_VERSION}; upgrade the router",
            )
        steps = PG_MIGRATIONS if self._db.dialect == "postgresql" else MIGRATIONS
        with self._db.migrating():  # routers starting at once on one new database: one migrates
            version = self.schema_version()
            while version < SCHEMA_VERSION:
                with self.transaction():
                    # Re-read inside the write lock: another process may have
                    # migrated between the check and BEGIN IMMEDIATE.
                    version = self.schema_version()
                    if version >= SCHEMA_VERSION:
                        break
                    steps[version](self._db)
                    self._db.set_schema_version(version + 1)
                version = self.schema_version()
        self._opened_version = version

    # ---------------------------------------------------------------- sessions

    _SESSION_COLUMNS = (
        "id, parent, generation, cursor_runtime, cursor_seq, settings, handoff, "
        "open_runtime, open_seq, created_at, updated_at, daemon_url, daemon_token, daemon_runtime, "
        "daemon_container, launcher, harness, launcher_state, launcher_reason"
    )
    #: :data:`DAEMON_COLUMNS` -> its column in ``sessions``.
    _DAEMON_COLUMN = {
        "url": "daemon_url", "token": "daemon_token", "runtime": "daemon_runtime", "container": "daemon_container",
        "launcher": "launcher", "harness": "harness", "state": "launcher_state", "reason": "launcher_reason",
    }

    @staticmethod
    def _session_of(row: tuple) -> SessionRecord:
        return SessionRecord(
            id=row[0],
            parent=row[1],
            generation=row[2],
            cursor_runtime=row[3],
            cursor_seq=row[4],
            settings=json.loads(row[5]),
            handoff=row[6],
            open_runtime=row[7],
            open_seq=row[8],
            created_at=row[9],
            updated_at=row[10],
            daemon=DaemonRecord(**dict(zip(DAEMON_COLUMNS, row[11:19]))),
        )

    def session(self, id: str) -> SessionRecord | None:
        with self.transaction():
            row = self._q(f"SELECT {self._SESSION_COLUMNS} FROM sessions WHERE id = ?", (id,)).fetchone()
        return None if row is None else self._session_of(row)

    def require_session(self, id: str) -> SessionRecord:
        record = self.session(id)
        if record is None:
            raise Refused(
                "unknown-session", f"there is no container session {id!r}; create it first"
            )
        return record

    def sessions(self) -> list[SessionRecord]:
        """Every session, oldest first."""
        with self.transaction():
            rows = self._q(f"SELECT {self._SESSION_COLUMNS} FROM sessions ORDER BY ordinal").fetchall()
        return [self._session_of(row) for row in rows]

    def create_session(
        self, id: str, *, settings: dict | None = None, parent: str | None = None
    ) -> tuple[SessionRecord, bool]:
        """Create a session, or return the one with this id unchanged.
        Returns the record and whether this call created it."""
        if type(id) is not str or not id:
            raise Refused(
                "bad-session-id",
                f"a session id must be a non-empty string, not {id!r}; a daemon refuses an empty one",
            )
        with self.transaction():
            existing = self.session(id)
            if existing is not None:
                return existing, False
            now = self.now()
            (ordinal,) = self._q("SELECT COALESCE(MAX(ordinal), 0) + 1 FROM sessions").fetchone()
            self._q(
                "INSERT INTO sessions (id, parent, ordinal, settings, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (id, parent, ordinal, _dump(settings or {}), now, now),
            )
            return self.require_session(id), True

    def fork_session(self, id: str, parent: str) -> SessionRecord:
        """A new session ``id`` that continues ``parent``'s current
        generation: its messages and persisted entries, copied, and its
        settings. The fork starts at generation 1 with no cursor."""
        with self.transaction():
            source = self.require_session(parent)
            if self.session(id) is not None:
                raise Refused(
                    "session-exists", f"a container session {id!r} exists; fork into a new id"
                )
            record, _ = self.create_session(id, settings=source.settings, parent=parent)
            self._q(
                "INSERT INTO messages (session, generation, id, position, operation_id, data,"
                " created_at, updated_at)"
                " SELECT ?, 1, id, position, operation_id, data, created_at, updated_at"
                " FROM messages WHERE session = ? AND generation = ?",
                (id, parent, source.generation),
            )
            self._q(
                "INSERT INTO entries (session, generation, position, data)"
                " SELECT ?, 1, position, data FROM entries WHERE session = ? AND generation = ?",
                (id, parent, source.generation),
            )
            return record

    def _touch(self, id: str, assignments: str, params: Sequence[Any]) -> None:
        self._q(
            f"UPDATE sessions SET {assignments}, updated_at = ? WHERE id = ?",
            (*params, self.now(), id),
        )

    def set_cursor(self, id: str, runtime: str, seq: int) -> None:
        with self.transaction():
            self._touch(id, "cursor_runtime = ?, cursor_seq = ?", (runtime, seq))

    def set_open_mark(self, id: str, runtime: str, seq: int) -> None:
        """Record that ``open`` for the current generation went to
        ``runtime`` when its newest frame was ``seq``."""
        with self.transaction():
            self._touch(id, "open_runtime = ?, open_seq = ?", (runtime, seq))

    def set_daemon(self, id: str, **fields: str | None) -> DaemonRecord:
        """Set some of a session's daemon fields (:data:`DAEMON_COLUMNS`;
        None clears one); the others stay. Returns the daemon record."""
        unknown = set(fields) - set(DAEMON_COLUMNS)
        if unknown:
            raise ValueError(f"not daemon fields: {sorted(unknown)}")
        with self.transaction():
            self.require_session(id)
            if fields:
                names = list(fields)
                self._touch(id, ", ".join(f"{self._DAEMON_COLUMN[name]} = ?" for name in names),
                            [fields[name] for name in names])
            if fields.get("state") == "unreachable" and self.on_change is not None:
                self.on_change(self._db, "unreachable", {"session": id, "reason": fields.get("reason") or ""})
            return self.require_session(id).daemon

    def set_settings(self, id: str, settings: dict) -> None:
        with self.transaction():
            self.require_session(id)
            self._touch(id, "settings = ?", (_dump(settings),))

    def take_handoff(self, id: str) -> str | None:
        """The pending handoff note, removed from the session."""
        with self.transaction():
            record = self.require_session(id)
            if record.handoff is not None:
                self._touch(id, "handoff = NULL", ())
            return record.handoff

    def reset_session(self, id: str, handoff: str | None) -> int:
        """Start a new generation (no entries, an empty transcript) with an
        optional handoff note. Refused while the session has open
        operations. Returns the new generation."""
        with self.transaction():
            record = self.require_session(id)
            if self.operations(session=id, statuses=OPEN_STATUSES):
                raise Refused(
                    "session-busy",
                    f"container session {id!r} has operations queued or running; "
                    "wait for them or abort them before a reset",
                )
            generation = record.generation + 1
            self._touch(id, "generation = ?, handoff = ?", (generation, handoff))
            return generation

    def reopen_session(self, id: str) -> int:
        """Move the current generation, as it stands, to a new number: its
        transcript, persisted entries and operations are relabelled (nothing
        copied, nothing dropped), so a daemon that holds the old number open
        from an earlier hold is sent ``restore`` and ``open`` for the new one
        and rebuilds its adapter session from the record (the reconcile's
        stale daemon: :mod:`router.host.reconcile`). Returns the new
        generation."""
        with self.transaction():
            record = self.require_session(id)
            old, new = record.generation, record.generation + 1
            for table in ("messages", "entries", "operations"):
                self._q(
                    f"UPDATE {table} SET generation = ? WHERE session = ? AND generation = ?",
                    (new, id, old),
                )
            self._touch(id, "generation = ?", (new,))
            return new

    # ---------------------------------------------------------------- operations

    _OPERATION_COLUMNS = (
        "session, id, ordinal, generation, input, when_busy, status, outcome, delivered, "
        "handoff, created_at, started_at, settled_at"
    )

    @staticmethod
    def _operation_of(row: tuple) -> OperationRecord:
        return OperationRecord(
            session=row[0],
            id=row[1],
            ordinal=row[2],
            generation=row[3],
            input=json.loads(row[4]),
            when_busy=row[5],
            status=row[6],
            outcome=_load(row[7]),
            delivered=row[8],
            handoff=row[9],
            created_at=row[10],
            started_at=row[11],
            settled_at=row[12],
        )

    def enqueue(
        self, session: str, id: str, input: JsonValue, when_busy: WhenBusy = "followUp"
    ) -> tuple[OperationRecord, bool]:
        """Durably queue an operation. Idempotent on ``(session, id)``: a
        second call stores nothing and returns the first record. Returns the
        record and whether this call created it."""
        if when_busy not in ("followUp", "steer"):
            raise Refused("bad-when-busy", f"whenBusy is 'followUp' or 'steer', not {when_busy!r}")
        with self.transaction():
            existing = self.operation(session, id)
            if existing is not None:
                return existing, False
            record = self.require_session(session)
            (ordinal,) = self._q("SELECT COALESCE(MAX(ordinal), 0) + 1 FROM operations").fetchone()
            self._q(
                "INSERT INTO operations (session, id, ordinal, generation, input, when_busy,"
                " status, created_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                (session, id, ordinal, record.generation, _dump(input), when_busy, self.now()),
            )
            created = self.operation(session, id)
            assert created is not None
            return created, True

    def operation(self, session: str, id: str) -> OperationRecord | None:
        with self.transaction():
            row = self._q(
                f"SELECT {self._OPERATION_COLUMNS} FROM operations WHERE session = ? AND id = ?",
                (session, id),
            ).fetchone()
        return None if row is None else self._operation_of(row)

    def operations(
        self, *, session: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[OperationRecord]:
        """Operations in submission order, narrowed to a session and statuses."""
        where, params = [], []
        if session is not None:
            where.append("session = ?")
            params.append(session)
        if statuses is not None:
            if not statuses:
                return []
            if set(statuses) == set(OPEN_STATUSES):
                where.append(_OPEN_TERM)  # the partial index's own term: it reads only open operations
            else:
                where.append(f"status IN ({', '.join('?' for _ in statuses)})")
                params.extend(statuses)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self.transaction():
            rows = self._q(
                f"SELECT {self._OPERATION_COLUMNS} FROM operations {clause} ORDER BY ordinal", params
            ).fetchall()
        return [self._operation_of(row) for row in rows]

    def open_sessions(self) -> list[str]:
        """Ids of sessions with queued or running operations, oldest first."""
        with self.transaction():
            rows = self._q(
                "SELECT s.id FROM sessions s WHERE EXISTS (SELECT 1 FROM operations o"
                " WHERE o.session = s.id AND o.status IN ('queued', 'running')) ORDER BY s.ordinal"
            ).fetchall()
        return [row[0] for row in rows]

    def start(self, session: str, id: str) -> bool:
        """``queued`` → ``running``. False when it was not queued."""
        with self.transaction():
            return (
                self._q(
                    "UPDATE operations SET status = 'running', started_at = ?"
                    " WHERE session = ? AND id = ? AND status = 'queued'",
                    (self.now(), session, id),
                ).rowcount
                > 0
            )

    def requeue(self, session: str, id: str) -> bool:
        """``running`` → ``queued``, undelivered, to run again."""
        with self.transaction():
            return (
                self._q(
                    "UPDATE operations SET status = 'queued', delivered = NULL, started_at = NULL"
                    " WHERE session = ? AND id = ? AND status = 'running'",
                    (session, id),
                ).rowcount
                > 0
            )

    def settle(self, session: str, id: str, outcome: dict) -> bool:
        """Settle a queued or running operation with a wire outcome
        (``{"status": "done", "text"}`` or ``{"status": "unanswered",
        "reason"}``). False when it had settled already or does not exist."""
        status = outcome.get("status")
        if status not in SETTLED_STATUSES:
            raise ValueError(f"not an outcome: {outcome!r}")
        with self.transaction():
            settled = (
                self._q(
                    "UPDATE operations SET status = ?, outcome = ?, settled_at = ?"
                    " WHERE session = ? AND id = ? AND status IN ('queued', 'running')",
                    (status, _dump(outcome), self.now(), session, id),
                ).rowcount
                > 0
            )
            if settled and status == "done" and self.on_change is not None:
                self.on_change(self._db, "turn-ended", {"session": session, "operation": id,
                                                        "text": str(outcome.get("text") or "")})
            return settled

    def set_delivered(
        self, session: str, id: str, runtime: str | None, *, handoff: str | None = None
    ) -> None:
        """Record the runtime an operation was handed to (None: not handed
        to any live one). ``handoff``, when given, is attached to it."""
        with self.transaction():
            if handoff is None:
                self._q(
                    "UPDATE operations SET delivered = ? WHERE session = ? AND id = ?",
                    (runtime, session, id),
                )
            else:
                self._q(
                    "UPDATE operations SET delivered = ?, handoff = ? WHERE session = ? AND id = ?",
                    (runtime, handoff, session, id),
                )

    # ---------------------------------------------------------------- transcript

    def put_message(
        self, session: str, generation: int, message: dict, operation_id: str | None = None
    ) -> None:
        """Store a transcript message; one with the same id in the same
        generation is replaced in place (its position kept)."""
        now = self.now()
        with self.transaction():
            self._q(
                "INSERT INTO messages (session, generation, id, position, operation_id, data,"
                " created_at, updated_at) VALUES (?, ?, ?,"
                " (SELECT COALESCE(MAX(position), 0) + 1 FROM messages"
                "  WHERE session = ? AND generation = ?), ?, ?, ?, ?)"
                " ON CONFLICT (session, generation, id) DO UPDATE SET"
                " data = excluded.data, operation_id = excluded.operation_id,"
                " updated_at = excluded.updated_at",
                (session, generation, message["id"], session, generation, operation_id,
                 _dump(message), now, now),
            )  # fmt: skip

    def message_owner(self, session: str, generation: int, id: str) -> tuple[str | None, dict] | None:
        """The stored message ``id`` of ``generation`` as ``(operation id,
        message)``; None when there is none."""
        with self.transaction():
            row = self._q(
                "SELECT operation_id, data FROM messages WHERE session = ? AND generation = ? AND id = ?",
                (session, generation, id),
            ).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def messages(self, session: str, generation: int | None = None) -> list[dict]:
        """The transcript of ``generation`` (default: the current one, that
        is, since the last reset), in order of first appearance."""
        with self.transaction():
            if generation is None:
                generation = self.require_session(session).generation
            rows = self._q(
                "SELECT data FROM messages WHERE session = ? AND generation = ? ORDER BY position",
                (session, generation),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def _message_version(self, session: str) -> int:
        (version,) = self._q("SELECT COALESCE(MAX(version), 0) FROM messages WHERE session = ?", (session,)).fetchone()
        return version

    def message_log(self, session: str, since: int | None = None) -> MessageLog:
        """The current generation's messages changed after version
        ``since``, oldest change first; with ``since`` None, every message
        in transcript order. One transaction, so ``version`` is exactly what
        the messages read reflect."""
        with self.transaction():
            generation = self.require_session(session).generation
            version = self._message_version(session)
            if since is None:
                sql = "SELECT version, data FROM messages WHERE session = ? AND generation = ? ORDER BY position"
                params: tuple = (session, generation)
            else:
                sql = (
                    "SELECT version, data FROM messages WHERE session = ? AND generation = ? AND version > ?"
                    " ORDER BY version"
                )
                params = (session, generation, since)
            rows = self._q(sql, params).fetchall()
        return MessageLog(
            generation=generation, version=version, messages=[(row[0], json.loads(row[1])) for row in rows]
        )

    def message_versions(self, session: str, ids: Sequence[str]) -> MessageLog:
        """The current generation, the session's highest message version,
        and the ``(version, message)`` now of each of ``ids`` stored in
        the generation (in the order asked, each once)."""
        with self.transaction():
            generation = self.require_session(session).generation
            version = self._message_version(session)
            found: list[tuple[int, dict]] = []
            for mid in dict.fromkeys(ids):
                row = self._q(
                    "SELECT version, data FROM messages WHERE session = ? AND generation = ? AND id = ?",
                    (session, generation, mid),
                ).fetchone()
                if row is not None:
                    found.append((row[0], json.loads(row[1])))
        return MessageLog(generation=generation, version=version, messages=found)

    # ---------------------------------------------------------------- entries

    def append_entries(self, session: str, generation: int, entries: Sequence[JsonValue]) -> None:
        if not entries:
            return
        with self.transaction():
            (end,) = self._q(
                "SELECT COALESCE(MAX(position), 0) FROM entries WHERE session = ? AND generation = ?",
                (session, generation),
            ).fetchone()
            self._db.executemany(
                "INSERT INTO entries (session, generation, position, data) VALUES (?, ?, ?, ?)",
                [(session, generation, end + i, _dump(e)) for i, e in enumerate(entries, 1)],
            )

    def entries(self, session: str, generation: int | None = None) -> list[JsonValue]:
        """The adapter's persisted entries of ``generation`` (default: the
        current one), in order."""
        with self.transaction():
            if generation is None:
                generation = self.require_session(session).generation
            rows = self._q(
                "SELECT data FROM entries WHERE session = ? AND generation = ? ORDER BY position",
                (session, generation),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    # ---------------------------------------------------------------- skipped frames

    def skip_frame(self, session: str, runtime: str, seq: int, reason: str, text: str) -> None:
        """Keep the note of a frame passed without applying it: its runtime
        and seq, why, and the start of its text (at most
        :data:`SKIPPED_TEXT_CHARS` characters)."""
        with self.transaction():
            self._q(
                "INSERT INTO skipped_frames (session, runtime, seq, reason, text, at) VALUES (?, ?, ?, ?, ?, ?)",
                (session, runtime, seq, reason, _storable(text[:SKIPPED_TEXT_CHARS]), self.now()),
            )

    def skipped_frames(self, session: str) -> list[SkippedFrame]:
        """The frames of ``session`` the host passed without applying, oldest first."""
        with self.transaction():
            rows = self._q(
                "SELECT session, runtime, seq, reason, text, at FROM skipped_frames"
                " WHERE session = ? ORDER BY rowid",
                (session,),
            ).fetchall()
        return [
            SkippedFrame(session=row[0], runtime=row[1], seq=row[2], reason=row[3], text=row[4], at=row[5])
            for row in rows
        ]

    # ---------------------------------------------------------------- usage

    def record_usage(
        self, session: str, operation_id: str | None, runtime: str, seq: int, event: dict
    ) -> None:
        """Keep one ``usage`` event, which came in frame ``runtime``/``seq``.
        Called once per frame: the apply core's cursor skips replays."""
        with self.transaction():
            self._q(
                "INSERT INTO usage (session, runtime, seq, operation_id,"
                " input_tokens, output_tokens, cost_usd, raw, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session,
                    runtime,
                    seq,
                    operation_id,
                    _figure(event.get("inputTokens")),
                    _figure(event.get("outputTokens")),
                    _figure(event.get("costUsd")),
                    _dump(event),
                    self.now(),
                ),
            )

    def usage_records(
        self, session_id: str | None = None, since: int | None = None
    ) -> list[UsageRecord]:
        """Usage figures per operation, for the plug-in layer's limits.

        One :class:`UsageRecord` per ``(session, operation)`` that reported
        usage, summing its ``usage`` events; events between turns (no
        operation) form one record per session with ``operation_id`` None.
        ``session_id`` narrows to one session; ``since`` (ms since the epoch)
        counts only events recorded at or after it. Ordered by the last
        event's time, oldest first. From Trio code:
        ``await store.call(store.usage_records, session_id, since)``.
        """
        where, params = [], []
        if session_id is not None:
            where.append("session = ?")
            params.append(session_id)
        if since is not None:
            where.append("at >= ?")
            params.append(since)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self.transaction():
            rows = self._q(
                "SELECT session, operation_id, SUM(input_tokens), SUM(output_tokens),"
                " SUM(cost_usd), COUNT(*), MIN(at), MAX(at) FROM usage"
                f" {clause} GROUP BY session, operation_id ORDER BY MAX(at), session, operation_id NULLS FIRST",
                params,
            ).fetchall()
        return [
            UsageRecord(
                session=row[0],
                operation_id=row[1],
                input_tokens=row[2],
                output_tokens=row[3],
                cost_usd=row[4],
                events=row[5],
                first_at=row[6],
                last_at=row[7],
            )
            for row in rows
        ]

    def usage_after(self, session: str, mark: int | None = None) -> UsageAfter:
        """The ``usage`` events of ``session`` recorded after ``mark``
        (a :attr:`UsageAfter.mark` this method answered before), summed,
        and the new mark: the session's last event so far. ``mark`` None
        asks for the mark alone (nothing is summed). What the ``frames``
        usage source brackets a turn with: each read costs the events since
        the mark (the ``usage_session`` index), however long the session's
        history. From Trio code: ``await store.call(store.usage_after, session, mark)``.
        """
        with self.transaction():
            if mark is None:
                (last,) = self._q("SELECT MAX(rowid) FROM usage WHERE session = ?", (session,)).fetchone()
                return UsageAfter(mark=last or 0, events=0, input_tokens=None, output_tokens=None)
            last, events, input_tokens, output_tokens = self._q(
                "SELECT MAX(rowid), COUNT(*), SUM(input_tokens), SUM(output_tokens) FROM usage"
                " WHERE session = ? AND rowid > ?",
                (session, mark),
            ).fetchone()
        return UsageAfter(mark=mark if last is None else last, events=events,
                          input_tokens=input_tokens, output_tokens=output_tokens)

    # ---------------------------------------------------------------- inspection

    def dump(self, *, timestamps: bool = False) -> dict[str, list[tuple]]:
        """Every row of every table, sorted: for tests that compare stores.
        Timestamps are left out unless asked for."""
        stamp = {"created_at", "updated_at", "started_at", "settled_at", "at"}
        out: dict[str, list[tuple]] = {}
        with self.transaction():
            for table in self.TABLES:
                cursor = self._q(f"SELECT * FROM {table}")
                names = [d[0] for d in cursor.description]
                # PostgreSQL's tables carry SQLite's ``rowid`` as a column.
                keep = [i for i, n in enumerate(names) if (timestamps or n not in stamp) and n != "rowid"]
                out[table] = sorted(
                    (tuple(row[i] for i in keep) for row in cursor.fetchall()), key=repr
                )
        return out
