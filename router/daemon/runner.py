"""The container daemon's Trio layer: sessions, turns and connections' send side.

:class:`Daemon` serves any number of sessions with one adapter. Each session
is a :class:`SessionRunner`: a :class:`~router.daemon.core.SessionCore`
(all the decisions) and the tasks that carry them out, in a nursery of its
own:

- host messages are handled one at a time, in order. A message that
  arrives while nothing is queued is handled in its reader's task
  (:meth:`SessionRunner.receive`); when its effects include adapter calls
  (open, close, steer, configure) they go to the **inbox task**, which
  awaits them, and every message that arrives meanwhile queues behind them.
  An adapter call is decided when its message is handled and made later:
  a steer decided for a turn that has ended by then is declined without
  calling the adapter (the operation queues), as if the turn had ended
  first;
- one **turn task** runs the session's turns one after another, each
  inside a cancel scope (consecutive turns share one until a turn is
  cancelled); ``abort``, a new generation and shutdown cancel it. A turn
  starts only when its connection's outbox holds at most ``OUTBOX_HIGH``
  texts, so a host that reads slower than turns answer slows the turns,
  not the reader.

A connection's send side is an :class:`Outbox`: the core's sends are queued
there without blocking (so an adapter's ``emit`` never waits on the network
and frames keep their order) and one writer task per connection writes them.
The transport (:mod:`router.daemon.transport`) owns the sockets.

Error handling: an adapter that raises in ``open``, ``steer`` or
``configure`` gets the host an ``error`` message (the reference sends the
error's text); ``close`` errors are logged. A turn that raises settles
``unanswered`` with the error's text. Nothing an adapter or a peer does
escapes a session's nursery; a bug in the core does, loudly.

Resource handling: :meth:`Daemon.run` owns every session's nursery;
:meth:`Daemon.aclose` stops each session's inbox, cancels its running turn,
waits for it, closes its adapter session (all sessions at once, within
:data:`SHUTDOWN_GRACE`), then cancels everything left.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from typing import Any, Final, Protocol

import trio

from router._websocket import WebSocketClosed
from router.daemon.adapter import Adapter, AdapterContext, AdapterTurn
from router.daemon.core import (
    MAX_KEPT_FRAMES,
    SETTLED_KEPT,
    AwaitTurn,
    CancelTurn,
    CloseConnection,
    CloseSession,
    AnswerAsk,
    ConfigureSession,
    Effect,
    OpenSession,
    Send,
    SessionCore,
    StartTurn,
    Steer,
    Turn,
    TurnCancelled,
    TurnFailed,
    error_text,
)
from wire.container import AdapterInfo
from wire.json import dumps

__all__ = ["CLOSE_NOT_READING", "Daemon", "DaemonClosed", "OUTBOX_HIGH", "OUTBOX_SLACK", "Outbox", "SessionRunner", "SHUTDOWN_GRACE"]

log = logging.getLogger("router.daemon")

#: Host messages a session holds before the socket's reader waits (so a
#: host that sends faster than the session handles is slowed by TCP, not
#: buffered without bound). Ours; any small number works.
INBOX_SIZE: Final = 64
#: How long shutdown waits for turns to stop and adapter sessions to close
#: before it cancels what is left. Ours: well inside the 10 s a container
#: runtime gives a process between SIGTERM and SIGKILL (docker stop's
#: default).
SHUTDOWN_GRACE: Final = 5.0
#: How long a close handshake may take before the socket is dropped. Ours;
#: the reference does not wait for it at all.
CLOSE_TIMEOUT: Final = 5.0
#: Texts an outbox may hold beyond a whole replay of its session's kept
#: frames (``max_kept_frames``, which a ``replay`` queues at once) before
#: its host is taken for one that stopped reading (a half-open connection
#: the reference host never pings). Ours: a thousand live frames arriving
#: while the writer drains a full replay is a long turn's worth of deltas.
#: Beyond it the outbox holds only texts the session keeps anyway, or
#: frames it has already dropped for their age, so its memory is bounded.
OUTBOX_SLACK: Final = 1_024
#: The close code and reason for such a host (RFC 6455 1011, "an
#: unexpected condition prevented the server from fulfilling the
#: request"). Nothing is lost: every frame not acknowledged is kept, and
#: the host's next connection replays it.
CLOSE_NOT_READING: Final = 1011
NOT_READING_REASON: Final = "the host is not reading; reconnect and replay"
#: Texts a connection's outbox may hold when a turn starts; with more, the
#: turn waits (cancellably: abort still stops it) until the writer has
#: brought them below this. A host that pipelines thousands of prompts and
#: reads slower than the daemon answers would otherwise see its outbox
#: reach its ``limit`` (and be closed as not reading) although it reads.
#: Ours: half of :data:`OUTBOX_SLACK`, so the frames of the turns of a
#: burst always fit under the limit.
OUTBOX_HIGH: Final = OUTBOX_SLACK // 2


class MessageSocket(Protocol):
    """What an :class:`Outbox` writes to (a :class:`router._websocket.WebSocket`).
    It may also have ``async send_messages(texts: list[str])``, which writes
    them all, in order, at once."""

    async def send_message(self, message: str) -> None: ...

    async def aclose(self, code: int = 1000, reason: str | None = None) -> None: ...


class Outbox:
    """The send side of one connection: texts queued in order, without
    blocking, and written by one task (:meth:`run`).

    A send to a closed or dead connection is dropped: the session goes on,
    and the frames it keeps are replayed to the next connection. A send
    that would make the queue longer than ``limit`` texts (its host stopped
    reading) empties the queue and closes the connection with
    :data:`CLOSE_NOT_READING`; the transport drops it if even the close
    cannot be written.
    """

    __slots__ = (
        "name", "limit", "_queue", "_wakeup", "_closing", "_dead", "sent", "overflowed", "finished",
        "close_requested", "_written",
    )  # fmt: skip

    def __init__(self, name: str = "", *, limit: int = MAX_KEPT_FRAMES + OUTBOX_SLACK) -> None:
        self.name = name
        self.limit = limit
        #: Whether the queue reached ``limit`` (and the connection was closed for it).
        self.overflowed = False
        self._queue: deque[str] = deque()
        self._wakeup: trio.Event | None = None
        self._closing: tuple[int, str] | None = None
        self._dead = False
        #: Messages written so far.
        self.sent = 0
        #: Set when :meth:`run` has returned (closed, or the socket died).
        self.finished = trio.Event()
        #: Set by :meth:`close` (the transport gives the writer a deadline).
        self.close_requested = trio.Event()
        #: Set by the writer after each write while :meth:`room` waits.
        self._written: trio.Event | None = None

    def send(self, text: str) -> None:
        if self._dead or self._closing is not None:
            return
        if len(self._queue) >= self.limit:
            # The host is not reading. What is queued is kept by the
            # session (or was dropped from it for its age already): let it
            # go, and let the next connection replay it.
            log.warning("outbox %s: %d texts unwritten; closing %d", self.name, len(self._queue), CLOSE_NOT_READING)
            self.overflowed = True
            self._queue.clear()
            self.close(CLOSE_NOT_READING, NOT_READING_REASON)
            return
        self._queue.append(text)
        if self._wakeup is not None:
            self._wakeup.set()

    def close(self, code: int, reason: str) -> None:
        """Close with ``code`` once what is queued has been written."""
        if self._dead or self._closing is not None:
            return
        self._closing = (code, reason)
        self.close_requested.set()
        if self._wakeup is not None:
            self._wakeup.set()

    @property
    def closing(self) -> bool:
        return self._closing is not None or self._dead

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def room(self, most: int = OUTBOX_HIGH) -> None:
        """Return once at most ``most`` texts wait to be written (or the
        connection is closing or dead: nothing more will be written).
        Without a checkpoint when that is so already."""
        while len(self._queue) > most and not self.closing:
            self._written = written = trio.Event()
            await written.wait()


    async def run(self, socket: MessageSocket) -> None:
        """Write queued texts to ``socket`` until :meth:`close` (then close it)
        or the socket dies. Returns then; never raises for a dead socket.

        When the socket can write several messages at once
        (``send_messages``), everything queued goes out in one write: one
        lock, one system call, one trip through the scheduler for a batch
        instead of one per frame.
        """
        queue = self._queue
        send_many = getattr(socket, "send_messages", None)
        try:
            while True:
                while queue:
                    if send_many is not None and len(queue) > 1:
                        batch = list(queue)
                        queue.clear()
                        await send_many(batch)
                        self.sent += len(batch)
                    else:
                        await socket.send_message(queue.popleft())
                        self.sent += 1
                    if self._written is not None:
                        self._written.set()
                        self._written = None
                if self._closing is not None:
                    code, reason = self._closing
                    with trio.move_on_after(CLOSE_TIMEOUT):
                        await socket.aclose(code, reason)
                    return
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                self._wakeup = None
        except (WebSocketClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._dead = True
            queue.clear()
            self.finished.set()
            if self._written is not None:
                self._written.set()

    def __repr__(self) -> str:
        state = "dead" if self._dead else "overflowed" if self.overflowed else "closing" if self._closing else "open"
        return f"<Outbox {self.name} {state} pending={len(self._queue)} sent={self.sent}>"


class SessionRunner:
    """One session: its core and the tasks that act for it."""

    def __init__(self, core: SessionCore, adapter: Adapter) -> None:
        self.core = core
        self._adapter = adapter
        self._inbox_send, self._inbox_receive = trio.open_memory_channel[tuple[Any, Any, Any]](INBOX_SIZE)
        #: Messages given to the inbox task and not yet handled by it.
        self._queued = 0
        self._nursery: trio.Nursery | None = None
        self._inbox_scope = trio.CancelScope()
        self._inbox_done = trio.Event()
        #: Turns started and not finished, each with the event set when it ends.
        self._turns: dict[Turn, trio.Event] = {}
        #: Turns to run, oldest first (the turn task takes them), and those
        #: asked to stop; the turn running and the scope it runs in.
        self._starting: deque[Turn] = deque()
        self._aborting: set[Turn] = set()
        self._current: Turn | None = None
        self._turn_scope: trio.CancelScope | None = None
        self._turn_wakeup: trio.Event | None = None
        #: Adapter sessions a handled message is to close and whose close
        #: has not ended yet: when shutdown stops the inbox part-way through
        #: a new generation (waiting for the old turn to unwind), it closes
        #: them itself.
        self._closing: list[Any] = []
        self._stopped = False

    def __repr__(self) -> str:
        return f"<SessionRunner {self.core!r}>"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._handle_inbox, name=f"inbox of {self.core.session!r}")
            nursery.start_soon(self._run_turns, name=f"turns of {self.core.session!r}")
            task_status.started()

    # ------------------------------------------------------------------ connections

    @property
    def outbox_limit(self) -> int:
        """The ``limit`` of this session's connections' outboxes: a whole
        replay of its kept frames and :data:`OUTBOX_SLACK` more."""
        return self.core.max_kept_frames + OUTBOX_SLACK

    def attach(self, outbox: Outbox) -> None:
        self._apply(self.core.attach(outbox))

    def detach(self, outbox: Outbox) -> None:
        self.core.detach(outbox)

    async def receive(self, outbox: Outbox, text: str) -> None:
        """A text from ``outbox``'s socket: refused, ignored or queued for the
        inbox (waits while the inbox is full)."""
        try:
            message, effects = self.core.receive(outbox, text)
        except Exception as exc:  # a bug in parsing, not the peer: say so, keep the connection
            log.exception("session %r: reading a host message failed", self.core.session)
            outbox.send(dumps({"type": "error", "message": error_text(exc)}))
            return
        if effects:
            self._apply(effects)
        if message is None or self._stopped:
            return
        if self._queued == 0:
            # Nothing queued or being handled: handle it here, in order,
            # without the inbox task's two scheduler steps. Only effects
            # that must be awaited (adapter calls) go to the inbox task,
            # and until they are done every later message queues behind
            # them, so messages are still handled one at a time, in order.
            effects = self._handled(outbox, message)
            if effects is None or all(type(effect) in _AT_ONCE for effect in effects):
                if effects:
                    self._apply(effects)
                return
            item: tuple[Any, Any, list[Effect] | None] = (outbox, message, effects)
        else:
            item = (outbox, message, None)
        self._queued += 1
        try:
            await self._inbox_send.send(item)
        except trio.BrokenResourceError:
            self._queued -= 1  # shutting down: the message is dropped, as after a close

    # ------------------------------------------------------------------ tasks

    async def _handle_inbox(self) -> None:
        try:
            with self._inbox_scope:
                async for conn, message, effects in self._inbox_receive:
                    try:
                        await self._handle(conn, message, effects)
                    finally:
                        self._queued -= 1
        finally:
            # A reader waiting to queue a message must not wait forever.
            self._inbox_receive.close()
            self._inbox_done.set()

    def _handled(self, conn: Outbox, message: Any) -> list[Effect] | None:
        """The core's effects for ``message``, or None after a bug in the
        core (reported to the host)."""
        try:
            effects = self.core.handle(conn, message)
        except Exception as exc:  # a bug, not the peer: say so, go on
            self._report(conn, message, exc)
            return None
        self._closing.extend(effect.session for effect in effects if type(effect) is CloseSession)
        return effects

    def _report(self, conn: Outbox, message: Any, exc: Exception) -> None:
        log.exception("session %r: handling %s failed", self.core.session, type(message).__name__, exc_info=exc)
        conn.send(dumps({"type": "error", "message": error_text(exc)}))

    async def _handle(self, conn: Outbox, message: Any, effects: list[Effect] | None) -> None:
        """Perform ``message``'s effects (handled already when given)."""
        if effects is None:
            effects = self._handled(conn, message)
            if effects is None:
                return
        try:
            await self._perform(effects)
        except Exception as exc:  # a bug, not the peer: say so, go on
            self._report(conn, message, exc)

    def _start_turn(self, turn: Turn) -> None:
        self._turns[turn] = trio.Event()
        self._starting.append(turn)
        if self._turn_wakeup is not None:
            self._turn_wakeup.set()

    def _cancel_turn(self, turn: Turn) -> None:
        if turn in self._turns:
            self._aborting.add(turn)
            if self._current is turn and self._turn_scope is not None:
                self._turn_scope.cancel()

    async def _run_turns(self) -> None:
        """The session's turns, one after another, in one task.

        Consecutive turns share one cancel scope until a turn is cancelled
        (abort, a new generation, shutdown): only the turn running when it
        is cancelled, or one that was cancelled before it began, meets the
        cancellation; the next turn gets a fresh scope. One task and one
        scope for many turns instead of a task and a scope per turn (their
        start and end were a tenth of the daemon's time, docs/bench.md).
        """
        starting = self._starting
        try:
            while True:
                while not starting:
                    self._turn_wakeup = wakeup = trio.Event()
                    await wakeup.wait()
                    self._turn_wakeup = None
                await self._run_turns_in(trio.CancelScope())
        finally:
            for ended in self._turns.values():  # cancelled with the session: nobody waits in vain
                ended.set()

    async def _run_turns_in(self, scope: trio.CancelScope) -> None:
        """Run turns while some are starting, in ``scope``, until it is
        cancelled."""
        starting = self._starting
        self._turn_scope = scope
        turn = None
        try:
            with scope:
                while starting and not scope.cancel_called:
                    turn = starting.popleft()
                    self._current = turn
                    if turn in self._aborting:  # cancelled before it began
                        scope.cancel()
                    result = await self._run_one(turn)
                    done, turn = turn, None
                    self._finish(done, result)
                    if starting and not scope.cancel_called:
                        await trio.lowlevel.checkpoint()  # the next turn, after the others had a go
        except Exception as exc:  # a group the scope's exit left behind
            if turn is None:
                raise  # not a turn's: a bug, loudly
            done, turn = turn, None
            self._finish(done, TurnFailed(error_text(exc)))
        if turn is not None:  # the scope caught its cancellation
            self._finish(turn, TurnCancelled())

    async def _run_one(self, turn: Turn) -> Any:
        """One turn's result; its cancellation (and a group holding it)
        goes through."""
        try:
            # A host that reads slower than turns answer holds the next
            # turn back, not its connection's outbox.
            room = getattr(self.core.conn, "room", None)
            if room is not None:
                await room()
            return await turn.session.run(AdapterTurn(operation_id=turn.operation_id, input=turn.input))
        except Exception as exc:
            return TurnFailed(error_text(exc))

    def _finish(self, turn: Turn, result: Any) -> None:
        self._current = None
        try:
            self._apply(self.core.turn_finished(turn, result))
        finally:
            self._aborting.discard(turn)
            self._turns.pop(turn).set()

    # ------------------------------------------------------------------ adapter callbacks

    def _emit(self, event: Any) -> None:
        self._apply(self.core.emit(event))

    def _persist(self, entries: Any) -> None:
        self._apply(self.core.persist(entries))

    def _log(self, level: str, message: str) -> None:
        self._apply(self.core.log(level, message))

    # ------------------------------------------------------------------ effects

    def _apply(self, effects: list[Effect]) -> None:
        """Perform effects that never block."""
        for effect in effects:
            kind = type(effect)
            if kind is Send:
                effect.conn.send(effect.text)
            elif kind is StartTurn:
                self._start_turn(effect.turn)
            elif kind is CancelTurn:
                self._cancel_turn(effect.turn)
            elif kind is CloseConnection:
                effect.conn.close(effect.code, effect.reason)
            else:  # pragma: no cover - the core returns these only from handle/shutdown
                raise AssertionError(f"{effect!r} cannot be performed here")

    async def _configure(self, core: SessionCore, effect: ConfigureSession) -> None:
        configure = getattr(effect.session, "configure", None)
        if callable(configure):
            try:
                await _maybe_await(configure(effect.settings))
            except Exception as exc:
                self._apply(core.configure_failed(effect.conn, exc))

    async def _perform(self, effects: list[Effect]) -> None:
        """Perform effects in order, awaiting adapter calls and feeding their
        results back to the core."""
        core = self.core
        for effect in effects:
            kind = type(effect)
            if kind is OpenSession:
                context = AdapterContext(
                    session=core.session,
                    settings=effect.settings,
                    restore=effect.restore,
                    emit=self._emit,
                    persist=self._persist,
                    log=self._log,
                )
                try:
                    session = await _maybe_await(self._adapter.open(context))
                except Exception as exc:
                    log.warning("session %r: adapter open failed: %s", core.session, error_text(exc))
                    more = core.open_failed(effect.conn, effect.generation, exc)
                else:
                    more = core.opened(effect.generation, session, can_steer=callable(getattr(session, "steer", None)))
                await self._perform(more)
            elif kind is Steer:
                if core.running is not effect.turn:
                    # The steer was decided for a turn that has ended since
                    # (its message was handled in its reader's task, and the
                    # call waited for this task while the turn task ran the
                    # turn to its end). The adapter must not hear of it: the
                    # echo, for one, would keep the text for its next turn,
                    # which is this operation's own (the text twice). Declined:
                    # the operation queues, as if the turn had ended first.
                    await self._perform(core.steered(effect.turn, effect.operation_id, False))
                    continue
                try:
                    took = await _maybe_await(effect.session.steer(effect.input))
                except Exception as exc:
                    more = core.steer_failed(effect.conn, effect.turn, effect.operation_id, exc)
                else:
                    more = core.steered(effect.turn, effect.operation_id, bool(took))  # truthy, as the reference
                await self._perform(more)
            elif kind is ConfigureSession:
                await self._configure(core, effect)
            elif kind is AnswerAsk:
                _answer_ask(core.session, effect)
            elif kind is AwaitTurn:
                ended = self._turns.get(effect.turn)
                if ended is not None:
                    await ended.wait()
            elif kind is CloseSession:
                try:
                    await _maybe_await(effect.session.close())
                except Exception as exc:
                    log.warning("session %r: adapter close failed: %s", core.session, error_text(exc))
                self._closing = [each for each in self._closing if each is not effect.session]
            else:
                self._apply([effect])

    # ------------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        """Stop handling host messages, abort the running turn and wait for
        it, and close the adapter session. Then cancel the session's tasks."""
        self._stopped = True
        self._inbox_scope.cancel()
        await self._inbox_done.wait()
        try:
            await self._perform(self.core.shutdown())
            # Closes the stopped inbox did not get to (or did not finish).
            await self._perform([CloseSession(session) for session in self._closing])
        finally:
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()


#: The effects :meth:`SessionRunner._apply` performs on the spot: a message
#: whose effects are all of these needs no await.
_AT_ONCE: Final = frozenset({Send, StartTurn, CancelTurn, CloseConnection})


async def _maybe_await(value: Any) -> Any:
    """An adapter method's result, awaited if it is awaitable (the interface
    is async; a plain function is tolerated)."""
    if inspect.isawaitable(value):
        return await value
    return value


class DaemonClosed(Exception):
    """The daemon is shutting down (or not running): no new sessions."""


class Daemon:
    """The daemon: any number of sessions, one adapter, one runtime id.

    Sessions are created on first connection and live as long as the daemon
    (as the reference's): their frames and operations outlive connections.
    """

    def __init__(
        self,
        adapter: Adapter,
        runtime_id: str,
        *,
        max_kept_frames: int = MAX_KEPT_FRAMES,
        settled_kept: int = SETTLED_KEPT,
    ) -> None:
        info = adapter.info
        if not isinstance(info, AdapterInfo):
            raise TypeError(f"adapter.info must be a wire.container.AdapterInfo, not {type(info).__name__}")
        self.adapter = adapter
        self.runtime_id = runtime_id
        self._limits = {"max_kept_frames": max_kept_frames, "settled_kept": settled_kept}
        self._sessions: dict[str, SessionRunner] = {}
        self._nursery: trio.Nursery | None = None
        self._closed = False

    @property
    def sessions(self) -> dict[str, SessionRunner]:
        return self._sessions

    async def run(self, *, task_status: trio.TaskStatus["Daemon"] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold every session's tasks until :meth:`aclose` (or cancellation)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            await trio.sleep_forever()

    def session(self, session_id: str) -> SessionRunner:
        """The session's runner, started on first use."""
        runner = self._sessions.get(session_id)
        if runner is None:
            if self._nursery is None or self._closed:
                raise DaemonClosed("the daemon is not running")
            core = SessionCore(session_id, runtime_id=self.runtime_id, adapter=self.adapter.info, **self._limits)
            runner = self._sessions[session_id] = SessionRunner(core, self.adapter)
            self._nursery.start_soon(runner.run, name=f"session {session_id!r}")
        return runner

    async def aclose(self) -> None:
        """Shut every session down (within :data:`SHUTDOWN_GRACE`), then stop."""
        self._closed = True
        with trio.move_on_after(SHUTDOWN_GRACE) as scope:
            async with trio.open_nursery() as nursery:
                for runner in list(self._sessions.values()):
                    nursery.start_soon(runner.shutdown)
        if scope.cancelled_caught:
            log.warning("shutdown: adapter sessions still closing after %.0f s; cancelled", SHUTDOWN_GRACE)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()


def _answer_ask(session: str, effect: AnswerAsk) -> None:
    """A person's answer to the adapter's ask (an adapter without asks, or
    an ask it no longer has, is logged: the answer came too late)."""
    answer = getattr(effect.session, "answer", None)
    if not (callable(answer) and answer(effect.ask_id, effect.decision)):
        log.info("session %r: no ask %r waits for an answer", session, effect.ask_id)
