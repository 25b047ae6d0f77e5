"""One session's turn brackets, on Trio: the thin layer over
:class:`router.turns.brackets.BracketCore`.

Usage (a task in the session's nursery; the session's view task feeds it)::

    meter = SessionBrackets(session_id, layer=layer, launch=launch_of, on_stop=stopped)
    await nursery.start(meter.run)
    meter.turn_started("op-1")      # synchronous: the core's state changes at once
    ...
    meter.turn_ended("op-1")        # end_turn runs in meter.run, then maybe on_stop

Theory of operation: the inputs (:meth:`turn_started`, :meth:`turn_ended`,
:meth:`all_ended`, :meth:`resync`) are applied to the core synchronously,
in the caller's task, so what the router reads (``core.measuring``,
``core.stopped``) is true the moment an event has been seen. The effects
the core answers are queued for the one worker task (:meth:`run`), which
calls ``PluginLayer.begin_turn`` / ``end_turn`` one at a time and feeds the
answers back; a stop runs ``on_stop``. :meth:`wait_until` waits for the
core to reach a state.

Error handling: ``begin_turn``, ``end_turn`` and ``launch`` (the session's
launch record) that raise are logged and fail closed (the core stops the
session at the end of the turn, see :func:`~router.turns.brackets.bracket_failure`),
except ``begin_turn`` or ``end_turn`` failing on the store blinking
(:mod:`router._transient`: tried again within its budget, then
``store-unavailable``), which is no limit's "no": logged, counted
(``unchecked``), the session goes on;
``on_stop`` that raises is logged. Nothing but ``Cancelled`` leaves
:meth:`run`, so a failing bracket never ends the session's nursery.

Resource handling: :meth:`run` owns nothing but its queue; cancelling it
(the session closing) drops what is queued. So a session closing in order
first awaits :meth:`finish_ended_turns`: a turn that has ended gets its
record stored (and the stop it causes carried out) before the worker goes.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
from typing import Any, Awaitable, Callable, Iterable

import attrs
import trio

from router._transient import is_transient
from router.plugins.limit_checks import MustStop
from router.plugins.routing import LaunchRecord
from router.plugins.usage import iso, utc_now
from router.turns.brackets import Begin, BeginFailed, BracketCore, Effect, End, StopInfo, StopSession, bracket_failure
from router.turns.seams import TurnLayer

__all__ = ["SessionBracketsStatistics", "SessionBrackets"]

log = logging.getLogger("router.turns.session_brackets")


@attrs.frozen
class SessionBracketsStatistics:
    """Where a session's brackets are: the phase, the turns running, begun,
    ended and dropped, the bracket calls that failed, the turns left
    unchecked, and the stop in force (its JSON; None: none)."""

    phase: str
    running: list[str]
    begun: int
    ended: int
    dropped: int
    failures: int
    unchecked: int
    stopped: dict[str, Any] | None


class SessionBrackets:
    """One session's brackets (see the module docstring).

    ``layer`` is the ``PluginLayer``; ``launch()`` answers the session's
    launch record as of now (its model may have changed); ``on_stop(stop)``
    is called once a turn's end stopped the session.
    """

    def __init__(
        self,
        session_id: str,
        *,
        layer: TurnLayer,
        launch: Callable[[], Awaitable[LaunchRecord]],
        on_stop: Callable[[StopInfo], Awaitable[None]],
        one_turn: bool = False,
        stopped: StopInfo | None = None,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self.session_id = session_id
        self.core = BracketCore(one_turn=one_turn, stopped=stopped)
        self._layer = layer
        self._launch = launch
        self._on_stop = on_stop
        self._now = now
        self._queue: collections.deque[Effect] = collections.deque()
        #: turn id -> the launch record its writer read (see :meth:`writing`).
        self._launches: dict[str, LaunchRecord] = {}
        self._work = trio.lowlevel.ParkingLot()
        self._changed = trio.lowlevel.ParkingLot()
        #: The last turn record ``end_turn`` stored (for tests and statistics).
        self.last_turn_record: dict[str, Any] | None = None
        self.failures = 0
        #: Turn ends whose record the store could not take within its
        #: retries (transient failures): not stops.
        self.unchecked = 0
        #: ``End`` and ``StopSession`` effects queued or being carried out.
        self._owed = 0

    def __repr__(self) -> str:
        return f"<SessionBrackets {self.session_id!r} {self.core!r} queued={len(self._queue)}>"

    def statistics(self) -> SessionBracketsStatistics:
        return SessionBracketsStatistics(
            phase=self.core.phase.value,
            running=sorted(self.core.running),
            begun=self.core.begun_count,
            ended=self.core.ended_count,
            dropped=self.core.dropped_count,
            failures=self.failures,
            unchecked=self.unchecked,
            stopped=None if self.core.stopped is None else self.core.stopped.to_json(),
        )
    # ------------------------------------------------------------------ inputs (synchronous)

    def _apply(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            self._queue.append(effect)
            if not isinstance(effect, Begin):
                self._owed += 1
        if self._queue:
            self._work.unpark_all()
        self._changed.unpark_all()

    def writing(self, turn_id: str, launch: LaunchRecord | None = None) -> None:
        """A turn is about to be written. ``launch``: the session's launch
        record, when the writer read it in a hop it made anyway (the
        delivery's plan): a bracket this opens uses it instead of reading it
        again (``launch()``, a worker-thread hop), whether it opens now or
        once the bracket before has closed."""
        if launch is not None:
            self._launches[turn_id] = launch
        self._apply(self.core.writing(turn_id))

    def not_writing(self, turn_id: str) -> None:
        self._launches.pop(turn_id, None)
        self._apply(self.core.not_writing(turn_id))

    def turn_started(self, turn_id: str) -> None:
        self._apply(self.core.turn_started(turn_id))

    def turn_ended(self, turn_id: str) -> None:
        self._apply(self.core.turn_ended(turn_id))

    def all_ended(self) -> None:
        self._apply(self.core.all_ended())

    def resync(self, running: Iterable[str]) -> None:
        self._apply(self.core.resync(running))

    def resume(self) -> StopInfo | None:
        stopped = self.core.resume()
        self._changed.unpark_all()
        return stopped

    async def wait_until(self, predicate: Callable[[BracketCore], bool]) -> None:
        """Until ``predicate(core)`` holds (checked after every change)."""
        while not predicate(self.core):
            await self._changed.park()

    async def finish_ended_turns(self) -> None:
        """Until every turn that has ended is measured, its record stored and
        the stop it caused carried out (a turn still running is not waited
        for). Needs :meth:`run` going; the caller bounds the wait."""
        while self.core.measuring or self._owed:
            await self._changed.park()

    # ------------------------------------------------------------------ the worker

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            while not self._queue:
                await self._work.park()
            effect = self._queue.popleft()
            try:
                await self._carry_out(effect)
            finally:
                if not isinstance(effect, Begin):
                    self._owed -= 1
                    self._changed.unpark_all()

    def _writers_launch(self) -> LaunchRecord | None:
        """The launch record a writer read for a turn this bracket opens for
        (one expected or running now), if any; every other is dropped (a
        bracket that opens later reads its own)."""
        turns = self.core.expected | self.core.running
        launch = next((self._launches[t] for t in sorted(turns) if t in self._launches), None)
        self._launches.clear()
        return launch

    async def _carry_out(self, effect: Effect) -> None:
        if isinstance(effect, Begin):
            try:
                launch = self._writers_launch() or await self._launch()
                bracket: Any = await self._layer.begin_turn(launch)
            except Exception as exc:
                self.failures += 1
                if is_transient(exc):  # the store blinked past its retries: not a stop (see end_turn)
                    self.unchecked += 1
                    log.warning("session %r: the turn's bracket could not begin (%s); the session goes on",
                                self.session_id, exc)
                    bracket = BeginFailed(stop=None)
                else:
                    log.exception("session %r: begin_turn failed; the session stops when the turn ends",
                                  self.session_id)
                    bracket = BeginFailed(stop=bracket_failure("begin_turn", exc, iso(self._now())))
            self._apply(self.core.begun(bracket))
        elif isinstance(effect, End):
            stop: StopInfo | None
            try:
                record, answer = await self._layer.end_turn(effect.bracket)
                self.last_turn_record = record
                stop = None if answer is None else _info(answer, iso(self._now()))
            except Exception as exc:
                self.failures += 1
                if is_transient(exc):
                    # The store blinked past its retries (router._transient):
                    # no limit said no, so the session goes on; its next
                    # turn's end asks the checks again.
                    self.unchecked += 1
                    log.warning("session %r: the turn's record could not be stored or checked (%s); "
                                "the session goes on", self.session_id, exc)
                    stop = None
                else:
                    log.exception("session %r: end_turn failed; the session stops", self.session_id)
                    stop = bracket_failure("end_turn", exc, iso(self._now()))
            self._apply(self.core.ended(stop))
        else:
            assert isinstance(effect, StopSession)
            log.warning("session %r stopped: %s", self.session_id, effect.stop.reason)
            try:
                await self._on_stop(effect.stop)
            except Exception:
                log.exception("session %r: carrying out its stop failed", self.session_id)


def _info(stop: MustStop, at: str) -> StopInfo:
    return StopInfo(reason=stop.reason, check=stop.check, at=at)
