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

**One repository per table** (:mod:`router.host.record`): the sessions,
operations, messages, entries, usage and skipped frames each have a module
of their own holding that table's SQL, and the store holds one of each,
named for its table: ``store.sessions.get(id)``,
``store.operations.enqueue(...)``, ``store.messages.log(...)``. No table
has a repository of its own only for the writes that go with another's:
the writes that span tables (one applied frame: the transcript, the
entries, the usage, the operation's settlement and the cursor) are one
transaction because the caller runs them in one (:meth:`Store.transact`),
each repository method joining it. :class:`Store` holds only what the
repositories share: the connection, the worker, the transactions, the
schema, the file lock, the clock and the change hook (:attr:`Store.on_change`).

**One connection, one thread at a time.** A :class:`Store` owns one
connection (SQLite's opened with ``check_same_thread=False``) and one
:class:`router.store.worker.Worker`. Trio code never calls its repositories
on the event loop: it goes through :meth:`Store.call` or :meth:`Store.transact`,
which run the work in the worker's thread (one ``CapacityLimiter(1)``
hop per batch), so the loop never waits on the disk and two threads never
share the connection. A sync method entered from a second thread while
another thread is inside the store raises :class:`StoreMisuse` instead of
silently interleaving (trio's ``ConflictDetector`` idea).

**Transactions.** :meth:`Store.transaction` is ``BEGIN IMMEDIATE`` …
``COMMIT`` (``ROLLBACK`` on any exception); nested use joins the outer
transaction. Every repository method runs inside one, so each call is atomic
on its own, and :meth:`Store.transact` runs a whole function (one applied frame,
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
    (the whole event, JSON), ``at``. Read it with ``store.usage.records``.
``skipped_frames`` (schema version 5)
    one row per frame the host passed without applying it (it could not
    parse or apply it; see :mod:`router.host.reconcile`): ``session``,
    ``runtime``, ``seq``, ``reason``, ``text`` (its first
    :data:`SKIPPED_TEXT_CHARS` characters), ``at``. Read it with
    ``store.skipped_frames.all``.
``messages.version`` (schema version 6)
    a per-session counter of transcript changes: a message's ``version`` is
    set, by triggers, to one more than the session's highest whenever it is
    inserted or its ``data`` changes (a rewrite with the same data keeps
    it). The live view's resume point across a restart: the messages of a
    session changed since version ``v`` are those above it
    (``store.messages.log``, ``store.messages.versions``).
``sessions`` daemon columns (schema version 7)
    each container session's own daemon: ``daemon_url`` and
    ``daemon_token`` (its endpoint; NULL: the host's default endpoint),
    ``daemon_runtime`` (the runtime id it was started with),
    ``daemon_container`` (the launcher's id for it: a container id, a
    pid), ``launcher`` (the launcher module that started it), ``harness``
    (what the daemon runs: ``echo``, ``claude-code`` ...), and
    ``launcher_state`` / ``launcher_reason`` (where its lifecycle stands,
    :mod:`router.host.lifecycle`, and why). Read as
    :attr:`SessionRecord.daemon`; written with ``store.sessions.set_daemon``.
History indexes (schema version 8)
    so that no read of a turn costs more as history grows:
    ``operations_session_open``, a partial index of each session's open
    operations (``store.operations.all`` writes its term), and
    ``usage_session``, the usage after a mark (``store.usage.after``;
    on PostgreSQL over a ``rowid`` identity column added to ``usage``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Final, Iterable, Iterator, Literal, Sequence, TypeVar

from router.store.db import Database, PgDatabase, SqliteDatabase, StoreTarget, database_errors, is_postgres_url
from router.store.worker import Worker
from router.host.record import Entries, Messages, Operations, Sessions, SkippedFrames, Usage
from router.host.record.base import (  # noqa: F401 (the record's types, re-exported: callers import them from here)
    DAEMON_COLUMNS, OPEN_STATUSES, SETTLED_STATUSES, SKIPPED_TEXT_CHARS, DaemonRecord, Marks, MessageLog, OperationRecord,
    OperationStatus, Refused, SessionRecord, SkippedFrame, UsageAfter, UsageRecord, WhenBusy,
)
from router.host.schema import MIGRATIONS, OPEN_TERM, PG_MIGRATIONS, SCHEMA_VERSION, STEPS  # noqa: F401 (the steps, re-exported)
from router.store.sqlite import lock_file, release_lock
from router._transient import is_transient

T = TypeVar("T")


class StoreMisuse(RuntimeError):
    """The store was entered from two threads at once (a bug in the caller)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Joined:
    """A transaction inside one of the same thread: nothing to begin or end
    (an exception passes through to the outer one, which rolls back)."""

    __slots__ = ("_store",)

    def __init__(self, store: Store) -> None:
        self._store = store

    def __enter__(self) -> Store:
        return self._store

    def __exit__(self, *exc: object) -> None:
        return None


# --------------------------------------------------------------------------- the store

def _target(path: str | os.PathLike[str] | StoreTarget) -> StoreTarget:
    """Where a store is: a :class:`StoreTarget` as given, a PostgreSQL URL, or a
    SQLite file's path."""
    if isinstance(path, StoreTarget):
        return path
    if isinstance(path, str) and is_postgres_url(path):
        return StoreTarget("postgresql", path)
    return StoreTarget("sqlite", os.fspath(path))


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
        path: str | os.PathLike[str] | StoreTarget,
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
        #: The repositories, one per table (:mod:`router.host.record`).
        self.sessions = Sessions(self)
        self.operations = Operations(self)
        self.messages = Messages(self)
        self.entries = Entries(self)
        self.usage = Usage(self)
        self.skipped_frames = SkippedFrames(self)
        #: Whether this store is the only writer of its record: a SQLite file
        #: under this store's lock (PostgreSQL is shared by a cluster's routers).
        self.sole_writer = False
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self._lock_fd: int | None = None
        self._owner: int | None = None
        #: What a nested :meth:`transaction` returns: the outer one goes on.
        self._joined = _Joined(self)
        self._closed = False
        #: The schema version when the store opened (``__repr__`` reads it; no query).
        self._opened_version = 0
        #: Held by the thread in a transaction, and by close().
        self._guard = threading.Lock()
        self._worker: Worker | None = None
        target = _target(path)
        if target.kind == "postgresql":
            self.path = None
            self.location = str(target)
            self._open_postgres(target.location, create=create)
            return
        self.path = Path(target.location)
        #: Where the record is, as messages name it (a PostgreSQL URL without its password).
        self.location = str(self.path)
        self._open_sqlite(exclusive=exclusive, create=create, synchronous=synchronous)

    def _open_sqlite(self, *, exclusive: bool, create: bool, synchronous: str) -> None:
        """The SQLite side of ``__init__``: the file lock (when
        ``exclusive``), the connection, foreign keys on, the migrations."""
        if not create and not self.path.exists():
            raise Refused("no-store", f"there is no store at {self.path}; check --store")
        if exclusive:
            self._lock()
        self.sole_writer = exclusive
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

    def _lock(self) -> None:
        """Take the store file's lock: one host per SQLite store."""
        try:
            self._lock_fd = lock_file(self.path)
        except OSError as error:
            raise self._bad_store(error.strerror or str(error)) from None
        if self._lock_fd is None:
            raise Refused(
                "store-busy",
                f"another host has the store {self.path} open; stop it or use another store",
            )

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

    def transaction(self) -> contextlib.AbstractContextManager[Store]:
        """One transaction; nested use (same thread) joins the outer one.

        Joining is the common case (every repository method opens one, and
        the host's apply calls several per frame), so it costs one
        comparison and a context that does nothing, not a generator."""
        if self._owner == threading.get_ident():
            return self._joined
        return self._outer()

    @contextlib.contextmanager
    def _outer(self) -> Iterator[Store]:
        me = threading.get_ident()
        if not self._guard.acquire(blocking=False):
            raise StoreMisuse("the store was entered from two threads at once; use Store.call")
        if self._closed:
            self._guard.release()
            raise StoreMisuse(f"the store {self.location} is closed; stop its host before closing it")
        self._owner = me
        try:
            self._db.begin()
            try:
                yield self
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()
        finally:
            self._owner = None
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

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """One statement on the connection (inside a transaction of this
        thread: the repositories' way to the database)."""
        return self._db.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._db.executemany(sql, rows)

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

    # ---------------------------------------------------------------- inspection

    def dump(self, *, timestamps: bool = False) -> dict[str, list[tuple]]:
        """Every row of every table, sorted: for tests that compare stores.
        Timestamps are left out unless asked for."""
        stamp = {"created_at", "updated_at", "started_at", "settled_at", "at"}
        out: dict[str, list[tuple]] = {}
        with self.transaction():
            for table in self.TABLES:
                cursor = self.execute(f"SELECT * FROM {table}")
                names = [d[0] for d in cursor.description]
                # PostgreSQL's tables carry SQLite's ``rowid`` as a column.
                keep = [i for i, n in enumerate(names) if (timestamps or n not in stamp) and n != "rowid"]
                out[table] = sorted(
                    (tuple(row[i] for i in keep) for row in cursor.fetchall()), key=repr
                )
        return out
