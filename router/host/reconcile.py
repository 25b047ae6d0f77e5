"""The host's reconcile, deliver and apply cores: sans-IO.

One :class:`ConnectionCore` per WebSocket connection of a session (the
reference's ``attached`` record, ``ContainerHarness`` in npm
``agents@0.32.0``, ``dist/harness/container/index.js``). It never touches a
socket and never awaits: each method takes the :class:`~router.host.store.Store`,
runs inside one store transaction (the caller's ``Store.transact``), writes
what the rule says, and returns :class:`Effects`: the host messages to send,
the session events to hand to live subscribers, and the operations it
settled. The Trio layer (:mod:`router.host.session_link`) sends and
notifies only after the transaction has committed, so nothing is announced
that is not stored; a send that is lost with the socket is healed by the next
``hello`` (see "Why deciding before sending is safe").

Theory of operation
-------------------

The daemon numbers every frame of a session ``1, 2, 3 …`` per runtime (one
container process), keeps it until acknowledged and replays kept frames
after a cursor. The host stores a cursor ``(runtime id, seq)``: the last frame
it applied. The record is the truth; the daemon is disposable.

**Reconcile** (:meth:`ConnectionCore.hello`), on every ``hello``, before
anything is delivered, in this order (as the reference's ``#reconcile``):

1. *Open.* If ``hello.open`` is not the stored generation, send the
   generation's persisted entries as ``restore`` chunks
   (:func:`~wire.container.chunk_entries`) with the last chunk in ``open``,
   and remember ``(runtime, hello.lastSeq)`` as the open mark (persisted
   entries numbered at or below it were produced by an older adapter
   session and are not kept for this generation). If the daemon already
   holds the generation, ``configure`` is sent with the stored settings
   instead: the daemon cannot tell whether an earlier ``configure`` reached
   it, and settings are idempotent.
2. *Operations the host has open* (queued or running), in submission order:
   reported settled by the daemon → settled from that report after
   ``caught-up``, so the kept frames (messages, persisted entries) land
   first; still queued or running there → left alone; running in another
   runtime (or in a runtime that regressed, below) → **lost**: requeued
   (``on_container_lost="retry"``) or settled ``unanswered`` /
   ``container_lost`` (``"fail"``, the reference's default); handed to
   another runtime (or none) → marked undelivered, so it is handed over
   again; handed to *this* runtime, which does not list it → handed over
   again at ``caught-up`` unless the replay settled it. (The daemon forgets
   settled operations beyond 1,000 but keeps up to 10,000 frames: an
   operation it forgot may still have its settle among the kept frames. The
   reference hands it over at once, and the daemon runs it a second time.)
3. *Operations the daemon has open but the host settled or never had* →
   ``abort`` there.
4. *Cursor.* A ``runtimeId`` other than the cursor's resets the cursor to
   ``(runtime, 0)``. Then ``replay`` from the cursor.

A runtime whose ``hello.lastSeq`` is below the stored cursor's seq for the
same runtime id is a new container that reused the id (the seed says runtime
ids name containers; this is the defensive reading): it is treated exactly
as a new runtime, or its frames would be skipped as already applied.

**Deliver** (:meth:`ConnectionCore.deliver`): every open operation not
delivered to this runtime goes out as ``prompt``, in submission order, and is
marked delivered to it; operations after one deferred to ``caught-up`` wait
with it, so the daemon still receives them in submission order. The first
one after a ``reset`` takes the session's handoff note, which is then kept on
the operation, so a redelivery carries it too. A connection whose generation
a ``reset`` has left behind delivers nothing (its daemon still has the old
adapter session open; the link redials and the next connection delivers).

**Apply** (:meth:`ConnectionCore.receive`): frames and ``caught-up`` in
order. A frame at or below the cursor of the same runtime is skipped;
``start`` moves the operation to running and records the user's message
(id ``<operationId>:user``, its parts from the input, ``createdAt`` the
submission time); ``event`` goes to subscribers, and ``message`` events are
stored under their operation's generation (a message of no operation under
the connection's; an update replaces the message with the same id);
``usage`` events are recorded per operation; ``persist`` appends entries to
the connection's generation (the one it opened or found open at ``hello``:
a ``reset`` while it is live does not move its frames into the new one);
``settle`` settles the operation. The cursor moves in the same transaction. An ``ack`` goes out
after every :data:`ACK_EVERY` frames and after every batch that settled an
operation. ``caught-up`` settles what ``hello`` reported settled, and hands
over the operations deferred in step 2 that are still open.

Frames that arrive before the reconcile is done (before :meth:`hello`) are
buffered and applied right after it, in the same transaction.

Why deciding before sending is safe
-----------------------------------

Every write here commits before its message is sent, and the socket may die
in between. Each case heals on the next ``hello``: a ``prompt`` marked
delivered but never received is not in ``hello.operations``, so step 2 marks
it undelivered; a lost ``abort`` is step 3; a lost ``ack`` costs a replay of
frames the cursor then skips; a lost ``open`` shows as ``hello.open`` ≠
generation; a lost ``configure`` is resent by step 1; a lost ``caught-up``
ends with its connection, and the next ``hello`` decides again.
"""

from __future__ import annotations

from typing import Any, Final, Literal, Sequence

import attrs

from router.host.events import (
    AdapterEvent,
    ContainerLost,
    HostEvent,
    MessageStored,
    OperationEnded,
    OperationResult,
    OperationStarted,
)
from router.host.store import OPEN_STATUSES, OperationRecord, SessionRecord, Store
from wire.container import (
    Abort,
    Ack,
    CaughtUp,
    Configure,
    ContainerInput,
    ContainerSettings,
    DaemonMessage,
    EventFrame,
    FrameMessage,
    Hello,
    HostMessage,
    Open,
    PendingOperation,
    PersistFrame,
    Prompt,
    Replay,
    Restore,
    SettledOperation,
    SettleFrame,
    StartFrame,
    chunk_entries,
    converter,
)
from wire.json import JsonValue

#: Frames between acknowledgements, so the daemon can forget them. The
#: reference's ``ACK_EVERY`` (32).
ACK_EVERY: Final = 32

LostPolicy = Literal["fail", "retry"]
#: What happens to an operation whose container was lost while it ran; the
#: reference's ``onContainerLost`` values, ``"fail"`` its default.
LOST_POLICIES: Final = ("fail", "retry")

#: The reason an operation lost with its container settles with (the wire's).
CONTAINER_LOST: Final = "container_lost"


@attrs.frozen(kw_only=True)
class Effects:
    """What a core call leaves to do once its transaction has committed."""

    sends: tuple[HostMessage, ...] = ()
    #: Session events for live subscribers, in order.
    events: tuple[HostEvent, ...] = ()
    settled: tuple[OperationResult, ...] = ()

    def __add__(self, other: Effects) -> Effects:
        return Effects(
            sends=self.sends + other.sends,
            events=self.events + other.events,
            settled=self.settled + other.settled,
        )

    def __bool__(self) -> bool:
        return bool(self.sends or self.events or self.settled)


NOTHING: Final = Effects()


@attrs.define
class _Reconcile:
    """What one reconcile decides, step by step, before it is committed."""

    sends: list[HostMessage] = attrs.field(factory=list)
    events: list[HostEvent] = attrs.field(factory=list)
    settled: list[OperationResult] = attrs.field(factory=list)
    #: ``(operation id, wire outcome)`` to settle at ``caught-up``.
    settled_there: list[tuple[str, dict]] = attrs.field(factory=list)
    #: Operations handed to this runtime that it does not list.
    deferred: list[str] = attrs.field(factory=list)

    def effects(self) -> Effects:
        return Effects(sends=tuple(self.sends), events=tuple(self.events), settled=tuple(self.settled))


def user_parts(input: JsonValue) -> list[dict]:
    """The transcript parts of a prompt's input (the reference's ``userParts``)."""
    if type(input) is str:
        return [{"type": "text", "text": input}]
    parts = []
    for part in input:
        if part.get("type") == "text":
            parts.append({"type": "text", "text": part["text"]})
        else:
            parts.append({"type": "image", "mediaType": part["mediaType"], "data": part["data"]})
    return parts


def with_handoff(input: JsonValue, handoff: str) -> JsonValue:
    """The input with the handoff note as a text part in front (the
    reference's ``withHandoff``)."""
    note = {"type": "text", "text": handoff}
    if type(input) is str:
        return [note, {"type": "text", "text": input}]
    return [note, *input]


def settle_in_store(store: Store, session: str, operation_id: str, outcome: dict) -> OperationResult | None:
    """Settle an open operation; its result, or None when it was not open."""
    if not store.settle(session, operation_id, outcome):
        return None
    record = store.operation(session, operation_id)
    return None if record is None else OperationResult.of(record)


def end_event(result: OperationResult) -> OperationEnded:
    return OperationEnded(result=result)


class ConnectionCore:
    """The host's side of one connection of one session. See the module
    docstring; each public method runs inside one store transaction.

    In-memory state (per connection, rebuilt from the store on the next
    one): the runtime from ``hello``, frames since the last ack, outcomes
    ``hello`` reported to settle at ``caught-up``, and frames buffered before
    the reconcile."""

    def __init__(
        self,
        session: str,
        *,
        on_container_lost: LostPolicy = "fail",
        ack_every: int = ACK_EVERY,
    ) -> None:
        if on_container_lost not in LOST_POLICIES:
            raise ValueError(f"on_container_lost is 'fail' or 'retry', not {on_container_lost!r}")
        self.session = session
        self.on_container_lost = on_container_lost
        self.ack_every = ack_every
        #: The runtime id from ``hello``; None until then.
        self.runtime_id: str | None = None
        #: The generation this connection opened (or found open) at
        #: ``hello``: the adapter session its frames come from, even after a
        #: ``reset`` moves the record on (the link then redials).
        self.generation: int | None = None
        self.since_ack = 0
        #: ``(operation id, wire outcome)`` the daemon reported settled, to
        #: settle at ``caught-up``.
        self.settled_there: list[tuple[str, dict]] = []
        #: Operations delivered to this runtime that ``hello`` did not list:
        #: handed over again at ``caught-up`` if the replay did not settle them.
        self.deferred: list[str] = []
        #: Frames and ``caught-up`` received before the reconcile.
        self.early: list[FrameMessage | CaughtUp] = []
        self.frames_applied = 0
        self.frames_skipped = 0

    def __repr__(self) -> str:
        phase = "ready" if self.ready else "awaiting hello"
        return (
            f"<ConnectionCore {self.session!r} {phase} runtime={self.runtime_id!r} "
            f"applied={self.frames_applied} skipped={self.frames_skipped} "
            f"since_ack={self.since_ack} early={len(self.early)}>"
        )

    @property
    def ready(self) -> bool:
        return self.runtime_id is not None

    # ------------------------------------------------------------------ reconcile

    def hello(self, store: Store, hello: Hello) -> Effects:
        """Reconcile with the daemon's ``hello`` (then apply any early
        frames). Returns ``restore``/``open``/``configure``, ``abort``s and
        ``replay`` to send, in that order: the module docstring's steps 1
        to 4, one method each."""
        if self.ready:
            raise RuntimeError("hello on a connection that is already reconciled")
        record = store.require_session(self.session)
        runtime = hello.runtime_id
        regressed = record.cursor_runtime == runtime and hello.last_seq < record.cursor_seq
        reconcile = _Reconcile()
        self._open(store, record, hello, reconcile)
        self._open_operations(store, hello, regressed, reconcile)
        self._abort_unknown(store, hello, reconcile)
        self._replay_from(store, record, runtime, regressed, reconcile)

        # Decided and written: now the in-memory state.
        self.runtime_id = runtime
        self.generation = record.generation
        self.settled_there = reconcile.settled_there
        self.deferred = reconcile.deferred
        effects = reconcile.effects()
        if self.early:
            early, self.early = self.early, []
            effects = effects + self._apply(store, early)
        return effects

    def _open(self, store: Store, record: SessionRecord, hello: Hello, reconcile: _Reconcile) -> None:
        """Step 1: ``restore`` chunks and ``open`` when the daemon does not
        hold the stored generation, else ``configure``."""
        settings = converter.structure(record.settings, ContainerSettings)
        if hello.open == record.generation:
            reconcile.sends.append(Configure(settings=settings))
            return
        groups = chunk_entries(store.entries(self.session, record.generation))
        last = groups.pop() if groups else []
        reconcile.sends += [Restore(generation=record.generation, entries=tuple(group)) for group in groups]
        reconcile.sends.append(Open(generation=record.generation, settings=settings, restore=tuple(last)))
        store.set_open_mark(self.session, hello.runtime_id, hello.last_seq)

    def _open_operations(self, store: Store, hello: Hello, regressed: bool, reconcile: _Reconcile) -> None:
        """Step 2: every operation the host has open, against what the
        daemon reports."""
        runtime = hello.runtime_id
        known = {operation.operation_id: operation for operation in hello.operations}
        lost_any = False
        for operation in store.operations(session=self.session, statuses=OPEN_STATUSES):
            there = known.get(operation.id)
            if type(there) is SettledOperation:
                reconcile.settled_there.append((operation.id, converter.unstructure(there.outcome)))
                continue
            if there is not None:
                continue
            lost = operation.status == "running" and (operation.delivered != runtime or regressed)
            if not lost:
                if operation.delivered == runtime and not regressed:
                    # Handed to this very runtime, which does not list it:
                    # it never arrived, or it settled and the daemon forgot
                    # it (beyond 1,000 settled) while its frames are still
                    # kept. Decide at ``caught-up``, once the kept frames
                    # are in, so a kept settle wins over a second run.
                    reconcile.deferred.append(operation.id)
                elif operation.delivered is not None:
                    store.set_delivered(self.session, operation.id, None)
                continue
            lost_any = True
            self._lose(store, operation.id, reconcile)
        if lost_any:
            reconcile.events.insert(0, ContainerLost())

    def _lose(self, store: Store, operation_id: str, reconcile: _Reconcile) -> None:
        """An operation lost with its container: requeued or settled
        ``unanswered``/``container_lost``, per the policy."""
        if self.on_container_lost == "retry":
            store.requeue(self.session, operation_id)
            return
        result = settle_in_store(
            store, self.session, operation_id, {"status": "unanswered", "reason": CONTAINER_LOST}
        )
        if result is not None:
            reconcile.settled.append(result)
            reconcile.events.append(end_event(result))

    def _abort_unknown(self, store: Store, hello: Hello, reconcile: _Reconcile) -> None:
        """Step 3: what the daemon has open but the host settled or never
        had is aborted there."""
        for there in hello.operations:
            if type(there) is not PendingOperation:
                continue
            mine = store.operation(self.session, there.operation_id)
            if mine is None or mine.settled:
                reconcile.sends.append(Abort(operation_id=there.operation_id))

    def _replay_from(
        self, store: Store, record: SessionRecord, runtime: str, regressed: bool, reconcile: _Reconcile
    ) -> None:
        """Step 4: a runtime other than the cursor's (or one that regressed)
        starts the cursor at 0; then ``replay`` from the cursor."""
        cursor_seq = record.cursor_seq
        if record.cursor_runtime != runtime or regressed:
            cursor_seq = 0
            store.set_cursor(self.session, runtime, 0)
        reconcile.sends.append(Replay(after=cursor_seq))

    # ------------------------------------------------------------------ deliver

    def deliver(self, store: Store) -> Effects:
        """``prompt`` every open operation not yet delivered to this runtime.
        Nothing once a ``reset`` moved the record past the generation this
        connection opened: the link redials, and the next connection opens
        the new generation and delivers."""
        if not self.ready:
            return NOTHING
        if store.require_session(self.session).generation != self.generation:
            return NOTHING
        runtime = self.runtime_id
        sends: list[HostMessage] = []
        held = set(self.deferred)
        for operation in store.operations(session=self.session, statuses=OPEN_STATUSES):
            if operation.id in held:
                # Decided at ``caught-up``; nothing after it goes first, so
                # the daemon still gets operations in submission order.
                break
            if operation.delivered == runtime:
                continue
            handoff = operation.handoff
            taken = None
            if handoff is None:
                taken = handoff = store.take_handoff(self.session)
            input = operation.input if handoff is None else with_handoff(operation.input, handoff)
            sends.append(
                Prompt(
                    operation_id=operation.id,
                    input=converter.structure(input, ContainerInput),
                    when_busy=operation.when_busy,
                )
            )
            store.set_delivered(self.session, operation.id, runtime, handoff=taken)
        return Effects(sends=tuple(sends))

    def configure(self, store: Store) -> Effects:
        """``configure`` with the session's stored settings."""
        if not self.ready:
            return NOTHING
        record = store.require_session(self.session)
        return Effects(sends=(Configure(settings=converter.structure(record.settings, ContainerSettings)),))

    # ------------------------------------------------------------------ apply

    def receive(self, store: Store, messages: Sequence[DaemonMessage]) -> Effects:
        """Apply daemon messages received after ``hello``, in order, as one
        transaction. Frames before the reconcile are buffered."""
        items: list[FrameMessage | CaughtUp] = []
        for message in messages:
            if type(message) is FrameMessage or type(message) is CaughtUp:
                items.append(message)
            # ``error`` and a second ``hello`` change nothing (the Trio layer
            # logs them).
        if not self.ready:
            self.early.extend(items)
            return NOTHING
        return self._apply(store, items)

    def _apply(self, store: Store, items: Sequence[FrameMessage | CaughtUp]) -> Effects:
        record = store.require_session(self.session)
        runtime = self.runtime_id
        assert runtime is not None
        cursor_runtime, cursor_seq = record.cursor_runtime, record.cursor_seq
        events: list[HostEvent] = []
        settled: list[OperationResult] = []
        counted = 0
        last_seq = None
        settled_frame = False
        applied = skipped = 0
        pending_there = self.settled_there
        deferred = self.deferred
        redeliver = False
        for item in items:
            if type(item) is CaughtUp:
                for operation_id, outcome in pending_there:
                    result = settle_in_store(store, self.session, operation_id, outcome)
                    if result is not None:
                        settled.append(result)
                        events.append(end_event(result))
                pending_there = []
                for operation_id in deferred:
                    operation = store.operation(self.session, operation_id)
                    if operation is not None and not operation.settled and operation.delivered == runtime:
                        store.set_delivered(self.session, operation_id, None)
                    redeliver = True  # and what was held behind it
                deferred = []
                continue
            seq = item.seq
            counted += 1
            last_seq = seq if last_seq is None else max(last_seq, seq)
            if cursor_runtime == runtime and seq <= cursor_seq:
                skipped += 1
                continue
            result = self._apply_frame(store, record, runtime, seq, item.frame, events)
            if result is not None:
                settled.append(result)
                settled_frame = True
            cursor_runtime, cursor_seq = runtime, seq
            applied += 1
        if applied:
            store.set_cursor(self.session, runtime, cursor_seq)

        # Written: now the in-memory state, and the ack.
        self.settled_there = pending_there
        self.deferred = deferred
        self.frames_applied += applied
        self.frames_skipped += skipped
        self.since_ack += counted
        sends: tuple[HostMessage, ...] = ()
        if last_seq is not None and (settled_frame or self.since_ack >= self.ack_every):
            self.since_ack = 0
            sends = (Ack(seq=last_seq),)
        effects = Effects(sends=sends, events=tuple(events), settled=tuple(settled))
        if redeliver:
            effects = effects + self.deliver(store)  # after ``self.deferred`` is cleared
        return effects

    def _apply_frame(
        self, store: Store, record: Any, runtime: str, seq: int, frame: Any, events: list[HostEvent]
    ) -> OperationResult | None:
        session = self.session
        kind = type(frame)
        if kind is StartFrame:
            operation_id = frame.operation_id
            if store.start(session, operation_id):
                operation = store.operation(session, operation_id)
                if operation is not None:
                    message = {
                        "id": f"{operation.id}:user",
                        "role": "user",
                        "parts": user_parts(operation.input),
                        "operationId": operation.id,
                        "createdAt": operation.created_at,
                    }
                    store.put_message(session, operation.generation, message, operation.id)
                    events.append(MessageStored(message=message, operation_id=operation.id))
                events.append(OperationStarted(operation_id=operation_id))
            return None
        if kind is EventFrame:
            event = frame.event
            operation_id = frame.operation_id
            if event["type"] == "message":
                message = event["message"]
                generation = self.generation
                if operation_id is not None:
                    operation = store.operation(session, operation_id)
                    if operation is not None:
                        generation = operation.generation
                store.put_message(session, generation, message, operation_id)
                events.append(MessageStored(message=message, operation_id=operation_id))
                return None
            if event["type"] == "usage":
                store.record_usage(session, operation_id, runtime, seq, event)
            events.append(AdapterEvent(event=event, operation_id=operation_id))
            return None
        if kind is PersistFrame:
            # Entries numbered at or below the open mark were persisted by an
            # older adapter session (before this host's ``open``): not this
            # generation's. Later ones belong to the generation this
            # connection opened, not to one a ``reset`` started since.
            if not (record.open_runtime == runtime and seq <= record.open_seq):
                store.append_entries(session, self.generation, frame.entries)
            return None
        if kind is SettleFrame:
            outcome = converter.unstructure(frame.outcome)
            result = settle_in_store(store, session, frame.operation_id, outcome)
            if result is not None:
                events.append(end_event(result))
            return result
        return None  # pragma: no cover - the parser admits no other kind


__all__ = [
    "ACK_EVERY",
    "CONTAINER_LOST",
    "ConnectionCore",
    "Effects",
    "LOST_POLICIES",
    "LostPolicy",
    "NOTHING",
    "OperationResult",
    "end_event",
    "settle_in_store",
    "user_parts",
    "with_handoff",
]
