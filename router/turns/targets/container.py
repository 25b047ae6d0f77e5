"""A container session as a target: the host's session.

The router writes with ``submit`` (the event id is the operation id; the
host and the daemon are idempotent on it). When turns are metered, the
session's one live-view task follows the host's events for it, publishes
them as live items and hands each operation's start and end to the
session's brackets (an ``OperationEnded`` comes after the host stored the
result and woke its waiters); unmetered, the task feeds the live view
alone. The view numbers its items and keeps its recent batches, and its ids
carry the transcript's durable position (``messages.version`` in the host's
store), so a reader resumes exactly, within the process from the view's
history and across a restart from the store (:meth:`ContainerTarget.live`).

:class:`ContainerSessions` is the host's side of the router: the container
sessions the host knows (open or not), creating one, waiting for an
operation's result, and the adapter the daemon last said it runs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Final, Mapping

import trio

from router._transient import StoreUnavailable
from router.asks import Ask, AskBook, AskPolicy, policy_from, rule_for, rule_text
from router.board.state import StampedListing, container_state
from router.errors import Refusal
from router.host import (
    AdapterEvent, Host, HostEvent, LinkError, MessageStored, OperationEnded, OperationStarted,
)
from router.host import Refused as HostRefused
from router.plugins.routing import LaunchRecord
from router.plugins.settings import SettingsDir, default_settings_dir
from router.turns.brackets import attached_launch
from router.turns.core import ContainerReadiness, NoAnswer, Outcome, Queued, SubmitPrompt, WriteMessage
from router.turns.delivery_log import DeliveryLog
from router.limits import is_limit_reason, limit_of_adapter_event, wall_ms
from router.turns.live import LiveHub, container_items, skipped_notice
from router.turns.parking import KeptOperation
from router.turns.resume import LiveId, StreamCursor, parse_live_id
from router.turns.registry import Session, SessionKind, Starter
from router.turns.session_brackets import SessionBrackets
from router.turns.targets.base import LiveStream, stale

if TYPE_CHECKING:  # the container wire loads with the host's session links, when one is driven
    from wire.container import AdapterInfo

__all__ = ["ContainerSessions", "ContainerTarget", "RESUBSCRIBE_PAUSE", "SNAPSHOT_NOTICES"]

log = logging.getLogger("router.turns.targets.container")

#: Pauses before a container session's view follows the host's events
#: again after they ended (the link failed or was closed), doubling (ours).
RESUBSCRIBE_PAUSE: Final = (0.1, 10.0)
#: Skipped frames a snapshot lists, the latest (ours: a notice each; a
#: daemon that sends many bad frames should not make every snapshot huge).
SNAPSHOT_NOTICES: Final = 100


class ContainerSessions:
    """The container sessions of ``host`` (see the module docstring).
    ``deliveries`` holds their recorded launches; a session with none is
    metered as ``instance`` on ``harness``, reached ``via``; a turn's
    bracket may take ``bracket_wait`` seconds to open before its prompt is
    submitted anyway."""

    kind = SessionKind.CONTAINER

    def __init__(
        self,
        host: Host,
        *,
        deliveries: DeliveryLog,
        instance: str,
        harness: str,
        via: str,
        routes: Callable[[], Awaitable[object]],
        bracket_wait: float,
        env: Mapping[str, str] | None = None,
        settings: SettingsDir | None = None,
    ) -> None:
        self.host = host
        #: Where asks.json is read (the rules that answer an adapter's asks):
        #: the plug-in layer's settings, else the environment's default.
        self.settings = settings if settings is not None else SettingsDir(default_settings_dir(env))
        self.deliveries = deliveries
        self.instance = instance
        self.harness = harness
        self.via = via
        self.routes = routes
        self.bracket_wait = bracket_wait
        #: The container adapter last seen in a ``hello`` (any session): one
        #: daemon runs one adapter, so it speaks for sessions not linked yet.
        self.adapter: AdapterInfo | None = None

    def __repr__(self) -> str:
        return f"<ContainerSessions adapter={None if self.adapter is None else self.adapter.id!r}>"

    def target(self, session_id: str, *, metered: bool) -> ContainerTarget:
        """The target of session ``session_id`` (``metered``: it has a view
        task of its own, feeding its brackets and its live view)."""
        return ContainerTarget(self, session_id, metered=metered)

    async def knows(self, session_id: str) -> bool:
        """Whether the host has session ``session_id``; one that was ended
        (``router end``) is refused ``session-ended``."""
        store = self.host.store
        record = await store.call(store.sessions.get, session_id)
        if record is not None and record.daemon.state == "ended":
            raise Refusal("session-ended", f"session {session_id!r} was ended; its transcript stays readable "
                          f"(`router transcript {session_id}`), start a new one with `router new` or `router launch`")
        return record is not None

    async def list(self) -> list[dict[str, Any]]:
        """``{id, kind, busy, state[, parent]}`` of every container session,
        oldest first (``state`` before any stop: the router adds those),
        with each session's ``(updated_at, model)`` of the same read as its
        ``stamps`` (the board describes the sessions from them)."""
        stamps: dict[str, tuple[int, Any]] = {}
        items = await self.host.sessions.list(stamps=stamps)
        out = StampedListing(stamps)
        for item in items:
            if item.get("ended"):
                continue  # `router end` ended it: off the board, its record kept
            link = self.host.session(item["id"]).link
            daemon = item.get("daemon")
            entry = {
                "id": item["id"],
                "kind": self.kind.value,
                "busy": item["busy"],
                "state": container_state(
                    busy=item["busy"], stopped=False, link_state=None if link is None else link.state,
                    daemon_state=None if daemon is None else daemon["state"],
                ),
            }
            if "parent" in item:
                entry["parent"] = item["parent"]
            if daemon is not None:
                entry["daemon"] = {key: value for key, value in daemon.items() if value is not None}
            out.append(entry)
        return out

    async def create(self, session_id: str | None, existing: Session | None, *, harness: str | None = None) -> str:
        """Create a container session (an id that exists is kept); its id.
        ``existing`` is the open session of that id, if any; ``harness``
        what its launched daemon runs."""
        if existing is not None and existing.kind is not self.kind:
            raise Refusal("session-exists", f"{session_id!r} is a {existing.kind.value} session")
        created = await self.host.sessions.create(session_id, harness=harness)
        return created.id

    async def reply_of(self, session_id: str, operation_id: str) -> dict[str, Any]:
        """Wait for a container operation to settle: its result as JSON."""
        try:
            result = await self.host.session(session_id).wait(operation_id)
        except (HostRefused, LinkError) as exc:
            return {"operationId": operation_id, "session": session_id, "status": "unanswered", "reason": exc.code}
        return result.to_json()

    def steers(self, session_id: str) -> bool:
        """Whether the session's adapter folds a prompt into a running turn."""
        link = self.host.session(session_id).link
        if link is not None and link.adapter is not None:
            self.adapter = link.adapter
        return self.adapter is not None and "steer" in self.adapter.capabilities


class ContainerTarget:
    """One container session, as a target (see the module docstring)."""

    kind = SessionKind.CONTAINER
    one_turn = False

    def __init__(self, sessions: ContainerSessions, session_id: str, *, metered: bool) -> None:
        self.id = session_id
        self.sessions = sessions
        self.host_session = sessions.host.session(session_id)
        self.metered = metered
        #: Every container session has its view (and its view task): the
        #: view numbers its items, so a reader resumes where it stopped.
        self.hub: LiveHub | None = LiveHub()
        #: Told what the view sees of the provider's usage limit (the
        #: router's parking; None: nobody listens).
        self.on_limit: Callable[[Any], None] | None = None
        #: The permission asks the session's adapter raised (the ACP
        #: adapter's ``raw`` ``ask`` events; docs/container-protocol.md,
        #: "Asks"), answered through the host's link.
        self.asks = AskBook(session_id)
        #: ask id -> the operation that raised it (its end ends the ask).
        self._ask_operations: dict[str, str | None] = {}

    def __repr__(self) -> str:
        return f"<ContainerTarget {self.id!r} metered={self.metered} {self.asks!r}>"

    # ------------------------------------------------------------------ tasks

    def tasks(self, brackets: SessionBrackets | None) -> list[Starter]:
        async def view(task_status: trio.TaskStatus[None]) -> None:
            await self._view(brackets, task_status)

        return [("live-view", view)]

    async def _view(self, brackets: SessionBrackets | None, task_status: trio.TaskStatus[None]) -> None:
        """The session's one live-view task: follows the host's events for
        the session, publishes them as live items, then hands each
        operation's start and end to the brackets. Each new subscription
        tells the brackets which operations run (from its snapshot), so a
        gap never leaves a bracket open. The events end when the host's
        link for the session fails or closes; the view follows again after
        a pause (viewers are told to take a fresh snapshot, and told again
        once the view follows: a reader who came during the pause missed
        what came before the new subscription). The store read as it
        subscribes (or as it reads a batch's position back) may fail past
        its retries (``store-unavailable``): that too is a pause and a
        reset, never the session's end."""
        from router.host import EventsLagged  # the session links' (loaded when the session is driven)

        assert self.hub is not None
        pause, cap = RESUBSCRIBE_PAUSE
        started = interrupted = False
        #: The refusal met by the last try, while no subscription opened
        #: since: the same one again changes nothing a viewer holds, so it
        #: is neither a reset nor a line in the log (a router of a cluster
        #: that does not hold the session meets ``not-holder`` at every try).
        repeated: str | None = None
        while True:
            try:
                # Read before subscribing: every change above it comes as
                # an event (the view's durable position never runs ahead).
                floor = await self._read(self.sessions.host.store.messages.versions, ())
                async with self.host_session.events(messages=False) as events:  # only "pending" is read
                    repeated = None
                    if interrupted:
                        self.hub.reset("the view follows the host's events again")
                    self.hub.durable = (floor.generation, floor.version)
                    if brackets is not None:
                        brackets.resync(
                            p["operationId"] for p in events.snapshot["pending"] if p["status"] == "running"
                        )
                    if not started:
                        task_status.started()
                        started = True
                    pause = RESUBSCRIBE_PAUSE[0]
                    await self._follow(events, brackets)
                why = "the host's events for the session ended"
            except EventsLagged as exc:
                why = str(exc)
            except (HostRefused, LinkError) as exc:
                why = f"the host refused the session's events ({exc.code})"
            except StoreUnavailable as exc:  # the store blinked past its retries: try again, keep the session
                why = f"the host's store could not be read ({exc.code})"
            if not started:
                task_status.started()
                started = True
            interrupted = True
            if why != repeated:
                # Another router of the cluster drives it: expected, not a warning.
                self.hub.reset(why, level=logging.INFO if "(not-holder)" in why else logging.WARNING)
                repeated = why
            await trio.sleep(pause)  # a pause before trying again, not a condition
            pause = min(pause * 2, cap)

    async def _follow(self, events: Any, brackets: SessionBrackets | None) -> None:
        assert self.hub is not None
        async for batch in events:
            items = _items(batch)
            durable = _durable_in(batch, self.hub.durable)
            self.hub.publish(items, durable if durable is not None else await self._durable_of(items))
            for event in batch:
                if type(event) is AdapterEvent and event.event["type"] == "raw":
                    opened = self._ask_event(event.event.get("value"), event.operation_id)
                    if opened is not None:
                        await self._record_ask(opened)
                        await self._by_rule(opened)
                    await self._record_ended(event.event.get("value"))
                elif type(event) is OperationEnded:
                    for ask in self._asks_of_ended(event.result.operation_id):
                        await self._record_ask(ask)
            if self.on_limit is not None:
                for event in batch:
                    _limit_signal(self.on_limit, event)
            if brackets is not None:
                for event in batch:
                    _bracket_host_event(brackets, event)

    # ------------------------------------------------------------------ asks

    def _ask_event(self, value: Any, operation_id: str | None) -> Ask | None:
        """An ask the adapter raised (the ask, once kept), or its end (the
        adapter's deadline, an abort): kept in the book as Claude Code's are
        (router.asks)."""
        if type(value) is not dict or type(value.get("askId")) is not str:
            return None
        now = time.time()
        if value.get("type") == "ask":
            self._ask_operations[value["askId"]] = operation_id
            deadline = value.get("deadline")
            wait = float(deadline) if type(deadline) in (int, float) else 0.0
            summary, tool = value.get("summary"), value.get("tool")
            try:
                self.asks.open(Ask(
                    id=value["askId"], session=self.id, tool=tool if type(tool) is str else "tool",
                    input=value.get("input"), summary=summary if type(summary) is str else "",
                    opened=now, deadline=now + wait,
                    tool_use_id=value["toolCallId"] if type(value.get("toolCallId")) is str else None,
                ))
            except Refusal as refused:
                log.warning("session %r: %s", self.id, refused)
                return None
            return self.asks.get(value["askId"])
        elif value.get("type") == "ask-ended" and value.get("state") != "answered":
            self.asks.close(value["askId"], now=now, state="expired" if value.get("state") == "expired" else "gone")
        return None

    async def _by_rule(self, ask: Ask) -> None:
        """A rule of asks.json answers the ask at once, as it answers Claude
        Code's (router.asks ``rule_for``); a broken asks.json answers nothing."""
        document = await trio.to_thread.run_sync(self.sessions.settings.read, "asks.json")
        policy = document if isinstance(document, Refusal) else policy_from(document.value)
        if isinstance(policy, Refusal):
            log.warning("asks.json cannot be used (%s); no rule answers asks", policy)
            policy = AskPolicy()
        rule = rule_for(policy.rules, ask.tool, ask.input)
        if rule is not None and ask.state == "waiting":
            try:
                self.answer_ask(ask.id, rule.decision, by=f"rule:{rule_text(rule)}")
            except Refusal as refused:
                log.warning("session %r: the rule could not answer ask %s: %s", self.id, ask.id, refused)

    def _asks_of_ended(self, operation_id: str) -> list[Ask]:
        """An operation ended (its daemon may have died with its asks
        waiting): its asks still waiting are ``gone`` (returned)."""
        gone = []
        for ask_id, of in list(self._ask_operations.items()):
            if of == operation_id:
                del self._ask_operations[ask_id]
                closed = self.asks.close(ask_id, now=time.time(), state="gone")
                if closed is not None:
                    gone.append(closed)
        return gone

    async def _record_ended(self, value: Any) -> None:
        """An ask's end as the adapter told it: its final state recorded."""
        if type(value) is dict and value.get("type") == "ask-ended" and type(value.get("askId")) is str:
            ask = self.asks.get(value["askId"])
            if ask is not None:
                await self._record_ask(ask)

    async def _record_ask(self, ask: Ask) -> None:
        """Keep the ask in the session's record (the delivery log's
        ``asks``), as Claude Code's are; a failure never holds it up."""
        deliveries = self.sessions.deliveries
        try:
            await deliveries.call(deliveries.put_ask, ask.to_json())
        except Exception:  # noqa: BLE001 - the record failing never holds the ask up
            log.exception("session %r: ask %s could not be recorded", self.id, ask.id)

    def answer_ask(self, ask_id: str, decision: str, *, by: str) -> dict[str, Any]:
        """A person's answer: the first wins, and goes to the daemon's
        adapter through the host. Raises :class:`Refusal` (``unknown-ask``,
        ``ask-answered``, ``ask-expired``, ``bad-decision``, ``no-link``)."""
        ask = self.asks.get(ask_id)
        if ask is not None and ask.state == "waiting" and decision in ("allow", "deny"):
            self.host_session.answer(ask_id, decision)
        return self.asks.answer(ask_id, decision, by=by, now=time.time()).to_json()

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.sessions.host.store.call(fn, self.id, *args)

    async def _durable_of(self, items: list[dict[str, Any]]) -> tuple[int, int] | None:
        """The durable position a reader of ``items`` has: the highest
        version of their messages, read back from the store, counting only
        a message the store still holds as the item shows it (a message
        changed again since has a version its later event brings; counting
        it would let a resume skip what came between). ``None``: no message,
        so the position stands."""
        shown = [item["message"] for item in items if item["type"] == "message"]
        if not shown:
            return None
        now = await self._read(self.sessions.host.store.messages.versions, [m["id"] for m in shown])
        stored = {message["id"]: version for version, message in now.messages if message in shown}
        if not stored:
            return None
        return (now.generation, max(stored.values()))

    # ------------------------------------------------------------------ writing

    def readiness(self, stopped: str | None) -> ContainerReadiness:
        return ContainerReadiness(steers=self.sessions.steers(self.id), stopped=stopped)

    async def prepare(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None,
                      launch: LaunchRecord | None = None) -> None:
        """Open the turn's bracket before the operation is submitted (the
        adapter may report usage the moment it starts), and wait until its
        marks are taken; at most ``bracket_wait`` seconds (logged). A
        ``launch`` read in the delivery's plan is the bracket's (what
        :meth:`launch_record` answers when the record holds one)."""
        assert isinstance(step, SubmitPrompt)
        if brackets is None:
            return
        brackets.writing(step.operation_id, launch)
        wait = self.sessions.bracket_wait
        with trio.move_on_after(wait) as waited:
            await brackets.wait_until(lambda core: core.open)
        if waited.cancelled_caught:
            log.warning("session %r: no bracket opened within %g s; submitting anyway (%r)", self.id, wait, brackets)

    def withdraw(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> None:
        assert isinstance(step, SubmitPrompt)
        if brackets is not None:
            brackets.not_writing(step.operation_id)

    async def write(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> Outcome:
        assert isinstance(step, SubmitPrompt)
        try:
            receipt = await self.host_session.submit(
                step.text, operation_id=step.operation_id, when_busy=step.when_busy
            )
        except HostRefused as exc:
            self.withdraw(step, brackets)
            return NoAnswer(refusal=Refusal(exc.code, f"{exc.message}; resend with the same eventId"))
        except BaseException:
            self.withdraw(step, brackets)
            raise
        if not receipt.accepted:
            self.withdraw(step, brackets)  # known already: no new turn comes of it
        return Queued(operation_id=receipt.operation_id, when_busy=step.when_busy)

    async def abort_operation(self, operation_id: str) -> None:
        await self.host_session.abort(operation_id)

    # ------------------------------------------------------------------ metering

    async def turns_seen(self, brackets: SessionBrackets) -> None:
        """A turn the host settled but the view has not seen end yet (the
        sender may have its reply before the view its end): wait for the
        view, unless the host still runs something."""
        if brackets.core.running and not await self.host_session.busy():
            await brackets.wait_until(lambda core: not core.running)

    async def stopped(self) -> None:
        """Abort what is queued: the session's next turns must not run."""
        try:
            await self.host_session.abort()
        except (HostRefused, LinkError) as exc:
            log.warning("session %r: aborting its queued operations failed: %s", self.id, exc)

    async def launch_record(self) -> LaunchRecord:
        deliveries = self.sessions.deliveries
        launched = await deliveries.call(deliveries.launch_of, self.id)
        if launched is not None:
            return launched
        return attached_launch(
            session=self.id, instance=self.sessions.instance, harness=self.sessions.harness,
            via=self.sessions.via, routes=await self.sessions.routes(),
        )

    # ------------------------------------------------------------------ reading

    def entry(self) -> None:
        """The host lists container sessions (:meth:`ContainerSessions.list`)."""
        return None

    async def messages(self) -> list[Any]:
        return await self.host_session.messages()

    @contextlib.asynccontextmanager
    async def live(self, since: str | None = None) -> AsyncIterator[LiveStream]:
        """The live view. A resume point is honoured from the view's history
        while it holds it; else, when the id carries the transcript's
        generation and version and the generation is still the session's,
        from the host's store: the messages changed since, as ``message``
        items (each replaces the reader's message of its id), each with an
        id of its own; else a reset and a snapshot."""
        assert self.hub is not None
        point = parse_live_id(since)
        with self.hub.subscribe(point) as subscription:
            # Subscribed first, so nothing falls between what is read from
            # the store and the items (the cursor drops what repeats it).
            if subscription.replay is not None:
                yield LiveStream.resumed(subscription, StreamCursor(subscription.epoch, point and point.durable))
                return
            if point is not None and point.durable is not None:
                generation, version = point.durable
                log = await self._read(self.sessions.host.store.messages.log, version)
                if log.generation == generation and version <= log.version:
                    replay = [
                        (str(LiveId(durable=(generation, changed))), {"type": "message", "message": message})
                        for changed, message in log.messages
                    ]
                    cursor = StreamCursor(
                        subscription.epoch, (generation, log.version), {m["id"]: m for _, m in log.messages}
                    )
                    yield LiveStream(subscription, cursor, replay=replay)
                    return
            snapshot, cursor = await self._snapshot(subscription.epoch)
            yield LiveStream(
                subscription, cursor, snapshot=snapshot, snapshot_id=cursor.id_of(subscription.position, None),
                reset=stale(point, since),
            )  # fmt: skip

    async def _snapshot(self, epoch: str) -> tuple[dict[str, Any], StreamCursor]:
        """``{session, kind, messages, busy, notices}`` (``notices``: the
        last :data:`SNAPSHOT_NOTICES` frames the host skipped), and the
        reader's cursor from it."""
        store = self.sessions.host.store
        log = await self._read(store.messages.log, None)
        skipped = await self._read(store.skipped_frames.all)
        messages = [message for _, message in log.messages]
        snapshot = {
            "session": self.id,
            "kind": self.kind.value,
            "messages": messages,
            "busy": await self.host_session.busy(),
            "notices": [skipped_notice(f.runtime, f.seq, f.reason) for f in skipped[-SNAPSHOT_NOTICES:]],
        }
        return snapshot, StreamCursor(epoch, (log.generation, log.version), {m["id"]: m for m in messages})

    async def abort(self, operation_id: str | None) -> dict[str, Any]:
        if operation_id is not None and (type(operation_id) is not str or not operation_id):
            raise Refusal("bad-body", "operationId is a non-empty string")
        aborted = await self.host_session.abort(operation_id)
        return {"session": self.id, "aborted": aborted, **({"operationId": operation_id} if operation_id else {})}


def _durable_in(batch: list[HostEvent], durable: tuple[int, int] | None) -> tuple[int, int] | None:
    """The durable position a reader of ``batch`` has, from the versions
    the host's apply gave its messages (``MessageStored.stored``): the
    highest, when every message of the batch has one in the generation of
    ``durable``. None otherwise (no message, or one whose version is not
    known, or another generation): :meth:`ContainerTarget._durable_of`
    reads it back. Each version is the one of the message as its item
    shows it, so a resume from it skips nothing."""
    stored = [event.stored for event in batch if type(event) is MessageStored]
    if not stored or durable is None or any(each is None or each[0] != durable[0] for each in stored):
        return None
    return (durable[0], max(each[1] for each in stored))  # type: ignore[index]


def _items(batch: list[HostEvent]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for event in batch:
        items += container_items(event)
    return items


def _limit_signal(on_limit: Callable[[Any], None], event: HostEvent) -> None:
    """The usage limit in the host's events: the adapter's ``usage-limit``
    event (park), then the operation it ended (keep it)."""
    if type(event) is AdapterEvent:
        seen = limit_of_adapter_event(event.event, wall_ms())
        if seen is not None:
            on_limit(seen)
    elif type(event) is OperationEnded and event.result.status == "unanswered" and is_limit_reason(event.result.reason):
        on_limit(KeptOperation(event.result.operation_id))


def _bracket_host_event(brackets: SessionBrackets, event: HostEvent) -> None:
    # Events of other classes (an adapter's live text, a frame the host
    # skipped) open and close no turn.
    if type(event) is OperationStarted:
        brackets.turn_started(event.operation_id)
    elif type(event) is OperationEnded:
        brackets.turn_ended(event.operation_id)
