"""The record's databases: SQLite files or one PostgreSQL database, behind
one small connection face.

The host's store (:mod:`router.host.store`), the delivery record
(:mod:`router.turns.delivery_log`), the turn records
(:mod:`router.plugins.usage`) and the paired devices
(:mod:`router.remote.devices`) write SQL that is portable but for a few
spots; :class:`Database` is what they hold instead of a ``sqlite3``
connection, and it takes care of those spots:

- ``execute(sql, params)`` / ``executemany``: the SQL is written with ``?``
  placeholders (SQLite's); on PostgreSQL they become ``%s`` (and a literal
  ``%`` becomes ``%%``), outside quoted strings (:func:`pg_sql`). Rows are
  tuples on both; a cursor has ``fetchone``, ``fetchall``, ``rowcount``,
  ``description``.
- :meth:`Database.begin`: the one place a transaction starts. SQLite's
  ``BEGIN IMMEDIATE`` takes the file's write lock, so writers (and the
  store's reads, which run in transactions too) go one at a time. On
  PostgreSQL it is ``BEGIN`` and a transaction-level advisory lock named
  after the record (``pg_advisory_xact_lock``), so the transactions of one
  record go one at a time across every router on the database, exactly as
  on SQLite: the ``SELECT MAX(ordinal) + 1`` the store takes and the
  read-then-insert of an admission stay right with many routers. The other
  records (a store's and a delivery log's) have locks of their own.
  Then every *fence* registered on the database (:attr:`Database.fences`)
  runs inside the new transaction: the hook the cluster's fencing numbers
  use (docs/store.md, "Hook for fencing").
- ``COMMIT``, ``ROLLBACK``, ``SAVEPOINT``/``ROLLBACK TO``/``RELEASE`` are
  the same statements on both (a failed statement aborts a PostgreSQL
  transaction until ``ROLLBACK`` or ``ROLLBACK TO``: every caller here does
  one of the two when a statement raises).
- :meth:`Database.schema_version`: ``PRAGMA user_version`` of the file on
  SQLite; a row of the ``router_schema`` table on PostgreSQL, one per record
  (``component``), since the records share one database there. A component
  whose tables live in another record's database (the notifications', in
  the delivery record's and the host's) has its row of ``router_schema``
  on either dialect (a SQLite file gets the table too).

- :class:`Step` and :func:`migrate`: a record's schema as steps, each
  holding its SQLite and its PostgreSQL statements side by side (or one
  portable list); a record of its own (a *component*: ``host``, ``turns``,
  ``records``, ``devices`` …) is a name and such a list, handed to
  :func:`migrate` (a SQLite file) or :func:`open_migrated` (PostgreSQL).

Connections are autocommit (transactions begun by hand, as the SQLite ones
are opened with ``isolation_level=None``) and used from the one worker
thread their owner's :class:`router.store.worker.Worker` runs calls on.
psycopg's async API runs under asyncio only, so from Trio the sync API runs
in worker threads, as SQLite does.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sqlite3
import sys
from pathlib import Path
from typing import Any, Callable, Final, Iterable, Iterator, Literal, Sequence
from urllib.parse import urlsplit, urlunsplit

import attrs

from router.store.sqlite import connect_wal
from router._transient import StoreUnavailable
from router.errors import Refusal

__all__ = [
    "Database",
    "IDLE_IN_TRANSACTION_LIMIT",
    "PgDatabase",
    "SqliteDatabase",
    "Step",
    "StoreTarget",
    "connect_postgres",
    "database_errors",
    "is_postgres_url",
    "is_store_failure",
    "migrate",
    "open_migrated",
    "parse_target",
    "pg_sql",
    "redact",
]

#: The URL schemes libpq takes for a PostgreSQL database.
POSTGRES_SCHEMES: Final = ("postgresql", "postgres")
#: A ``--store`` that names a SQLite data directory explicitly.
SQLITE_PREFIX: Final = "sqlite:"


# --------------------------------------------------------------------------- targets

@attrs.frozen
class StoreTarget:
    """Where the record lives: ``kind`` ``sqlite`` (``location`` a data
    directory, or a file for a single record) or ``postgresql``
    (``location`` the URL, as given)."""

    kind: Literal["sqlite", "postgresql"]
    location: str

    def __str__(self) -> str:
        return self.location if self.kind == "sqlite" else redact(self.location)


def is_postgres_url(text: str) -> bool:
    return text.split("://", 1)[0].lower() in POSTGRES_SCHEMES and "://" in text


def parse_target(text: str) -> StoreTarget:
    """A ``--store`` value as a :class:`StoreTarget`: ``postgresql://…`` (or
    ``postgres://…``) is a PostgreSQL database, ``sqlite:PATH`` or any other
    text a SQLite path. Refused (``bad-store-url``) when it is empty, holds
    a NUL, names another URL scheme, or is a PostgreSQL URL libpq cannot
    read."""
    if type(text) is not str or not text or "\x00" in text:
        raise Refusal("bad-store-url", f"{text!r} is not a store: give a data directory or postgresql://…")
    if is_postgres_url(text):
        _check_postgres_url(text)
        return StoreTarget("postgresql", text)
    if text.startswith(SQLITE_PREFIX):
        path = text[len(SQLITE_PREFIX):]
        if path.startswith("//"):  # sqlite:///abs/path, the URL spelling
            path = path[2:]
        if not path:
            raise Refusal("bad-store-url", "sqlite: needs a path after it (sqlite:/var/lib/router)")
        return StoreTarget("sqlite", path)
    scheme = text.split("://", 1)[0] if "://" in text else None
    if scheme is not None and scheme.isidentifier():
        raise Refusal(
            "bad-store-url", f"{scheme}:// is not a store this router has: give a data directory or postgresql://…"
        )
    return StoreTarget("sqlite", text)


def _check_postgres_url(text: str) -> None:
    try:
        from psycopg.conninfo import conninfo_to_dict

        ports = str(conninfo_to_dict(text).get("port") or "")
    except ImportError as error:  # pragma: no cover - psycopg is a dependency
        raise Refusal("no-postgres-driver", f"psycopg does not import ({error}); pip install 'psycopg[binary]'")
    except Exception as error:  # psycopg.ProgrammingError; libpq's message says what is wrong
        raise Refusal("bad-store-url", f"{redact(text)} is not a PostgreSQL URL libpq reads: {error}") from None
    # libpq reads the port only when it connects; a port is checked here so
    # that a typo is refused when the router starts, not at its first write.
    for port in ports.split(",") if ports else ():
        if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise Refusal("bad-store-url", f"{redact(text)} names the port {port!r}, which is not a TCP port")


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: what logs and
    refusals print."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rsplit("@", 1)[1]
        user = parts.username or ""
        return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<a PostgreSQL URL that does not parse>"


# --------------------------------------------------------------------------- SQL

@functools.lru_cache(maxsize=1024)
def pg_sql(sql: str) -> str:
    """SQLite-flavoured SQL (``?`` placeholders) as psycopg takes it:
    ``?`` → ``%s`` and ``%`` → ``%%``, except inside quoted strings and
    quoted names, which pass through as written."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if quote is not None:
            out.append("%%" if char == "%" else char)
            if char == quote:
                quote = None
        elif char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


def _lock_key(component: str) -> int:
    """The advisory lock of one record: a signed 64-bit number from its
    name (PostgreSQL's advisory locks are keyed by a ``bigint``)."""
    digest = hashlib.sha256(f"router.record.{component}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# --------------------------------------------------------------------------- errors

def _psycopg() -> Any:
    """psycopg if this process loaded it (no PostgreSQL database opened:
    no psycopg error can be raised either)."""
    return sys.modules.get("psycopg")


def database_errors() -> tuple[type[BaseException], ...]:
    """Every error class a database of this process may raise, and
    :class:`router._transient.StoreUnavailable` (what the workers raise
    when one failed transiently past its retries)."""
    psycopg = _psycopg()
    if psycopg is None:
        return (sqlite3.Error, StoreUnavailable)
    return (sqlite3.Error, StoreUnavailable, psycopg.Error)


def is_store_failure(error: BaseException) -> bool:
    """Whether ``error`` is the database failing (the disk, a lock, a
    closed, lost or corrupt database), not the statement's data; a
    transient failure past its retries (``store-unavailable``) is one."""
    if isinstance(error, StoreUnavailable):
        return True
    if isinstance(error, (sqlite3.OperationalError, sqlite3.InternalError)):
        return True
    if type(error) is sqlite3.DatabaseError:
        return True
    psycopg = _psycopg()
    if psycopg is not None and isinstance(error, psycopg.Error):
        failures = (psycopg.OperationalError, psycopg.InternalError, psycopg.InterfaceError)
        return isinstance(error, failures) or type(error) is psycopg.DatabaseError
    return False


# --------------------------------------------------------------------------- connections

#: A fence: run inside every transaction right after it begins, with the
#: database; raising refuses the transaction (its caller rolls back).
Fence = Callable[["Database"], None]


class Database:
    """One connection, SQLite or PostgreSQL (see the module docstring)."""

    dialect: str = ""

    def __init__(self, component: str) -> None:
        #: The record this connection serves: ``host``, ``turns``, ``records``.
        self.component = component
        #: The fencing hook: each runs inside every transaction, after BEGIN.
        self.fences: list[Fence] = []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    @property
    def in_transaction(self) -> bool:
        raise NotImplementedError

    def _begin(self) -> None:
        raise NotImplementedError

    def begin(self) -> None:
        """Start a transaction (the one place every transaction starts),
        holding the record's write lock, and run the fences in it. A fence
        that raises leaves the transaction rolled back and raises on."""
        self._begin()
        try:
            for fence in self.fences:
                fence(self)
        except BaseException:
            self.rollback()
            raise

    def rollback(self) -> None:
        """``ROLLBACK`` the open transaction, if one is still open: SQLite
        rolls a transaction back by itself on some errors (a full disk), and
        a connection the server dropped has none left. Called while another
        error is on its way out, it must not replace that error with its
        own "no transaction is active"."""
        if self.in_transaction:
            self.execute("ROLLBACK")

    def commit(self) -> None:
        """``COMMIT``; when it fails (a full disk, a lost connection), what
        is left of the transaction is rolled back and the error raised:
        nothing of it is kept, and the caller may run it again whole."""
        try:
            self.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                self.rollback()
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """``begin()`` … ``COMMIT``, ``ROLLBACK`` when the block raises."""
        self.begin()
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def schema_version(self, component: str | None = None) -> int:
        """The schema version of ``component`` (default: this record's own,
        :attr:`component`) in this database; 0 when it has none yet."""
        raise NotImplementedError

    def set_schema_version(self, version: int, component: str | None = None) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def migrating(self, component: str | None = None) -> Iterator[None]:
        """Held around a whole migration of ``component`` (default: this
        record's own): SQLite's file lock already makes one process the
        migrator; PostgreSQL takes a lock (see there)."""
        yield

    def close(self) -> None:
        raise NotImplementedError


#: The table of schema versions: on PostgreSQL one row per record; in a
#: SQLite file one per component other than the file's own.
_SCHEMA_TABLE: Final = "CREATE TABLE IF NOT EXISTS router_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"


class SqliteDatabase(Database):
    """A ``sqlite3`` connection (WAL), unchanged: each record has its own
    file, so the component names nothing in it."""

    dialect = "sqlite"

    def __init__(self, path: str | Path, component: str, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL") -> None:
        super().__init__(component)
        self.raw = connect_wal(path, synchronous=synchronous)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.raw.executemany(sql, rows)

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def _begin(self) -> None:
        self.raw.execute("BEGIN IMMEDIATE")

    def schema_version(self, component: str | None = None) -> int:
        if component is None or component == self.component:
            return self.raw.execute("PRAGMA user_version").fetchone()[0]
        if self.raw.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'router_schema'").fetchone() \
                is None:
            return 0
        row = self.raw.execute("SELECT version FROM router_schema WHERE component = ?", (component,)).fetchone()
        return 0 if row is None else row[0]

    def set_schema_version(self, version: int, component: str | None = None) -> None:
        if component is None or component == self.component:
            self.raw.execute(f"PRAGMA user_version = {int(version)}")
            return
        self.raw.execute(_SCHEMA_TABLE)
        self.raw.execute("INSERT INTO router_schema (component, version) VALUES (?, ?) ON CONFLICT (component) "
                         "DO UPDATE SET version = excluded.version", (component, int(version)))

    def close(self) -> None:
        self.raw.close()


#: Seconds a transaction of ours may sit idle on the server between two
#: statements before the server ends it (``idle_in_transaction_session_timeout``
#: of every connection a router opens). Ours never pause inside one (each
#: runs start to finish on a worker thread), so only a stalled process does:
#: stopped (SIGSTOP), swapped out, cut off. Without a limit it would hold its
#: locks (a record's write lock, a lease row) for as long as it stalls, and
#: every other router's writes, and the reads of its board, would wait with
#: it. Past the limit nothing of that transaction is written, and its next
#: statement fails (the connection is opened again for the one after). A
#: cluster's fence sets a tighter limit in its own transactions.
IDLE_IN_TRANSACTION_LIMIT: Final = 5.0


def connect_postgres(url: str, *, idle_limit: float | None = None) -> Any:
    """A psycopg connection to ``url``, autocommit (transactions begun by
    hand), whose transactions the server ends when idle for ``idle_limit``
    seconds (default :data:`IDLE_IN_TRANSACTION_LIMIT`).
    ``psycopg.OperationalError`` when the server cannot be reached."""
    import psycopg

    idle_limit = IDLE_IN_TRANSACTION_LIMIT if idle_limit is None else idle_limit
    options = f"-c idle_in_transaction_session_timeout={max(1, round(idle_limit * 1000))}"
    return psycopg.connect(url, autocommit=True, application_name="router", options=options)


class PgDatabase(Database):
    """A psycopg 3 connection (sync API) to a database the records share."""

    dialect = "postgresql"

    def __init__(self, url: str, component: str, *, idle_limit: float | None = None) -> None:
        super().__init__(component)
        self.url = url
        self.idle_limit = idle_limit
        try:
            raw = connect_postgres(url, idle_limit=idle_limit)
        except Exception as error:
            if isinstance(error, database_errors()):  # the server refused us or is not there
                raise Refusal(
                    "bad-store", f"{redact(url)} cannot be used as a store ({str(error).strip()}); check --store"
                ) from None
            raise
        self._over(raw)

    @classmethod
    def dialing(cls, url: str, component: str, *, idle_limit: float | None = None) -> PgDatabase:
        """``component``'s record in ``url``, its connection opened now and
        a failure to open it raised as psycopg's own error (transient:
        :mod:`router._transient`), not refused ``bad-store``: for an owner
        whose calls are run again after a transient failure (the cluster's
        database, whose server may be restarting when it first dials)."""
        db = cls.__new__(cls)
        Database.__init__(db, component)
        db.url, db.idle_limit = url, idle_limit
        db._over(connect_postgres(url, idle_limit=idle_limit))
        return db

    @classmethod
    def borrowing(cls, raw: Any, component: str) -> PgDatabase:
        """``component``'s record over a connection another part opened and
        owns (the cluster's worker hands its own to a schema step): never
        opened again here, and never closed here."""
        db = cls.__new__(cls)
        Database.__init__(db, component)
        db.url, db.idle_limit = "", None
        db._over(raw)
        db._shut = True  # a lost connection is its owner's to open again
        return db

    def _over(self, raw: Any) -> None:
        self.raw = raw
        self._lock = _lock_key(self.component)
        #: Whether a transaction this connection began is still open.
        self._began = False
        #: How many times a lost connection was opened again.
        self.reconnects = 0
        #: Closed by its owner: never opened again.
        self._shut = False

    def live(self) -> None:
        """A connection the server dropped (a restart, a terminated backend,
        a network cut) is opened again before the next transaction or
        statement outside one: the one that met the loss raised (its
        transaction is lost, and the caller's retry, :mod:`router._transient`,
        runs it again whole); the ones after it go on. While the server is
        away the reconnect raises ``OperationalError`` (transient too), and
        the next statement tries again."""
        if (self.raw.broken or self.raw.closed) and not self._began and not self._shut:
            self.raw.close()
            self.raw = connect_postgres(self.url, idle_limit=self.idle_limit)
            self.reconnects += 1

    def rollback(self) -> None:
        if self.raw.broken or self.raw.closed:  # the server ended the transaction with the connection
            self._began = False
            return
        super().rollback()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.live()
        if sql in ("COMMIT", "ROLLBACK"):
            self._began = False
        # Without parameters psycopg sends the text as it is (a ``%`` stays one).
        return self.raw.execute(pg_sql(sql), params) if params else self.raw.execute(sql)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.raw.cursor() as cursor:
            cursor.executemany(pg_sql(sql), list(rows))

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def _begin(self) -> None:
        # One round trip: without parameters psycopg sends a simple query,
        # which may hold two statements (the key is our own integer).
        self._began = False
        self.live()
        try:
            self.raw.execute(f"BEGIN; SELECT pg_advisory_xact_lock({int(self._lock)})")
        except BaseException:
            if not (self.raw.broken or self.raw.closed) and self.in_transaction:
                self.raw.execute("ROLLBACK")
            raise
        self._began = True

    def schema_version(self, component: str | None = None) -> int:
        (table,) = self.raw.execute("SELECT to_regclass('router_schema')").fetchone()
        if table is None:
            return 0
        row = self.raw.execute("SELECT version FROM router_schema WHERE component = %s",
                               (component or self.component,)).fetchone()
        return 0 if row is None else row[0]

    @contextlib.contextmanager
    def migrating(self, component: str | None = None) -> Iterator[None]:
        """The migration lock of ``component`` (default: this record), a
        session-level advisory lock taken outside any transaction and held
        until the migration ends, so any number of routers starting at once
        on a new database migrate one after another. The per-transaction record lock alone is not enough:
        a transaction that waited for it at ``BEGIN`` could still look the
        schema table up in the catalog as it was before the other router's
        migration committed (``to_regclass`` reads the catalog, not the
        statement's snapshot), find no version, and create the tables
        again (``relation "sessions" already exists``, two starts in three
        seen). A migration that begins after this lock sees every one
        committed before it."""
        self.live()
        key = _lock_key(f"migrate:{component or self.component}")
        self.raw.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            yield
        finally:
            if not self.raw.broken:
                self.raw.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def set_schema_version(self, version: int, component: str | None = None) -> None:
        # Two records migrating at once would race on creating the table
        # (CREATE TABLE IF NOT EXISTS is not safe against a concurrent one):
        # one more lock, for the table, held to the end of the transaction.
        self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("router_schema"),))
        self.raw.execute(_SCHEMA_TABLE)
        self.raw.execute(
            "INSERT INTO router_schema (component, version) VALUES (%s, %s)"
            " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
            (component or self.component, int(version)),
        )

    def close(self) -> None:
        self._shut = True
        self.raw.close()


#: One dialect's half of a schema step: its statements, in order, or a
#: function of the database that runs them (for a step that reads as it goes).
StepPart = Sequence[str] | Callable[["Database"], None]


@attrs.frozen
class Step:
    """One schema step of a record, both dialects side by side: what takes
    a SQLite file and what takes a PostgreSQL database from version ``n``
    to ``n + 1`` (``steps[n]``). ``sqlite`` None: the record has no SQLite
    form (the turn records are a JSON-lines file there)."""

    sqlite: StepPart | None
    postgresql: StepPart

    @classmethod
    def portable(cls, *statements: str) -> Step:
        """A step whose statements are the same on both dialects."""
        return cls(sqlite=statements, postgresql=statements)

    def part(self, dialect: str) -> StepPart:
        part = self.postgresql if dialect == "postgresql" else self.sqlite
        if part is None:
            raise ValueError(f"this schema step has no {dialect} form")
        return part

    def run(self, db: Database) -> None:
        """Run this step's half for ``db``'s dialect (inside the caller's
        transaction)."""
        part = self.part(db.dialect)
        if callable(part):
            part(db)
            return
        for statement in part:
            db.execute(statement)


def _as_step(step: Step | Sequence[str]) -> Step:
    """A step as given: a :class:`Step`, or the statements of a portable one
    (a component's steps may be written either way)."""
    return step if isinstance(step, Step) else Step.portable(*step)


def migrate(db: Database, steps: Sequence[Step | Sequence[str]], *, too_new: Callable[[int], Exception] | None,
            component: str | None = None) -> None:
    """Take ``component`` (default: ``db``'s own record) to version
    ``len(steps)`` in ``db``: ``steps[n]`` takes version ``n`` to ``n + 1``
    (a :class:`Step`, or statements the same on both dialects), each step
    one transaction (under the record's lock, the version read again
    inside: another router may have migrated meanwhile) that also sets the
    version. Called inside a transaction already open (a call in a worker's
    group commit), the steps run in that one, under its lock. Nothing is
    written when the component is up to date. A component newer than the
    steps raises ``too_new(version)``; ``too_new`` None leaves it alone."""
    joined = db.in_transaction
    with contextlib.nullcontext() if joined else db.migrating(component):
        while (version := db.schema_version(component)) < len(steps):
            with contextlib.nullcontext() if joined else db.transaction():
                version = db.schema_version(component)
                if version < len(steps):
                    _as_step(steps[version]).run(db)
                    db.set_schema_version(version + 1, component)
    if version > len(steps) and too_new is not None:
        raise too_new(version)


def open_migrated(url: str, component: str, steps: Sequence[Step | Sequence[str]], *,
                  too_new: Callable[[int], Exception]) -> PgDatabase:
    """A connection to ``component``'s record in the PostgreSQL database
    ``url``, its schema taken to ``len(steps)`` (:func:`migrate`); nothing
    left open when it raises (``bad-store`` when the server cannot be
    reached)."""
    db = PgDatabase(url, component)
    try:
        migrate(db, steps, too_new=too_new)
    except BaseException as error:
        db.close()
        if isinstance(error, database_errors()):  # a user who may not create tables, a server going away
            raise Refusal(
                "bad-store", f"{redact(url)} cannot hold the {component} record ({str(error).strip()}); check --store"
            ) from None
        raise
    return db


def open_database(target: StoreTarget, component: str, **sqlite_options: Any) -> Database:
    """A connection to ``target`` for ``component``: a SQLite file at
    ``target.location``, or the PostgreSQL database it names."""
    if target.kind == "postgresql":
        return PgDatabase(target.location, component)
    return SqliteDatabase(target.location, component, **sqlite_options)
