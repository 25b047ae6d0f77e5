"""Notifications' record: the events (the outbox), their receipts and the
browsers' push subscriptions, as tables of the delivery record's database.

Theory of operation
-------------------

An event must be written in the *same transaction* as the state change that
made it, so it lives where that change lives: an ask, a stop, a park and
their ends in the delivery record's database (``turns.sqlite`` in a SQLite
data directory), a container turn that ended and a daemon that became
unreachable in the host's (``host.sqlite``); with PostgreSQL both are the
one database routers share, and so is the table. Subscriptions live in the
delivery record's only; an event's receipts beside the event. Its
tables are this module's own schema component, ``notify``: :data:`STEPS`
(one list for both dialects: the SQL is portable), its version kept in a
``router_schema`` row named ``notify`` (the table PostgreSQL's records
already share; a SQLite file gets the same table), taken there by
:func:`install` through :func:`router.store.db.migrate`.

:class:`Notices` is the hook the delivery record calls inside the
transaction of each change (``DeliveryLog.on_change``): it turns the change
into an :class:`~router.notify.core.Event` and inserts it, keyed so that a
change written twice (an ask kept again on a restart) makes one event.

- ``notify_events``: one row per event, in the order written (``seq``, the
  next number taken under the record's write lock), ``done`` once every destination has
  a final receipt. ``claimant``/``claimed_until``: the router that sends it
  (the one that wrote it, which holds the session) and until when; another
  router of a cluster takes an event over only once that claim expired.
- ``notify_receipts``: one row per (event, destination). ``pending`` is
  written just before a send; ``sent``, ``suppressed`` or ``failed`` after.
  A final receipt is never overwritten (the upsert's ``WHERE``), and a
  destination with one is never sent to again.
- ``notify_subscriptions``: one row per push endpoint, tied to a device.

Every function here is synchronous and takes the database; the caller runs
it on the delivery record's worker thread (``DeliveryLog.call``).
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Final, Iterator, Mapping, Protocol, TypeVar

from router.store.db import Database, migrate
from router.notify.core import (Event, SessionSetting, PushSubscription, ask_event, park_event, resumed_event, stop_event,
                                turn_ended_event, unreachable_event)

__all__ = ["COMPONENT", "NOTIFY_TABLES", "Notices", "STEPS", "install"]

COMPONENT: Final = "notify"

#: The schema as steps (``STEPS[n]`` takes version n to n + 1), the same on
#: SQLite and PostgreSQL.
STEPS: Final = (
    (
        """CREATE TABLE IF NOT EXISTS notify_events (
            id TEXT PRIMARY KEY,
            seq BIGINT NOT NULL,
            dedup TEXT NOT NULL UNIQUE,
            session TEXT NOT NULL,
            kind TEXT NOT NULL,
            record TEXT NOT NULL,
            at BIGINT NOT NULL,
            claimant TEXT NOT NULL,
            claimed_until BIGINT NOT NULL,
            done INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX IF NOT EXISTS notify_events_open ON notify_events (done, seq)",
        "CREATE INDEX IF NOT EXISTS notify_events_seq ON notify_events (seq)",
        "CREATE INDEX IF NOT EXISTS notify_events_session ON notify_events (session, seq)",
        """CREATE TABLE IF NOT EXISTS notify_receipts (
            event TEXT NOT NULL,
            destination TEXT NOT NULL,
            label TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'sent', 'suppressed', 'failed')),
            code TEXT,
            detail TEXT NOT NULL,
            status INTEGER,
            at BIGINT NOT NULL,
            PRIMARY KEY (event, destination)
        )""",
        """CREATE TABLE IF NOT EXISTS notify_subscriptions (
            id TEXT PRIMARY KEY,
            device TEXT NOT NULL,
            device_name TEXT NOT NULL,
            endpoint TEXT NOT NULL UNIQUE,
            p256dh TEXT NOT NULL,
            auth TEXT NOT NULL,
            expiration BIGINT,
            created_at BIGINT NOT NULL
        )""",
    ),
)

#: The tables, each after the ones its rows refer to, and their columns
#: (``router store copy`` copies them by name).
NOTIFY_TABLES: Final[dict[str, tuple[str, ...]]] = {
    "notify_events": ("id", "seq", "dedup", "session", "kind", "record", "at", "claimant", "claimed_until", "done"),
    "notify_receipts": ("event", "destination", "label", "outcome", "code", "detail", "status", "at"),
    "notify_subscriptions": ("id", "device", "device_name", "endpoint", "p256dh", "auth", "expiration",
                             "created_at"),
}

#: Seconds a router's claim on an event lasts before another may take it
#: over (ours: a router's cluster lease is of the same order).
CLAIM: Final = 60.0


def _ms() -> int:
    return time.time_ns() // 1_000_000


@contextlib.contextmanager
def atomic(db: Database) -> Iterator[None]:
    """A transaction, unless one is open already (a group commit's)."""
    if db.in_transaction:
        yield
        return
    with db.transaction():
        yield


def install(db: Database) -> None:
    """Take the ``notify`` component to ``len(STEPS)`` in ``db`` (the
    delivery record's database, or the host's): :func:`router.store.db.migrate`
    with the component named, inside the worker's transaction when its call
    is in one. A newer schema is left alone."""
    migrate(db, STEPS, too_new=None, component=COMPONENT)


# --------------------------------------------------------------------------- events


T = TypeVar("T")


class NoticeSource(Protocol):
    """A record the ``notify`` tables live in (the delivery record, the
    host's store): its database, the hook it calls inside each change's
    transaction, and its one worker thread."""

    @property
    def database(self) -> Database: ...

    on_change: Callable[[Database, str, dict[str, Any]], None] | None

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...


class Notices:
    """The hook the delivery record calls inside a change's transaction
    (``DeliveryLog.on_change``): ``(database, what, record)``. ``claimant``
    names this router; ``wake`` (thread-safe) tells the outbox there is
    work; ``setting(session)`` is the session's notification setting."""

    def __init__(self, claimant: str, *, wake: Callable[[], None] = lambda: None,
                 turn_ended: Callable[[str], bool] = lambda session: False, clock: Callable[[], int] = _ms) -> None:
        self.claimant = claimant
        self.wake = wake
        #: Whether the person asked for "turn ended" notifications of a session.
        self.turn_ended = turn_ended
        self._clock = clock
        self.written = 0

    def __repr__(self) -> str:
        return f"<Notices {self.claimant!r} written={self.written}>"

    def __call__(self, db: Database, what: str, record: Mapping[str, Any]) -> None:
        now = self._clock()
        if what == "turn-ended" and not self.turn_ended(str(record.get("session", ""))):
            return
        made = self._event(what, record, now)
        if made is None:
            return
        dedup, event = made
        add_event(db, event, dedup=dedup, claimant=self.claimant, until=now + int(CLAIM * 1000))
        self.written += 1
        self.wake()

    @staticmethod
    def _event(what: str, record: Mapping[str, Any], now: int) -> tuple[str, Event] | None:
        session = str(record.get("session", ""))
        if what == "ask":
            event = ask_event(record, now)
            return None if event is None else (f"ask:{record['id']}", event)
        if what == "stop":
            return f"stop:{session}:{record.get('at')}", stop_event(session, str(record.get("reason", "")), now)
        if what == "park":
            return (f"park:{session}:{record.get('resets_at')}",
                    park_event(session, int(record.get("resets_at") or 0), now, str(record.get("limit_kind") or "")))
        if what == "stop-cleared":
            return f"resumed:{session}:{now}", resumed_event(session, "resumed: it takes messages again", now)
        if what == "turn-ended":
            return (f"turn:{session}:{record.get('operation')}",
                    turn_ended_event(session, str(record.get("text", "")), now))
        if what == "unreachable":
            return f"unreachable:{session}:{now}", unreachable_event(session, str(record.get("reason", "")), now)
        if what == "park-ended":
            return f"resumed:{session}:{now}", resumed_event(session, "its park ended; its kept work goes on", now)
        return None


def add_event(db: Database, event: Event, *, dedup: str, claimant: str, until: int) -> bool:
    """Insert ``event`` (nothing when ``dedup`` was written before)."""
    return db.execute(
        "INSERT INTO notify_events (id, seq, dedup, session, kind, record, at, claimant, claimed_until) "
        "VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM notify_events), ?,?,?,?,?,?,?) "
        "ON CONFLICT (dedup) DO NOTHING",
        (event.id, dedup, event.session, event.kind, json.dumps(event.to_json()), event.at, claimant, until),
    ).rowcount > 0


def claim(db: Database, claimant: str, now: int, *, limit: int = 32) -> list[Event]:
    """The open events this router sends: its own, and any whose claim
    expired (taken over), oldest first; their claims renewed."""
    until = now + int(CLAIM * 1000)
    with atomic(db):
        db.execute("UPDATE notify_events SET claimant = ?, claimed_until = ? WHERE done = 0 AND "
                   "(claimant = ? OR claimed_until < ?)", (claimant, until, claimant, now))
        rows = db.execute("SELECT record FROM notify_events WHERE done = 0 AND claimant = ? ORDER BY seq LIMIT ?",
                          (claimant, limit)).fetchall()
    return [Event.from_json(json.loads(row[0])) for row in rows]


def renew(db: Database, claimant: str, now: int) -> None:
    """Renew this router's claims on its open events (before each send)."""
    db.execute("UPDATE notify_events SET claimed_until = ? WHERE done = 0 AND claimant = ?",
               (now + int(CLAIM * 1000), claimant))


def finish(db: Database, event: str) -> None:
    db.execute("UPDATE notify_events SET done = 1 WHERE id = ?", (event,))


def final_receipts(db: Database, event: str) -> set[str]:
    return {row[0] for row in db.execute(
        "SELECT destination FROM notify_receipts WHERE event = ? AND outcome != 'pending'", (event,)).fetchall()}


def pending_receipts(db: Database, event: str) -> list[tuple[str, str]]:
    """``(destination, label)`` of each receipt still ``pending``."""
    return [tuple(row) for row in db.execute(
        "SELECT destination, label FROM notify_receipts WHERE event = ? AND outcome = 'pending'", (event,)).fetchall()]


def put_receipt(db: Database, event: str, destination: str, label: str, outcome: str, *, detail: str,
                code: str | None = None, status: int | None = None, at: int | None = None) -> bool:
    """Write a receipt; a final one is never replaced. Whether it was written."""
    return db.execute(
        "INSERT INTO notify_receipts (event, destination, label, outcome, code, detail, status, at) "
        "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (event, destination) DO UPDATE SET outcome = excluded.outcome, "
        "code = excluded.code, detail = excluded.detail, status = excluded.status, at = excluded.at "
        "WHERE notify_receipts.outcome = 'pending'",
        (event, destination, label, outcome, code, detail[:500], status, _ms() if at is None else at),
    ).rowcount > 0


def ask_state(db: Database, ask: str) -> str | None:
    row = db.execute("SELECT state FROM asks WHERE ask_id = ?", (ask,)).fetchone()
    return None if row is None else row[0]


def events(db: Database, *, session: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """The newest events (of ``session``), each with its receipts, newest first."""
    if session is None:
        rows = db.execute("SELECT record FROM notify_events ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
    else:
        rows = db.execute("SELECT record FROM notify_events WHERE session = ? ORDER BY seq DESC LIMIT ?",
                          (session, limit)).fetchall()
    out = [json.loads(row[0]) for row in rows]
    if not out:
        return out
    marks = ", ".join("?" for _ in out)
    receipts: dict[str, list[dict[str, Any]]] = {}
    for event, destination, label, outcome, code, detail, status, at in db.execute(
            "SELECT event, destination, label, outcome, code, detail, status, at FROM notify_receipts "
            f"WHERE event IN ({marks}) ORDER BY at, destination", [e["id"] for e in out]).fetchall():
        receipts.setdefault(event, []).append({"destination": label, "id": destination, "outcome": outcome,
                                               "code": code, "detail": detail, "status": status, "at": at})
    for event in out:
        event["receipts"] = receipts.get(event["id"], [])
    return out


# --------------------------------------------------------------------------- subscriptions


def put_subscription(db: Database, subscription: PushSubscription, device: str, device_name: str) -> None:
    """Keep ``subscription`` for ``device``; the same endpoint replaces the old row."""
    with atomic(db):
        db.execute("DELETE FROM notify_subscriptions WHERE endpoint = ?", (subscription.endpoint,))
        db.execute("INSERT INTO notify_subscriptions (id, device, device_name, endpoint, p256dh, auth, expiration, "
                   "created_at) VALUES (?,?,?,?,?,?,?,?)",
                   (subscription.id, device, device_name, subscription.endpoint, subscription.p256dh,
                    subscription.auth, subscription.expiration, _ms()))


def drop_subscription(db: Database, sub_id: str, device: str | None = None) -> bool:
    """Remove one subscription (``device``: only if it is that device's)."""
    if device is None:
        return db.execute("DELETE FROM notify_subscriptions WHERE id = ?", (sub_id,)).rowcount > 0
    return db.execute("DELETE FROM notify_subscriptions WHERE id = ? AND device = ?", (sub_id, device)).rowcount > 0


def subscriptions(db: Database) -> list[dict[str, Any]]:
    """Every subscription, ``{id, device, device_name, subscription}``, oldest first."""
    rows = db.execute("SELECT id, device, device_name, endpoint, p256dh, auth, expiration FROM notify_subscriptions "
                      "ORDER BY created_at, id").fetchall()
    return [{"id": r[0], "device": r[1], "device_name": r[2],
             "subscription": PushSubscription(endpoint=r[3], p256dh=r[4], auth=r[5], expiration=r[6])} for r in rows]


def setting_of(settings: Mapping[str, SessionSetting], session: str) -> SessionSetting:
    return settings.get(session, SessionSetting())
