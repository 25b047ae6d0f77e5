"""The cluster's tables in PostgreSQL, and the statements on them.

Every rule of :mod:`router.cluster.lease` is one statement here, on the
database's clock (``clock_timestamp()``), never a router's: routers on
several machines agree on when a lease expires because only the database
says.

Tables (``ensure_schema`` takes them through :data:`STEPS`, versioned as
every record's schema is; ``cluster_`` names, beside the
host's and the deliveries' tables in the same database):

- ``cluster_routers``: membership (id, API URL, private socket, its
  ``GET /router`` answer, heartbeat). A router is live while its heartbeat
  is younger than the membership TTL.
- ``cluster_leases``: one row per session (holder, fencing, expires_at). A
  session enters the cluster with ``ensure_sessions`` (free, number 0).
- ``cluster_inbox``: deliveries sent to a router that does not hold their
  session, keyed by event id (a resend finds its row: inserted once,
  answered once); ``pg_notify('cluster_inbox', session)`` on insert wakes
  the holder, ``pg_notify('cluster_reply', event_id)`` on the answer wakes
  the router the sender waits on.
- ``cluster_refused``: every write refused by the fencing check (session,
  holder, number, what), for the operator and the tests.

**Fencing** (:func:`fence`): a write of a session's record runs, in its own
transaction, ``SELECT ... FROM cluster_leases WHERE session AND holder AND
fencing AND expires_at > clock_timestamp() FOR SHARE``. No row: the write
is refused (:class:`LeaseLost`, ``lease-lost``) and rolled back. A row:
it is share-locked until the write commits, so an acquire by another
router (an ``UPDATE`` of that row) waits for the commit; every write under
number *n* is ordered before the lease moves to *n + 1*.

Everything here is synchronous (psycopg 3's sync API; its async API runs
under asyncio only): :class:`ClusterDatabase` is the cluster's record as a
:class:`router.store.db.PgDatabase`, and runs each call on its one worker
(:mod:`router.store.worker`), on its one connection, and
:class:`Listener` waits for notifications in Trio itself, on the
connection's socket.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Callable, Final, Iterable, Mapping, TypeVar

import trio

from router._transient import DEFAULT_POLICY, RetryPolicy
from router.cluster.lease import Lease
from router.errors import Refusal
from router.store.db import PgDatabase, Step, migrate
from router.store.worker import Worker

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

__all__ = [
    "ClusterDatabase",
    "BOARD_CHANNEL",
    "SYNC_CHANNEL",
    "ROUTER_CHANNEL",
    "INBOX_CHANNEL",
    "LEASE_CHANNEL",
    "LeaseLost",
    "Listener",
    "REPLY_CHANNEL",
    "acquire",
    "answer",
    "STEPS",
    "ensure_schema",
    "ensure_sessions",
    "FENCED_TABLES",
    "FENCE_SQLSTATE",
    "fence",
    "fence_settings",
    "install_fences",
    "lease_lost_of",
    "heartbeat",
    "leases",
    "leave",
    "notify",
    "live_routers",
    "pending_for",
    "post",
    "record_refusal",
    "lease_lost_in",
    "refusals",
    "release",
    "renew",
    "reply_of",
]

T = TypeVar("T")

#: The notification channels (ours).
INBOX_CHANNEL: Final = "cluster_inbox"
#: Leases were handed back (a router left or shed sessions): the others
#: run a round now instead of at their next tick.
LEASE_CHANNEL: Final = "cluster_leases"
REPLY_CHANNEL: Final = "cluster_reply"
#: Some router changed a session's record (its row or its operations),
#: the session's id as the payload (an empty one: anything may have
#: changed): the board re-reads that session (:func:`install_board_notify`).
BOARD_CHANNEL: Final = "cluster_board"
#: A router's mark in the notifications' order (the payload is its own):
#: once it comes back, every notification of a transaction committed
#: before it was sent has come too (PostgreSQL delivers them in commit
#: order), so what the listener was told is as fresh as a read.
SYNC_CHANNEL: Final = "cluster_sync"
#: A router's sessions outside the record (its Claude Code sessions) may
#: have changed, its id as the payload: the others ask it again instead
#: of answering from what it last said.
ROUTER_CHANNEL: Final = "cluster_router"
#: The record's tables whose writes change what the board lists (a
#: session's record and its ``lastActivity``; its operations: ``busy``),
#: each with the column that names the row's session.
BOARD_TABLES: Final = {"sessions": "id", "operations": "session"}
#: The advisory lock that serializes schema creation across routers
#: starting at once (ours: any number no other part of the record uses).
SCHEMA_LOCK: Final = 0x726F7574  # "rout"
#: The cluster's name in ``router_schema`` (its schema version's row).
COMPONENT: Final = "cluster"

#: The cluster's schema, step by step as every record's is
#: (:class:`router.store.db.Step`; PostgreSQL only: a cluster is a shared
#: PostgreSQL record): ``STEPS[n]`` takes the ``cluster`` component of
#: ``router_schema`` from version ``n`` to ``n + 1``. Step 1's statements
#: are all ``IF NOT EXISTS``, so a database whose tables an older router
#: made before the cluster had versions (version 0, tables there) is
#: upgraded in place by recording the version. A new step goes at the end;
#: a step once released is never changed.
STEPS: Final = (
    Step(sqlite=None, postgresql=(
        """
        CREATE TABLE IF NOT EXISTS cluster_routers (
            id text PRIMARY KEY,
            api_url text,
            socket text,
            info text NOT NULL DEFAULT '{}',
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS cluster_leases (
            session text PRIMARY KEY,
            holder text,
            fencing bigint NOT NULL DEFAULT 0,
            expires_at timestamptz NOT NULL DEFAULT '-infinity',
            created_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """,
        """
        CREATE INDEX IF NOT EXISTS cluster_leases_holder ON cluster_leases (holder)
        """,
        """
        CREATE TABLE IF NOT EXISTS cluster_inbox (
            event_id text PRIMARY KEY,
            session text NOT NULL,
            body text NOT NULL,
            posted_by text NOT NULL,
            posted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            reply text,
            final boolean NOT NULL DEFAULT false,
            answered_by text,
            answered_fencing bigint,
            answered_at timestamptz
        )
        """,
        """
        CREATE INDEX IF NOT EXISTS cluster_inbox_open ON cluster_inbox (session) WHERE reply IS NULL
        """,
        """
        CREATE TABLE IF NOT EXISTS cluster_refused (
            id bigserial PRIMARY KEY,
            session text NOT NULL,
            holder text NOT NULL,
            fencing bigint NOT NULL,
            what text NOT NULL,
            at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """,
    )),
)


#: The record's tables whose every row write is fenced (the trigger of
#: :func:`install_fences`), each with its session column; ``creates``: an
#: insert makes the session (its lease row, free), it does not drive it.
FENCED_TABLES: Final = {
    "sessions": ("id", "creates"),
    "operations": ("session", ""),
    "messages": ("session", ""),
    "entries": ("session", ""),
    "usage": ("session", ""),
    "skipped_frames": ("session", ""),
    "deliveries": ("session", ""),
}
#: The SQLSTATE the fence trigger raises (ours; a class no standard uses).
FENCE_SQLSTATE: Final = "RL409"

FENCE_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION cluster_fence() RETURNS trigger LANGUAGE plpgsql AS $fence$
DECLARE
    me text := current_setting('router.holder', true);
    row_session text;
    number bigint;
BEGIN
    row_session := CASE WHEN TG_OP = 'DELETE' THEN to_jsonb(OLD) ELSE to_jsonb(NEW) END ->> TG_ARGV[0];
    IF TG_OP = 'INSERT' AND TG_ARGV[1] = 'creates' THEN  -- a new session enters the cluster, free
        INSERT INTO cluster_leases (session) VALUES (row_session) ON CONFLICT (session) DO NOTHING;
        RETURN NEW;
    END IF;
    IF me IS NULL OR me = '' THEN  -- not a router of the cluster (a copy, a migration): unfenced
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    number := (coalesce(nullif(current_setting('router.leases', true), ''), '{{}}')::jsonb ->> row_session)::bigint;
    -- Held live under this number, or a session no router has driven yet
    -- (number 0: made, filled, queued for its first holder). Share-locked
    -- until commit either way, so the next acquire waits for this write.
    PERFORM 1 FROM cluster_leases l WHERE l.session = row_session
        AND ((l.holder = me AND l.fencing = number AND l.expires_at > clock_timestamp())
             OR (l.fencing = 0 AND (l.holder IS NULL OR l.expires_at <= clock_timestamp())))
        FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lease-lost: router % does not hold session % (number %): % on % refused',
            me, row_session, number, TG_OP, TG_TABLE_NAME
            USING ERRCODE = '{FENCE_SQLSTATE}', DETAIL = json_build_object('session', row_session,
                'holder', me, 'fencing', number, 'what', TG_OP || ' on ' || TG_TABLE_NAME)::text;
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$fence$;
"""


class LeaseLost(Refusal):
    """A write under a lease this router no longer holds (expired, or taken
    over under a higher fencing number): refused, nothing written."""


def ensure_schema(conn: psycopg.Connection[Any]) -> None:
    """Take the cluster's tables to the latest of :data:`STEPS` on ``conn``
    (an autocommit connection, the worker's): each step one transaction,
    under the record's migration lock (routers starting at once migrate one
    after another); nothing written when up to date. A database newer than
    this router is refused (``cluster-too-new``)."""
    migrate(PgDatabase.borrowing(conn, COMPONENT), STEPS, too_new=_too_new)


def _too_new(version: int) -> Refusal:
    return Refusal("cluster-too-new", f"the cluster's tables were written by a newer router (schema {version}); "
                   "upgrade this one")


# --------------------------------------------------------------------------- membership


def heartbeat(conn: psycopg.Connection[Any], router: str, *, api_url: str | None = None, socket: str | None = None,
              info: str = "{}") -> None:
    """Register ``router``, or say it is alive (its heartbeat now)."""
    conn.execute(
        "INSERT INTO cluster_routers (id, api_url, socket, info) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET heartbeat_at = clock_timestamp(), api_url = EXCLUDED.api_url, "
        "socket = EXCLUDED.socket, info = EXCLUDED.info",
        (router, api_url, socket, info),
    )


def live_routers(conn: psycopg.Connection[Any], ttl: float) -> list[dict[str, Any]]:
    """Routers whose heartbeat is younger than ``ttl`` seconds, by id."""
    rows = conn.execute(
        "SELECT id, api_url, socket, info FROM cluster_routers "
        "WHERE heartbeat_at > clock_timestamp() - make_interval(secs => %s) ORDER BY id",
        (ttl,),
    ).fetchall()
    return [{"id": row[0], "apiUrl": row[1], "socket": row[2], "info": row[3]} for row in rows]


def leave(conn: psycopg.Connection[Any], router: str) -> int:
    """A clean stop: ``router`` leaves and hands back every lease it holds
    at once (so the others need not wait for the expiry). Returns how many."""
    conn.execute("DELETE FROM cluster_routers WHERE id = %s", (router,))
    held = conn.execute("SELECT session, fencing FROM cluster_leases WHERE holder = %s "
                        "AND expires_at > clock_timestamp()", (router,)).fetchall()
    return len(release(conn, router, dict(held)))


# --------------------------------------------------------------------------- leases


def ensure_sessions(conn: psycopg.Connection[Any], sessions: Iterable[str]) -> None:
    """The sessions enter the cluster (free, number 0) if they were not in it."""
    conn.execute(
        "INSERT INTO cluster_leases (session) SELECT unnest(%s::text[]) ON CONFLICT (session) DO NOTHING",
        (list(sessions),),
    )


def leases(conn: psycopg.Connection[Any]) -> tuple[list[Lease], float]:
    """Every lease, with the database's clock now (epoch seconds), so a
    lease's ``live(now)`` is the database's view."""
    now = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    rows = conn.execute(
        "SELECT session, holder, fencing, extract(epoch FROM expires_at)::float8 FROM cluster_leases ORDER BY session"
    ).fetchall()
    assert now is not None
    out = [Lease(session=row[0], holder=row[1], fencing=row[2], expires_at=float(row[3])) for row in rows]
    return out, float(now[0])


def acquire(conn: psycopg.Connection[Any], holder: str, sessions: Iterable[str], ttl: float) -> dict[str, int]:
    """Take the free (or own) leases among ``sessions``: session → its
    fencing number, for those taken. One statement (the rules of
    :meth:`router.cluster.lease.LeaseBook.acquire`); a row locked now (a
    write under the lease it ends is committing, another router takes it)
    is skipped, not waited for: the next round tries again, and no lock
    is ever waited for while others are held (no deadlock)."""
    rows = conn.execute(
        "UPDATE cluster_leases AS l SET "
        "fencing = CASE WHEN l.holder = %(me)s AND l.expires_at > clock_timestamp() THEN l.fencing "
        "ELSE l.fencing + 1 END, "
        "holder = %(me)s, expires_at = clock_timestamp() + make_interval(secs => %(ttl)s) "
        "FROM (SELECT session FROM cluster_leases WHERE session = ANY(%(sessions)s::text[]) "
        "AND (holder IS NULL OR holder = %(me)s OR expires_at <= clock_timestamp()) "
        "ORDER BY session FOR UPDATE SKIP LOCKED) AS free "
        "WHERE l.session = free.session "
        "AND (l.holder IS NULL OR l.holder = %(me)s OR l.expires_at <= clock_timestamp()) "
        "RETURNING l.session, l.fencing",
        {"me": holder, "ttl": ttl, "sessions": list(sessions)},
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def _one_by_one(conn: psycopg.Connection[Any], holder: str, held: Mapping[str, int], change: str,
                params: tuple[Any, ...] = ()) -> set[str]:
    """``UPDATE cluster_leases SET <change>`` for each live lease of
    ``held`` (session → number) still ``holder``'s: one statement (its own
    transaction) per lease, so a round holds one row lock at a time and
    can never close a cycle with a write that locks several (it waits,
    at most, behind this router's own write of that session)."""
    done = set()
    for session, fencing in held.items():
        row = conn.execute(
            f"UPDATE cluster_leases SET {change} WHERE session = %s AND fencing = %s AND holder = %s "
            "AND expires_at > clock_timestamp() RETURNING session",
            (*params, session, fencing, holder),
        ).fetchone()
        if row is not None:
            done.add(session)
    return done


def renew(conn: psycopg.Connection[Any], holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
    """Extend the live leases ``held`` (session → number); the sessions
    renewed. One missing from the answer is lost.

    One statement for every lease whose row is not locked now (``SKIP
    LOCKED``: it never waits, so it can close no cycle); a row locked now
    (this router's own write of that session is committing) is renewed
    after, one statement each, waiting as :func:`_one_by_one` does. One
    statement per lease cost a router of 330 sessions a quarter of its
    samples (bench/board_scale.py's profile)."""
    change = "expires_at = clock_timestamp() + make_interval(secs => %s)"
    if not held:
        return set()
    rows = conn.execute(
        "UPDATE cluster_leases AS l SET expires_at = clock_timestamp() + make_interval(secs => %(ttl)s) "
        "FROM (SELECT c.session FROM cluster_leases c "
        "JOIN unnest(%(sessions)s::text[], %(numbers)s::bigint[]) AS h(session, fencing) "
        "ON c.session = h.session AND c.fencing = h.fencing "
        "WHERE c.holder = %(me)s AND c.expires_at > clock_timestamp() "
        "ORDER BY c.session FOR UPDATE OF c SKIP LOCKED) AS mine "
        "WHERE l.session = mine.session RETURNING l.session",
        {"ttl": ttl, "me": holder, "sessions": list(held), "numbers": list(held.values())},
    ).fetchall()
    done = {row[0] for row in rows}
    rest = {session: fencing for session, fencing in held.items() if session not in done}
    return done | _one_by_one(conn, holder, rest, change, (ttl,))


def release(conn: psycopg.Connection[Any], holder: str, held: Mapping[str, int]) -> set[str]:
    """Hand back the leases ``held`` now; the sessions released. The other
    routers are told (``LEASE_CHANNEL``), so they take them at once."""
    released = _one_by_one(conn, holder, held, "holder = NULL, expires_at = clock_timestamp()")
    if released:
        conn.execute("SELECT pg_notify(%s, %s)", (LEASE_CHANNEL, holder))
    return released


def fence(conn: psycopg.Connection[Any], session: str, holder: str, fencing: int | None, what: str = "write") -> None:
    """The fencing check, inside the caller's transaction (see the module
    docstring): returns with the lease's row share-locked until the caller
    commits, or raises :class:`LeaseLost`."""
    row = None
    if fencing is not None:
        row = conn.execute(
            "SELECT 1 FROM cluster_leases WHERE session = %s AND holder = %s AND fencing = %s "
            "AND expires_at > clock_timestamp() FOR SHARE",
            (session, holder, fencing),
        ).fetchone()
    if row is None:
        raise LeaseLost(
            "lease-lost",
            f"router {holder} no longer holds the lease of session {session!r} (number {fencing}): "
            f"its {what} was refused; the session's holder answers it",
            session=session, holder=holder, fencing=fencing, what=what,
        )


def install_fences(conn: psycopg.Connection[Any], tables: Mapping[str, tuple[str, str]] = FENCED_TABLES) -> list[str]:
    """Fence every row write of the record's tables (those that exist):
    a trigger checks, per row, that the transaction's router holds the
    row's session under the number it set (:func:`fence_settings`).
    Idempotent; returns the tables fenced."""
    fenced = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute(FENCE_FUNCTION)
        for table, (column, mode) in tables.items():
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
                continue
            if conn.execute("SELECT 1 FROM pg_trigger WHERE tgname = 'cluster_fence' AND tgrelid = %s::regclass",
                            (table,)).fetchone() is not None:
                fenced.append(table)
                continue  # already fenced (no DDL: it would lock the table against the other routers' writes)
            conn.execute(f'CREATE TRIGGER cluster_fence BEFORE INSERT OR UPDATE OR DELETE ON "{table}" '
                         f"FOR EACH ROW EXECUTE FUNCTION cluster_fence('{column}', '{mode}')")
            fenced.append(table)
    return fenced


BOARD_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION cluster_board_row() RETURNS trigger LANGUAGE plpgsql AS $board$
BEGIN
    PERFORM pg_notify('{BOARD_CHANNEL}',
        CASE WHEN TG_OP = 'DELETE' THEN to_jsonb(OLD) ELSE to_jsonb(NEW) END ->> TG_ARGV[0]);
    RETURN NULL;
END
$board$;
"""


def install_board_notify(conn: psycopg.Connection[Any], tables: Mapping[str, str] = BOARD_TABLES) -> list[str]:
    """Notify :data:`BOARD_CHANNEL` after every row written in one of the
    record's ``tables`` (those that exist; table -> the column naming the
    row's session), the session's id as the payload: one notification per
    session a transaction writes (PostgreSQL folds equal ones), sent at
    its commit. The statement trigger of routers before it (an empty
    payload: "something changed") is dropped; a router that still
    installs it makes listeners re-read everything, never miss a change.
    Idempotent; returns the tables that notify."""
    done = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        if conn.execute("SELECT 1 FROM pg_proc WHERE proname = 'cluster_board_row'").fetchone() is None:
            conn.execute(BOARD_FUNCTION)
        for table, column in tables.items():
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
                continue
            triggers = {row[0] for row in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgname IN ('cluster_board', 'cluster_board_row') "
                "AND tgrelid = %s::regclass", (table,)).fetchall()}
            if "cluster_board_row" not in triggers:  # DDL only when missing: it locks the table
                conn.execute(f'CREATE TRIGGER cluster_board_row AFTER INSERT OR UPDATE OR DELETE ON "{table}" '
                             f"FOR EACH ROW EXECUTE FUNCTION cluster_board_row('{column}')")
            if "cluster_board" in triggers:
                conn.execute(f'DROP TRIGGER cluster_board ON "{table}"')
            done.append(table)
    return done


def notify(conn: psycopg.Connection[Any], channel: str, payload: str) -> None:
    """``NOTIFY channel, payload`` (sent when this call's transaction commits)."""
    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def fence_settings(holder: str, numbers: Mapping[str, int], idle_limit: float) -> tuple[str, tuple[str, str, str]]:
    """The statement (``?`` placeholders) that a transaction of router
    ``holder`` runs first: who it is and the numbers it holds, for the
    fence trigger, and how long the transaction may sit idle
    (``idle_in_transaction_session_timeout``, seconds): a router stopped
    inside a transaction (SIGSTOP, a partition) would otherwise hold its
    locks, and with them the session's lease row and the record's write
    lock, for as long as it is stopped. Past the limit the database ends
    the transaction: nothing of it is written, and the router's commit,
    when it wakes, fails. (All transaction-local settings.)"""
    return ("SELECT set_config('router.holder', ?, true), set_config('router.leases', ?, true), "
            "set_config('idle_in_transaction_session_timeout', ?, true)",
            (holder, json.dumps(dict(numbers), separators=(",", ":")), str(max(1, round(idle_limit * 1000)))))


def lease_lost_of(exc: BaseException) -> LeaseLost | None:
    """The :class:`LeaseLost` a database error means, when the fence
    trigger raised it."""
    if getattr(exc, "sqlstate", None) != FENCE_SQLSTATE:
        return None
    diag = getattr(exc, "diag", None)
    text = str(getattr(diag, "message_primary", None) or exc)
    try:
        data = json.loads(getattr(diag, "message_detail", None) or "{}")
    except ValueError:
        data = {}
    return LeaseLost("lease-lost", text.removeprefix("lease-lost: "), session=str(data.get("session")),
                     holder=str(data.get("holder")), fencing=data.get("fencing"), what=str(data.get("what", "write")))


def lease_lost_in(exc: BaseException | None) -> LeaseLost | None:
    """The fence's refusal in ``exc`` or in what caused it, if any."""
    for _ in range(8):  # ours: a chain is never longer
        if exc is None:
            return None
        refused = exc if isinstance(exc, LeaseLost) else lease_lost_of(exc)
        if refused is not None:
            return refused
        exc = exc.__cause__ or exc.__context__
    return None


def record_refusal(conn: psycopg.Connection[Any], refused: LeaseLost) -> None:
    """Keep a refused write in ``cluster_refused`` and log it (after the
    refused transaction rolled back)."""
    data = refused.data
    log.warning("fencing: %s", refused.message)
    conn.execute(
        "INSERT INTO cluster_refused (session, holder, fencing, what) VALUES (%s, %s, %s, %s)",
        (data["session"], data["holder"], -1 if data["fencing"] is None else data["fencing"], data["what"]),
    )


def refusals(conn: psycopg.Connection[Any], holder: str | None = None) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT session, holder, fencing, what FROM cluster_refused WHERE %(h)s::text IS NULL OR holder = %(h)s "
        "ORDER BY id",
        {"h": holder},
    ).fetchall()
    return [{"session": row[0], "holder": row[1], "fencing": row[2], "what": row[3]} for row in rows]


# --------------------------------------------------------------------------- the inbox


def post(conn: psycopg.Connection[Any], event_id: str, session: str, body: str, by: str) -> bool:
    """Keep a delivery for the session's holder; False when the event id
    was already in with a final reply or none yet (a resend: the first one
    stands). A resend of one answered *not* final (``Unanswered``: try
    again) opens it again. The holder is woken at commit."""
    with conn.transaction():
        inserted = conn.execute(
            "INSERT INTO cluster_inbox (event_id, session, body, posted_by) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (event_id) DO UPDATE SET reply = NULL, answered_by = NULL, answered_fencing = NULL, "
            "answered_at = NULL WHERE cluster_inbox.reply IS NOT NULL AND NOT cluster_inbox.final RETURNING 1",
            (event_id, session, body, by),
        ).fetchone()
        if inserted is not None:
            conn.execute("SELECT pg_notify(%s, %s)", (INBOX_CHANNEL, session))
        return inserted is not None


def reply_of(conn: psycopg.Connection[Any], event_id: str) -> tuple[str, str | None] | None:
    """``(session, reply)`` of a delivery in the inbox (reply None while
    unanswered), or None when it is not there."""
    row = conn.execute("SELECT session, reply FROM cluster_inbox WHERE event_id = %s", (event_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def pending_for(conn: psycopg.Connection[Any], holder: str, limit: int = 256) -> list[tuple[str, str, str]]:
    """Unanswered deliveries of sessions ``holder`` holds live, oldest
    first: ``(event_id, session, body)``."""
    rows = conn.execute(
        "SELECT i.event_id, i.session, i.body FROM cluster_inbox i JOIN cluster_leases l ON l.session = i.session "
        "WHERE i.reply IS NULL AND l.holder = %s AND l.expires_at > clock_timestamp() "
        "ORDER BY i.posted_at, i.event_id LIMIT %s",
        (holder, limit),
    ).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def answer(conn: psycopg.Connection[Any], event_id: str, reply: str, holder: str, fencing: int | None,
           final: bool = True) -> str:
    """Answer a delivery of the inbox, under the holder's lease (fenced):
    the reply that stands (the first answer; a second is ignored until a
    resend opens a reply that was not ``final``)."""
    with conn.transaction():
        row = conn.execute("SELECT session, reply FROM cluster_inbox WHERE event_id = %s FOR UPDATE",
                           (event_id,)).fetchone()
        if row is None:
            raise Refusal("unknown-delivery", f"no delivery {event_id!r} in the cluster's inbox", event_id=event_id)
        session, stored = row
        # Fenced first, even when the row is answered already: a router
        # that lost the lease learns it (and the refusal is recorded)
        # whichever answer reached the row first.
        fence(conn, session, holder, fencing, what=f"answer to {event_id}")
        if stored is not None:
            return str(stored)
        conn.execute(
            "UPDATE cluster_inbox SET reply = %s, final = %s, answered_by = %s, answered_fencing = %s, "
            "answered_at = clock_timestamp() WHERE event_id = %s",
            (reply, final, holder, fencing, event_id),
        )
        conn.execute("SELECT pg_notify(%s, %s)", (REPLY_CHANNEL, event_id))
        return reply


# --------------------------------------------------------------------------- Trio


class ClusterDatabase:
    """Calls into PostgreSQL from Trio: the cluster's record as a
    :class:`router.store.db.PgDatabase` (component ``cluster``), reached
    through its one worker (:class:`router.store.worker.Worker`), as every
    record of the router is. Each call runs on the worker's thread, one
    after another, on the one connection (opened when first needed, kept
    for the next call), and is handed psycopg's connection (``db.raw``):
    the cluster's statements take their own transactions (``conn.transaction()``),
    not the record lock a store transaction begins with
    (:meth:`router.store.db.Database.begin`), since the lease rounds of
    many routers must not wait for one another.

    Resource handling: a call is never abandoned on cancellation (its
    transaction commits or rolls back before the cancelled task moves on);
    a connection that failed is opened again at the next call
    (:meth:`router.store.db.PgDatabase.live`); :meth:`close` waits for a
    call in the thread, then closes it.

    Error handling: a call that meets a transient failure (the server
    restarting, a terminated backend: :mod:`router._transient`) is run
    again whole on a new connection while the policy allows, then refused
    ``store-unavailable``; ``retry=False`` (the lease rounds, which have
    their own next round) refuses at the first one. Every function run here
    is one statement or one transaction of its own: none waits on a lock
    another router holds for long (``acquire`` skips locked rows; ``renew``
    waits at most behind this router's own write of that session), so the
    lease rounds, the heartbeat and the inbox share the one thread.
    """

    def __init__(self, url: str, *, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self.url = url
        #: The record's connection, once the first call opened it.
        self.db: PgDatabase | None = None
        self.worker = Worker("the cluster's database", grouped=False, policy=policy)

    def __repr__(self) -> str:
        stats = self.worker.statistics()
        connected = self.db is not None and not self.db.raw.closed
        return (f"<ClusterDatabase connected={connected} calls={stats.calls} "
                f"retries={stats.retries}>")

    @property
    def calls(self) -> int:
        return self.worker.statistics().calls

    @property
    def retries(self) -> int:
        return self.worker.statistics().retries

    async def call(self, fn: Callable[..., T], *args: Any, retry: bool = True) -> T:
        """``fn(connection, *args)`` on the worker's thread; again after a
        transient failure (see the class docstring)."""
        return await self.worker.call(self._on_connection, fn, args, retry=retry)

    def _on_connection(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """In the worker's thread: ``fn`` on the connection, opened first
        when there is none or the server dropped it."""
        db = self.db
        if db is None:
            db = self.db = PgDatabase.dialing(self.url, COMPONENT)
        else:
            db.live()
        try:
            return fn(db.raw, *args)
        except BaseException:
            if db.raw.broken and not db.raw.closed:  # not kept: the next call dials again
                db.raw.close()
            raise

    def close(self) -> None:
        """Close the connection once no call runs; calls after it are refused."""
        with self.worker.held():
            self.worker.close_held()
            db, self.db = self.db, None
            if db is not None:
                db.close()


def _connect(url: str) -> Any:
    from router.store.db import connect_postgres

    return connect_postgres(url)


class Listener:
    """LISTEN on the cluster's channels, waited for in Trio on the
    connection's socket (``wait_readable``: cancellable, no thread parked).
    Each notification sets the events of its ``(channel, payload)`` and of
    its channel, and hands its payload to the channel's taps (:meth:`tap`);
    a connection lost is redialled (every waiter is woken then, to look
    again: notifications sent meanwhile are gone). ``live`` says whether
    it listens now, ``connections`` counts the connections it listened on:
    a reader that kept what it was told compares both to know whether it
    may have missed some.

    Resource handling: :meth:`run` owns the connection and closes it on
    every exit.
    """

    def __init__(self, url: str,
                 channels: Iterable[str] = (INBOX_CHANNEL, REPLY_CHANNEL, LEASE_CHANNEL, BOARD_CHANNEL,
                                            SYNC_CHANNEL, ROUTER_CHANNEL), *,
                 retry: float = 1.0) -> None:
        self.url = url
        self.channels = tuple(channels)
        #: Seconds between two dials after the connection was lost (ours).
        self.retry = retry
        self._waiters: dict[tuple[str, str | None], trio.Event] = {}
        self._taps: dict[str, list[Callable[[str], None]]] = {}
        self.received = 0
        self.connections = 0
        self.live = False

    def __repr__(self) -> str:
        return f"<Listener {self.channels} received={self.received} waiters={len(self._waiters)}>"

    def event(self, channel: str, payload: str | None = None) -> trio.Event:
        """The event the next notification on ``channel`` (with ``payload``,
        or any when None) sets. Take it *before* reading the record, so a
        notification between the read and the wait still wakes."""
        key = (channel, payload)
        event = self._waiters.get(key)
        if event is None:
            event = self._waiters[key] = trio.Event()
        return event

    def tap(self, channel: str, callback: Callable[[str], None]) -> None:
        """Call ``callback(payload)`` for every notification on ``channel``
        (synchronously, in the listener's task: it must not block)."""
        self._taps.setdefault(channel, []).append(callback)

    def _fire(self, key: tuple[str, str | None]) -> None:
        event = self._waiters.pop(key, None)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for event in waiters.values():
            event.set()

    async def run(self, *, task_status: trio.TaskStatus[Listener] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            try:
                conn = await trio.to_thread.run_sync(_connect, self.url)
            except Exception as exc:
                log.warning("cluster listener: cannot connect: %s", exc)
                await trio.sleep(self.retry)
                continue
            try:
                for channel in self.channels:
                    await trio.to_thread.run_sync(conn.execute, f"LISTEN {channel}")
                self.connections += 1
                self.live = True
                self._wake_all()
                if not started:
                    started = True
                    task_status.started(self)
                await self._receive(conn)
            except Exception as exc:
                log.warning("cluster listener: connection lost: %s", exc)
            finally:
                self.live = False
                conn.close()
            self._wake_all()
            await trio.sleep(self.retry)

    async def _receive(self, conn: Any) -> None:
        pgconn = conn.pgconn
        while True:
            await trio.lowlevel.wait_readable(conn.fileno())
            pgconn.consume_input()  # raises OperationalError when the connection is gone
            while (note := pgconn.notifies()) is not None:
                self.received += 1
                channel, payload = note.relname.decode(), note.extra.decode()
                for callback in self._taps.get(channel, ()):
                    callback(payload)
                self._fire((channel, payload))
                self._fire((channel, None))

