"""The deliveries' durable record: one SQLite file of its own in the data dir,
or tables of a PostgreSQL database (``DeliveryLog("postgresql://…")``, the
same methods over :mod:`router.store.db`: ``BEGIN IMMEDIATE`` is ``BEGIN`` plus
this record's advisory lock, the schema is :data:`STEPS`, no file
lock; docs/store.md).

One row per event id (a :class:`~router.turns.core.DeliveryEntry`): the session, the
message, the state, the attempts, whether a person's Dispatch attempt is
spent, and the final answer. It is what makes a delivery exactly once across
resends and across restarts of the router: a resend is answered from here.

Beside the deliveries (schema 2): each session's **stop** (a limit stopped
it; kept until the person resumes it, so a restart keeps it stopped) and
each container session's **launch** (the launch record its turn brackets
name, without ``env`` and with only ``reach.via``: they may hold secrets).
Schema 3 adds each Claude Code permission **ask** and its answer
(:mod:`router.asks`): one row per ask id, replaced as the ask is answered or
expires. Schema 4 adds each session's **park** (the provider's usage limit,
:mod:`router.limits`: one row per parked session, kept until its kept work
ran) and that **kept work** (``park_work``: one row per delivery or
operation the park holds, in order, marked ``resuming`` before it goes out
and ``done`` once it went; docs/limits.md).

Theory of operation
-------------------
One connection (SQLite's WAL, ``check_same_thread=False``; or PostgreSQL),
opened by :class:`DeliveryLog`, and one :class:`router.store.worker.Worker`.
Trio code never calls it on the event loop: it goes through
:meth:`DeliveryLog.call`, which runs the work in the worker's thread (one
``CapacityLimiter(1)`` hop per batch), so the loop never waits on the disk
and two threads never share the connection. A call is not abandoned on
cancellation: a cancelled task waits for its write to commit or roll back.
:meth:`admit` reads and inserts in one transaction, so two concurrent
resends of a new event id make one record.

**Group commit** (the worker). Calls that arrive while one is in the thread
wait, and go together in the next hop: one ``BEGIN IMMEDIATE`` … ``COMMIT``
around them all, each call in a savepoint of its own (a call that raises
rolls back only its own writes and raises to its own caller). Every caller
is answered after the ``COMMIT`` of the transaction that holds its call, so
"answered" still means "on disk"; under load (many sessions) one thread hop
and one commit serve many calls.

Durability: ``synchronous=NORMAL`` under WAL, as the host's store: a
committed record survives the death of the process at any instant.

Resource handling: the log takes a non-blocking ``flock`` on its file for
as long as it is open, so two routers never share one record
(``deliveries-busy``); :meth:`close` (the worker's) releases it once no call
runs.

Error handling: a log that cannot be opened (another router holds it, a
newer router wrote it) raises :class:`~router.errors.Refusal`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Final, TypeVar

import attrs

from router.store.db import Database, SqliteDatabase, Step, StoreTarget, is_postgres_url, migrate, open_migrated
from router.store.worker import Worker
from router.store.sqlite import lock_file, release_lock
from router._transient import is_transient
from router.errors import Refusal
from router.limits import Park
from router.plugins.routing import LaunchRecord
from router.turns.brackets import StopInfo, launch_of_json, launch_to_json
from router.turns.core import Admission, Card, Delivery, Message, Person, Proceed, DeliveryEntry, State, admit

__all__ = ["DeliveryLog", "SCHEMA_VERSION"]

T = TypeVar("T")

#: The schema this code writes (``PRAGMA user_version``): 2 added ``stops``
#: and ``launches``, 3 ``asks``, 4 ``parks`` and ``park_work`` (an older
#: file gains them when opened).
SCHEMA_VERSION: Final = 4

#: The schema, as steps: ``STEPS[n]`` takes the record from version ``n``
#: to ``n + 1``, each step's SQLite and PostgreSQL statements side by side.
#: PostgreSQL has the same tables in its types (times ``BIGINT``: ms since
#: the epoch do not fit an ``INTEGER``), with a ``rowid`` identity column
#: where SQLite's implicit one orders the rows. The SQLite statements are
#: ``IF NOT EXISTS``: a file of any older version gains what it lacks.
STEPS: Final[tuple[Step, ...]] = (
    # 1: the deliveries.
    Step(
        sqlite=("""CREATE TABLE IF NOT EXISTS deliveries (
            event_id TEXT PRIMARY KEY,
            session TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('person', 'card')),
            text TEXT NOT NULL,
            message_id TEXT,
            state TEXT NOT NULL CHECK (state IN ('pending', 'unanswered', 'answered')),
            attempts INTEGER NOT NULL,
            person_spent INTEGER NOT NULL,
            answer TEXT,
            last_code TEXT,
            last_message TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",),
        postgresql=(
            """CREATE TABLE deliveries (
                rowid BIGINT GENERATED ALWAYS AS IDENTITY,
                event_id TEXT PRIMARY KEY,
                session TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('person', 'card')),
                text TEXT NOT NULL,
                message_id TEXT,
                state TEXT NOT NULL CHECK (state IN ('pending', 'unanswered', 'answered')),
                attempts BIGINT NOT NULL,
                person_spent INTEGER NOT NULL,
                answer TEXT,
                last_code TEXT,
                last_message TEXT,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL
            )""",
            "CREATE INDEX deliveries_session ON deliveries (session, created_at, rowid)",
        ),
    ),
    # 2: each session's stop and launch.
    Step(
        sqlite=(
            "CREATE TABLE IF NOT EXISTS stops (session TEXT PRIMARY KEY, reason TEXT NOT NULL,"
            " check_name TEXT NOT NULL, at TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS launches (session TEXT PRIMARY KEY, record TEXT NOT NULL,"
            " updated_at INTEGER NOT NULL)",
        ),
        postgresql=(
            "CREATE TABLE stops (session TEXT PRIMARY KEY, reason TEXT NOT NULL, check_name TEXT NOT NULL, at TEXT NOT NULL)",
            "CREATE TABLE launches (session TEXT PRIMARY KEY, record TEXT NOT NULL, updated_at BIGINT NOT NULL)",
        ),
    ),
    # 3: the permission asks.
    Step(
        sqlite=("""CREATE TABLE IF NOT EXISTS asks (
            ask_id TEXT PRIMARY KEY,
            session TEXT NOT NULL,
            state TEXT NOT NULL,
            record TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        )""",),
        postgresql=(
            """CREATE TABLE asks (
                rowid BIGINT GENERATED ALWAYS AS IDENTITY,
                ask_id TEXT PRIMARY KEY,
                session TEXT NOT NULL,
                state TEXT NOT NULL,
                record TEXT NOT NULL,
                updated_at BIGINT NOT NULL
            )""",
            "CREATE INDEX asks_session ON asks (session, rowid)",
        ),
    ),
    # 4: the parks and their kept work.
    Step(
        sqlite=(
            """CREATE TABLE IF NOT EXISTS parks (
                session TEXT PRIMARY KEY,
                record TEXT NOT NULL,
                updated_at INTEGER NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS park_work (
                session TEXT NOT NULL,
                item TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('delivery', 'operation')),
                state TEXT NOT NULL CHECK (state IN ('kept', 'resuming', 'done')),
                created_at INTEGER NOT NULL,
                PRIMARY KEY (session, item)
            )""",
        ),
        postgresql=(
            """CREATE TABLE parks (
                rowid BIGINT GENERATED ALWAYS AS IDENTITY,
                session TEXT PRIMARY KEY,
                record TEXT NOT NULL,
                updated_at BIGINT NOT NULL
            )""",
            """CREATE TABLE park_work (
                rowid BIGINT GENERATED ALWAYS AS IDENTITY,
                session TEXT NOT NULL,
                item TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('delivery', 'operation')),
                state TEXT NOT NULL CHECK (state IN ('kept', 'resuming', 'done')),
                created_at BIGINT NOT NULL,
                PRIMARY KEY (session, item)
            )""",
        ),
    ),
)
assert len(STEPS) == SCHEMA_VERSION, "every schema version has its step"
#: The PostgreSQL halves of :data:`STEPS` (what the tests build an old database with).
PG_MIGRATIONS: Final = tuple(step.postgresql for step in STEPS)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _row_of(entry: DeliveryEntry) -> tuple[Any, ...]:
    message = entry.message
    return (
        entry.event_id,
        entry.session,
        "person" if isinstance(message, Person) else "card",
        message.text,
        message.message_id if isinstance(message, Person) else None,
        entry.state.value,
        entry.attempts,
        int(entry.person_spent),
        None if entry.answer is None else json.dumps(entry.answer),
        None if entry.last is None else entry.last[0],
        None if entry.last is None else entry.last[1],
    )


def _entry_of(row: tuple[Any, ...]) -> DeliveryEntry:
    event_id, session, kind, text, message_id, state, attempts, spent, answer, last_code, last_message = row
    message: Message = Person(text=text, message_id=message_id) if kind == "person" else Card(text=text)
    return DeliveryEntry(
        event_id=event_id,
        session=session,
        message=message,
        state=State(state),
        attempts=attempts,
        person_spent=bool(spent),
        answer=None if answer is None else json.loads(answer),
        last=None if last_code is None else (last_code, last_message),
    )


_COLUMNS: Final = (
    "event_id, session, kind, text, message_id, state, attempts, person_spent, answer, last_code, last_message"
)


def _launch(record: str) -> LaunchRecord | None:
    """A stored launch, or None for one this version cannot read."""
    try:
        return launch_of_json(json.loads(record))
    except ValueError:
        return None


class DeliveryLog:
    """The durable record of deliveries (see the module docstring)."""

    #: Its tables.
    TABLES: Final = ("deliveries", "stops", "launches", "asks")

    def __init__(self, path: str | os.PathLike[str] | StoreTarget, *, clock: Callable[[], int] = _now_ms) -> None:
        self._clock = clock
        self._lock_fd: int | None = None
        #: Told of each change a notification is made of (an ask kept, a
        #: stop, a park, their end), inside the transaction that writes it:
        #: ``(database, what, record)`` (:class:`router.notify.record.Notices`).
        self.on_change: Callable[[Database, str, dict[str, Any]], None] | None = None
        url = path.location if isinstance(path, StoreTarget) and path.kind == "postgresql" else None
        if url is None and isinstance(path, str) and is_postgres_url(path):
            url = path
        if url is not None:
            self.path = None
            self.location = str(StoreTarget("postgresql", url))
            self._open_postgres(url)
            return
        self.path = Path(path.location if isinstance(path, StoreTarget) else path)
        #: Where the record is, as messages name it (a PostgreSQL URL without its password).
        self.location = str(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_file(self.path)
        if self._lock_fd is None:
            raise Refusal(
                "deliveries-busy",
                f"another router has the delivery record {self.path} open; stop it or use another data dir",
            )
        db: Database | None = None
        try:
            db = self._db = SqliteDatabase(self.path, "turns")
            migrate(self._db, STEPS, too_new=self._too_new)  # nothing written when up to date (a full disk still opens)
        except BaseException as error:
            if db is not None:
                db.close()
            release_lock(self._lock_fd)
            if isinstance(error, (sqlite3.Error, OSError)):
                if is_transient(error):
                    raise Refusal("store-unavailable", f"the delivery record {self.path} cannot be opened or "
                                  f"written now ({str(error).strip()}): its disk is full or failing; free space on "
                                  "it and start again") from None
                raise Refusal("bad-store", f"{self.path} cannot be used as a delivery record ({str(error).strip()}); "
                              "check --data-dir") from None
            raise
        self._worker = Worker("the delivery record", db=self._db, lock_fd=self._lock_fd)

    def _too_new(self, version: int) -> Refusal:
        return Refusal(
            "deliveries-too-new",
            f"{self.location} was written by a newer router (schema {version}); upgrade this one",
        )

    def _open_postgres(self, url: str) -> None:
        """The PostgreSQL side of ``__init__``: no file lock (routers share
        the database by design), the schema migrated step by step, each
        step in a transaction under the record's lock."""
        self._db = open_migrated(url, "turns", STEPS, too_new=self._too_new)
        self._worker = Worker("the delivery record", db=self._db)

    @property
    def database(self) -> Database:
        """The connection, for the fencing hook (``database.fences``) and
        the copy command; use it only from the log's worker thread."""
        return self._db

    def __repr__(self) -> str:
        return f"<DeliveryLog {self.location!r}>"

    def close(self) -> None:
        """Close the file; waits for a call in flight. Closing twice is harmless."""
        self._worker.close()

    def __enter__(self) -> DeliveryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- from Trio

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` (one of the sync methods) in the log's thread,
        in a group commit with the calls waiting beside it (see the module
        docstring); returns once the transaction holding it committed."""
        return await self._worker.call(fn, *args)

    @property
    def calls(self) -> int:
        return self._worker.statistics().calls

    @property
    def batches(self) -> int:
        return self._worker.statistics().batches

    # ----------------------------------------------------------------- sync (worker thread)

    @contextlib.contextmanager
    def _changing(self, what: str, record: dict[str, Any]) -> Any:
        """The block's writes and :attr:`on_change`'s in one transaction
        (the group commit's, when the call is in one). ``record`` may be
        filled in by the block; set ``record["skip"]`` to tell nothing."""
        if self.on_change is None:
            yield
            return
        if self._db.in_transaction:
            yield
            if not record.pop("skip", False):
                self.on_change(self._db, what, record)
            return
        with self._db.transaction():
            yield
            if not record.pop("skip", False):
                self.on_change(self._db, what, record)

    @contextlib.contextmanager
    def atomically(self) -> Any:
        """The block's reads and writes in one transaction (the group
        commit's, when the call is in one)."""
        if self._db.in_transaction:
            yield
            return
        with self._db.transaction():
            yield

    def get(self, event_id: str) -> DeliveryEntry | None:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM deliveries WHERE event_id = ?", (event_id,)).fetchone()
        return None if row is None else _entry_of(row)

    def put(self, entry: DeliveryEntry) -> None:
        """Store ``entry`` (insert or replace its row)."""
        now = self._clock()
        self._db.execute(
            f"INSERT INTO deliveries ({_COLUMNS}, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (event_id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts, "
            "person_spent = excluded.person_spent, answer = excluded.answer, last_code = excluded.last_code, "
            "last_message = excluded.last_message, updated_at = excluded.updated_at",
            (*_row_of(entry), now, now),
        )

    def admit(self, delivery: Delivery) -> Admission:
        """:func:`~router.turns.core.admit` against the stored record, and
        the new entry stored, in one transaction."""
        if self._db.in_transaction:  # in a group commit: its transaction is ours
            admission = admit(self.get(delivery.event_id), delivery)
            if isinstance(admission, Proceed) and admission.new:
                self.put(admission.entry)
            return admission
        self._db.begin()
        try:
            admission = admit(self.get(delivery.event_id), delivery)
            if isinstance(admission, Proceed) and admission.new:
                self.put(admission.entry)
        except BaseException:
            self._db.rollback()
            raise
        self._db.commit()
        return admission

    def entries(self, session: str | None = None) -> list[DeliveryEntry]:
        """Every entry (of one session), oldest first."""
        if session is None:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM deliveries ORDER BY created_at, rowid").fetchall()
        else:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM deliveries WHERE session = ? ORDER BY created_at, rowid", (session,)
            ).fetchall()
        return [_entry_of(row) for row in rows]

    # ----------------------------------------------------------------- stops and launches

    def put_stop(self, session: str, stop: StopInfo) -> None:
        with self._changing("stop", {"session": session, **stop.to_json()}):
            self._put_stop(session, stop)

    def _put_stop(self, session: str, stop: StopInfo) -> None:
        self._db.execute(
            "INSERT INTO stops (session, reason, check_name, at) VALUES (?,?,?,?) ON CONFLICT (session) "
            "DO UPDATE SET reason = excluded.reason, check_name = excluded.check_name, at = excluded.at",
            (session, stop.reason, stop.check, stop.at),
        )

    def clear_stop(self, session: str) -> bool:
        """Forget the session's stop; whether it had one."""
        change: dict[str, Any] = {"session": session}
        with self._changing("stop-cleared", change):
            had = self._db.execute("DELETE FROM stops WHERE session = ?", (session,)).rowcount > 0
            change["skip"] = not had
        return had

    def stop_of(self, session: str) -> StopInfo | None:
        row = self._db.execute("SELECT reason, check_name, at FROM stops WHERE session = ?", (session,)).fetchone()
        return None if row is None else StopInfo(reason=row[0], check=row[1], at=row[2])

    def stops(self) -> dict[str, StopInfo]:
        rows = self._db.execute("SELECT session, reason, check_name, at FROM stops").fetchall()
        return {row[0]: StopInfo(reason=row[1], check=row[2], at=row[3]) for row in rows}

    def put_ask(self, ask: dict[str, Any]) -> None:
        """Keep an ask as :meth:`router.asks.Ask.to_json` writes it (its
        ``id``, ``session`` and ``state`` are also columns)."""
        with self._changing("ask", dict(ask)):
            self._put_ask(ask)

    def _put_ask(self, ask: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO asks (ask_id, session, state, record, updated_at) VALUES (?,?,?,?,?) ON CONFLICT (ask_id) "
            "DO UPDATE SET state = excluded.state, record = excluded.record, updated_at = excluded.updated_at",
            (ask["id"], ask["session"], ask["state"], json.dumps(ask), self._clock()),
        )

    def turn_ended(self, session: str, turn: str, text: str) -> None:
        """A Claude Code session's turn ``turn`` ended, its answer ``text``
        (the mod's ``turn-complete``). The record keeps no row of a Claude
        Code turn: the change is told to :attr:`on_change` alone, in a
        transaction of its own (the notification event is its record)."""
        with self._changing("turn-ended", {"session": session, "operation": turn, "text": text}):
            pass

    def asks_of(self, session: str) -> list[dict[str, Any]]:
        """The session's asks, as kept, oldest first."""
        rows = self._db.execute("SELECT record FROM asks WHERE session = ? ORDER BY rowid", (session,)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def put_launch(self, session: str, record: LaunchRecord) -> None:
        self._db.execute(
            "INSERT INTO launches (session, record, updated_at) VALUES (?,?,?) ON CONFLICT (session) "
            "DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at",
            (session, json.dumps(launch_to_json(record)), self._clock()),
        )

    def launch_of(self, session: str) -> LaunchRecord | None:
        row = self._db.execute("SELECT record FROM launches WHERE session = ?", (session,)).fetchone()
        return None if row is None else _launch(row[0])

    def launches(self) -> dict[str, LaunchRecord]:
        """Every session's launch, in one query (the board describes every
        session at once: one query, not one per session)."""
        rows = self._db.execute("SELECT session, record FROM launches").fetchall()
        return {session: launch for session, record in rows if (launch := _launch(record)) is not None}

    # ----------------------------------------------------------------- parks (schema 4)

    def put_park(self, park: Park) -> None:
        """Keep ``park`` (a new one, or one moved to a later reset)."""
        with self._changing("park", attrs.asdict(park)):
            self._put_park(park)

    def _put_park(self, park: Park) -> None:
        self._db.execute(
            "INSERT INTO parks (session, record, updated_at) VALUES (?,?,?) ON CONFLICT (session) "
            "DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at",
            (park.session, json.dumps(attrs.asdict(park)), self._clock()),
        )

    def drop_park(self, session: str) -> None:
        """Forget the session's park and its kept work (it ran, or a person
        cancelled it)."""
        change: dict[str, Any] = {"session": session}
        with self._changing("park-ended", change):
            change["skip"] = self._db.execute("DELETE FROM parks WHERE session = ?", (session,)).rowcount == 0
            self._db.execute("DELETE FROM park_work WHERE session = ?", (session,))

    def parks(self) -> list[Park]:
        out = []
        for (record,) in self._db.execute("SELECT record FROM parks ORDER BY rowid").fetchall():
            try:
                out.append(Park(**json.loads(record)))
            except (TypeError, ValueError):
                continue  # a row this version cannot read stays for the version that wrote it
        return out

    def keep(self, session: str, item: str, kind: str) -> bool:
        """Keep ``item`` (an event id or an operation id) as the parked
        session's work; whether it is new (a resend keeps nothing twice)."""
        return self._db.execute(
            "INSERT INTO park_work (session, item, kind, state, created_at) VALUES (?,?,?,'kept',?) "
            "ON CONFLICT (session, item) DO UPDATE SET state = 'kept' WHERE state != 'kept'",
            (session, item, kind, self._clock()),
        ).rowcount > 0

    def kept(self, session: str) -> list[tuple[str, str, str]]:
        """The session's kept work not done, oldest first: ``(item, kind, state)``."""
        return self._db.execute(
            "SELECT item, kind, state FROM park_work WHERE session = ? AND state != 'done' ORDER BY created_at, rowid",
            (session,),
        ).fetchall()

    def mark_kept(self, session: str, item: str, state: str) -> None:
        self._db.execute("UPDATE park_work SET state = ? WHERE session = ? AND item = ?", (state, session, item))
