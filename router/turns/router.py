"""The user-turn router: the Trio layer over :mod:`router.turns.core`.

:class:`TurnRouter` takes deliveries (an event id, a target session, a
message) and writes each into its session exactly once, answering the
sender; it also serves the sessions' transcripts, live views and aborts, so
every surface (the HTTP API, ``router send``, the MCP tools) calls this one
object.

Usage (a component in the main job's nursery)::

    router = TurnRouter(log=DeliveryLog(path), host=host, registry=registry)
    reply = await router.deliver(Delivery(event_id="e1", session="root",
                                          message=Person(text="hi", message_id="e1")))

Theory of operation
-------------------
``deliver`` admits the delivery against the durable record (one
transaction: a resend of an answered delivery is answered from the record
here and goes no further), then queues it on the session's **inbox** and
waits for its reply. Each open session has one inbox task (in the
session's nursery, :mod:`router.turns.registry`) that takes its
deliveries one at a time, in order; sessions run concurrently. For each:

1. read the record again (a resend queued behind the first attempt finds
   it answered and is answered from it);
2. with a plug-in layer, wait while the session's last turn is being
   measured (its stop decision comes first);
3. ``core.plan`` with the session's target: is the mod connected (a
   Claude Code session); does the adapter steer (a container session); is
   the session stopped (``session-stopped``, nothing written);
4. store the planned record, *then* write: ``session.message`` on the mod
   link under the call deadline, or ``submit`` to the host with the event id
   as the operation id (its turn's bracket opened first);
5. ``core.settle`` with the outcome; store; answer the sender.

The sender's wait is only a wait: cancelling it (a client that hung up)
leaves the delivery to the inbox, which records its answer for the resend.

**Turn brackets and stops** (with ``layer``, a ``PluginLayer``): each
session has a meter (:mod:`router.turns.meter` over
:mod:`router.turns.brackets`) fed by its live-view task, which sees each
turn start and end after its result reached the viewers (a Claude Code
session's mod events; a container session's host events, which come after
the host stored the result and woke its waiters). At each turn's end the
layer records its usage and asks the limit checks; a stop is recorded in
``turns.sqlite`` (so a restart keeps it), shown in the live view
(``session-stopped``), and a container session's queued operations are
aborted. The session then answers deliveries ``session-stopped`` until the
person resumes it (:meth:`TurnRouter.resume`, or launching it again with
:meth:`TurnRouter.create`), which the limit checks must allow.

Error handling: every refusal is a reply with a kebab-case code, never an
exception: :class:`~router.turns.core.Refused` (bad target, a reused event
id), :class:`~router.turns.core.Unanswered` (resend later). A bug while
handling one delivery answers it ``internal`` and the inbox goes on.

Resource handling: sessions live in the registry; closing one answers the
deliveries still queued for it ``session-closed``. The record (the
:class:`~router.turns.delivery_log.DeliveryLog`) and the host are the caller's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from typing import Any, AsyncIterator, Final, Mapping

import attrs
import trio

from router.host import EventsLagged, Host, HostEvent, LinkError, OperationEnded, OperationStarted
from router.host import Refused as HostRefused
from router.modlink.errors import ModCallError, ModCallTimeout, ModLinkClosed, ModSubscriberOverflow
from router.modlink.server import DEFAULT_CALL_DEADLINE, ModLink
from router.turns.core import (
    Answered,
    Card,
    ClaudeCodeTarget,
    ContainerTarget,
    Delivery,
    Denied,
    NoAnswer,
    Outcome,
    Person,
    Proceed,
    PromptTaken,
    Queued,
    Refused,
    Reply,
    RowWritten,
    State,
    SubmitPrompt,
    Unanswered,
    WriteMessage,
    check_delivery,
    plan,
    settle,
    stopped_sentence,
)
from router.plugins.refusal import Refusal
from router.plugins.routing import LaunchRecord
from router.turns.brackets import StopInfo, attached_record
from router.turns.live import LiveHub, LiveSubscription, container_items
from router.turns.meter import SessionMeter
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import Session, SessionKind, SessionRegistry, Starter
from wire.container import AdapterInfo
from wire.mod import (
    ModHelloEvent,
    ModMessageDenied,
    ModPromptTaken,
    ModRowWritten,
    ModSessionEndEvent,
    ModSessionMessageArgs,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
    ModUnreadCard,
    ModUnreadPerson,
)

__all__ = ["INBOX_SIZE", "LiveStream", "MEASURE_WAIT", "Problem", "TurnRouter", "new_event_id"]

log = logging.getLogger("router.turns")

#: Deliveries a session's inbox holds before a new one is refused
#: ``inbox-full`` (ours: far more than a person types ahead).
INBOX_SIZE: Final = 256
#: The longest a delivery waits for the end of the turn before it to be
#: measured (ours: ``end_turn`` reads each usage source under the broker's
#: 5 s deadline; this leaves room for two and the records, and keeps a
#: stuck meter from holding the inbox).
MEASURE_WAIT: Final = 30.0
#: Pauses before a container session's view follows the host's events
#: again after they ended (the link failed or was closed), doubling (ours).
RESUBSCRIBE_PAUSE: Final = (0.1, 10.0)


@attrs.frozen(kw_only=True)
class Problem(Exception):
    """A refusal of a session operation (not a delivery): a kebab-case
    ``code`` and a sentence; surfaces map the code to their own status."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class _Slot:
    """One queued delivery and the reply its sender waits for."""

    __slots__ = ("delivery", "done", "reply")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.done = trio.Event()
        self.reply: Reply | None = None

    def answer(self, reply: Reply) -> None:
        if self.reply is None:
            self.reply = reply
            self.done.set()


class TurnRouter:
    """The user-turn router (see the module docstring).

    ``host`` serves container sessions (None: there are none);
    ``message_deadline`` (seconds) bounds each ``session.message`` call;
    ``env`` is where a Claude Code session's socket path is resolved from
    (default ``os.environ``).

    ``layer`` (a ``PluginLayer``; None: turns are not metered) brackets
    every session's turns and may stop a session (see
    :mod:`router.turns.brackets`). A session the router did not launch
    itself (a Claude Code session it attached to; a container session with
    no recorded launch, such as ``root``) is metered as the instance
    ``instance``; container sessions run on ``container_harness``, reached
    ``container_via`` (``in-process`` or ``daemon``).
    """

    def __init__(
        self,
        *,
        log: DeliveryLog,
        registry: SessionRegistry,
        host: Host | None = None,
        env: Mapping[str, str] | None = None,
        message_deadline: float = DEFAULT_CALL_DEADLINE,
        inbox_size: int = INBOX_SIZE,
        link_options: Mapping[str, Any] | None = None,
        layer: Any = None,
        instance: str = "default",
        container_harness: str = "echo",
        container_via: str = "in-process",
        measure_wait: float = MEASURE_WAIT,
    ) -> None:
        self.log = log
        self.registry = registry
        self.host = host
        self.env = os.environ if env is None else env
        self.message_deadline = message_deadline
        self.inbox_size = inbox_size
        self.link_options = dict(link_options or {})
        self.layer = layer
        self.instance = instance
        self.container_harness = container_harness
        self.container_via = container_via
        self.measure_wait = measure_wait
        #: The container adapter last seen in a ``hello`` (any session): one
        #: daemon runs one adapter, so it speaks for sessions not linked yet.
        self.adapter: AdapterInfo | None = None
        self.delivered = 0

    def __repr__(self) -> str:
        return f"<TurnRouter {self.registry!r} delivered={self.delivered}>"

    # ------------------------------------------------------------------ sessions

    async def open_claude_code(self, session_id: str) -> Session:
        """Serve the mod link of Claude Code session ``session_id`` and
        register it. Raises ``ModLinkRefused`` when the link cannot start."""
        link = ModLink(session_id, env=self.env, **self.link_options)
        live = LiveHub()
        send, receive = trio.open_memory_channel[_Slot](self.inbox_size)
        session = Session(id=session_id, kind=SessionKind.CLAUDE_CODE, inbox=send, link=link, live=live)
        session.on_close.append(lambda: live.close())
        starters: list[Starter] = []

        async def serve_link(task_status: trio.TaskStatus[None]) -> None:
            await link.run(task_status=task_status)

        starters.append(("mod-link", serve_link))
        if self.layer is not None:
            session.meter = await self._meter(session, one_turn=True)
            starters.append(("meter", session.meter.run))

        # Subscribed before the link serves, so the view misses no event.
        first = link.events()

        async def view(task_status: trio.TaskStatus[None]) -> None:
            await self._view(session, link, live, first, task_status)

        starters.append(("live-view", view))
        starters.append(("inbox", lambda task_status: self._inbox(session, receive, task_status)))
        return await self.registry.open(session, starters)

    async def _open_container(self, session_id: str) -> Session:
        send, receive = trio.open_memory_channel[_Slot](self.inbox_size)
        session = Session(id=session_id, kind=SessionKind.CONTAINER, inbox=send)
        starters: list[Starter] = []
        if self.layer is not None:
            # Metered: one view task follows the host's events for both the
            # meter and the live view (which then also carries stop notices).
            live = session.live = LiveHub()
            session.on_close.append(lambda: live.close())
            session.meter = await self._meter(session, one_turn=False)
            starters.append(("meter", session.meter.run))
            starters.append(("live-view", lambda task_status: self._container_view(session, task_status)))
        starters.append(("inbox", lambda task_status: self._inbox(session, receive, task_status)))
        return await self.registry.open(session, starters)

    async def _meter(self, session: Session, *, one_turn: bool) -> SessionMeter:
        stopped = await self.log.call(self.log.stop_of, session.id)

        async def launch() -> LaunchRecord:
            return await self._launch_record(session)

        async def on_stop(stop: StopInfo) -> None:
            await self._stopped(session, stop)

        return SessionMeter(session.id, layer=self.layer, launch=launch, on_stop=on_stop,
                            one_turn=one_turn, stopped=stopped)

    async def _routes(self) -> object:
        document = await trio.to_thread.run_sync(self.layer.settings.read, "routes.json")
        return None if isinstance(document, Refusal) else document.value

    async def _launch_record(self, session: Session) -> LaunchRecord:
        """The launch record a turn of ``session`` is metered under: the
        one recorded when it was launched, else one for an attached
        session (see :func:`~router.turns.brackets.attached_record`)."""
        if session.kind is SessionKind.CLAUDE_CODE:
            assert session.link is not None
            state = session.link.state
            return attached_record(
                # A ``/clear`` moves the session id, and the transcript with it.
                session=state.session_id or session.id, instance=self.instance, harness="claude-code",
                via="mod-link", routes=await self._routes(), model=state.model,
                harness_version=state.claude_version, counts_account=True,
            )
        launched = await self.log.call(self.log.launch_of, session.id)
        if launched is not None:
            return launched
        return attached_record(
            session=session.id, instance=self.instance, harness=self.container_harness,
            via=self.container_via, routes=await self._routes(),
        )

    async def _stopped(self, session: Session, stop: StopInfo) -> None:
        """A turn's end stopped ``session``: record it, tell its viewers,
        and abort what is queued in a container session (its next turns
        must not run)."""
        await self.log.call(self.log.put_stop, session.id, stop)
        if session.live is not None:
            session.live.publish([{"type": "session-stopped", "session": session.id, **stop.to_json()}])
        if session.kind is SessionKind.CONTAINER and self.host is not None:
            try:
                await self.host.session(session.id).abort()
            except (HostRefused, LinkError) as exc:
                log.warning("session %r: aborting its queued operations failed: %s", session.id, exc)

    def _stop_of(self, session: Session) -> StopInfo | None:
        return None if session.meter is None else session.meter.core.stopped

    async def resume(self, session_id: str) -> dict[str, Any]:
        """Let a stopped session take deliveries again, once the limit
        checks let its subject launch (``may_launch``): the person raised
        the limit or reset its count. Raises :class:`Problem` with the
        checks' refusal (``limit-reached``, ``limit-check-failed``) and the
        session stays stopped. A session that is not stopped answers
        ``resumed: false``."""
        session = await self.session(session_id)
        meter = session.meter
        if meter is None or meter.core.stopped is None:
            return {"session": session_id, "resumed": False}
        record = await self._launch_record(session)
        refusal = await self.layer.may_continue(record.subject())
        if refusal is not None:
            raise Problem(code=refusal.code, message=f"{refusal.message}; the session stays stopped")
        return await self._resume(session)

    async def _resume(self, session: Session) -> dict[str, Any]:
        assert session.meter is not None
        await self.log.call(self.log.clear_stop, session.id)
        was = session.meter.resume()
        if was is not None and session.live is not None:
            session.live.publish([{"type": "session-resumed", "session": session.id}])
        return {"session": session.id, "resumed": was is not None,
                **({"was": was.to_json()} if was is not None else {})}

    async def session(self, session_id: str) -> Session:
        """The open session ``session_id``; a container session the host
        knows is opened on first use. Raises :class:`Problem`
        (``unknown-session``)."""
        if type(session_id) is not str or not session_id:
            raise Problem(code="bad-session", message="a session id is a non-empty string")
        session = self.registry.get(session_id)
        if session is not None:
            return session
        if self.host is not None:
            store = self.host.store
            if await store.call(store.session, session_id) is not None:
                return await self._open_container(session_id)
        raise Problem(
            code="unknown-session",
            message=f"there is no session {session_id!r}; list the sessions (GET /sessions, or the "
            "list_sessions tool) to see which there are, or create a container session (POST /sessions)",
        )

    async def list(self) -> list[dict[str, Any]]:
        """Every session: ``{id, kind, busy}`` (container sessions oldest
        first, then Claude Code sessions), with ``stopped`` (the stop's
        reason) when a limit stopped it."""
        out: list[dict[str, Any]] = []
        stops = await self.log.call(self.log.stops) if self.layer is not None else {}
        if self.host is not None:
            for item in await self.host.sessions.list():
                entry = {"id": item["id"], "kind": SessionKind.CONTAINER.value, "busy": item["busy"]}
                if "parent" in item:
                    entry["parent"] = item["parent"]
                out.append(entry)
        for session in self.registry.sessions():
            if session.kind is SessionKind.CLAUDE_CODE:
                assert session.link is not None
                state = session.link.state
                out.append(
                    {
                        "id": session.id,
                        "kind": session.kind.value,
                        "busy": state.turn_running,
                        "connected": state.hello_session_id is not None,
                    }
                )
        for entry in out:
            open_session = self.registry.get(entry["id"])
            stop = self._stop_of(open_session) if open_session is not None else stops.get(entry["id"])
            if stop is not None:
                entry["stopped"] = stop.reason
        return out

    async def create(self, session_id: str | None = None, *, launch: LaunchRecord | None = None) -> dict[str, Any]:
        """Create a container session (an id that exists returns it).
        ``launch`` is the launch the plug-in layer allowed for it: its turns
        are metered under it, and a session a limit stopped is resumed (the
        launch passed the limit checks)."""
        if self.host is None:
            raise Problem(code="no-host", message="this router serves no container sessions")
        if session_id is not None and (type(session_id) is not str or not session_id):
            raise Problem(code="bad-session", message="a session id is a non-empty string")
        existing = None if session_id is None else self.registry.get(session_id)
        if existing is not None and existing.kind is not SessionKind.CONTAINER:
            raise Problem(code="session-exists", message=f"{session_id!r} is a {existing.kind.value} session")
        created = await self.host.sessions.create(session_id)
        if launch is not None:
            await self.log.call(self.log.put_launch, created.id, launch)
            if self.layer is not None and await self.log.call(self.log.stop_of, created.id) is not None:
                await self._resume(await self.session(created.id))
        return {"id": created.id, "kind": SessionKind.CONTAINER.value}

    async def messages(self, session_id: str) -> dict[str, Any]:
        """``{session, kind, messages}``: the transcript (a container
        session's since its last reset; a Claude Code session's since the
        router attached)."""
        session = await self.session(session_id)
        if session.kind is SessionKind.CONTAINER:
            assert self.host is not None
            messages = await self.host.session(session_id).messages()
        else:
            assert session.live is not None
            messages = session.live.converter.snapshot()["messages"]
        return {"session": session_id, "kind": session.kind.value, "messages": messages}

    @contextlib.asynccontextmanager
    async def live(self, session_id: str) -> AsyncIterator[LiveStream]:
        """The session's live view: ``stream.snapshot``, then ``async for
        items in stream`` until the session closes. The snapshot has
        ``stopped`` (``{reason, check, at}``) while a limit has the session
        stopped; the items ``session-stopped`` / ``session-resumed`` say
        when that changes."""
        session = await self.session(session_id)
        if session.live is None:
            # A container session that is not metered: the host's events, as they come.
            assert self.host is not None
            async with self.host.session(session_id).events() as events:
                snapshot = {
                    "session": session_id,
                    "kind": session.kind.value,
                    "messages": events.snapshot["messages"],
                    "busy": events.snapshot["busy"],
                }
                yield LiveStream(snapshot, _container_batches(events))
            return
        with session.live.subscribe() as subscription:
            if session.kind is SessionKind.CLAUDE_CODE:
                snapshot = {"session": session_id, "kind": session.kind.value, **subscription.snapshot}
            else:
                # Subscribed first, so nothing falls between the snapshot and
                # the items (an item may repeat what the snapshot shows).
                assert self.host is not None
                host_snapshot = await self.host.session(session_id).snapshot()
                snapshot = {
                    "session": session_id,
                    "kind": session.kind.value,
                    "messages": host_snapshot["messages"],
                    "busy": host_snapshot["busy"],
                }
            stop = self._stop_of(session)
            if stop is not None:
                snapshot["stopped"] = stop.to_json()
            yield LiveStream(snapshot, _batches(subscription))

    async def abort(self, session_id: str, operation_id: str | None = None) -> dict[str, Any]:
        session = await self.session(session_id)
        if session.kind is not SessionKind.CONTAINER:
            raise Problem(
                code="abort-unsupported",
                message="a Claude Code session's turn is stopped at its own terminal (Esc); "
                "the mod link carries no abort",
            )
        assert self.host is not None
        if operation_id is not None and (type(operation_id) is not str or not operation_id):
            raise Problem(code="bad-body", message="operationId is a non-empty string")
        aborted = await self.host.session(session_id).abort(operation_id)
        return {"session": session_id, "aborted": aborted, **({"operationId": operation_id} if operation_id else {})}

    async def reply_of(self, session_id: str, operation_id: str) -> dict[str, Any]:
        """Wait for a container operation to settle: its result as JSON."""
        assert self.host is not None
        try:
            result = await self.host.session(session_id).wait(operation_id)
        except (HostRefused, LinkError) as exc:
            return {"operationId": operation_id, "session": session_id, "status": "unanswered", "reason": exc.code}
        return result.to_json()

    # ------------------------------------------------------------------ deliveries

    async def deliver(self, delivery: Delivery) -> Reply:
        """Write one delivery into its session, exactly once per event id,
        and return the reply (see the module docstring)."""
        refused = check_delivery(delivery)
        if refused is not None:
            return refused
        try:
            session = await self.session(delivery.session)
        except Problem as problem:
            return Refused(code=problem.code, message=problem.message)
        admission = await self.log.call(self.log.admit, delivery)
        if not isinstance(admission, Proceed):
            return admission
        slot = _Slot(delivery)
        try:
            session.inbox.send_nowait(slot)
        except trio.WouldBlock:
            return Unanswered(
                event_id=delivery.event_id,
                code="inbox-full",
                message=f"session {delivery.session!r} has {self.inbox_size} deliveries waiting; "
                "resend with the same eventId later",
            )
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return _closed(delivery)
        await slot.done.wait()
        assert slot.reply is not None
        return slot.reply

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
                body["reply"] = await self.reply_of(session_id, body["operationId"])
            return reply, body
        if isinstance(reply, Unanswered):
            return reply, {"error": reply.code, "message": reply.message, "eventId": reply.event_id}
        return reply, {"error": reply.code, "message": reply.message}

    async def _inbox(
        self, session: Session, receive: trio.MemoryReceiveChannel[_Slot], task_status: trio.TaskStatus[None]
    ) -> None:
        current: _Slot | None = None
        task_status.started()
        try:
            async for slot in receive:
                current = slot
                try:
                    reply = await self._handle(session, slot.delivery)
                except Exception:
                    log.exception("delivery %r to session %r failed", slot.delivery.event_id, session.id)
                    reply = Unanswered(
                        event_id=slot.delivery.event_id,
                        code="internal",
                        message="the router failed on this delivery (it was logged); resend with the same eventId",
                    )
                slot.answer(reply)
                current = None
        finally:
            # The session is closing: whatever waits is answered, never left.
            if current is not None:
                current.answer(_closed(current.delivery))
            while True:
                try:
                    left = receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                left.answer(_closed(left.delivery))
            receive.close()

    async def _handle(self, session: Session, delivery: Delivery) -> Reply:
        record = await self.log.call(self.log.get, delivery.event_id)
        if record is None:  # pragma: no cover - admitted records are never removed
            raise RuntimeError(f"no record for admitted event {delivery.event_id!r}")
        if record.state is State.ANSWERED:
            assert record.answer is not None
            return Answered(answer=record.answer, from_record=True)
        await self._measured(session)
        stop = self._stop_of(session)
        stopped = None if stop is None else stop.reason
        if session.kind is SessionKind.CLAUDE_CODE:
            assert session.link is not None
            target: ClaudeCodeTarget | ContainerTarget = ClaudeCodeTarget(
                connected=session.link.state.hello_session_id is not None, stopped=stopped
            )
        else:
            target = ContainerTarget(steers=self._steers(session.id), stopped=stopped)
        planned, step = plan(record, target)
        await self.log.call(self.log.put, planned)
        if not isinstance(step, (WriteMessage, SubmitPrompt)):
            return step
        outcome = await self._write(session, step)
        settled, reply = settle(planned, step, outcome)
        await self.log.call(self.log.put, settled)
        if isinstance(reply, Answered):
            self.delivered += 1
        return reply

    async def _measured(self, session: Session) -> None:
        """Hold a delivery while the turn before it is being measured, so
        that a turn which reached a limit stops the session before anything
        else is written into it. A container turn the host settled but the
        view has not seen end yet counts as being measured too (the sender
        may have its reply before the view its end). At most
        ``measure_wait`` seconds: a meter that is stuck does not hold the
        inbox for ever (logged)."""
        meter = session.meter
        if meter is None:
            return
        with trio.move_on_after(self.measure_wait) as waited:
            if session.kind is SessionKind.CONTAINER and meter.core.running:
                assert self.host is not None
                if not await self.host.session(session.id).busy():
                    await meter.wait_until(lambda core: not core.running)
            await meter.wait_until(lambda core: not core.measuring)
        if waited.cancelled_caught:
            log.warning("session %r: the last turn was not measured within %g s; delivering anyway (%r)",
                        session.id, self.measure_wait, meter)

    async def _bracket_ahead(self, session: Session, meter: SessionMeter, operation_id: str) -> None:
        """Open the turn's bracket before the operation is submitted (the
        adapter may report usage the moment it starts), and wait until its
        marks are taken; at most ``measure_wait`` seconds (logged)."""
        meter.writing(operation_id)
        with trio.move_on_after(self.measure_wait) as waited:
            await meter.wait_until(lambda core: core.open)
        if waited.cancelled_caught:
            log.warning("session %r: no bracket opened within %g s; submitting anyway (%r)",
                        session.id, self.measure_wait, meter)

    def _steers(self, session_id: str) -> bool:
        assert self.host is not None
        link = self.host.session(session_id).link
        if link is not None and link.adapter is not None:
            self.adapter = link.adapter
        return self.adapter is not None and "steer" in self.adapter.capabilities

    async def _write(self, session: Session, step: WriteMessage | SubmitPrompt) -> Outcome:
        if isinstance(step, SubmitPrompt):
            assert self.host is not None
            meter = session.meter
            if meter is not None:
                await self._bracket_ahead(session, meter, step.operation_id)
                stop = self._stop_of(session)
                if stop is not None:  # a turn's end stopped the session meanwhile
                    meter.not_writing(step.operation_id)
                    return NoAnswer(code="session-stopped", message=stopped_sentence(session.id, stop.reason))
            try:
                receipt = await self.host.session(session.id).submit(
                    step.text, operation_id=step.operation_id, when_busy=step.when_busy
                )
            except HostRefused as exc:
                if meter is not None:
                    meter.not_writing(step.operation_id)
                return NoAnswer(code=exc.code, message=f"{exc.message}; resend with the same eventId")
            except BaseException:
                if meter is not None:
                    meter.not_writing(step.operation_id)
                raise
            if meter is not None and not receipt.accepted:
                meter.not_writing(step.operation_id)  # known already: no new turn comes of it
            if self._stop_of(session) is not None:
                # The session stopped while this was being stored, after the
                # stop aborted what was queued: it must not run either.
                await self.host.session(session.id).abort(step.operation_id)
            return Queued(operation_id=receipt.operation_id, when_busy=step.when_busy)
        assert session.link is not None
        message = step.message
        unread: ModUnreadPerson | ModUnreadCard = (
            ModUnreadPerson(text=message.text, message_id=message.message_id)
            if isinstance(message, Person)
            else ModUnreadCard(text=message.text)
        )
        args = ModSessionMessageArgs(
            content=({"type": "text", "text": message.text},), message=unread, event_id=step.event_id
        )
        try:
            result = await session.link.call("session.message", args, deadline=self.message_deadline)
        except ModCallTimeout:
            return NoAnswer(
                code="no-answer",
                message=f"the Claude Code session did not answer within {self.message_deadline:g} s; resend "
                "with the same eventId (a resend goes as a card, and the session answers it from its record "
                "if this write landed)",
            )
        except ModLinkClosed:
            return NoAnswer(
                code="link-closed",
                message="the session's mod link closed before it answered; resend with the same eventId",
            )
        except ModCallError as exc:
            return NoAnswer(
                code="mod-error", message=f"the mod failed the write ({exc.error}); resend with the same eventId"
            )
        if isinstance(result, ModRowWritten):
            return RowWritten(uuid=result.uuid)
        if isinstance(result, ModPromptTaken):
            return PromptTaken()
        assert isinstance(result, ModMessageDenied)
        return Denied(deny=result.deny, as_=result.as_)

    # ------------------------------------------------------------------ live view task

    async def _view(
        self, session: Session, link: ModLink, live: LiveHub, subscription: Any, task_status: trio.TaskStatus[None]
    ) -> None:
        """A Claude Code session's one live-view task: the link's events,
        converted, then handed to the meter (a turn's end reaches the meter
        after its result reached the viewers). A subscription that
        overflowed is replaced (the view's readers are told to take a fresh
        snapshot; the meter takes the turn the link's state says runs)."""
        meter = session.meter
        task_status.started()
        while True:
            with subscription:
                try:
                    async for event in subscription:
                        live.feed([event])
                        if meter is not None:
                            _meter_mod_event(meter, event)
                except ModSubscriberOverflow as exc:
                    live.reset(str(exc))
                    subscription = link.events()
                    if meter is not None:
                        state = link.state
                        meter.resync([state.turn_id] if state.turn_running and state.turn_id else [])
                    continue
            return  # the link stopped

    async def _container_view(self, session: Session, task_status: trio.TaskStatus[None]) -> None:
        """A container session's one live-view task: follows the host's
        events for the session, publishes them as live items, then hands
        each operation's start and end to the meter (an ``operation-end``
        comes after the host stored the result and woke its waiters). Each
        new subscription tells the meter which operations run (from its
        snapshot), so a gap never leaves a bracket open. The events end
        when the host's link for the session fails or closes; the view
        follows again after a pause (viewers are told to take a fresh
        snapshot)."""
        assert self.host is not None and session.live is not None
        live, meter = session.live, session.meter
        host_session = self.host.session(session.id)
        pause, cap = RESUBSCRIBE_PAUSE
        started = False
        while True:
            try:
                async with host_session.events() as events:
                    if meter is not None:
                        meter.resync(
                            p["operationId"] for p in events.snapshot["pending"] if p["status"] == "running"
                        )
                    if not started:
                        task_status.started()
                        started = True
                    pause = RESUBSCRIBE_PAUSE[0]
                    async for batch in events:
                        items: list[dict[str, Any]] = []
                        for event in batch:
                            items += container_items(event)
                        live.publish(items)
                        if meter is not None:
                            for event in batch:
                                _meter_host_event(meter, event)
                why = "the host's events for the session ended"
            except EventsLagged as exc:
                why = str(exc)
            except (HostRefused, LinkError) as exc:
                why = f"the host refused the session's events ({exc.code})"
            if not started:
                task_status.started()
                started = True
            live.reset(why)
            await trio.sleep(pause)  # a pause before trying again, not a condition
            pause = min(pause * 2, cap)


def _meter_mod_event(meter: SessionMeter, event: Any) -> None:
    if isinstance(event, ModTurnStartEvent):
        meter.turn_started(event.turn_id)
    elif isinstance(event, ModTurnCompleteEvent):
        meter.turn_ended(event.turn_id)
    elif isinstance(event, (ModHelloEvent, ModSessionEndEvent)):
        meter.all_ended()  # the mod restarted, or the session ended: no turn runs


def _meter_host_event(meter: SessionMeter, event: HostEvent) -> None:
    if type(event) is OperationStarted:
        meter.turn_started(event.operation_id)
    elif type(event) is OperationEnded:
        meter.turn_ended(event.operation_id)


def _closed(delivery: Delivery) -> Unanswered:
    return Unanswered(
        event_id=delivery.event_id,
        code="session-closed",
        message=f"session {delivery.session!r} closed before this delivery was answered; "
        "resend with the same eventId",
    )


class LiveStream:
    """A live view: ``snapshot`` (``{session, kind, messages, busy}``) and
    ``async for items in stream``."""

    def __init__(self, snapshot: dict[str, Any], batches: AsyncIterator[list[dict[str, Any]]]) -> None:
        self.snapshot = snapshot
        self._batches = batches

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        return self._batches


async def _batches(subscription: LiveSubscription) -> AsyncIterator[list[dict[str, Any]]]:
    async for items in subscription:
        yield items


async def _container_batches(events: Any) -> AsyncIterator[list[dict[str, Any]]]:
    async for batch in events:
        items: list[dict[str, Any]] = []
        for event in batch:
            items += container_items(event)
        if items:
            yield items


def new_event_id() -> str:
    return str(uuid.uuid4())

