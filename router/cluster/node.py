"""A router's part in the cluster: the glue between its
:class:`~router.cluster.member.ClusterMember` and the parts of the main job
it changes.

- **the host** drives only the sessions held here: ``Host(may_link=
  node.holds)``; a lease gained opens the session's link when it has open
  operations (the link's reconcile replays from the stored cursor: the
  takeover), a lease lost closes the link and the turn router's session at
  once;
- **the record's writes** carry the fencing numbers: :meth:`ClusterNode.fence`
  is the store's fence (it runs first in every transaction; the trigger of
  :func:`router.cluster.pg.install_fences` checks every row);
- **the turn router** relays a delivery for a session held elsewhere
  (:meth:`ClusterNode.relay`, through the inbox), and the inbox's
  deliveries for sessions held here are delivered by it
  (:meth:`ClusterNode.handle`), exactly once by event id in the shared
  delivery record;
- **the board** names each session's holder (:meth:`ClusterNode.holders`),
  hears of every change of the record (:meth:`ClusterNode.board_changed`),
  keeps the record's session list between the notifications naming each
  session written (:meth:`ClusterNode.kept_list`,
  :mod:`router.cluster.mirror`) and knows which local routers are of this
  cluster (:meth:`ClusterNode.sockets`).

Resource handling: :meth:`run` owns the member and the tasks that open and
close links; the database pool is the caller's.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
from typing import Any, Awaitable, Callable, Final, Mapping

import trio

from router._transient import DEFAULT_POLICY, is_transient
from router.cluster import pg
from router.cluster.lease import HOLD_MARGIN
from router.cluster.member import ClusterMember, ClusterSettings
from router.cluster.mirror import RecordMirror
from router.errors import Refusal

log = logging.getLogger(__name__)

__all__ = ["ClusterNode", "LEASE_TTL_ENV", "TRUST_BELIEF_ENV", "delivery_json", "delivery_of", "open_node", "reply_json", "reply_of"]

#: The lease's life in seconds, when set (ours; the default is
#: ``ClusterSettings.lease_ttl``): renews every third of it, routers
#: counted live for as long.
LEASE_TTL_ENV: Final = "ROUTER_CLUSTER_LEASE_TTL"

#: Tests only, never set in production: seconds a router goes on trusting
#: its belief past the database's expiry, refused renews notwithstanding
#: (``ClusterSettings.trust_belief``), so the tests see the fence refuse
#: the late writes of a router stopped past its lease. Unset, today's
#: behaviour.
TRUST_BELIEF_ENV: Final = "ROUTER_CLUSTER_TRUST_BELIEF"

#: Open operations a gained session's drive waits on at once (ours).
DRIVE_WAITS: Final = 64

#: Seconds a router waits for its own mark to come back on the sync
#: channel before it reads the record whole instead (ours: far above a
#: loaded machine's round trip, ~10 ms; the full read is always right).
SYNC_TIMEOUT: Final = 2.0
#: Seconds between two notifications of this router's own sessions having
#: changed (ours: as the board's survey gap; a streaming turn's burst of
#: changes is one notification per gap).
ANNOUNCE_GAP: Final = 0.05


def delivery_json(delivery: Any) -> str:
    from router.turns.core import Card
    from wire.json import dumps

    message = delivery.message
    body: dict[str, Any] = {"eventId": delivery.event_id, "session": delivery.session, "text": message.text,
                            "kind": "card" if isinstance(message, Card) else "person"}
    if not isinstance(message, Card):
        body["messageId"] = message.message_id
    return dumps(body)


def delivery_of(event_id: str, session: str, text: str) -> Any:
    from router.turns.core import Card, Delivery, Person
    from wire.json import loads

    body = loads(text)
    assert isinstance(body, dict)
    message = Card(text=body["text"]) if body.get("kind") == "card" else Person(text=body["text"],
                                                                                 message_id=body["messageId"])
    return Delivery(event_id=event_id, session=session, message=message)


def reply_json(reply: Any) -> tuple[str, bool]:
    """A reply as the inbox keeps it, and whether it is final (a resend
    is answered from it) or not (``DeliveryUnanswered``: a resend tries again).
    A refusal is kept as :meth:`Refusal.to_json` spells it, under ``refusal``."""
    from router.turns.core import Answered, DeliveryUnanswered
    from wire.json import dumps

    if isinstance(reply, Answered):
        return dumps({"type": "answered", "answer": dict(reply.answer), "fromRecord": reply.from_record}), True
    if isinstance(reply, DeliveryUnanswered):
        return dumps({"type": "unanswered", "eventId": reply.event_id, "refusal": reply.refusal.to_json()}), False
    return dumps({"type": "refused", "refusal": reply.refusal.to_json()}), True


def reply_of(text: str) -> Any:
    """A reply :func:`reply_json` kept, read back. Rows written before
    refusals were kept whole spell theirs ``code`` and ``message`` beside
    ``type`` (a final reply stays in the inbox and answers every resend,
    so such rows last): they are read too."""
    from router.turns.core import Answered, DeliveryRefused, DeliveryUnanswered
    from wire.json import loads

    body = loads(text)
    assert isinstance(body, dict)
    if body["type"] == "answered":
        return Answered(answer=body["answer"], from_record=bool(body["fromRecord"]))
    refusal = Refusal.from_json(body["refusal"]) if "refusal" in body else Refusal(body["code"], body["message"])
    assert refusal is not None, f"the inbox holds a reply whose refusal is not one: {text!r}"
    if body["type"] == "unanswered":
        return DeliveryUnanswered(event_id=body["eventId"], refusal=refusal)
    return DeliveryRefused(refusal=refusal)


def settings_from(env: Mapping[str, str]) -> ClusterSettings:
    """The cluster's settings, with the lease's life from ``env`` (and
    the tests' :data:`TRUST_BELIEF_ENV`)."""
    trust = _seconds(env, TRUST_BELIEF_ENV, 0.0)
    text = env.get(LEASE_TTL_ENV)
    if not text:
        return ClusterSettings(trust_belief=trust)
    try:
        ttl = float(text)
    except ValueError:
        ttl = math.nan
    if not (math.isfinite(ttl) and ttl >= 1.5):
        raise Refusal("bad-lease-ttl", f"${LEASE_TTL_ENV} is {text!r}: give a number of seconds, 1.5 or more")
    return ClusterSettings(lease_ttl=ttl, renew_every=ttl / 3, router_ttl=ttl, margin=min(HOLD_MARGIN, ttl / 5),
                           trust_belief=trust)


def _seconds(env: Mapping[str, str], name: str, least: float) -> float | None:
    text = env.get(name)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= least):
        raise Refusal("bad-cluster-setting", f"${name} is {text!r}: give a number of seconds, {least} or more")
    return value


def open_node(store: Any, deliveries: Any, *, env: Mapping[str, str] | None = None,
              router_id: str | None = None) -> ClusterNode:
    """This router's node over the record's database (the store's URL),
    its fence registered on the host's store and on the deliveries'
    record. Close it (:meth:`ClusterNode.close`) after the job stopped."""
    env = os.environ if env is None else env
    url = store.database.url
    name = router_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"
    db = pg.ClusterDatabase(url)
    node = ClusterNode(ClusterMember(db, url, name, settings=settings_from(env)))
    for record in (store, deliveries):
        database = getattr(record, "database", None)
        if database is not None and getattr(database, "dialect", "") == "postgresql":
            database.fences.append(node.fence)
    return node


class ClusterNode:
    """See the module docstring. ``host`` and ``router`` are set by the
    main job once it made them (before :meth:`run`)."""

    def __init__(self, member: ClusterMember) -> None:
        self.member = member
        member.owner = self
        self.host: Any = None
        self.router: Any = None
        self.registry: Any = None
        #: session → number, replaced whole on every change (the store's
        #: worker thread reads it in :meth:`fence`).
        self._numbers: Mapping[str, int] = {}
        self._nursery: trio.Nursery | None = None
        self.takeovers = 0
        #: The record's session list, kept between notifications (kept_list).
        self.mirror = RecordMirror()
        self._mirror_lock = trio.Lock()
        #: This router's marks on the sync channel waiting to come back.
        self._marks: dict[str, trio.Event] = {}
        self._marked = 0
        #: Seconds a mark may take to come back (:meth:`synced`).
        self.sync_timeout = SYNC_TIMEOUT
        #: Whether every table of ``pg.BOARD_TABLES`` notifies (a record
        #: whose tables were made after the node joined: not yet).
        self._notifying = False
        self._announce = False
        self._announcing = False
        member.listener.tap(pg.BOARD_CHANNEL, self.mirror.named)
        member.listener.tap(pg.SYNC_CHANNEL, self._mark_back)

    def __repr__(self) -> str:
        return f"<ClusterNode {self.member.id} held={len(self._numbers)} takeovers={self.takeovers}>"

    @property
    def id(self) -> str:
        return self.member.id

    def holds(self, session: str) -> bool:
        return self.member.holds(session)

    # ------------------------------------------------------------------ the store's fence

    def fence(self, db: Any) -> None:
        """Run first in every transaction of the record (a worker thread):
        who this router is and the numbers it holds, for the trigger."""
        sql, params = pg.fence_settings(self.member.id, self._numbers, self.member.settings.lease_ttl / 2)
        db.execute(sql, params)

    # ------------------------------------------------------------------ LeaseOwner

    def gained(self, session: str, fencing: int) -> None:
        self._numbers = {**self._numbers, session: fencing}
        if self._nursery is not None:
            self._nursery.start_soon(self._drive, session, name=f"cluster drive {session}")

    def lost(self, session: str) -> None:
        numbers = dict(self._numbers)
        numbers.pop(session, None)
        self._numbers = numbers
        if self._nursery is not None:
            self._nursery.start_soon(self._release, session, name=f"cluster release {session}")

    async def _drive(self, session: str) -> None:
        """A session held from now on: open its link when it has work (the
        reconcile replays from the stored cursor), and hand the work to
        the turn router's record."""
        if self.host is None:
            return
        pending = None
        while pending is None:
            try:
                pending = await self.host.session(session).pending()
            except Exception as error:
                # The record blinked past its retries (router._transient), or
                # the session is gone: this task ends, never the node. While
                # the lease is held, a blink is waited out and read again.
                if not is_transient(error):
                    log.exception("cluster %s: cannot drive %s", self.id, session)
                    return
                if not self.holds(session):
                    return
                log.warning("cluster %s: reading %s's open work failed (%s); trying again", self.id, session, error)
                await trio.sleep(DEFAULT_POLICY.most)
        if not pending:
            return
        self.takeovers += 1
        log.info("cluster %s: drives %s (%d open operations)", self.id, session, len(pending))
        async with trio.open_nursery() as nursery:
            for each in pending[:DRIVE_WAITS]:
                nursery.start_soon(self._wait, session, each["operationId"])

    async def _wait(self, session: str, operation_id: str) -> None:
        try:
            await self.host.session(session).wait(operation_id)
        except Refusal as refused:  # not-holder (lost again meanwhile), host stopped, link gave up, store-unavailable
            log.info("cluster %s: %s/%s: %s", self.id, session, operation_id, refused)
        except Exception as error:  # the store blinking below its refusal: this wait ends, never the node
            if not is_transient(error):
                raise
            log.warning("cluster %s: %s/%s: %s", self.id, session, operation_id, error)

    async def _release(self, session: str) -> None:
        try:
            if self.registry is not None:
                await self.registry.close(session)
            if self.host is not None:
                await self.host.close_session(session)
        except Exception as error:  # the store blinking: this task ends, never the node
            if not is_transient(error):
                raise
            log.warning("cluster %s: releasing %s: %s", self.id, session, error)

    # ------------------------------------------------------------------ deliveries

    async def relay(self, delivery: Any) -> Any:
        """Deliver through the session's holder: kept in the inbox by event
        id, answered by the holder (see :mod:`router.cluster.member`)."""
        from router.turns.core import DeliveryRefused

        known = await self.member.db.call(_known, delivery.session)
        if not known:
            return DeliveryRefused(refusal=Refusal("unknown-session", f"there is no session {delivery.session!r} in "
                                                   "the cluster; list the sessions to see which there are"))
        text = await self.member.relay(delivery.event_id, delivery.session, delivery_json(delivery))
        return reply_of(text)

    async def refused(self, delivery: Any, error: BaseException) -> Any:
        """The reply to a delivery whose write here the fence refused
        (recorded in ``cluster_refused`` and logged): unanswered, to be
        resent to the holder; None when ``error`` is not the fence's."""
        from router.turns.core import DeliveryUnanswered

        lost = pg.lease_lost_in(error)
        if lost is None:
            return None
        await self.member.db.call(pg.record_refusal, lost)
        return DeliveryUnanswered(event_id=delivery.event_id, refusal=Refusal(
            "lease-lost", f"this router no longer holds {delivery.session!r}; resend with the same eventId"))

    async def handle(self, event_id: str, session: str, body: str) -> tuple[str, bool]:
        """The inbox's delivery, held here: the turn router delivers it
        here (never relayed again: a lease lost meanwhile leaves the row
        for the next holder, who may be this router again, once this
        handler is done with it)."""
        reply = await self.router.deliver_here(delivery_of(event_id, session, body))
        if not self.holds(session):
            raise pg.LeaseLost("lease-lost", f"the lease of {session!r} moved while {event_id} was delivered",
                               session=session, holder=self.id, fencing=None, what=f"answer to {event_id}")
        return reply_json(reply)

    # ------------------------------------------------------------------ the board

    async def holders(self) -> dict[str, dict[str, Any]]:
        """session → the live router holding it (``{id, apiUrl, socket,
        info}``), for the sessions held now."""
        return await self.member.db.call(_holders, self.member.settings.router_ttl)

    def board_changed(self) -> trio.Event:
        """The event the next change of any session's record, by any router
        of the cluster, sets (``pg.BOARD_CHANNEL``; also set when the
        listener's connection was lost). Take it before reading."""
        return self.member.listener.event(pg.BOARD_CHANNEL)

    async def kept_list(self, read_all: Callable[[], Awaitable[Mapping[str, Any]]],
                        read_some: Callable[[frozenset[str]], Awaitable[Mapping[str, Any]]]) -> list[Any]:
        """Every session's row of the record, in order, as fresh as a read:
        kept between the notifications that name each session written, the
        named ones read again (``read_some(ids)``: id -> row of those
        found), or every one (``read_all()``: id -> row, in order) when
        the notifications cannot be trusted (see
        :mod:`router.cluster.mirror`). One read at a time."""
        notifying = self._notifying  # else what was written before the triggers was never named: read whole
        if not notifying:  # the record's tables made since the node joined: their triggers now
            self._notifying = set(await self.member.db.call(pg.install_board_notify)) == set(pg.BOARD_TABLES)
        synced = notifying and await self.synced()
        listener = self.member.listener
        async with self._mirror_lock:
            plan = self.mirror.plan(epoch=listener.connections, live=listener.live, synced=synced,
                                    now=trio.current_time())
            try:
                rows = await read_all() if plan.full else (await read_some(plan.ids) if plan.ids else {})
            except BaseException:
                self.mirror.failed(plan)
                raise
            return self.mirror.read(plan, rows)

    async def synced(self, timeout: float | None = None) -> bool:
        """Whether the listener has taken every notification of a
        transaction committed before this call: this router's mark, sent
        on ``pg.SYNC_CHANNEL``, came back within ``timeout`` on the
        connection that listened when it was sent (PostgreSQL delivers
        notifications in commit order). False when it did not, or could
        not be sent (the record blinking). ``timeout``: else
        :attr:`sync_timeout`."""
        listener = self.member.listener
        if not listener.live:
            return False
        epoch = listener.connections
        self._marked += 1
        mark = f"{self.id} {self._marked}"
        back = self._marks[mark] = trio.Event()
        try:
            await self.member.db.call(pg.notify, pg.SYNC_CHANNEL, mark)
            with trio.move_on_after(self.sync_timeout if timeout is None else timeout):
                await back.wait()
        except Exception as error:
            if not is_transient(error):
                raise
            log.warning("cluster %s: cannot mark the notifications (%s); the record is read whole", self.id, error)
        finally:
            self._marks.pop(mark, None)
        return back.is_set() and listener.live and listener.connections == epoch

    def _mark_back(self, payload: str) -> None:
        event = self._marks.pop(payload, None)
        if event is not None:
            event.set()

    async def sockets(self) -> set[str]:
        """The private sockets of the cluster's live routers (this one's too)."""
        return set(await self.routers())

    async def routers(self) -> dict[str, str]:
        """The cluster's live routers (this one too): private socket -> id."""
        routers = await self.member.db.call(pg.live_routers, self.member.settings.router_ttl)
        return {each["socket"]: each["id"] for each in routers if each["socket"]}

    def listening(self) -> tuple[int, bool]:
        """The listener's connection count and whether it listens now: what
        was kept from its notifications holds while both stay."""
        return self.member.listener.connections, self.member.listener.live

    def on_router_changed(self, callback: Any) -> None:
        """Call ``callback(router id)`` when a router of the cluster tells
        that its sessions outside the record may have changed
        (:meth:`announce`; this router's own included)."""
        self.member.listener.tap(pg.ROUTER_CHANNEL, callback)

    def announce(self) -> None:
        """This router's sessions outside the record (its Claude Code
        sessions) may have changed: tell the cluster's routers, which keep
        its last answer until then (``pg.ROUTER_CHANNEL``; at most one
        notification per :data:`ANNOUNCE_GAP`, the last change always
        told). Synchronous, never blocks; nothing before :meth:`run`."""
        self._announce = True
        if not self._announcing and self._nursery is not None:
            self._announcing = True
            self._nursery.start_soon(self._announcer, name="cluster announce")

    async def _announcer(self) -> None:
        try:
            while self._announce:
                self._announce = False
                try:
                    await self.member.db.call(pg.notify, pg.ROUTER_CHANNEL, self.id)
                except Exception as error:  # the record blinking: the others re-ask within their age limit
                    if not is_transient(error):
                        raise
                    log.warning("cluster %s: cannot tell of a change of its sessions: %s", self.id, error)
                await trio.sleep(ANNOUNCE_GAP)
        finally:
            self._announcing = False

    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: trio.TaskStatus[ClusterNode] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._notifying = set(await self.member.db.call(_join_record)) == set(pg.BOARD_TABLES)
            await nursery.start(self.member.run)
            await nursery.start(self.member.serve_inbox, self.handle)
            task_status.started(self)
            await trio.sleep_forever()

    async def aclose(self) -> None:
        """A clean stop: stop driving every held session (links closed, so
        the next holder's link does not meet ours at the daemon), then hand
        the leases back and leave."""
        held = self.member.held.sessions()
        self._numbers = {}
        self.member.taking = False  # no round takes a lease while they are handed back
        with trio.move_on_after(self.member.settings.lease_ttl):
            for session in held:
                await self._release(session)
        await self.member.aclose()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason="the cluster node stops")

    def close(self) -> None:
        """Close the database pool (after :meth:`run` returned)."""
        self.member.db.close()

    def register(self, *, api_url: str | None, socket: str | None, info: Mapping[str, Any] | None) -> None:
        """What the board shows of this router (the next round writes it)."""
        from wire.json import dumps

        self.member.registration = {"api_url": api_url, "socket": socket,
                                    "info": dumps(dict(info or {}, cluster=self.id))}
        self.member.wake()


def _known(conn: Any, session: str) -> bool:
    return conn.execute("SELECT 1 FROM cluster_leases WHERE session = %s", (session,)).fetchone() is not None


def _join_record(conn: Any) -> list[str]:
    """The cluster's tables and the fences over the record, and every
    session of the record in the cluster (a record made before it was);
    the record's tables that notify the board."""
    pg.ensure_schema(conn)
    pg.install_fences(conn)
    notifying = pg.install_board_notify(conn)
    if conn.execute("SELECT to_regclass('sessions')").fetchone() != (None,):
        conn.execute("INSERT INTO cluster_leases (session) SELECT id FROM sessions ON CONFLICT (session) DO NOTHING")
    return notifying


def _holders(conn: Any, ttl: float) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT l.session, r.id, r.api_url, r.socket, r.info FROM cluster_leases l JOIN cluster_routers r "
        "ON r.id = l.holder WHERE l.expires_at > clock_timestamp() "
        "AND r.heartbeat_at > clock_timestamp() - make_interval(secs => %s)",
        (ttl,),
    ).fetchall()
    return {row[0]: {"id": row[1], "apiUrl": row[2], "socket": row[3], "info": row[4]} for row in rows}
