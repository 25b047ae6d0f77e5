"""The host's durable record: one SQLite file, in WAL mode, or tables of a
PostgreSQL database (``Store("postgresql://…")``) that many routers share.

The host owns everything a session is (the daemon in the container is
disposable): the sessions, their operations, the transcript, the adapter's
persisted entries, the replay cursor and the generation. This module keeps
them in the record (SQLite or PostgreSQL, :mod:`router.store.db`) and
nothing else; the rules that decide *what* to write live in
:mod:`router.host.reconcile`, and the Trio code that moves bytes lives in
:mod:`router.host.session_link`.

Theory of operation
-------------------

**One connection, one thread at a time.** A :class:`Store` owns one
connection (SQLite's opened with ``check_same_thread=False``) and one
:class:`router.store.worker.Worker`. Trio code never calls its methods on
the event loop: it goes through :meth:`Store.call` or :meth:`Store.transact`,
which run the work in the worker's thread (one ``CapacityLimiter(1)``
hop per batch), so the loop never waits on the disk and two threads never
share the connection. A sync method entered from a second thread while
another thread is inside the store raises :class:`StoreMisuse` instead of
silently interleaving (trio's ``ConflictDetector`` idea).

**Transactions.** :meth:`Store.transaction` is ``BEGIN IMMEDIATE`` …
``COMMIT`` (``ROLLBACK`` on any exception); nested use joins the outer
transaction. Every public method runs inside one, so each call is atomic on
its own, and :meth:`Store.transact` runs a whole function (one applied frame,
or a batch of them, with the cursor) as one transaction. A worker-thread call
is not abandoned on cancellation: a Trio task that is cancelled while its
transaction runs waits for it to commit or roll back, so nothing is left
half-written. **Group commit** (the worker, :mod:`router.store.worker`): the calls and
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
:mod:`router.store.db`: the connection is psycopg 3's sync one, used from the
worker thread as the SQLite one is; ``BEGIN IMMEDIATE`` becomes ``BEGIN``
plus this record's advisory lock, so this record's transactions go one at
a time across every router on the database, as SQLite's writers do on a
file; ``exclusive`` and ``synchronous`` mean nothing there (no file lock:
routers share the database by design; the server's settings make a commit
durable). Every transaction begins in :meth:`router.store.db.Database.begin`,
which runs the fencing hook (``store.database.fences``).

Schema
------

Versioned with ``PRAGMA user_version`` (PostgreSQL: the ``host`` row of
``router_schema``); :data:`router.host.schema.STEPS` lists the steps, each
step's SQLite and PostgreSQL statements side by side, each run in its own
transaction that also sets the new version. A file newer than this code is refused (``store-too-new``); a path that cannot be opened,
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
import json
import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Literal, Sequence, TypeVar

import attrs

from router.store.db import Database, PgDatabase, SqliteDatabase, Target, database_errors, is_postgres_url
from router.store.worker import Worker
from router.host.schema import MIGRATIONS, OPEN_TERM, PG_MIGRATIONS, SCHEMA_VERSION, STEPS  # noqa: F401 (the steps, re-exported)
from router.store.sqlite import lock_file, release_lock
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
        self._worker: Worker | None = None
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
        self._start_worker()
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
        self._start_worker()
        try:
            if not create and self._db.schema_version() == 0:
                raise Refused("no-store", f"there is no store in {self.location}; check --store")
            self._migrate()
        except BaseException as error:
            self.close()
            if isinstance(error, database_errors()):
                raise self._bad_store(str(error).strip()) from None
            raise

    def _start_worker(self) -> None:
        """The store's worker (:mod:`router.store.worker`), from here on the
        owner of the connection and the file lock. A batch of several calls
        runs in :meth:`transaction` (which the calls' own transactions
        join); a lone call runs its own transactions."""
        self._worker = Worker("the store", db=self._db, lock_fd=self._lock_fd, transaction=self.transaction,
                              alone=lambda: True)
        self._lock_fd = None

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
        if self._worker is None:  # not opened: only the file lock to drop
            self._unlock()
            return
        with self._worker.held(), self._guard:
            if self._closed:
                return
            self._closed = True
            self._worker.close_held()

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
        assert self._worker is not None
        return await self._worker.call(fn, *args, retry=retry)

    async def transact(self, fn: Callable[..., T], *args: Any, retry: bool = True) -> T:
        """Run ``fn(self, *args)`` as one transaction in a worker thread (in
        a group commit: a savepoint of the batch's transaction). With
        ``retry`` (the default) run again whole after a transient failure:
        ``fn`` must change nothing but the record; a function that changes
        state of its own passes ``retry=False`` and hears
        ``store-unavailable`` at once."""
        assert self._worker is not None
        return await self._worker.call(self._in_transaction, fn, args, retry=retry)

    def _in_transaction(self, fn: Callable[..., T], args: tuple) -> T:
        with self.transaction():
            return fn(self, *args)

    @property
    def group_commits(self) -> tuple[int, int]:
        """Calls made through :meth:`call` and :meth:`transact`, and the
        batches (thread hops and commits) that ran them."""
        assert self._worker is not None
        stats = self._worker.statistics()
        return stats.calls, stats.batches

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
        with self._db.migrating():  # routers starting at once on one new database: one migrates
            version = self.schema_version()
            while version < SCHEMA_VERSION:
                with self.transaction():
                    # Re-read inside the write lock: another process may have
                    # migrated between the check and BEGIN IMMEDIATE.
                    version = self.schema_version()
                    if version >= SCHEMA_VERSION:
                        break
                    STEPS[version].run(self._db)
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
                where.append(OPEN_TERM)  # the partial index's own term: it reads only open operations
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
            return (
                self._q(
                    "UPDATE operations SET status = ?, outcome = ?, settled_at = ?"
                    " WHERE session = ? AND id = ? AND status IN ('queued', 'running')",
                    (status, _dump(outcome), self.now(), session, id),
                ).rowcount
                > 0
            )

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
