"""The user-turn router: the Trio layer over :mod:`router.turns.core`.

:class:`TurnRouter` takes deliveries (an event id, a target session, a
message) and writes each into its session exactly once, answering the
sender; it also serves the sessions' transcripts, live views and aborts, so
every surface (the HTTP API, ``router send``, the MCP tools) calls this one
object.

Usage (a component in the main job's nursery)::

    router = TurnRouter(deliveries=DeliveryLog(path), host=host, registry=registry)
    reply = await router.deliver(Delivery(event_id="e1", session="root",
                                          message=Person(text="hi", message_id="e1")))

Theory of operation
-------------------
The router does five things: **admit, inbox, plan, write, settle**.
Everything that depends on how a session is reached is its *target*
(:mod:`router.turns.targets`: a Claude Code session's mod link, a container
session's host), behind one protocol; every decision is the core's.

``deliver`` admits the delivery against the durable record (one
transaction: a resend of an answered delivery is answered from the record
here and goes no further), then queues it on the session's **inbox** and
waits for its reply. Each open session has one inbox task (in the
session's nursery, :mod:`router.turns.registry`) that takes its
deliveries one at a time, in order; sessions run concurrently. For each:

1. with a plug-in layer, wait while the session's last turn is being
   measured (its stop decision comes first);
2. read the delivery's entry again (a resend queued behind the first
   attempt finds it answered and is answered from it);
3. ``core.plan`` with the target's readiness: is the mod connected (a
   Claude Code session); does the adapter steer (a container session); is
   the session stopped (``session-stopped``, nothing written);
4. store the planned entry, *then* write through the target: it prepares
   (a container turn's bracket opens first), ``core.before_write`` says
   whether the write still goes out (a turn's end may have stopped the
   session meanwhile), the target writes (``session.message`` on the mod
   link under the call deadline, or ``submit`` to the host with the event
   id as the operation id), and ``core.after_write`` says whether the
   session stopped while it wrote (a queued prompt is then aborted);
5. ``core.settle`` with the outcome; store; answer the sender.

The sender's wait is only a wait: cancelling it (a client that hung up)
leaves the delivery to the inbox, which records its answer for the resend.

**Turn brackets and stops** (with ``layer``, a ``PluginLayer``): each
session has its brackets (:mod:`router.turns.session_brackets` over
:mod:`router.turns.brackets`) fed by its target's live-view task, which
sees each turn start and end after its result reached the viewers (a
Claude Code session's mod events; a container session's host events,
which come after the host stored the result and woke its waiters). At each
turn's end the layer records its usage and asks the limit checks; a stop is
recorded in ``turns.sqlite`` (so a restart keeps it), shown in the live view
(``session-stopped``), and the target stops what it has queued (a container
session's operations are aborted). The session then answers deliveries
``session-stopped`` until the person resumes it (:meth:`TurnRouter.resume`,
or launching it again with :meth:`TurnRouter.create`), which the limit
checks must allow.

Error handling: every refusal of a delivery is a reply with a kebab-case
code, never an exception: :class:`~router.turns.core.DeliveryRefused` (bad target,
a reused event id), :class:`~router.turns.core.DeliveryUnanswered` (resend later).
A bug while handling one delivery answers it ``internal`` and the inbox
goes on. The session operations (list, create, read, live, abort, resume)
raise :class:`~router.errors.Refusal`.

Resource handling: sessions live in the registry; closing one answers the
deliveries still queued for it ``session-closed``. The delivery log (the
:class:`~router.turns.delivery_log.DeliveryLog`) and the host are the caller's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from functools import partial
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Final, Mapping

import attrs
import trio

from router._transient import StoreUnavailable, is_transient, unavailable
from router.errors import Refusal
from router.host import Host
from router.modlink.server import DEFAULT_CALL_DEADLINE
from router.plugins.routing import LaunchRecord
from router.turns.brackets import StopInfo
from router.turns.core import (
    AbortOperation,
    Answered,
    Card,
    Delivery,
    DeliveryEntry,
    Outcome,
    Person,
    Proceed,
    DeliveryRefused,
    Reply,
    State,
    SubmitPrompt,
    DeliveryUnanswered,
    WriteMessage,
    admit,
    after_write,
    before_write,
    check_delivery,
    plan,
    settle,
)
from router.board.state import parked_state, stopped_state
from router.limits import ParkBook, is_limit_reason
from router.turns.delivery_log import DeliveryLog
from router.turns.parking import Parking, ResumeMarker
from router.turns.registry import Session, SessionRegistry, SessionRegistryStatistics, Starter
from router.turns.seams import Remote, TurnLayer
from router.turns.session_brackets import SessionBrackets
from router.turns.targets import ClaudeCodeTarget, ContainerSessions, ContainerTarget, LiveStream, Target

__all__ = ["TurnRouterStatistics", "INBOX_SIZE", "LiveStream", "MEASURE_WAIT", "QueuedDelivery", "TurnRouter", "new_event_id"]

log = logging.getLogger("router.turns")

#: Deliveries a session's inbox holds before a new one is refused
#: ``inbox-full`` (ours: far more than a person types ahead).
INBOX_SIZE: Final = 256
#: The longest a delivery waits for the end of the turn before it to be
#: measured (ours: ``end_turn`` reads each usage source under the broker's
#: 5 s deadline; this leaves room for two and the records, and keeps a
#: stuck meter from holding the inbox).
MEASURE_WAIT: Final = 30.0


class QueuedDelivery:
    """One delivery in a session's inbox, and the reply its sender waits for;
    ``admitted``: whether its entry is in the record already (else the
    inbox admits it in the call that plans it)."""

    __slots__ = ("delivery", "done", "reply", "admitted")

    def __init__(self, delivery: Delivery, admitted: bool = True) -> None:
        self.delivery = delivery
        self.done = trio.Event()
        self.reply: Reply | None = None
        self.admitted = admitted

    def __repr__(self) -> str:
        return f"<QueuedDelivery {self.delivery.event_id!r} {'answered' if self.done.is_set() else 'waiting'}>"

    def answer(self, reply: Reply) -> None:
        if self.reply is None:
            self.reply = reply
            self.done.set()


@attrs.frozen
class TurnRouterStatistics:
    """What a :class:`TurnRouter` did: deliveries delivered, and its registry's sessions."""

    delivered: int
    registry: SessionRegistryStatistics


class TurnRouter:
    """The user-turn router (see the module docstring).

    ``deliveries`` is the delivery log; ``host`` serves container sessions
    (None: there are none); ``message_deadline`` (seconds) bounds each
    ``session.message`` call; ``env`` is where a Claude Code session's
    socket path is resolved from (default ``os.environ``).

    ``layer`` (a ``PluginLayer``; None: turns are not metered) brackets
    every session's turns and may stop a session (see
    :mod:`router.turns.brackets`). A session the router did not launch
    itself (a Claude Code session it attached to; a container session with
    no recorded launch, such as ``root``) is metered as the instance
    ``instance``; container sessions run on ``container_harness``, reached
    ``container_via`` (``in-process`` or ``daemon``). A delivery waits at
    most ``measure_wait`` seconds for the turn before it to be measured, and
    a container write at most ``bracket_wait`` for its turn's bracket to
    open (each then goes on, logged). ``park_book`` is the park scheduler
    (its delay, stagger and jitter; :mod:`router.turns.parking`);
    ``shared_limits`` the account limits file every local router shares
    (:mod:`router.limits.shared`; None: this router's own limits only).
    """

    def __init__(
        self,
        *,
        deliveries: DeliveryLog,
        registry: SessionRegistry,
        host: Host | None = None,
        env: Mapping[str, str] | None = None,
        message_deadline: float = DEFAULT_CALL_DEADLINE,
        inbox_size: int = INBOX_SIZE,
        link_options: Mapping[str, Any] | None = None,
        layer: TurnLayer | None = None,
        instance: str = "default",
        container_harness: str = "echo",
        container_via: str = "in-process",
        measure_wait: float = MEASURE_WAIT,
        bracket_wait: float = MEASURE_WAIT,
        park_book: ParkBook | None = None,
        shared_limits: Path | None = None,
        remote: Remote | None = None,
    ) -> None:
        self.deliveries = deliveries
        #: The cluster (``router.cluster.ClusterNode``; None: this router
        #: alone): a container session another router holds is delivered
        #: through it (``holds(session)``, ``await relay(delivery)``), and a
        #: write here its fence refused is answered by it (``await
        #: refused(delivery, error)``: a reply, or None when not the fence's).
        self.remote = remote
        self.registry = registry
        self.env = os.environ if env is None else env
        self.message_deadline = message_deadline
        self.inbox_size = inbox_size
        self.link_options = dict(link_options or {})
        self.layer = layer
        self.instance = instance
        self.measure_wait = measure_wait
        #: The host's container sessions (None: this router serves none).
        self.containers = None if host is None else ContainerSessions(
            host, deliveries=deliveries, instance=instance, harness=container_harness, via=container_via,
            routes=self._routes, bracket_wait=bracket_wait, env=self.env,
            settings=getattr(layer, "settings", None),
        )
        self.delivered = 0
        #: Sessions whose inbox has a delivery in hand (see :meth:`_idle`).
        self._handling: set[str] = set()
        #: The provider's usage limits: parks, kept work, resumes
        #: (:mod:`router.turns.parking`; its task is the main job's to run).
        self.parking = Parking(self, book=park_book, shared=shared_limits)
        #: The notifications (``router.notify.outbox.Notifications``; set by
        #: ``router serve``; None: this router sends none). The router only
        #: carries them to its API (``router.api.context``), which hands
        #: them to the notification routes; it calls nothing on them, so
        #: it names no type of theirs.
        self.notifications: object | None = None
        #: Told (synchronously, never awaited) when a session is created or
        #: opens here, or its live view publishes: what :meth:`list` says of it may have
        #: changed (the board's live stream surveys at once; None: nobody).
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def __repr__(self) -> str:
        return f"<TurnRouter {self.registry!r} delivered={self.delivered}>"

    def statistics(self) -> TurnRouterStatistics:
        return TurnRouterStatistics(delivered=self.delivered, registry=self.registry.statistics())
    # ------------------------------------------------------------------ sessions

    async def open_claude_code(self, session_id: str) -> Session:
        """Serve the mod link of Claude Code session ``session_id`` and
        register it. Raises ``ModLinkRefused`` when the link cannot start."""
        return await self._open(
            ClaudeCodeTarget(
                session_id, env=self.env, link_options=self.link_options, deadline=self.message_deadline,
                instance=self.instance, routes=self._routes,
                record_ask=partial(self.deliveries.call, self.deliveries.put_ask),
                record_turn_end=partial(self.deliveries.call, self.deliveries.turn_ended),
            )
        )

    async def _open(self, target: Target) -> Session:
        """Register a session over ``target``; its nursery runs the
        brackets (with a plug-in layer), the target's tasks, then the inbox."""
        send, receive = trio.open_memory_channel[QueuedDelivery](self.inbox_size)
        session = Session(id=target.id, kind=target.kind, inbox=send, target=target, live=target.hub)
        hub = target.hub
        if hub is not None:
            session.on_close.append(hub.close)
            hub.on_publish = self._changed
        starters: list[Starter] = []
        if self.layer is not None:
            brackets = session.brackets = await self._brackets(session, target)
            starters.append(("meter", brackets.run))
        target.on_limit = partial(self.parking.signal, target.id)
        starters += target.tasks(session.brackets)
        starters.append(("inbox", lambda task_status: self._inbox(session, receive, task_status)))
        opened = await self.registry.open(session, starters)
        self._changed()
        await self.parking.joined(opened)
        return opened

    async def _brackets(self, session: Session, target: Target) -> SessionBrackets:
        stopped = await self.deliveries.call(self.deliveries.stop_of, session.id)

        async def on_stop(stop: StopInfo) -> None:
            await self._stopped(session, stop)

        return SessionBrackets(session.id, layer=self.layer, launch=target.launch_record, on_stop=on_stop,
                               one_turn=target.one_turn, stopped=stopped)

    async def _routes(self) -> object:
        document = await trio.to_thread.run_sync(self.layer.settings.read, "routes.json")
        return None if isinstance(document, Refusal) else document.value

    async def _stopped(self, session: Session, stop: StopInfo) -> None:
        """A turn's end stopped ``session``: record it, tell its viewers,
        and let its target stop what it has queued (its next turns must not
        run)."""
        await self.deliveries.call(self.deliveries.put_stop, session.id, stop)
        if session.live is not None:
            session.live.publish([{"type": "session-stopped", "session": session.id, **stop.to_json()}])
        await session.target.stopped()

    def _stop_of(self, session: Session) -> StopInfo | None:
        return None if session.brackets is None else session.brackets.core.stopped

    def _stop_reason(self, session: Session) -> str | None:
        stop = self._stop_of(session)
        return None if stop is None else stop.reason

    async def resume(self, session_id: str) -> dict[str, Any]:
        """Let a stopped session take deliveries again, once the limit
        checks let its subject launch (``may_launch``): the person raised
        the limit or reset its count. Raises :class:`Refusal` with the
        checks' refusal (``limit-reached``, ``limit-check-failed``) and the
        session stays stopped. A session that is not stopped answers
        ``resumed: false``. A session the provider's usage limit parked is
        resumed now: its kept work goes in (``was: {parked}``)."""
        session = await self.session(session_id)
        parked = await self.parking.resume_now(session_id)
        if parked is not None:
            return parked
        brackets = session.brackets
        if brackets is None or brackets.core.stopped is None:
            return {"session": session_id, "resumed": False}
        record = await session.target.launch_record()
        refusal = await self.layer.may_continue(record.subject())
        if refusal is not None:
            raise Refusal(refusal.code, f"{refusal.message}; the session stays stopped")
        return await self._resume(session)

    async def _resume(self, session: Session) -> dict[str, Any]:
        assert session.brackets is not None
        await self.deliveries.call(self.deliveries.clear_stop, session.id)
        was = session.brackets.resume()
        if was is not None and session.live is not None:
            session.live.publish([{"type": "session-resumed", "session": session.id}])
        return {"session": session.id, "resumed": was is not None,
                **({"was": was.to_json()} if was is not None else {})}

    async def cancel_park(self, session_id: str) -> dict[str, Any]:
        """End the park of a session the provider's usage limit parked:
        ``{session, cancelled[, dropped, was]}``; its kept deliveries become
        unanswered ``park-cancelled`` (resend them), nothing is written."""
        await self.session(session_id)
        return await self.parking.cancel(session_id)

    async def session(self, session_id: str) -> Session:
        """The open session ``session_id``; a container session the host
        knows is opened on first use. Raises :class:`Refusal`
        (``bad-session``, ``unknown-session``)."""
        if type(session_id) is not str or not session_id:
            raise Refusal("bad-session", "a session id is a non-empty string")
        session = self.registry.get(session_id)
        if session is not None:
            return session
        if self.containers is not None and await self.containers.knows(session_id):
            return await self._open(self.containers.target(session_id, metered=self.layer is not None))
        raise Refusal(
            "unknown-session",
            f"there is no session {session_id!r}; list the sessions (GET /sessions, or the "
            "list_sessions tool) to see which there are, or create a container session (POST /sessions)",
        )

    def is_open(self, session_id: str) -> bool:
        """Whether ``session_id`` is open here (its tasks run in this
        router): a session this router lists, known without a read."""
        return self.registry.get(session_id) is not None

    async def list(self, *, containers: bool = True) -> list[dict[str, Any]]:
        """Every session: ``{id, kind, busy, state}`` (container sessions
        oldest first, then Claude Code sessions), with ``stopped`` (the
        stop's reason) when a limit stopped it; ``state`` as
        :mod:`router.board.state` derives it. ``containers=False``: the
        Claude Code sessions only (a cluster's board lists the container
        sessions of the shared record once, not from every router)."""
        stops = await self.deliveries.call(self.deliveries.stops) if self.layer is not None else {}
        out = [] if self.containers is None or not containers else await self.containers.list()
        out += [entry for session in self.registry.sessions() if (entry := session.target.entry()) is not None]
        await self.parking.check_shared(*(entry["id"] for entry in out))
        for entry in out:
            open_session = self.registry.get(entry["id"])
            stop = self._stop_of(open_session) if open_session is not None else stops.get(entry["id"])
            if stop is not None:
                entry["stopped"] = stop.reason
                entry["state"] = stopped_state(entry["state"])
            park = self.parking.holding(entry["id"])
            if park is not None:
                entry["parked"] = park.to_json()
                entry["state"] = parked_state(entry["state"])
        return out

    async def create(self, session_id: str | None = None, *, launch: LaunchRecord | None = None,
                     harness: str | None = None) -> dict[str, Any]:
        """Create a container session (an id that exists returns it).
        ``launch`` is the launch the plug-in layer allowed for it: its turns
        are metered under it, and a session a limit stopped is resumed (the
        launch passed the limit checks). ``harness``: what its daemon runs
        when a launcher starts it (``echo``, ``claude-code`` ...)."""
        if self.containers is None:
            raise Refusal("no-host", "this router serves no container sessions")
        if session_id is not None and (type(session_id) is not str or not session_id):
            raise Refusal("bad-session", "a session id is a non-empty string")
        existing = None if session_id is None else self.registry.get(session_id)
        created = await self.containers.create(session_id, existing, harness=harness)
        if launch is not None:
            await self.deliveries.call(self.deliveries.put_launch, created, launch)
            if self.layer is not None and await self.deliveries.call(self.deliveries.stop_of, created) is not None:
                await self._resume(await self.session(created))
        self._changed()
        return {"id": created, "kind": self.containers.kind.value}

    async def messages(self, session_id: str) -> dict[str, Any]:
        """``{session, kind, messages}``: the transcript (a container
        session's since its last reset; a Claude Code session's since the
        router attached)."""
        session = await self.session(session_id)
        return {"session": session_id, "kind": session.kind.value, "messages": await session.target.messages()}

    @contextlib.asynccontextmanager
    async def live(self, session_id: str, since: str | None = None) -> AsyncIterator[LiveStream]:
        """The session's live view: ``stream.snapshot``, then ``async for
        items in stream`` until the session closes; with ``since`` (a
        reader's last event id), what it missed when the view can tell
        (``stream.replay``; see the target's ``live``). The snapshot has
        ``stopped`` (``{reason, check, at}``) while a limit has the session
        stopped; the items ``session-stopped`` / ``session-resumed`` say
        when that changes."""
        session = await self.session(session_id)
        async with session.target.live(since) as stream:
            stop = self._stop_of(session)
            if stop is not None and stream.snapshot is not None:
                stream.snapshot["stopped"] = stop.to_json()
            park = self.parking.holding(session_id)
            if park is not None and stream.snapshot is not None:
                stream.snapshot["parked"] = park.to_json()
            yield stream

    async def abort(self, session_id: str, operation_id: str | None = None) -> dict[str, Any]:
        """Stop a session's running turn (or one operation). Raises
        :class:`Refusal` (``abort-unsupported`` for a Claude Code session)."""
        session = await self.session(session_id)
        return await session.target.abort(operation_id)

    async def reply_of(self, session_id: str, operation_id: str) -> dict[str, Any]:
        """Wait for a container operation to settle: its result as JSON."""
        assert self.containers is not None
        return await self.containers.reply_of(session_id, operation_id)

    # ------------------------------------------------------------------ admit

    async def deliver(self, delivery: Delivery) -> Reply:
        """Write one delivery into its session, exactly once per event id,
        and return the reply (see the module docstring)."""
        refused = check_delivery(delivery)
        if refused is not None:
            return refused
        try:
            if self._elsewhere(delivery.session):
                return await self.remote.relay(delivery)
            try:
                reply = await self._deliver_here(delivery)
            except Exception as error:
                # In a cluster, a write the fence refused (this router's lease
                # moved under it) is the holder's to answer, not a failure.
                reply = None if self.remote is None else await self.remote.refused(delivery, error)
                if reply is None:
                    raise
            if not isinstance(reply, Answered) and self._elsewhere(delivery.session):
                # The lease moved while it was written here (the write was
                # refused by its fencing number): the holder answers it.
                return await self.remote.relay(delivery)
            return reply
        except StoreUnavailable as refused:  # the store blinked past its retries: not done, resend
            return DeliveryUnanswered(event_id=delivery.event_id, refusal=Refusal(refused.code, refused.message))

    async def deliver_here(self, delivery: Delivery) -> Reply:
        """Write one delivery into its session *here*, never relaying it:
        for a cluster's inbox, whose deliveries are relayed already (a
        relay from the inbox's own handler would wait on its own row)."""
        refused = check_delivery(delivery)
        if refused is not None:
            return refused
        return await self._deliver_here(delivery)

    def _elsewhere(self, session_id: str) -> bool:
        """Whether another router of the cluster drives ``session_id`` (a
        container session this router holds no lease for)."""
        if self.remote is None:
            return False
        local = self.registry.get(session_id)
        if local is not None and not isinstance(local.target, ContainerTarget):
            return False  # a Claude Code session is this router's own
        return not self.remote.holds(session_id)

    async def _deliver_here(self, delivery: Delivery) -> Reply:
        try:
            session = await self.session(delivery.session)
            # An idle inbox (nothing queued, nothing in hand) takes the
            # delivery at once: it admits it in the call that plans it (one
            # thread hop and one commit less). A busy one has it admitted
            # here, meanwhile, and a resend of an answered delivery is
            # answered from the record without waiting its turn. In a
            # cluster always here: a write the fence refuses is the
            # holder's to answer (deliver), never the inbox's.
            admitted = self.remote is not None or not self._idle(session)
            admission = await self.deliveries.call(self.deliveries.admit, delivery) if admitted else None
        except Refusal as refusal:
            if isinstance(refusal, StoreUnavailable):  # not done: resend with the same eventId
                return DeliveryUnanswered(event_id=delivery.event_id, refusal=Refusal(refusal.code, refusal.message))
            return DeliveryRefused(refusal=Refusal(refusal.code, refusal.message))
        if admitted and not isinstance(admission, Proceed):
            return admission  # type: ignore[return-value]
        queued = QueuedDelivery(delivery, admitted=admitted)
        try:
            session.inbox.send_nowait(queued)
        except trio.WouldBlock:
            return DeliveryUnanswered(
                event_id=delivery.event_id,
                refusal=Refusal("inbox-full", f"session {delivery.session!r} has {self.inbox_size} deliveries "
                                "waiting; resend with the same eventId later"),
            )
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return _closed(delivery)
        await queued.done.wait()
        assert queued.reply is not None
        return queued.reply

    def _idle(self, session: Session) -> bool:
        """Whether ``session``'s inbox holds no delivery and handles none."""
        return session.id not in self._handling and session.inbox.statistics().current_buffer_used == 0

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        event_id: str | None = None,
        card: bool = False,
        message_id: str | None = None,
        wait: bool = False,
    ) -> tuple[Reply, dict[str, Any]]:
        """What every surface does with "send this text to this session":
        build the delivery (a person's message unless ``card``; the event id
        minted when not given; the Dispatch message id defaults to the event
        id), deliver it, and answer its reply with the reply's JSON body:
        the answer (plus ``reply``, a container operation's result, when
        ``wait``), or ``{error, message[, eventId]}``."""
        event_id = new_event_id() if event_id is None else event_id
        message: Person | Card = (
            Card(text=text) if card else Person(text=text, message_id=event_id if message_id is None else message_id)
        )
        reply = await self.deliver(Delivery(event_id=event_id, session=session_id, message=message))
        if isinstance(reply, Answered):
            body = reply.to_json()
            if wait and body.get("status") == "delivered" and type(body.get("operationId")) is str:
                body["reply"] = result = await self.reply_of(session_id, body["operationId"])
                if is_limit_reason(result.get("reason")):  # kept, not failed: it goes in again at the resume
                    result["kept"] = True
                    park = self.parking.holding(session_id)
                    if park is not None:
                        result["parked"] = park.to_json()
            return reply, body
        if isinstance(reply, DeliveryUnanswered):
            return reply, {**reply.refusal.to_json(), "eventId": reply.event_id}
        return reply, reply.refusal.to_json()

    # ------------------------------------------------------------------ inbox

    async def _inbox(
        self, session: Session, receive: trio.MemoryReceiveChannel[QueuedDelivery],
        task_status: trio.TaskStatus[None],
    ) -> None:
        current: QueuedDelivery | None = None
        task_status.started()
        try:
            async for queued in receive:
                if isinstance(queued, ResumeMarker):  # a park's kept work runs here, in order
                    try:
                        await self.parking.run_kept(session, queued)
                    except Exception:
                        log.exception("session %r: resuming its kept work failed; it stays kept", session.id)
                    continue
                current = queued
                self._handling.add(session.id)
                try:
                    reply = await self._handle(session, queued.delivery, queued.admitted)
                except Exception as error:
                    if is_transient(error):  # the store blinked past its retries: resend later
                        refused = unavailable(error)
                        log.warning("delivery %r to session %r: %s", queued.delivery.event_id, session.id, refused)
                        reply = DeliveryUnanswered(event_id=queued.delivery.event_id,
                                                   refusal=Refusal(refused.code, refused.message))
                        queued.answer(reply)
                        current = None
                        self._handling.discard(session.id)
                        continue
                    fenced = await self._fenced(queued.delivery, error)
                    if fenced is not None:  # this router's lease moved under it: resend (to the holder)
                        queued.answer(fenced)
                        current = None
                        continue
                    log.exception("delivery %r to session %r failed", queued.delivery.event_id, session.id)
                    reply = DeliveryUnanswered(
                        event_id=queued.delivery.event_id,
                        refusal=Refusal("internal", "the router failed on this delivery (it was logged); resend "
                                        "with the same eventId"),
                    )
                queued.answer(reply)
                current = None
                self._handling.discard(session.id)
        finally:
            self._handling.discard(session.id)
            # The session is closing: whatever waits is answered, never left.
            if current is not None:
                current.answer(_closed(current.delivery))
            while True:
                try:
                    left = receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                if isinstance(left, ResumeMarker):
                    continue  # its park stays in the record: the next start resumes it
                left.answer(_closed(left.delivery))
            receive.close()

    async def _fenced(self, delivery: Delivery, error: Exception) -> Reply | None:
        """The reply to a delivery whose write the cluster's fence refused
        in the session's inbox (the lease moved after its admission):
        unanswered ``lease-lost``, resent to the holder. None when
        ``error`` is not the fence's, or there is no cluster."""
        if self.remote is None:
            return None
        try:
            return await self.remote.refused(delivery, error)
        except Exception as failed:  # noqa: BLE001 - recording the refusal failed (the store away): still refused
            log.warning("delivery %r: the fence's refusal could not be recorded: %s", delivery.event_id, failed)
            return DeliveryUnanswered(event_id=delivery.event_id, refusal=Refusal(
                "lease-lost", f"this router no longer holds {delivery.session!r}; resend with the same eventId"))

    # ------------------------------------------------------------------ plan, write, settle

    async def _handle(self, session: Session, delivery: Delivery, admitted: bool = True) -> Reply:
        await self.parking.check_shared(session.id)
        park = self.parking.holding(session.id)
        if park is not None:  # the provider's usage limit: kept, answered `parked`
            if not admitted:  # kept work is resumed from its admitted entry
                admission = await self.deliveries.call(self.deliveries.admit, delivery)
                if not isinstance(admission, Proceed):
                    return admission
            return await self.parking.keep_delivery(delivery, park)
        return await self.write_delivery(session, delivery, admitted)

    async def write_delivery(self, session: Session, delivery: Delivery, admitted: bool = True) -> Reply:
        """Plan, write and settle one delivery (the inbox's work; a park's
        resume runs its kept deliveries through here). ``admitted=False``:
        its entry is not in the record yet, and the call that plans it
        admits it first, in the same transaction."""
        await self._measured(session)
        readiness = session.target.readiness(self._stop_reason(session))
        # Read the entry again (or admit it), plan and store the plan in one
        # call: one thread hop and one commit (the log's group commit may
        # hold others); a prompt's launch record is read in it too, for its
        # turn's bracket.
        entry, planned_step, launch = await self.deliveries.call(self._plan, delivery, readiness, admitted)
        if not isinstance(entry, DeliveryEntry):  # not admitted: refused, or answered from the record
            return entry
        if planned_step is None:
            assert entry.answer is not None
            return Answered(answer=entry.answer, from_record=True)
        planned, step = planned_step
        if not isinstance(step, (WriteMessage, SubmitPrompt)):
            return step
        outcome, abort = await self._write(session, step, launch)
        if abort is not None:
            await session.target.abort_operation(abort.operation_id)
        settled, reply = settle(planned, step, outcome)
        await self.deliveries.call(self.deliveries.put, settled)
        if isinstance(reply, Answered):
            self.delivered += 1
        return reply

    def _plan(self, delivery: Delivery, readiness: Any, admitted: bool = True) -> tuple[Any, Any, LaunchRecord | None]:
        """In the log's thread: the delivery's entry and, unless a resend
        queued behind the first attempt finds it answered, its plan, stored;
        for a prompt (a container session's turn) the session's stored
        launch record too (None: none stored, or not a prompt). Not
        ``admitted``: admitted first, in the same transaction; an admission
        that does not proceed (refused, answered from the record) comes
        back in the entry's place."""
        event_id = delivery.event_id
        with self.deliveries.atomically():
            if admitted:
                entry = self.deliveries.get(event_id)
                if entry is None:  # pragma: no cover - admitted entries are never removed
                    raise RuntimeError(f"no entry for admitted event {event_id!r}")
            else:
                admission = admit(self.deliveries.get(event_id), delivery)
                if not isinstance(admission, Proceed):
                    return admission, None, None
                entry = admission.entry
            if entry.state is State.ANSWERED:
                return entry, None, None
            planned, step = plan(entry, readiness)
            self.deliveries.put(planned)
            launch = self.deliveries.launch_of(entry.session) if isinstance(step, SubmitPrompt) else None
        return entry, (planned, step), launch

    async def _measured(self, session: Session) -> None:
        """Hold a delivery while the turn before it is being measured, so
        that a turn which reached a limit stops the session before anything
        else is written into it (a turn the channel settled but the view
        has not seen end yet counts as being measured too: the sender may
        have its reply before the view its end). At most ``measure_wait``
        seconds: brackets that are stuck do not hold the inbox for ever
        (logged)."""
        brackets = session.brackets
        if brackets is None:
            return
        with trio.move_on_after(self.measure_wait) as waited:
            await session.target.turns_seen(brackets)
            await brackets.wait_until(lambda core: not core.measuring)
        if waited.cancelled_caught:
            log.warning("session %r: the last turn was not measured within %g s; delivering anyway (%r)",
                        session.id, self.measure_wait, brackets)

    async def _write(
        self, session: Session, step: WriteMessage | SubmitPrompt, launch: LaunchRecord | None = None
    ) -> tuple[Outcome, AbortOperation | None]:
        """Write ``step`` through the session's target. The stop is read
        twice, each time right after an await, and the core decides what it
        means: stopped before the write went out, nothing is written;
        stopped while the host stored it, the operation is aborted."""
        target, brackets = session.target, session.brackets
        await target.prepare(step, brackets, launch)
        stopped = before_write(self._stop_reason(session))
        if stopped is not None:
            target.withdraw(step, brackets)
            return stopped, None
        outcome = await target.write(step, brackets)
        return after_write(outcome, self._stop_reason(session))


def _closed(delivery: Delivery) -> DeliveryUnanswered:
    return DeliveryUnanswered(
        event_id=delivery.event_id,
        refusal=Refusal("session-closed", f"session {delivery.session!r} closed before this delivery was "
                        "answered; resend with the same eventId"),
    )


def new_event_id() -> str:
    return str(uuid.uuid4())
