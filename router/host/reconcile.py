"""The host's reconcile, deliver and apply rules, run inside a store
transaction.

Not sans-IO: the rules read and write the record as they decide (an
operation's status, the cursor, the frames kept), so they run where the
record is, on the store's worker thread, inside one transaction. What they
never do is touch a socket or await.

One :class:`ConnectionRules` per WebSocket connection of a session (the
reference's ``attached`` record, ``ContainerHarness`` in npm
``agents@0.32.0``, ``dist/harness/container/index.js``). Each method takes the :class:`~router.host.store.Store`,
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

**Reconcile** (:meth:`ConnectionRules.hello`), on every ``hello``, before
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
   known there by an attempt the record does not stand by (handed to it
   in an earlier hold, or before the record handed it elsewhere) → **lost**,
   as below: given up there and handed over again as the next attempt
   (see "Attempts"), or settled ``unanswered`` / ``container_lost``;
   reported settled by the daemon → settled from that report after
   ``caught-up``, so the kept frames (messages, persisted entries) land
   first; still queued or running there → left alone; running in another
   runtime (or in a runtime that regressed, below) → **lost**: requeued
   (``on_container_lost="retry"``, or ``"if-declared"`` when the new
   runtime's adapter declares ``rerun``) or settled ``unanswered`` /
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

A runtime that **kept the session from an earlier hold** (:func:`is_stale`:
the cursor names another runtime, yet this one reports frames, operations
or an open adapter session; a router of a cluster that takes a session back
meets its own daemon as it left it, turns behind the record) is never
continued: before step 1 everything it has queued or running is aborted
(before ``open``, which would start its queue on the new adapter session);
the generation it holds open moves to a new number
(:meth:`~router.host.record.Sessions.reopen`), so step 1 restores the
record's entries into a new adapter session; in step 2 an open operation it
already knows is lost, as with a container lost (its attempt there may
have run without its result reaching the record): the policy decides, and
a rerun goes to it as the next attempt; the others are handed over afresh;
step 3 is that abort; step 4 starts the
cursor at its ``lastSeq`` and acks it (its frames so far are of the
earlier hold, never applied).

**Attempts.** A daemon takes an operation id once (npm ``agents@0.32.0``
``protocol.d.ts``; ours: :class:`~router.daemon.core.SessionCore` ignores a
``prompt`` whose id it knows), so an operation handed to the same daemon
again goes by a new id there: ``<operation id>~<n>`` for its ``n``-th
attempt (:func:`attempt_id`). The record keeps no attempt numbers: every
``hello`` lists the attempts the daemon knows, and :class:`AttemptsThere`
reads them against the record's open operations (the latest one is the
operation's there; older ones are given up). The connection maps the
latest attempt's frames to the operation (its id; a message's
``operationId`` and an id the attempt prefixes, ``<attempt id>:…``), so
the record reads as one run and the person's own message stays
``<operation id>:user``; frames of an attempt given up are skipped and an
attempt given up that is still open there is aborted. An operation whose
settle the record has is never handed over again: only open operations
have attempts.

A runtime whose ``hello.lastSeq`` is below the stored cursor's seq for the
same runtime id is a new container that reused the id (npm ``agents@0.32.0`` ``protocol.d.ts`` says
runtime ids name containers; this is the defensive reading): it is treated exactly
as a new runtime, or its frames would be skipped as already applied.

**Deliver** (:meth:`ConnectionRules.deliver`): every open operation not
delivered to this runtime goes out as ``prompt``, in submission order, and is
marked delivered to it; operations after one deferred to ``caught-up`` wait
with it, so the daemon still receives them in submission order. The first
one after a ``reset`` takes the session's handoff note, which is then kept on
the operation, so a redelivery carries it too. A connection whose generation
a ``reset`` has left behind delivers nothing (its daemon still has the old
adapter session open; the link redials and the next connection delivers).

**Apply** (:meth:`ConnectionRules.receive`): frames and ``caught-up`` in
order. A frame at or below the cursor of the same runtime is skipped;
``start`` moves the operation to running and records the user's message
(id ``<operationId>:user``, its parts from the input, ``createdAt`` the
submission time); ``event`` goes to subscribers, and ``message`` events are
stored under their operation's generation (a message of no operation under
the connection's; an update replaces the message with the same id, unless
that would rewrite settled history: a message of a settled operation, or
the person's own ``<operationId>:user``, is never replaced by a daemon; the
frame is passed with :data:`HISTORY_SETTLED` and logged once per
connection);
``usage`` events are recorded per operation; ``persist`` appends entries to
the connection's generation (the one it opened or found open at ``hello``:
a ``reset`` while it is live does not move its frames into the new one);
``settle`` settles the operation. A frame that does not parse (an
:class:`UnreadableFrame`) or cannot be applied (it raises, and the call is
``careful``: one savepoint per frame) is *passed*: kept in the store's
``skipped_frames``, told as :class:`~router.host.events.FrameSkipped`, and
acked at once, so one poisoned frame that a daemon replays on every
connection cannot stall the session. The cursor moves in the same
transaction. An ``ack`` goes out
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

import contextlib
import json
import logging
import re
from typing import Any, Callable, Final, Sequence

import attrs

from router.host.events import (
    AdapterEvent,
    ContainerLost,
    FrameSkipped,
    HostEvent,
    MessageStored,
    OperationEnded,
    OperationResult,
    OperationStarted,
)
from router.store.db import is_store_failure as database_failure
from router.host.store import OPEN_STATUSES, Marks, OperationRecord, SessionRecord, Store, StoreMisuse
# Defined with the settings that name them, so that module does not import
# this one (and the container wire with it).
from router.host.settings import ACK_EVERY, LOST_POLICIES, LostPolicy
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
    dump_message,
)
from wire.json import JsonValue

log = logging.getLogger(__name__)

#: The adapter capability (in ``hello.adapter.capabilities``) saying its
#: turns are safe to run again: an operation it lost with its container may
#: run a second time (ours: the echo adapter declares it). The reference
#: host ignores capabilities it does not know.
RERUN_CAPABILITY: Final = "rerun"

#: The code of a frame refused for rewriting settled history (it is passed:
#: recorded in ``skipped_frames`` with this code in its reason, and told).
HISTORY_SETTLED: Final = "history-settled"

#: The reason an operation lost with its container settles with (the wire's).
CONTAINER_LOST: Final = "container_lost"

#: Between an operation's id and its attempt's number in the id a daemon
#: knows a second (third ...) attempt by: ``<operation id>~<n>``.
ATTEMPT_MARK: Final = "~"
_ATTEMPT: Final = re.compile(r"(.+)~([1-9][0-9]*)", re.DOTALL)


def attempt_id(operation_id: str, attempt: int) -> str:
    """The id a daemon knows an operation's ``attempt`` by: the operation's
    own id for the first, ``<operation id>~<n>`` after."""
    return operation_id if attempt <= 1 else f"{operation_id}{ATTEMPT_MARK}{attempt}"


@attrs.define
class AttemptsThere:
    """Which attempt of each open operation a daemon knows, from its
    ``hello`` (the record keeps no attempt numbers: a daemon's list is the
    only place they live, and the host reads them again on every
    connection)."""

    #: Open operation id → (the latest attempt the daemon knows, its report).
    latest: dict[str, tuple[int, Any]] = attrs.field(factory=dict)
    #: Older attempts' ids: their frames are of an attempt given up.
    superseded: set[str] = attrs.field(factory=set)

    @classmethod
    def of(cls, hello: Hello, open_ids: set[str], is_operation: Callable[[str], bool]) -> "AttemptsThere":
        """The attempts ``hello`` lists; ``is_operation`` says whether an
        id is an operation of the record's own (then never an attempt)."""
        attempts = cls()
        for there in hello.operations:
            wire = there.operation_id
            if wire in open_ids:
                base, number = wire, 1
            else:
                match = _ATTEMPT.fullmatch(wire)
                if match is None or match.group(1) not in open_ids or is_operation(wire):
                    continue
                base, number = match.group(1), int(match.group(2))
            known = attempts.latest.get(base)
            if known is None or known[0] < number:
                if known is not None:
                    attempts.superseded.add(attempt_id(base, known[0]))
                attempts.latest[base] = (number, there)
            else:
                attempts.superseded.add(wire)
        return attempts


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


@attrs.frozen(kw_only=True)
class UnreadableFrame:
    """A daemon message that is a frame (its top level names ``seq``, see
    :func:`frame_seq`) but does not parse: the core passes it as skipped,
    in its place among the frames."""

    seq: int
    reason: str
    text: str


#: The largest ``seq`` taken from a frame that does not parse: the wire's
#: integers are JavaScript's safe integers (2**53 - 1).
MAX_SEQ: Final = 2**53 - 1
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_INTEGER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?![0-9.eE])")


def frame_seq(text: str) -> int | None:
    """The ``seq`` of a daemon message that does not parse but is a frame:
    a JSON object whose top level has ``"type": "frame"`` and ``"seq"`` a
    positive integer (up to :data:`MAX_SEQ`); None otherwise.

    Only the top level is read, without recursion (a value nested at any
    depth is stepped over by counting brackets), and reading stops once
    both are found, so a frame whose body is deep, malformed or cut short
    is still known by its number."""
    found: dict[str, object] = {}
    at = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
    if not text.startswith("{", at):
        return None
    at += 1
    while len(found) < 2:
        key = _STRING.match(text, _WHITESPACE.match(text, at).end())  # type: ignore[union-attr]
        if key is None:
            return None
        at = _WHITESPACE.match(text, key.end()).end()  # type: ignore[union-attr]
        if not text.startswith(":", at):
            return None
        at = _WHITESPACE.match(text, at + 1).end()  # type: ignore[union-attr]
        name = json.loads(key.group())
        if name in ("type", "seq"):
            value = (_STRING if name == "type" else _INTEGER).match(text, at)
            if value is None:
                return None
            found[name] = json.loads(value.group())
            at = value.end()
        else:
            at = _step_over(text, at)
        at = _WHITESPACE.match(text, at).end()  # type: ignore[union-attr]
        if not text.startswith(",", at):
            break
        at += 1
    seq = found.get("seq")
    if found.get("type") != "frame" or type(seq) is not int or not 0 < seq <= MAX_SEQ:
        return None
    return seq


def _step_over(text: str, at: int) -> int:
    """Where the JSON value starting at ``at`` ends (or the text does):
    strings skipped whole, brackets counted, no recursion."""
    depth = 0
    while at < len(text):
        char = text[at]
        if char == '"':
            string = _STRING.match(text, at)
            if string is None:
                return len(text)
            at = string.end()
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                return at
            depth -= 1
        elif char == "," and depth == 0:
            return at
        at += 1
    return at


def _text_of(item: FrameMessage) -> str:
    """A frame's wire text, for the record of a frame passed; empty when
    even that fails (it is only a note)."""
    try:
        return dump_message(item)
    except Exception:
        return ""


def is_store_failure(error: BaseException) -> bool:
    """Whether ``error`` is the store failing (the disk, a lock, a closed or
    corrupt file), not this frame: then the batch fails and the connection
    with it, and the next one tries again from the record. Anything else
    raised while applying one frame is that frame's doing (a value the store
    cannot hold, a value too deep to encode, a bug that only it meets)."""
    if isinstance(error, (StoreMisuse, MemoryError)):
        return True
    return database_failure(error)  # SQLite's or PostgreSQL's, by the same rule


@attrs.define(kw_only=True)
class _Batch:
    """What applying one batch has done so far, before it is committed."""

    cursor_runtime: str | None
    cursor_seq: int
    #: Whether the cursor moved (a frame applied or passed).
    moved: bool = False
    events: list[HostEvent] = attrs.field(factory=list)
    settled: list[OperationResult] = attrs.field(factory=list)
    #: Frames counted towards the next ack, and the highest seq among them.
    counted: int = 0
    last_seq: int | None = None
    #: Ack at the end of this batch (a settle, or a frame passed).
    ack_now: bool = False
    applied: int = 0
    skipped: int = 0
    passed: int = 0
    #: The connection's ``settled_there`` and ``deferred``, which a
    #: ``caught-up`` in this batch empties, and whether it hands deferred
    #: operations over again.
    settled_there: list[tuple[str, dict]]
    deferred: list[str]
    redeliver: bool = False
    #: Operations as this batch last read or wrote them (one read each per
    #: batch, not one per frame): nothing else writes the record while
    #: the batch's call runs. Emptied when a frame's savepoint is undone
    #: and after a ``caught-up``, which write operations on their own.
    operations: dict[str, OperationRecord | None] = attrs.field(factory=dict)

    def operation(self, store: Store, session: str, operation_id: str) -> OperationRecord | None:
        try:
            return self.operations[operation_id]
        except KeyError:
            record = self.operations[operation_id] = store.operations.get(session, operation_id)
            return record


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
    #: The attempts of open operations the daemon knows, and the id each
    #: open operation goes by there where that is not its own.
    attempts: AttemptsThere = attrs.field(factory=AttemptsThere)
    wire_ids: dict[str, str] = attrs.field(factory=dict)

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
    record = store.operations.settle_record(session, operation_id, outcome)
    return None if record is None else OperationResult.of(record)


def is_stale(record: SessionRecord, hello: Hello) -> bool:
    """Whether the daemon saying ``hello`` kept this session from an
    earlier hold: the record moved on under another runtime since (the
    cursor names it), yet this runtime has frames, operations or an open
    adapter session for the session. A router that takes a session back
    (each router its own daemon: docs/cluster.md) meets its own daemon as
    it left it, turns behind the record; a daemon that never had the session
    (a new container, a restart) says ``lastSeq`` 0, nothing open."""
    if record.cursor_runtime is None or record.cursor_runtime == hello.runtime_id:
        return False
    return hello.open is not None or hello.last_seq > 0 or bool(hello.operations)


def end_event(result: OperationResult) -> OperationEnded:
    return OperationEnded(result=result)


class ConnectionRules:
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
            raise ValueError(f"on_container_lost is one of {LOST_POLICIES}, not {on_container_lost!r}")
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
        #: Operation id → the id this runtime knows it by, where that is
        #: not the operation's own (a later attempt), and back.
        self.wire_ids: dict[str, str] = {}
        self.operation_ids: dict[str, str] = {}
        #: Ids of attempts given up on this runtime: their frames are passed.
        self.superseded: set[str] = set()
        #: Frames and ``caught-up`` received before the reconcile.
        self.early: list[FrameMessage | CaughtUp | UnreadableFrame] = []
        self.frames_applied = 0
        #: Frames at or below the cursor (already applied or passed).
        self.frames_skipped = 0
        #: Frames passed without applying: they did not parse, or could not
        #: be applied.
        self.frames_passed = 0
        #: Frames refused for rewriting settled history (passed too).
        self.frames_refused = 0

    def __repr__(self) -> str:
        phase = "ready" if self.ready else "awaiting hello"
        return (
            f"<ConnectionRules {self.session!r} {phase} runtime={self.runtime_id!r} "
            f"applied={self.frames_applied} skipped={self.frames_skipped} "
            f"since_ack={self.since_ack} early={len(self.early)}>"
        )

    @property
    def ready(self) -> bool:
        return self.runtime_id is not None

    def wire_id(self, operation_id: str) -> str:
        """The id this runtime knows the operation by (its attempt's)."""
        return self.wire_ids.get(operation_id, operation_id)

    # ------------------------------------------------------------------ reconcile

    def hello(self, store: Store, hello: Hello) -> Effects:
        """Reconcile with the daemon's ``hello`` (then apply any early
        frames). Returns ``restore``/``open``/``configure``, ``abort``s and
        ``replay`` to send, in that order: the module docstring's steps 1
        to 4, one method each."""
        if self.ready:
            raise RuntimeError("hello on a connection that is already reconciled")
        record = store.sessions.require(self.session)
        runtime = hello.runtime_id
        regressed = record.cursor_runtime == runtime and hello.last_seq < record.cursor_seq
        reconcile = _Reconcile()
        stale = is_stale(record, hello)
        if stale:
            # Step 0: a daemon that kept this session from an earlier hold.
            # Everything it has queued or running stops first (before
            # ``open``, which would start its queue on the new adapter
            # session); the generation it holds open moves to a new number,
            # so step 1 restores the record's entries into a new adapter
            # session.
            reconcile.sends += [
                Abort(operation_id=there.operation_id)
                for there in hello.operations
                if type(there) is PendingOperation
            ]
            if hello.open == record.generation:
                store.sessions.reopen(self.session)
                record = store.sessions.require(self.session)
            log.warning(
                "session %r: runtime %r kept this session from an earlier hold (open generation %s, "
                "frame %d) while the record moved on under runtime %r; its queued and running work is "
                "aborted and the session opened again from the record's entries as generation %d",
                self.session, runtime, hello.open, hello.last_seq, record.cursor_runtime, record.generation,
            )  # fmt: skip
        self._open(store, record, hello, reconcile)
        self._open_operations(store, hello, regressed, reconcile, stale=stale)
        if not stale:
            self._abort_unknown(store, hello, reconcile)
        self._replay_from(store, record, hello, regressed, reconcile, stale=stale)

        # Decided and written: now the in-memory state.
        self.runtime_id = runtime
        self.generation = record.generation
        self.settled_there = reconcile.settled_there
        self.deferred = reconcile.deferred
        self.wire_ids = reconcile.wire_ids
        self.operation_ids = {wire: operation_id for operation_id, wire in reconcile.wire_ids.items()}
        self.superseded = reconcile.attempts.superseded
        effects = reconcile.effects()
        if self.early:
            early, self.early = self.early, []
            effects = effects + self._apply(store, early, True)
        return effects

    def _open(self, store: Store, record: SessionRecord, hello: Hello, reconcile: _Reconcile) -> None:
        """Step 1: ``restore`` chunks and ``open`` when the daemon does not
        hold the stored generation, else ``configure``."""
        settings = converter.structure(record.settings, ContainerSettings)
        if hello.open == record.generation:
            reconcile.sends.append(Configure(settings=settings))
            return
        groups = chunk_entries(store.entries.all(self.session, record.generation))
        last = groups.pop() if groups else []
        reconcile.sends += [Restore(generation=record.generation, entries=tuple(group)) for group in groups]
        reconcile.sends.append(Open(generation=record.generation, settings=settings, restore=tuple(last)))
        store.sessions.set_open_mark(self.session, hello.runtime_id, hello.last_seq)

    def _open_operations(
        self, store: Store, hello: Hello, regressed: bool, reconcile: _Reconcile, *, stale: bool = False
    ) -> None:
        """Step 2: every operation the host has open, against what the
        daemon reports (by its latest attempt there). One the daemon knows
        but was not handed by the record (a stale daemon's report is of an
        earlier hold) is :meth:`_given_up`; the others, against a stale
        daemon, are handed over afresh."""
        operations = store.operations.all(session=self.session, statuses=OPEN_STATUSES)
        attempts = reconcile.attempts = AttemptsThere.of(
            hello, {operation.id for operation in operations},
            lambda id: store.operations.get(self.session, id) is not None,
        )  # fmt: skip
        known = {operation_id: there for operation_id, (_, there) in attempts.latest.items()}
        lost_any = False
        for operation in operations:
            latest = attempts.latest.get(operation.id)
            if latest is not None and latest[0] > 1:
                reconcile.wire_ids[operation.id] = attempt_id(operation.id, latest[0])
            if latest is not None and (stale or operation.delivered != hello.runtime_id):
                lost_any |= self._given_up(store, hello, operation, latest, reconcile)
            elif stale:
                lost_any |= self._stale_operation(store, hello, known, operation, reconcile)
            else:
                lost_any |= self._open_operation(store, hello, regressed, known, operation, reconcile)
        if lost_any:
            reconcile.events.insert(0, ContainerLost())

    def _given_up(
        self, store: Store, hello: Hello, operation: Any, latest: tuple[int, Any], reconcile: _Reconcile
    ) -> bool:
        """An open operation this daemon knows from a hand-over the record
        no longer stands by (an earlier hold, or a hand-over to another
        runtime since): its attempt there may have run without its result
        reaching the record, as with a container lost, so the policy
        decides. Under a rerun the attempt there is given up (aborted if
        still open there: step 3, or step 0 for a stale daemon; its frames
        are passed) and the operation goes to this daemon again as the next
        attempt, ``<operation id>~<n>``, as the daemon takes an operation id
        once (npm ``agents@0.32.0`` ``protocol.d.ts``). True: it is lost."""
        number, there = latest
        if not self._rerun(hello):
            self._lose(store, operation.id, False, reconcile)
            return True
        reconcile.attempts.superseded.add(there.operation_id)
        number += 1
        while store.operations.get(self.session, attempt_id(operation.id, number)) is not None:
            number += 1  # an operation of the record's own goes by that id
        reconcile.wire_ids[operation.id] = attempt_id(operation.id, number)
        store.operations.requeue(self.session, operation.id)
        if operation.delivered is not None:
            store.operations.set_delivered(self.session, operation.id, None)
        return True

    def _stale_operation(
        self, store: Store, hello: Hello, known: dict[str, Any], operation: Any, reconcile: _Reconcile
    ) -> bool:
        """One open operation against a stale daemon's report, which does
        not list it; True when it is lost."""
        if operation.status == "running":
            self._lose(store, operation.id, self._rerun(hello), reconcile)
            return True
        if operation.delivered is not None:
            store.operations.set_delivered(self.session, operation.id, None)
        return False

    def _open_operation(
        self, store: Store, hello: Hello, regressed: bool, known: dict[str, Any], operation: Any,
        reconcile: _Reconcile,
    ) -> bool:
        """One open operation against a current daemon's report; True when
        it is lost."""
        runtime = hello.runtime_id
        there = known.get(operation.id)
        if type(there) is SettledOperation:
            reconcile.settled_there.append((operation.id, converter.unstructure(there.outcome)))
            return False
        if there is not None:
            return False
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
                store.operations.set_delivered(self.session, operation.id, None)
            return False
        self._lose(store, operation.id, self._rerun(hello), reconcile)
        return True

    def _rerun(self, hello: Hello) -> bool:
        """Whether an operation lost with its container runs again (the
        policy, and the new runtime's adapter)."""
        return self.on_container_lost == "retry" or (
            self.on_container_lost == "if-declared" and RERUN_CAPABILITY in hello.adapter.capabilities
        )

    def _lose(self, store: Store, operation_id: str, rerun: bool, reconcile: _Reconcile) -> None:
        """An operation lost with its container: requeued (``rerun``, as the
        policy and the new runtime's adapter decide) or settled
        ``unanswered``/``container_lost``."""
        if rerun:
            store.operations.requeue(self.session, operation_id)
            return
        result = settle_in_store(
            store, self.session, operation_id, {"status": "unanswered", "reason": CONTAINER_LOST}
        )
        if result is not None:
            reconcile.settled.append(result)
            reconcile.events.append(end_event(result))

    def _abort_unknown(self, store: Store, hello: Hello, reconcile: _Reconcile) -> None:
        """Step 3: what the daemon has open but the host settled or never
        had, or an attempt given up, is aborted there."""
        current = {wire: operation_id for operation_id, wire in reconcile.wire_ids.items()}
        for there in hello.operations:
            if type(there) is not PendingOperation:
                continue
            wire = there.operation_id
            if wire in reconcile.attempts.superseded:
                reconcile.sends.append(Abort(operation_id=wire))
                continue
            mine = store.operations.get(self.session, current.get(wire, wire))
            if mine is None or mine.settled:
                reconcile.sends.append(Abort(operation_id=wire))

    def _replay_from(
        self, store: Store, record: SessionRecord, hello: Hello, regressed: bool, reconcile: _Reconcile,
        *, stale: bool = False,
    ) -> None:
        """Step 4: a runtime other than the cursor's (or one that regressed)
        starts the cursor at 0, a stale one at its ``lastSeq`` (its frames
        so far are of the earlier hold: acknowledged, never applied); then
        ``replay`` from the cursor."""
        runtime = hello.runtime_id
        cursor_seq = record.cursor_seq
        if stale:
            cursor_seq = hello.last_seq
            store.sessions.set_cursor(self.session, runtime, cursor_seq)
            if cursor_seq > 0:
                reconcile.sends.append(Ack(seq=cursor_seq))
        elif record.cursor_runtime != runtime or regressed:
            cursor_seq = 0
            store.sessions.set_cursor(self.session, runtime, 0)
        reconcile.sends.append(Replay(after=cursor_seq))

    # ------------------------------------------------------------------ deliver

    def deliver(self, store: Store) -> Effects:
        """``prompt`` every open operation not yet delivered to this runtime.
        Nothing once a ``reset`` moved the record past the generation this
        connection opened: the link redials, and the next connection opens
        the new generation and delivers."""
        if not self.ready:
            return NOTHING
        if store.sessions.marks(self.session).generation != self.generation:
            return NOTHING
        runtime = self.runtime_id
        sends: list[HostMessage] = []
        held = set(self.deferred)
        for operation in store.operations.all(session=self.session, statuses=OPEN_STATUSES):
            if operation.id in held:
                # Decided at ``caught-up``; nothing after it goes first, so
                # the daemon still gets operations in submission order.
                break
            if operation.delivered == runtime:
                continue
            handoff = operation.handoff
            taken = None
            if handoff is None:
                taken = handoff = store.sessions.take_handoff(self.session)
            input = operation.input if handoff is None else with_handoff(operation.input, handoff)
            sends.append(
                Prompt(
                    operation_id=self.wire_ids.get(operation.id, operation.id),
                    input=converter.structure(input, ContainerInput),
                    when_busy=operation.when_busy,
                )
            )
            store.operations.set_delivered(self.session, operation.id, runtime, handoff=taken)
        return Effects(sends=tuple(sends))

    def configure(self, store: Store) -> Effects:
        """``configure`` with the session's stored settings."""
        if not self.ready:
            return NOTHING
        record = store.sessions.require(self.session)
        return Effects(sends=(Configure(settings=converter.structure(record.settings, ContainerSettings)),))

    # ------------------------------------------------------------------ apply

    def receive(
        self, store: Store, messages: Sequence[DaemonMessage | UnreadableFrame], *, careful: bool = False
    ) -> Effects:
        """Apply daemon messages received after ``hello``, in order, as one
        transaction. Frames before the reconcile are buffered.

        A frame that raises while it is applied makes the whole call raise
        (the transaction rolls back, this core is unchanged), unless
        ``careful``: then each frame is applied in its own savepoint and one
        that raises is undone alone and passed. The caller applies a batch
        quickly first and carefully only after it raised something that is
        not a store failure (:func:`is_store_failure`): savepoints cost
        about half the speed of a batch of small frames."""
        items: list[FrameMessage | CaughtUp | UnreadableFrame] = []
        for message in messages:
            if type(message) is FrameMessage or type(message) is CaughtUp or type(message) is UnreadableFrame:
                items.append(message)
            # ``error`` and a second ``hello`` change nothing (the Trio layer
            # logs them).
        if not self.ready:
            self.early.extend(items)
            return NOTHING
        return self._apply(store, items, careful)

    def _apply(
        self, store: Store, items: Sequence[FrameMessage | CaughtUp | UnreadableFrame], careful: bool
    ) -> Effects:
        record = store.sessions.marks(self.session)
        runtime = self.runtime_id
        assert runtime is not None
        batch = _Batch(
            cursor_runtime=record.cursor_runtime,
            cursor_seq=record.cursor_seq,
            settled_there=list(self.settled_there),
            deferred=list(self.deferred),
        )
        for item in items:
            if type(item) is CaughtUp:
                self._caught_up(store, runtime, batch)
            else:
                self._frame(store, record, runtime, item, batch, careful)
        if batch.moved:
            store.sessions.set_cursor(self.session, runtime, batch.cursor_seq)

        # Written: now the in-memory state, and the ack.
        self.settled_there = batch.settled_there
        self.deferred = batch.deferred
        self.frames_applied += batch.applied
        self.frames_skipped += batch.skipped
        self.frames_passed += batch.passed
        self.since_ack += batch.counted
        sends: tuple[HostMessage, ...] = ()
        if batch.last_seq is not None and (batch.ack_now or self.since_ack >= self.ack_every):
            self.since_ack = 0
            sends = (Ack(seq=batch.last_seq),)
        effects = Effects(sends=sends, events=tuple(batch.events), settled=tuple(batch.settled))
        if batch.redeliver:
            effects = effects + self.deliver(store)  # after ``self.deferred`` is cleared
        return effects

    def _caught_up(self, store: Store, runtime: str, batch: _Batch) -> None:
        """``caught-up``: settle what ``hello`` reported settled, and hand
        over again what was deferred and is still open (with what was held
        behind it)."""
        for operation_id, outcome in batch.settled_there:
            result = settle_in_store(store, self.session, operation_id, outcome)
            if result is not None:
                batch.settled.append(result)
                batch.events.append(end_event(result))
        for operation_id in batch.deferred:
            operation = store.operations.get(self.session, operation_id)
            if operation is not None and not operation.settled and operation.delivered == runtime:
                store.operations.set_delivered(self.session, operation_id, None)
            batch.redeliver = True
        batch.settled_there = []
        batch.deferred = []
        batch.operations.clear()

    def _frame(
        self,
        store: Store,
        record: Marks,
        runtime: str,
        item: FrameMessage | UnreadableFrame,
        batch: _Batch,
        careful: bool,
    ) -> None:
        """One frame: skipped when the cursor is past it, else applied (when
        ``careful``, in a savepoint) or, when it cannot be parsed or applied,
        passed."""
        seq = item.seq
        batch.counted += 1
        batch.last_seq = seq if batch.last_seq is None else max(batch.last_seq, seq)
        if batch.cursor_runtime == runtime and seq <= batch.cursor_seq:
            batch.skipped += 1
            return
        if (item := self._as_operation(item)) is None:
            # An attempt given up (:meth:`_given_up`): nothing of it
            # reaches the record.
            batch.skipped += 1
            batch.cursor_runtime, batch.cursor_seq, batch.moved = runtime, seq, True
            return
        if type(item) is UnreadableFrame:
            self._pass(store, runtime, seq, item.reason, item.text, batch)
        elif (refused := self._rewrites_history(store, item.frame, batch)) is not None:
            self.frames_refused += 1
            if self.frames_refused == 1:
                log.warning(
                    "session %r: frame %d of runtime %r refused: %s (logged once per connection)",
                    self.session, seq, runtime, refused,
                )  # fmt: skip
            self._pass(store, runtime, seq, f"{HISTORY_SETTLED}: {refused}", "", batch)
        else:
            events: list[HostEvent] = []
            try:
                with store.savepoint() if careful else contextlib.nullcontext():
                    result = self._apply_frame(store, record, runtime, seq, item.frame, events, batch)
            except Exception as error:
                if not careful or is_store_failure(error):
                    raise
                batch.operations.clear()  # the frame's writes are undone: read again
                log.warning(
                    "session %r: frame %d of runtime %r cannot be applied; passing it",
                    self.session, seq, runtime, exc_info=True,
                )  # fmt: skip
                self._pass(store, runtime, seq, f"it cannot be applied: {error!r:.300}", _text_of(item), batch)
            else:
                batch.events += events
                batch.applied += 1
                if result is not None:
                    batch.settled.append(result)
                    batch.ack_now = True
        batch.cursor_runtime, batch.cursor_seq, batch.moved = runtime, seq, True

    def _as_operation(self, item: FrameMessage | UnreadableFrame) -> FrameMessage | UnreadableFrame | None:
        """A frame of a later attempt as its operation's: the operation id,
        and a message's ``operationId`` and an id the attempt prefixes
        (``<attempt id>:…``), so the record reads as one run. None for a
        frame of an attempt given up; any other frame as it is."""
        if not (self.superseded or self.operation_ids) or type(item) is UnreadableFrame:
            return item
        wire = getattr(item.frame, "operation_id", None)
        if wire is None:
            return item
        if wire in self.superseded:
            return None
        operation_id = self.operation_ids.get(wire)
        if operation_id is None:
            return item
        return attrs.evolve(item, frame=self._frame_as(item.frame, wire, operation_id))

    @staticmethod
    def _frame_as(frame: Any, wire: str, operation_id: str) -> Any:
        if type(frame) is EventFrame and frame.event.get("type") == "message":
            message = dict(frame.event["message"])
            if message.get("operationId") == wire:
                message["operationId"] = operation_id
            id = message.get("id")
            if type(id) is str and (id == wire or id.startswith(wire + ":")):
                message["id"] = operation_id + id[len(wire):]
            return attrs.evolve(frame, operation_id=operation_id, event={**frame.event, "message": message})
        return attrs.evolve(frame, operation_id=operation_id)

    def _rewrites_history(self, store: Store, frame: Any, batch: _Batch) -> str | None:
        """Why a ``message`` event would rewrite settled history (None when
        it would not): history is append-only once settled. A daemon (a new
        runtime above all) may add messages, and update a message of an
        operation still open, but never replace a message of a settled
        operation, nor the person's own message, which the host writes
        (``<operation id>:user``)."""
        if type(frame) is not EventFrame or frame.event.get("type") != "message":
            return None
        message = frame.event["message"]
        generation = self.generation
        operation_id = frame.operation_id
        operation = None if operation_id is None else batch.operation(store, self.session, operation_id)
        if operation is not None:
            generation = operation.generation
        assert generation is not None
        stored = store.messages.owner(self.session, generation, message["id"])
        if stored is None:
            return None
        owner_id, existing = stored
        if owner_id is not None and existing.get("id") == f"{owner_id}:user" and existing.get("role") == "user":
            return f"message {message['id']!r} is the person's own message, which only the host writes"
        if operation is not None and operation.settled:
            return f"message {message['id']!r} belongs to operation {operation_id!r}, settled {operation.status}"
        if owner_id is not None and owner_id != operation_id and self._settled_or_gone(store, owner_id, batch):
            return f"message {message['id']!r} belongs to settled operation {owner_id!r}"
        return None

    def _settled_or_gone(self, store: Store, operation_id: str, batch: _Batch) -> bool:
        """Whether the operation is settled, or not in the record at all."""
        owner = batch.operation(store, self.session, operation_id)
        return owner is None or owner.settled

    def _pass(self, store: Store, runtime: str, seq: int, reason: str, text: str, batch: _Batch) -> None:
        """Pass a frame without applying it: recorded, told, and acked at
        once (so the daemon drops it, and a replay does not bring it back)."""
        store.skipped_frames.add(self.session, runtime, seq, reason, text)
        batch.events.append(FrameSkipped(runtime_id=runtime, seq=seq, reason=reason))
        batch.passed += 1
        batch.ack_now = True

    def _apply_frame(
        self, store: Store, record: Marks, runtime: str, seq: int, frame: Any, events: list[HostEvent],
        batch: _Batch,
    ) -> OperationResult | None:
        session = self.session
        kind = type(frame)
        if kind is StartFrame:
            operation_id = frame.operation_id
            operation = store.operations.start_record(session, operation_id)
            if operation is not None:
                batch.operations[operation_id] = operation
                message = {
                    "id": f"{operation.id}:user",
                    "role": "user",
                    "parts": user_parts(operation.input),
                    "operationId": operation.id,
                    "createdAt": operation.created_at,
                }
                version = store.messages.put(session, operation.generation, message, operation.id)
                events.append(MessageStored(message=message, operation_id=operation.id,
                                            stored=(operation.generation, version)))
                events.append(OperationStarted(operation_id=operation_id))
            return None
        if kind is EventFrame:
            event = frame.event
            operation_id = frame.operation_id
            if event["type"] == "message":
                message = event["message"]
                generation = self.generation
                if operation_id is not None:
                    operation = batch.operation(store, session, operation_id)
                    if operation is not None:
                        generation = operation.generation
                version = store.messages.put(session, generation, message, operation_id)
                events.append(MessageStored(message=message, operation_id=operation_id, stored=(generation, version)))
                return None
            if event["type"] == "usage":
                store.usage.record(session, operation_id, runtime, seq, event)
            events.append(AdapterEvent(event=event, operation_id=operation_id))
            return None
        if kind is PersistFrame:
            # Entries numbered at or below the open mark were persisted by an
            # older adapter session (before this host's ``open``): not this
            # generation's. Later ones belong to the generation this
            # connection opened, not to one a ``reset`` started since.
            if not (record.open_runtime == runtime and seq <= record.open_seq):
                store.entries.append(session, self.generation, frame.entries)
            return None
        if kind is SettleFrame:
            outcome = converter.unstructure(frame.outcome)
            settled = store.operations.settle_record(session, frame.operation_id, outcome)
            if settled is None:
                return None
            batch.operations[frame.operation_id] = settled
            result = OperationResult.of(settled)
            events.append(end_event(result))
            return result
        return None  # pragma: no cover - the parser admits no other kind


__all__ = [
    "ACK_EVERY",
    "ATTEMPT_MARK",
    "AttemptsThere",
    "attempt_id",
    "CONTAINER_LOST",
    "ConnectionRules",
    "HISTORY_SETTLED",
    "Effects",
    "LOST_POLICIES",
    "LostPolicy",
    "RERUN_CAPABILITY",
    "NOTHING",
    "OperationResult",
    "end_event",
    "settle_in_store",
    "UnreadableFrame",
    "frame_seq",
    "is_stale",
    "is_store_failure",
    "user_parts",
    "with_handoff",
]
