"""The Trio layer of a router in a cluster: membership, lease rounds, the
inbox it serves and the replies it waits for.

Theory of operation
-------------------
:class:`ClusterMember` is a component (``run``, ``started`` once it has
registered, run its first lease round and listens). It owns three tasks:

- **the lease round**, every ``renew_every`` seconds (or at once when woken:
  a session added, the inbox seeing work for a free session): one worker
  call that, on one connection, beats the router's heartbeat, renews every
  lease it believes it holds, reads the leases and the live routers,
  computes the spread's plan (:func:`router.cluster.lease.plan`) and hands
  back and takes leases by it. Back in Trio the belief
  (:class:`~router.cluster.lease.HeldLeases`) is updated with the time the
  round was *sent*, and the owner is told what it gained (a session and its
  fencing number: open its link) and lost (close it at once).
- **the expiry watch**: a cancel scope whose deadline is the earliest
  belief's end; when it fires (no renew came back in time: the database is
  slow or unreachable, or this process was stopped) those leases are lost
  here too, before the database gives them to another router.
- **the listener** (:class:`router.cluster.pg.Listener`), which wakes the
  inbox and the replies' waiters.

The inbox (:meth:`ClusterMember.serve_inbox`): a delivery sent to a router
that does not hold its session is kept in ``cluster_inbox`` by event id
(:meth:`ClusterMember.relay` posts it and waits for its reply). The holder
takes the unanswered rows of the sessions it holds (woken by NOTIFY, and
every ``inbox_poll`` seconds as a backstop: a notification is lost with a
listener's connection), hands each to its handler (the router's own
``deliver``: exactly once by event id in the shared record) and answers
the row under its lease (fenced). A holder that dies before answering
leaves the row unanswered; the next holder takes it and the record answers
it (the same event id). A relay whose router dies is resent by its sender,
to any router, and finds the row.

Error handling: a database error in a round is logged and the round tried
again on the next tick (the belief runs out meanwhile, so links close in
time); an answer refused by the fencing check is recorded
(``cluster_refused``) and dropped (the new holder answers); a handler that
raises answers nothing (the row stays for the next try).

Resource handling: :meth:`aclose` (a clean stop) hands back every lease
and leaves the membership; cancelling ``run`` leaves them to expire (a
crash, as SIGKILL would).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Awaitable, Callable, Final, Protocol

import attrs
import trio

from router._transient import StoreUnavailable
from router.cluster import pg
from router.cluster.lease import HOLD_MARGIN, HeldLeases, Plan, plan

log = logging.getLogger(__name__)

__all__ = ["ClusterMemberStatistics", "ClusterMember", "ClusterSettings", "LeaseOwner", "Round"]

#: What answers the inbox's deliveries: ``(event_id, session, body)`` →
#: ``(reply, final)``.
Handler = Callable[[str, str, str], Awaitable[tuple[str, bool]]]

#: Unanswered inbox rows taken per look (ours).
INBOX_BATCH: Final = 256


@attrs.frozen(kw_only=True)
class ClusterSettings:
    """The cluster's times, in seconds (ours; docs/cluster.md)."""

    #: A lease's life on the database's clock from its last renew: a dead
    #: router's sessions wait this long at most before another takes them.
    lease_ttl: float = 10.0
    #: Between two lease rounds (renews, heartbeat, spread): a third of the
    #: lease, so two renews may fail before it expires.
    renew_every: float = 3.0
    #: A router whose heartbeat is older is not counted in the spread.
    router_ttl: float = 10.0
    #: The inbox's backstop look, for a notification lost with a connection.
    inbox_poll: float = 5.0
    #: A reply's backstop look, likewise.
    reply_poll: float = 2.0
    #: The belief's margin before the database's expiry.
    margin: float = HOLD_MARGIN
    #: Tests only (``$ROUTER_CLUSTER_TRUST_BELIEF``, :mod:`router.cluster.node`):
    #: when set, the belief outlives the database's expiry by this many
    #: seconds and a renew the database refuses does not end it, so a
    #: router stopped past its lease and continued goes on writing under
    #: its old numbers, and the fence is seen refusing them. None (always in
    #: production): the belief ends before the database's expiry, or at
    #: the first refused renew.
    trust_belief: float | None = None


class LeaseOwner(Protocol):
    """What the member tells whoever drives sessions (synchronous calls:
    nothing may fall between a lease's loss and the link's close)."""

    def gained(self, session: str, fencing: int) -> None:
        """``session`` is held under ``fencing`` now: drive it."""

    def lost(self, session: str) -> None:
        """``session`` is no longer held: stop driving it at once."""


@attrs.frozen(kw_only=True)
class Round:
    """What one lease round did, as the database answered."""

    renewed: frozenset[str]
    released: frozenset[str]
    acquired: dict[str, int]
    routers: tuple[dict[str, Any], ...]
    plan: Plan


def _round(conn: Any, me: str, held: dict[str, int], settings: ClusterSettings, registration: dict[str, Any],
           want: bool) -> Round:
    """One lease round on one connection (a worker thread)."""
    pg.heartbeat(conn, me, **registration)
    renewed = pg.renew(conn, me, held, settings.lease_ttl)
    leases, now = pg.leases(conn)
    routers = pg.live_routers(conn, settings.router_ttl)
    moves = plan(me, [router["id"] for router in routers], leases, now) if want else Plan(acquire=(), release=())
    released = pg.release(conn, me, {session: held[session] for session in moves.release if session in renewed})
    acquired = pg.acquire(conn, me, moves.acquire, settings.lease_ttl) if moves.acquire else {}
    return Round(renewed=frozenset(renewed - released), released=frozenset(released), acquired=acquired,
                 routers=tuple(routers), plan=moves)


@attrs.frozen
class ClusterMemberStatistics:
    """What a :class:`ClusterMember` did: leases held, rounds and failed
    rounds, routers known, inbox deliveries in flight, notifications received."""

    held: int
    rounds: int
    failed_rounds: int
    routers: int
    in_flight: int
    notifications: int


class ClusterMember:
    """One router in the cluster; see the module docstring."""

    def __init__(self, db: pg.ClusterDatabase, listen_url: str, router_id: str, *, owner: LeaseOwner | None = None,
                 settings: ClusterSettings | None = None) -> None:
        self.db = db
        self.listen_url = listen_url
        self.id = router_id
        self.owner = owner
        self.settings = settings or ClusterSettings()
        trusted = self.settings.trust_belief
        self.held = HeldLeases(self.settings.margin if trusted is None else -trusted)
        self.listener = pg.Listener(listen_url)
        #: What the board shows of this router (its API URL, socket, name).
        self.registration: dict[str, Any] = {}
        #: The live routers as the last round read them.
        self.routers: tuple[dict[str, Any], ...] = ()
        #: Whether this router takes leases (False: it only relays).
        self.taking = True
        self.rounds = 0
        self.failed_rounds = 0
        self._wake = trio.Event()
        self._held_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._in_flight: set[str] = set()

    def __repr__(self) -> str:
        return f"<ClusterMember {self.id} held={len(self.held)} rounds={self.rounds} routers={len(self.routers)}>"

    def statistics(self) -> ClusterMemberStatistics:
        return ClusterMemberStatistics(held=len(self.held), rounds=self.rounds, failed_rounds=self.failed_rounds,
                                       routers=len(self.routers), in_flight=len(self._in_flight),
                                       notifications=self.listener.received)
    def fencing(self, session: str) -> int | None:
        """The number this router writes ``session`` under, or None: it
        does not hold it (believed, now)."""
        self.held.expire(trio.current_time())
        return self.held.fencing(session)

    def holds(self, session: str) -> bool:
        return self.fencing(session) is not None

    def wake(self) -> None:
        """Run the next lease round now."""
        self._wake.set()

    async def add_sessions(self, sessions: list[str]) -> None:
        """``sessions`` enter the cluster (free until a round takes them)."""
        await self.db.call(pg.ensure_sessions, sessions)
        self.wake()

    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: trio.TaskStatus[ClusterMember] = trio.TASK_STATUS_IGNORED) -> None:
        await self.db.call(pg.ensure_schema)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.listener.run)
            await self._one_round()
            nursery.start_soon(self._rounds, name=f"cluster rounds {self.id}")
            nursery.start_soon(self._expiry, name=f"cluster expiry {self.id}")
            task_status.started(self)
            await trio.sleep_forever()

    async def aclose(self) -> None:
        """A clean stop: stop the tasks, hand back every lease, leave. The
        rounds stop first: a round after the leave would take the leases it
        just handed back (and register the router again), and the others
        would wait for their expiry."""
        self.taking = False
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason="the cluster member stops")
        for session in self.held.sessions():
            self._lose(session)
        with trio.CancelScope(shield=True), trio.move_on_after(self.settings.lease_ttl):
            try:
                await self.db.call(pg.leave, self.id)
            except Exception as exc:
                log.warning("cluster %s: could not leave cleanly (its leases expire): %s", self.id, exc)

    async def _rounds(self) -> None:
        while True:
            handed_back = self.listener.event(pg.LEASE_CHANNEL)
            with trio.move_on_after(self.settings.renew_every):
                async with trio.open_nursery() as either:
                    for event in (self._wake, handed_back):
                        either.start_soon(_set_then_cancel, event, either.cancel_scope)
            self._wake = trio.Event()
            await self._one_round()

    async def _one_round(self) -> None:
        sent = trio.current_time()
        held = {session: fencing for session in self.held.sessions()
                if (fencing := self.held.fencing(session)) is not None}
        try:
            done = await self.db.call(_round, self.id, held, self.settings, self.registration, self.taking,
                                    retry=False)
        except Exception as exc:
            self.failed_rounds += 1
            log.warning("cluster %s: lease round failed (the leases run out unless one succeeds): %s", self.id, exc)
            return
        self.rounds += 1
        self.routers = done.routers
        for session in held:
            if session not in done.renewed and self.settings.trust_belief is None:
                self._lose(session)
        for session in done.renewed:
            if session in self.held:
                self.held.granted(session, held[session], sent, self.settings.lease_ttl)
        for session, fencing in sorted(done.acquired.items()):
            if self.held.granted(session, fencing, sent, self.settings.lease_ttl):
                log.info("cluster %s: holds %s under %d", self.id, session, fencing)
                if self.owner is not None:
                    self.owner.gained(session, fencing)
        # Leases whose belief ran out while the round was on the wire go now.
        self._expire_now()
        self._held_changed.set()

    def _lose(self, session: str) -> None:
        if self.held.lost(session):
            log.info("cluster %s: no longer holds %s", self.id, session)
            if self.owner is not None:
                self.owner.lost(session)

    def _expire_now(self) -> None:
        for session in self.held.expire(trio.current_time()):
            log.warning("cluster %s: the lease of %s ran out before a renew came back", self.id, session)
            if self.owner is not None:
                self.owner.lost(session)

    async def _expiry(self) -> None:
        while True:
            self._held_changed = trio.Event()
            deadline = self.held.next_expiry()
            with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf):
                await self._held_changed.wait()
            self._expire_now()

    # ------------------------------------------------------------------ the inbox

    async def relay(self, event_id: str, session: str, body: str) -> str:
        """Keep a delivery for its session's holder and wait for its reply
        (JSON text). A resend (the same event id, here or at any router)
        waits for the same row. Cancelling the wait leaves the row."""
        answered = self.listener.event(pg.REPLY_CHANNEL, event_id)
        await self.db.call(pg.post, event_id, session, body, self.id)
        while True:
            found = await self.db.call(pg.reply_of, event_id)
            if found is not None and found[1] is not None:
                return found[1]
            with trio.move_on_after(self.settings.reply_poll):
                await answered.wait()
            answered = self.listener.event(pg.REPLY_CHANNEL, event_id)

    async def serve_inbox(self, handler: Handler, *,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer the inbox's deliveries for the sessions held here:
        ``await handler(event_id, session, body)`` gives the reply (JSON
        text) and whether it is final (see :func:`router.cluster.pg.post`);
        a handler that raises :class:`~router.cluster.pg.LeaseLost` leaves
        the row for the next holder. Runs until cancelled."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                posted = self.listener.event(pg.INBOX_CHANNEL)
                held = self._held_changed
                try:
                    rows = await self.db.call(pg.pending_for, self.id, INBOX_BATCH)
                except Exception as exc:
                    log.warning("cluster %s: the inbox could not be read: %s", self.id, exc)
                    rows = []
                for event_id, session, body in rows:
                    if event_id not in self._in_flight:
                        self._in_flight.add(event_id)
                        nursery.start_soon(self._answer, handler, event_id, session, body, name=f"inbox {event_id}")
                with trio.move_on_after(self.settings.inbox_poll):
                    async with trio.open_nursery() as either:
                        for event in (posted, held):
                            either.start_soon(_set_then_cancel, event, either.cancel_scope)

    async def _answer(self, handler: Handler, event_id: str, session: str, body: str) -> None:
        try:
            try:
                reply, final = await handler(event_id, session, body)
                await self.db.call(pg.answer, event_id, reply, self.id, self.fencing(session), final)
            except pg.LeaseLost as refused:
                await self._record_refusal(refused)
            except Exception as exc:
                refused = pg.lease_lost_in(exc)
                if refused is not None:  # the handler's own write met the fence
                    await self._record_refusal(refused)
                    return
                if isinstance(exc, StoreUnavailable):  # the record blinked past its budget: expected, no traceback
                    log.warning("cluster %s: delivery %s stays in the inbox: %s", self.id, event_id, exc.message)
                    return
                log.exception("cluster %s: delivery %s failed here; it stays in the inbox", self.id, event_id)
        finally:
            self._in_flight.discard(event_id)

    async def _record_refusal(self, refused: pg.LeaseLost) -> None:
        """Keep the fence's refusal, if the database lets us: it is a
        record of what was refused, not part of the delivery (which stays
        in the inbox either way), so a database that is away past the retry
        budget is logged, never raised out of the inbox (where it ended
        ``router serve``)."""
        try:
            await self.db.call(pg.record_refusal, refused)
        except Exception as exc:  # noqa: BLE001 - the refusal itself was already logged by the fence
            log.warning("cluster %s: a refusal could not be recorded (%s): %s", self.id, refused.message, exc)


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
