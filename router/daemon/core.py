"""The daemon's per-session state machine, without I/O.

Theory of operation
-------------------

The container daemon serves any number of sessions. For each one it keeps a
queue of operations, runs them one at a time through an adapter, numbers
every frame it produces, and keeps frames until the host acknowledges them,
so a reconnecting host replays exactly what it missed. :class:`SessionCore`
is that bookkeeping for one session, as a plain class: inputs in (host
messages, connections coming and going, adapter results, adapter events),
effects out (texts to send, sockets to close, adapter calls to make). It
never awaits and never touches a socket; the Trio layer
(:mod:`router.daemon.runner`) performs the effects in the order given and
feeds results back. The rules are the reference daemon's (npm
``agents@0.32.0``, ``dist/daemon-core-*.js``: ``DaemonSession``); where this
class chooses differently it says so.

State, per session:

- ``seq``: the number of the last frame. Every frame gets ``seq + 1``, from 1,
  per session, per runtime (process).
- ``kept``: the frames not yet acknowledged, oldest first, at most
  ``max_kept_frames`` (10,000 in the reference; the oldest is dropped). Their
  seqs are consecutive: frames are appended with the next seq and dropped only
  from the front (by ``ack`` or the limit).
- ``operations``: every operation this runtime was given, in the order given
  (``hello`` lists them in that order), each ``queued``, ``running`` or
  ``settled`` with its outcome. When there are more than ``settled_kept``
  (1,000, the reference's ``SETTLED_KEPT``), settled ones are forgotten,
  oldest given first, until there are not, or none is left to forget.
- ``queue``: operations waiting for their turn, in order.
- ``running``: the turn being run (a :class:`Turn`), with the operations
  steered into it (``folded``); they settle with it.
- ``opened``: the open adapter session and its generation. ``restoring``: the
  entries of ``restore`` messages gathered for one generation.
- ``conn``/``live``: the current connection, and whether it has asked for
  ``replay`` (frames are sent only to a live connection; until then they are
  only kept).

Host messages are handled one at a time, in order: :meth:`handle` returns
effects, some of which are adapter calls the runner awaits (open, close,
steer, configure, and waiting for a cancelled turn to end) before it hands
the result back (:meth:`opened`, :meth:`steered`...) and only then handles
the next message. A turn runs concurrently with that: :class:`StartTurn` asks
the runner to run it in a cancel scope of its own, :class:`CancelTurn` to
cancel that scope (abort, a new generation, shutdown), and
:meth:`turn_finished` settles it. Adapter events (:meth:`emit`,
:meth:`persist`, :meth:`log`) arrive at any time and become frames at once.

Invariants (tested with hypothesis in ``tests/daemon/test_core_properties.py``):
seqs increase by exactly one; an operation settles at most once while it is
remembered and its outcome never changes; ``replay(after)`` sends exactly
the kept frames above ``after``, in order, then ``caught-up``.

Where this differs from the reference, on purpose:

- A new generation cancels the running turn and *waits for it to end*
  (:class:`AwaitTurn`) before closing the old adapter session; the reference
  closes it while the turn may still be unwinding, and may even start the
  next queued operation on the session being closed. Here queued operations
  wait for the new session.
- A steer that raises is a steer declined: the operation queues and the
  error is reported; in the reference the operation stays ``queued`` forever.
- An adapter event that is not one of the wire's events (``isEvent``), or
  persisted entries that are not JSON, are refused at the call
  (``ValueError`` to the adapter) instead of going out as a frame the host
  cannot parse.
- An outcome that is not :class:`~wire.container.Done` or
  :class:`~wire.container.Unanswered` settles ``unanswered`` with a reason
  that says so.
"""

from __future__ import annotations

import heapq
import reprlib
from collections import deque
from itertools import islice
from typing import Any, Final, Hashable, Iterator, NamedTuple, Sequence

import attrs

from wire.container import (
    CLOSE_REPLACED,
    CONTAINER_PROTOCOL_VERSION,
    Abort,
    Ack,
    AdapterInfo,
    Answer,
    Configure,
    ContainerInput,
    ContainerSettings,
    Done,
    HostMessage,
    Open,
    Prompt,
    Replay,
    Restore,
    Unanswered,
    chunk_entries,
    is_event,
    parse_host_message,
)
from wire.json import MAX_DEPTH, JsonValue, dumps, exceeds_depth, is_json

__all__ = [
    "AnswerAsk",
    "AwaitTurn",
    "CancelTurn",
    "CloseConnection",
    "CloseSession",
    "ConfigureSession",
    "Effect",
    "KeptFrame",
    "MAX_KEPT_FRAMES",
    "OpenSession",
    "SETTLED_KEPT",
    "Send",
    "SessionCore",
    "SessionStatistics",
    "StartTurn",
    "Steer",
    "Turn",
    "TurnCancelled",
    "TurnFailed",
    "error_text",
]

#: Kept (unacknowledged) frames per session; the oldest is dropped beyond
#: this. The reference's ``maxKeptFrames`` default (``1e4``).
MAX_KEPT_FRAMES: Final = 10_000
#: Operations remembered per session before settled ones are forgotten,
#: oldest given first. The reference's ``SETTLED_KEPT`` (``1e3``).
SETTLED_KEPT: Final = 1_000

#: The reason of an operation that was aborted (queued or running). The
#: reference's literal.
ABORTED: Final = "aborted"
#: The ``error`` message for a text that is not a host message. The
#: reference's literal.
UNPARSEABLE: Final = "unparseable message"
#: The close reason sent with ``CLOSE_REPLACED``. The reference's literal.
REPLACED_REASON: Final = "replaced by a newer connection"

_QUEUED: Final = "queued"
_RUNNING: Final = "running"
_SETTLED: Final = "settled"


def error_text(error: BaseException) -> str:
    """What the reference's ``errorText`` gives for a JavaScript ``Error``: its
    message. Python's ``str(exc)`` is the message; an exception without one
    is named by its class, so a reason is never empty."""
    return str(error) or type(error).__name__


# --------------------------------------------------------------------------- effects
# What the runner does for the core. The first four are done on the spot
# (they never block); the rest are awaited, in order, by the task that
# handles host messages, and their results come back through the methods
# named in each docstring.


class Send(NamedTuple):
    """Queue ``text`` for ``conn`` (never blocks; a dead connection drops it).

    A named tuple, not an attrs class as the other effects are: one is made
    per frame sent, and a frozen attrs instance costs about ten times a
    tuple to make (``object.__setattr__`` per field)."""

    conn: Hashable
    text: str


@attrs.frozen(slots=True)
class CloseConnection:
    """Close ``conn`` with ``code`` after what is already queued for it."""

    conn: Hashable
    code: int
    reason: str


@attrs.frozen(slots=True)
class StartTurn:
    """Run ``turn`` (``turn.session.run``) in a cancel scope of its own; report
    the end with :meth:`SessionCore.turn_finished`."""

    turn: "Turn"


@attrs.frozen(slots=True)
class CancelTurn:
    """Cancel ``turn``'s scope (it may not have started yet). Idempotent."""

    turn: "Turn"


@attrs.frozen(slots=True)
class AwaitTurn:
    """Wait until :meth:`SessionCore.turn_finished` has been applied for
    ``turn``."""

    turn: "Turn"


@attrs.frozen(slots=True)
class CloseSession:
    """``await session.close()``; errors are logged, not reported."""

    session: Any


@attrs.frozen(slots=True)
class OpenSession:
    """``await adapter.open(context)``, then :meth:`SessionCore.opened` or
    :meth:`SessionCore.open_failed`."""

    conn: Hashable
    generation: int
    settings: ContainerSettings
    restore: tuple[JsonValue, ...]


@attrs.frozen(slots=True)
class Steer:
    """``await session.steer(input)``, then :meth:`SessionCore.steered` or
    :meth:`SessionCore.steer_failed`."""

    conn: Hashable
    turn: "Turn"
    operation_id: str
    input: ContainerInput
    session: Any


@attrs.frozen(slots=True)
class ConfigureSession:
    """``await session.configure(settings)``; on error
    :meth:`SessionCore.configure_failed`."""

    conn: Hashable
    session: Any
    settings: ContainerSettings


@attrs.frozen(slots=True)
class AnswerAsk:
    """``session.answer(ask_id, decision)`` (an adapter that raises asks has
    it); an ask the adapter does not know is logged."""

    session: Any
    ask_id: str
    decision: str


Effect = (Send | CloseConnection | StartTurn | CancelTurn | AwaitTurn | CloseSession | OpenSession | Steer
          | ConfigureSession | AnswerAsk)


# --------------------------------------------------------------------------- turn results


@attrs.frozen(slots=True)
class TurnFailed:
    """The adapter's ``run`` raised; ``text`` is the error's text."""

    text: str


@attrs.frozen(slots=True)
class TurnCancelled:
    """The adapter's ``run`` ended with the turn's own cancellation."""


TurnResult = Done | Unanswered | TurnFailed | TurnCancelled


# --------------------------------------------------------------------------- state


class _Operation:
    __slots__ = ("id", "input", "when_busy", "state", "outcome", "order")

    def __init__(self, id: str, input: ContainerInput, when_busy: str, order: int) -> None:
        self.id = id
        self.input = input
        self.when_busy = when_busy
        self.state = _QUEUED
        self.outcome: dict | None = None
        #: Position in the order operations were given (for forgetting).
        self.order = order


class Turn:
    """One turn: an operation running on an adapter session, and the
    operations steered into it. Compared by identity."""

    __slots__ = ("number", "operation", "session", "folded", "aborted")

    def __init__(self, number: int, operation: _Operation, session: Any) -> None:
        #: 1, 2, 3... per session; only for ``repr`` and logs.
        self.number = number
        self.operation = operation
        #: The adapter session the turn runs on.
        self.session = session
        self.folded: list[_Operation] = []
        #: Cancellation was asked for (abort, new generation, shutdown).
        self.aborted = False

    @property
    def operation_id(self) -> str:
        return self.operation.id

    @property
    def input(self) -> ContainerInput:
        return self.operation.input

    def __repr__(self) -> str:
        folded = f" +{len(self.folded)} steered" if self.folded else ""
        aborted = " aborted" if self.aborted else ""
        return f"<Turn {self.number} {self.operation.id!r}{folded}{aborted}>"


@attrs.frozen(slots=True)
class _Opened:
    generation: int
    session: Any
    can_steer: bool


class KeptFrame(tuple):
    """``(seq, frame, text)``: a frame's number, its JSON object, and the
    ``frame`` message's wire text (written once, sent as often as replayed)."""

    __slots__ = ()

    @property
    def seq(self) -> int:
        return self[0]

    @property
    def frame(self) -> dict:
        return self[1]

    @property
    def text(self) -> str:
        return self[2]


@attrs.frozen(kw_only=True)
class SessionStatistics:
    """What :meth:`SessionCore.statistics` answers: the last frame's number,
    frames kept, operations known and queued, the running one's id, the open
    generation, and whether a connection is attached (and live)."""

    seq: int
    kept: int
    operations: int
    queued: int
    running: str | None
    open: int | None
    connected: bool
    live: bool


class SessionCore:
    """The daemon's state for one session. See the module docstring.

    Every public method returns the effects to perform, in order, and never
    raises for anything a peer sends; :meth:`emit`, :meth:`persist` and
    :meth:`log` raise ``ValueError`` to an adapter that hands them something
    the wire cannot carry.
    """

    def __init__(
        self,
        session: str,
        *,
        runtime_id: str,
        adapter: AdapterInfo,
        max_kept_frames: int = MAX_KEPT_FRAMES,
        settled_kept: int = SETTLED_KEPT,
    ) -> None:
        if max_kept_frames < 1 or settled_kept < 0:
            raise ValueError("max_kept_frames must be at least 1 and settled_kept at least 0")
        self.session = session
        self.runtime_id = runtime_id
        self.adapter = adapter
        self.max_kept_frames = max_kept_frames
        self.settled_kept = settled_kept
        self.seq = 0
        self._kept: deque[KeptFrame] = deque()
        self._operations: dict[str, _Operation] = {}
        #: A heap of ``(order, operation)``: compared by the int alone, in C
        #: (an operation's own ``__lt__`` is a Python call per comparison).
        self._settled: list[tuple[int, _Operation]] = []
        self._given = 0
        self._queue: deque[_Operation] = deque()
        self._running: Turn | None = None
        self._turns = 0
        self._opened: _Opened | None = None
        self._restoring: tuple[int, list[JsonValue]] | None = None
        self._conn: Hashable | None = None
        self._live = False
        self._out: list[Effect] = []
        self._adapter_json = {
            "id": adapter.id,
            "version": adapter.version,
            "capabilities": list(adapter.capabilities),
        }

    # ------------------------------------------------------------------ views

    @property
    def conn(self) -> Hashable | None:
        """The current connection, or None."""
        return self._conn

    @property
    def live(self) -> bool:
        return self._live

    @property
    def running(self) -> Turn | None:
        return self._running

    @property
    def open_generation(self) -> int | None:
        return None if self._opened is None else self._opened.generation

    def kept(self) -> list[KeptFrame]:
        """The kept frames, oldest first."""
        return list(self._kept)

    def replay(self, after: int) -> Iterator[KeptFrame]:
        """The kept frames whose seq is above ``after``, in order."""
        kept = self._kept
        if not kept:
            return iter(())
        skip = after - kept[0][0] + 1  # seqs are consecutive
        if skip <= 0:
            return iter(kept)
        return islice(kept, skip, None)

    def operations(self) -> list[dict]:
        """What ``hello`` says of the operations: the wire's
        ``DaemonOperation`` objects, in the order they were given."""
        result = []
        for op in self._operations.values():
            if op.state == _SETTLED:
                result.append({"operationId": op.id, "status": _SETTLED, "outcome": op.outcome})
            else:
                result.append({"operationId": op.id, "status": op.state})
        return result

    def hello(self) -> dict:
        """The ``hello`` message, as the reference writes it (same key order)."""
        return {
            "type": "hello",
            "protocol": CONTAINER_PROTOCOL_VERSION,
            "runtimeId": self.runtime_id,
            "session": self.session,
            "adapter": self._adapter_json,
            "open": self.open_generation,
            "lastSeq": self.seq,
            "operations": self.operations(),
        }

    def statistics(self) -> SessionStatistics:
        return SessionStatistics(
            seq=self.seq,
            kept=len(self._kept),
            operations=len(self._operations),
            queued=sum(1 for op in self._queue if op.state == _QUEUED),
            running=None if self._running is None else self._running.operation_id,
            open=self.open_generation,
            connected=self._conn is not None,
            live=self._live,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"<SessionCore {self.session!r} seq={s.seq} kept={s.kept} "
            f"operations={s.operations} queued={s.queued} running={s.running!r} "
            f"open={s.open} {'live' if s.live else 'connected' if s.connected else 'detached'}>"
        )

    # ------------------------------------------------------------------ connections

    def attach(self, conn: Hashable) -> list[Effect]:
        """A new connection for this session: it replaces the current one
        (closed with ``CLOSE_REPLACED``) and gets ``hello`` at once. Frames go
        to it only after it asks for ``replay``."""
        out = self._out = []
        previous = self._conn
        self._conn = conn
        self._live = False
        if previous is not None and previous is not conn:
            out.append(CloseConnection(previous, CLOSE_REPLACED, REPLACED_REASON))
        out.append(Send(conn, dumps(self.hello())))
        return out

    def detach(self, conn: Hashable) -> None:
        """``conn`` closed. Nothing happens unless it is the current one."""
        if self._conn is conn:
            self._conn = None
            self._live = False

    def is_current(self, conn: Hashable) -> bool:
        return self._conn is conn

    def receive(self, conn: Hashable, text: str) -> tuple[HostMessage | None, list[Effect]]:
        """A text arrived on ``conn``. Returns the message to handle (in
        turn, with :meth:`handle`), or None and what to do instead: nothing
        for a connection that was replaced, an ``error`` for a text that is
        not a host message (which changes nothing)."""
        if self._conn is not conn:
            return None, []
        message = parse_host_message(text)
        if message is None:
            return None, [Send(conn, _error(UNPARSEABLE))]
        return message, []

    # ------------------------------------------------------------------ host messages

    def handle(self, conn: Hashable, message: HostMessage) -> list[Effect]:
        """Handle one host message that arrived on ``conn``; its effects may
        include adapter calls, whose results must come back before the next
        message is handled."""
        out = self._out = []
        kind = type(message)
        if kind is Prompt:
            self._prompt(conn, message)
        elif kind is Ack:
            self._ack(message.seq)
        elif kind is Replay:
            self._replay(message.after)
        elif kind is Abort:
            self._abort(message.operation_id)
        elif kind is Restore:
            self._restore(message)
        elif kind is Open:
            self._open(conn, message)
        elif kind is Configure:
            if self._opened is not None:
                out.append(ConfigureSession(conn, self._opened.session, message.settings))
        elif kind is Answer:
            if self._opened is not None:
                out.append(AnswerAsk(self._opened.session, message.ask_id, message.decision))
        else:  # pragma: no cover - parse_host_message returns only the above
            out.append(Send(conn, _error(f"unhandled message {type(message).__name__}")))
        return out

    def _restore(self, message: Restore) -> None:
        if self._restoring is None or self._restoring[0] != message.generation:
            self._restoring = (message.generation, [])
        self._restoring[1].extend(message.entries)

    def _open(self, conn: Hashable, message: Open) -> None:
        restoring, self._restoring = self._restoring, None
        opened = self._opened
        if opened is not None and opened.generation == message.generation:
            return
        if restoring is not None and restoring[0] == message.generation:
            restore = (*restoring[1], *message.restore)
        else:
            restore = tuple(message.restore)
        if opened is not None:
            # Decide first: from here on the session counts as not open, so
            # a turn that ends meanwhile starts nothing on it.
            self._opened = None
            running = self._running
            if running is not None:
                running.aborted = True
                self._out.append(CancelTurn(running))
                self._out.append(AwaitTurn(running))
            self._out.append(CloseSession(opened.session))
        self._out.append(OpenSession(conn, message.generation, message.settings, restore))

    def _replay(self, after: int) -> None:
        # As the reference: the current connection gets the replay, even if
        # the request came from a connection replaced since it was received.
        conn = self._conn
        if conn is None:
            return
        out = self._out
        for kept in self.replay(after):
            out.append(Send(conn, kept[2]))
        out.append(Send(conn, '{"type":"caught-up","lastSeq":%d}' % self.seq))
        self._live = True

    def _ack(self, seq: int) -> None:
        kept = self._kept
        while kept and kept[0][0] <= seq:
            kept.popleft()

    def _prompt(self, conn: Hashable, message: Prompt) -> None:
        id = message.operation_id
        if id in self._operations:
            return  # idempotent on operationId
        self._given += 1
        op = _Operation(id, message.input, message.when_busy, self._given)
        self._operations[id] = op
        self._forget_old_settled()
        running = self._running
        opened = self._opened
        if message.when_busy == "steer" and running is not None and opened is not None and opened.can_steer:
            # Queued, but not in the queue, until the adapter says whether it
            # took the input (:meth:`steered`).
            self._out.append(Steer(conn, running, id, message.input, opened.session))
            return
        self._queue.append(op)
        self._pump()

    def _abort(self, operation_id: str | None) -> None:
        if operation_id is None:
            ops = list(self._operations.values())
        else:
            op = self._operations.get(operation_id)
            ops = [] if op is None else [op]
        dequeued = False
        for op in ops:
            if op.state == _QUEUED:
                self._settle(op, {"status": "unanswered", "reason": ABORTED})
                dequeued = True
            elif op.state == _RUNNING:
                self._cancel_running()
        if dequeued:
            # Out of the queue, as the reference splices them out (one pass
            # for any number): a queue that nothing drains (no session open,
            # a long turn) must not keep what the host aborted.
            self._queue = deque(op for op in self._queue if op.state == _QUEUED)

    def _cancel_running(self) -> None:
        running = self._running
        if running is not None and not running.aborted:
            running.aborted = True
            self._out.append(CancelTurn(running))

    # ------------------------------------------------------------------ adapter results

    def opened(self, generation: int, session: Any, *, can_steer: bool) -> list[Effect]:
        """``adapter.open`` returned ``session`` for ``generation``."""
        out = self._out = []
        self._opened = _Opened(generation, session, can_steer)
        self._pump()
        return out

    def open_failed(self, conn: Hashable, generation: int, error: BaseException) -> list[Effect]:
        """``adapter.open`` raised: no session is open; the host hears why."""
        return [Send(conn, _error(error_text(error)))]

    def steered(self, turn: Turn, operation_id: str, took: bool) -> list[Effect]:
        """The adapter answered a :class:`Steer`. Taken while the same turn
        still runs: the operation joins it (a ``start`` frame; it settles with
        the turn). Otherwise it queues."""
        out = self._out = []
        op = self._operations.get(operation_id)
        if op is None or op.state != _QUEUED:
            return out
        if took and self._running is turn:
            op.state = _RUNNING
            turn.folded.append(op)
            self._frame({"kind": "start", "operationId": op.id})
        else:
            self._queue.append(op)
            self._pump()
        return out

    def steer_failed(self, conn: Hashable, turn: Turn, operation_id: str, error: BaseException) -> list[Effect]:
        """``session.steer`` raised: as declined, and the host hears why."""
        effects = self.steered(turn, operation_id, False)
        effects.insert(0, Send(conn, _error(error_text(error))))
        return effects

    def configure_failed(self, conn: Hashable, error: BaseException) -> list[Effect]:
        return [Send(conn, _error(error_text(error)))]

    def turn_finished(self, turn: Turn, result: TurnResult) -> list[Effect]:
        """``turn`` ended: settle it (and the operations steered into it) and
        start the next queued operation.

        A turn asked to stop settles ``unanswered``/``aborted`` when it ended
        ``done``, raised, or was cancelled; an ``unanswered`` it returned keeps
        its own reason. A turn that raised otherwise settles ``unanswered``
        with the error's text. (The reference's ``#run``.)
        """
        out = self._out = []
        outcome = _outcome(turn, result)
        if self._running is turn:
            self._running = None
        self._settle(turn.operation, outcome)
        for op in turn.folded:
            self._settle(op, outcome)
        self._pump()
        return out

    def shutdown(self) -> list[Effect]:
        """The daemon is stopping: abort the running turn, wait for it, and
        close the adapter session. Operations stay as they are."""
        out = self._out = []
        running = self._running
        if running is not None:
            self._cancel_running()
            out.append(AwaitTurn(running))
        opened, self._opened = self._opened, None
        if opened is not None:
            out.append(CloseSession(opened.session))
        return out

    # ------------------------------------------------------------------ adapter events

    def emit(self, event: JsonValue) -> list[Effect]:
        """An adapter event (a ``ContainerEvent`` JSON object): an ``event``
        frame for the running operation, or null between turns."""
        if not is_event(event):
            raise ValueError(f"not a container event (see wire.container.ContainerEvent): {_preview(event)}")
        out = self._out = []
        running = self._running
        self._frame({
            "kind": "event",
            "operationId": None if running is None else running.operation.id,
            "event": event,
        })
        return out

    def persist(self, entries: Sequence[JsonValue]) -> list[Effect]:
        """Adapter resume state: ``persist`` frames of at most
        ``MAX_CHUNK_CHARS`` each (a larger entry alone)."""
        if isinstance(entries, (str, bytes, dict)):
            raise ValueError(f"persist takes a list of JSON values, not {_preview(entries)}")
        entries = list(entries)
        if not is_json(entries):
            raise ValueError(f"persist takes a list of JSON values, not {_preview(entries)}")
        out = self._out = []
        # One entry is one group whatever its size: no need to measure it.
        for group in chunk_entries(entries) if len(entries) > 1 else [entries] if entries else []:
            self._frame({"kind": "persist", "entries": group})
        return out

    def log(self, level: str, message: str) -> list[Effect]:
        """A diagnostic line: a ``log`` event."""
        return self.emit({"type": "log", "level": level, "message": message})

    # ------------------------------------------------------------------ internals

    def _pump(self) -> None:
        """Start the next queued operation, if a session is open and idle."""
        opened = self._opened
        if self._running is not None or opened is None:
            return
        queue = self._queue
        while queue:
            op = queue.popleft()
            # Only queued, remembered operations are in the queue (aborts
            # take theirs out); skip anything else all the same.
            if op.state != _QUEUED or self._operations.get(op.id) is not op:
                continue
            self._turns += 1
            turn = Turn(self._turns, op, opened.session)
            self._running = turn
            op.state = _RUNNING
            self._frame({"kind": "start", "operationId": op.id})
            self._out.append(StartTurn(turn))
            return

    def _settle(self, op: _Operation, outcome: dict) -> None:
        if op.state == _SETTLED:
            return
        op.state = _SETTLED
        op.outcome = outcome
        heapq.heappush(self._settled, (op.order, op))
        self._frame({"kind": "settle", "operationId": op.id, "outcome": outcome})

    def _forget_old_settled(self) -> None:
        operations = self._operations
        settled = self._settled
        while len(operations) > self.settled_kept and settled:
            _, op = heapq.heappop(settled)
            if operations.get(op.id) is op:
                del operations[op.id]

    def _frame(self, frame: dict) -> None:
        """Number ``frame``, keep it, and send it if the connection is live.
        Raises ``ValueError`` (and changes nothing) for a frame the wire
        cannot carry: ``dumps`` refuses a frame nested deeper than
        ``MAX_DEPTH``, and the message around it is one level more."""
        body = dumps(frame)  # first: nothing changes if this raises
        seq = self.seq + 1
        text = '{"type":"frame","seq":%d,"frame":%s}' % (seq, body)
        if exceeds_depth(text):
            raise ValueError(f"the frame is nested deeper than the wire's {MAX_DEPTH} levels (wire.json.MAX_DEPTH)")
        self.seq = seq
        kept = self._kept
        kept.append(KeptFrame((seq, frame, text)))
        if len(kept) > self.max_kept_frames:
            kept.popleft()
        if self._live and self._conn is not None:
            self._out.append(Send(self._conn, text))


_ABORTED: Final = {"status": "unanswered", "reason": ABORTED}


def _preview(value: object) -> str:
    """A short picture of what an adapter handed over, for its error:
    ``reprlib`` stops at six levels and a few items, so a value of any depth
    or size is shown in bounded time and stack."""
    return reprlib.repr(value)



def _outcome(turn: Turn, result: TurnResult) -> dict[str, Any]:
    """The wire outcome a turn's result settles its operations with (see
    :meth:`SessionCore.turn_finished`)."""
    kind = type(result)
    if (kind is Done and type(result.text) is not str) or (kind is Unanswered and type(result.reason) is not str):
        kind = None  # attrs does not check types: not an outcome the wire can carry
    if kind is Done:
        outcome = _ABORTED if turn.aborted else {"status": "done", "text": result.text, **result.extra}
    elif kind is Unanswered:
        outcome = {"status": "unanswered", "reason": result.reason, **result.extra}
    elif kind is TurnFailed:
        outcome = _ABORTED if turn.aborted else {"status": "unanswered", "reason": result.text}
    elif kind is TurnCancelled:
        outcome = _ABORTED
    else:
        reason = f"the adapter's run returned {type(result).__name__}, not an outcome (Done or Unanswered)"
        outcome = _ABORTED if turn.aborted else {"status": "unanswered", "reason": reason}
    if len(outcome) > 2 and not is_json(outcome):
        # ``extra`` fields an adapter put on its outcome must be JSON too.
        outcome = {"status": "unanswered", "reason": "the adapter's outcome is not JSON"}
    return outcome

def _error(message: str) -> str:
    return dumps({"type": "error", "message": message})
