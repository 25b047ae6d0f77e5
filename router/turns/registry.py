"""The session registry: every session the router serves, with its kind, its
nursery and its tasks.

A session is one of two kinds (:class:`SessionKind`): a **container**
session (reached through the host and its daemon) or a **claude-code**
session (reached through its mod link). Each open session owns a nursery of
its own, under the registry's, holding one task per channel it uses:

- every session: the user-turn router's **inbox** (its deliveries, one at a
  time, in order);
- a claude-code session also: the **mod link**'s server (``ModLink.run``)
  and the **live view** task that turns the link's events into the session's
  live items;
- a container session, when the router meters turns: the **live view**
  task that follows the host's events for the session;
- with a plug-in layer, every session: the **meter** (its turn brackets,
  ``router.turns.session_brackets``), which the live view task feeds.

Sessions run concurrently; closing one cancels exactly its tasks.

Error handling: a task that fails while the session starts fails the start
(:meth:`SessionRegistry.open` raises that one error: a ``ModLinkRefused``,
say); a task that fails later ends its session only (logged; the session's
``failure`` keeps it) and never the registry. ``Cancelled`` is never
swallowed.

Resource handling: :meth:`SessionRegistry.run` owns every session's nursery;
:meth:`SessionRegistry.close` cancels one session and waits until its tasks
are done; :meth:`SessionRegistry.aclose` does that for all (cancelling
``run`` does it at once). Closing lets a session's meter first finish the
turns that have ended (their records, any stop), up to ``METER_GRACE``
seconds, so a router stopped right after a turn still counts it. Each session's ``on_close`` callbacks run once its tasks are done
(the router uses one to answer the deliveries still queued).
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Final, Sequence

import attrs
import trio

from router._trio import sole_error

if TYPE_CHECKING:
    from router.turns.live import LiveHub
    from router.turns.session_brackets import SessionBrackets

__all__ = ["SessionRegistryStatistics", "Session", "SessionKind", "SessionRegistry", "Starter"]

log = logging.getLogger("router.turns.registry")

#: Seconds a closing session's meter may take to store the records of turns
#: that have ended (``end_turn`` reads usage and writes one line).
METER_GRACE: Final = 5.0

#: ``(name, fn)``: a session task, started with ``nursery.start(fn)``, so
#: ``fn`` takes ``task_status`` and calls ``started()`` once it is ready.
Starter = tuple[str, Callable[..., Awaitable[Any]]]


class SessionKind(str, enum.Enum):
    CONTAINER = "container"
    CLAUDE_CODE = "claude-code"


@attrs.define(eq=False)
class Session:
    """One open session. ``inbox`` takes its deliveries; ``target`` is its
    channel (a ``router.turns.targets`` target: the mod link, or the host);
    ``live`` its live view (a container session's, when it has a view
    task); ``brackets`` its turn brackets."""

    id: str
    kind: SessionKind
    inbox: trio.MemorySendChannel[Any]
    target: Any = None
    live: LiveHub | None = None
    brackets: SessionBrackets | None = None
    #: Names of the tasks running in the session's nursery.
    tasks: list[str] = attrs.field(factory=list)
    scope: trio.CancelScope | None = None
    closed: trio.Event = attrs.field(factory=trio.Event)
    failure: BaseException | None = None
    on_close: list[Callable[[], None]] = attrs.field(factory=list)

    def __repr__(self) -> str:
        state = "closed" if self.closed.is_set() else "open"
        return f"<Session {self.id!r} {self.kind.value} {state} tasks={self.tasks}>"


@attrs.frozen
class SessionRegistryStatistics:
    """The sessions a :class:`SessionRegistry` holds: by id, each one's kind
    and the names of its tasks."""

    sessions: dict[str, tuple[str, tuple[str, ...]]]


class SessionRegistry:
    """Every open session (see the module docstring)."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._nursery: trio.Nursery | None = None
        self._opening: dict[str, trio.Event] = {}

    def __repr__(self) -> str:
        kinds = [session.kind.value for session in self._sessions.values()]
        return f"<SessionRegistry sessions={len(kinds)} claude-code={kinds.count('claude-code')}>"

    def statistics(self) -> SessionRegistryStatistics:
        return SessionRegistryStatistics(
            sessions={id: (session.kind.value, tuple(session.tasks)) for id, session in self._sessions.items()},
        )
    async def run(self, *, task_status: trio.TaskStatus[SessionRegistry] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold every session's nursery until cancelled."""
        if self._nursery is not None:
            raise RuntimeError("this registry is already running")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None

    def get(self, id: str) -> Session | None:
        return self._sessions.get(id)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    async def open(self, session: Session, starters: Sequence[Starter]) -> Session:
        """Start ``session``'s tasks, in order, each ready before the next,
        and register it. Raises the error of a task that failed to start.
        Opening an id that is open (or opening) returns that session."""
        if self._nursery is None:
            raise RuntimeError("the session registry is not running")
        while session.id in self._opening:
            await self._opening[session.id].wait()
        existing = self._sessions.get(session.id)
        if existing is not None:
            return existing
        opening = self._opening[session.id] = trio.Event()
        try:
            await self._nursery.start(self._run_session, session, starters, name=f"session {session.id!r}")
        except BaseExceptionGroup as group:
            sole = sole_error(group)
            if sole is not None and isinstance(sole, Exception):
                raise sole from None
            raise
        finally:
            del self._opening[session.id]
            opening.set()
        return session

    async def _run_session(
        self, session: Session, starters: Sequence[Starter], *, task_status: trio.TaskStatus[Session]
    ) -> None:
        started = False
        try:
            with trio.CancelScope() as scope:
                session.scope = scope
                async with trio.open_nursery() as nursery:
                    for name, fn in starters:
                        await nursery.start(fn, name=f"{session.kind.value} {session.id!r}: {name}")
                        session.tasks.append(name)
                    self._sessions[session.id] = session
                    started = True
                    task_status.started(session)
        except Exception as exc:
            if not started:
                raise
            # A session's task failed: that session ends, nothing else does.
            session.failure = exc
            log.exception("session %r (%s) failed and was closed", session.id, session.kind.value, exc_info=exc)
        finally:
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]
            session.tasks.clear()
            session.closed.set()
            for callback in session.on_close:
                try:
                    callback()
                except Exception:  # a bug in a callback must not stop the others
                    log.exception("on_close of session %r failed", session.id)

    async def close(self, id: str) -> bool:
        """Close one session: cancel its tasks and wait until they are done.
        False when no such session is open."""
        session = self._sessions.get(id)
        if session is None:
            return False
        await _finish_metering([session])
        assert session.scope is not None
        session.scope.cancel(reason=f"session {id!r} closed")
        await session.closed.wait()
        return True

    async def aclose(self) -> None:
        """Close every session (all at once) and wait for them."""
        sessions = list(self._sessions.values())
        await _finish_metering(sessions)
        for session in sessions:
            if session.scope is not None:
                session.scope.cancel(reason="the router is shutting down")
        for session in sessions:
            await session.closed.wait()


async def _finish_metering(sessions: Sequence[Session]) -> None:
    """Let each session's meter finish the turns that have ended, all at
    once, for at most ``METER_GRACE`` seconds."""
    meters = [session.brackets for session in sessions if session.brackets is not None]
    if not meters:
        return
    with trio.move_on_after(METER_GRACE) as grace:
        async with trio.open_nursery() as nursery:
            for meter in meters:
                nursery.start_soon(meter.finish_ended_turns)
    if grace.cancelled_caught:
        late = [meter.session_id for meter in meters if meter.core.measuring]
        log.warning("closing without the records of ended turns of %s: the meter took over %g s", late, METER_GRACE)
