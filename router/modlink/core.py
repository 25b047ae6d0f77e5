"""The mod link's state, without I/O: the sans-IO core the server drives.

Theory of operation
-------------------
One :class:`LinkCore` per mod link (one Claude Code session). It holds four
things, each changed only by a plain method call that returns at once:

- **The instance claim.** :meth:`LinkCore.admit` is asked about every post
  before anything of it is read, and :meth:`LinkCore.claim` once the post has
  proved good, just before it is applied. The first good post that names an
  instance (``MOD_INSTANCE_HEADER``) claims the link for the core's life; a
  post naming another instance is refused (the server answers
  ``MOD_STATUS_TAKEN``); a post naming none is served and claims nothing
  (claude-envoy 1.19.0 ``hooks/mod-protocol.ts``, ``MOD_INSTANCE_HEADER``); a post refused as malformed claims nothing.

- **The request queue and the pending-call table.** :meth:`start_call` makes a
  request, queues it and records it as pending. :meth:`take_requests` hands
  every queued request to the one poll that asks, and empties the queue, so a
  request goes to exactly one poll; when that poll's answer could not be
  written, :meth:`send_failed` puts its requests back at the front of the
  queue for the next poll (a caller never waits out its deadline for work a
  dead poll took). A result (:meth:`accept_results`) settles
  the pending call with its id and removes it; a result for an id that is not
  pending (unknown, already settled, or abandoned when its caller's deadline
  passed) is dropped and counted. :meth:`abandon_call` forgets a call whose
  caller gave up, and takes it back out of the queue if no poll took it yet,
  so the mod is not asked for work nobody waits for.

- **The link state** (:class:`LinkState`), a frozen snapshot replaced on each
  event that changes it: the mod instance, Claude Code's version and whether
  it is new enough, the session id (which a ``/clear`` moves), the model,
  whether a turn is running.

- **The subscribers** (:class:`SubscriberQueue`): every accepted event is
  pushed to each subscriber's bounded queue. A full queue sheds ``step``
  snapshots, oldest first and superseded ones before any other (a snapshot
  holds the whole step so far, so a later one of the same step loses
  nothing); it never sheds another kind. A queue full of events it may not
  shed is *overflowed*: it takes nothing more, and its reader is told, once it
  has read what the queue holds, that it lost events. So a subscriber that
  never reads costs at most its capacity, and never holds the link up.

The Trio layer (``router.modlink.server``) owns the sockets, the poll hold,
the callers' deadlines and the wake-ups; it reads the outcome of each method
and does the I/O.
"""

from __future__ import annotations

import collections
import logging
import uuid
from typing import Any, Callable, Iterable

import attrs

from wire.mod import (
    MOD_MIN_CLAUDE_VERSION,
    ModEvent,
    ModHelloEvent,
    ModModelEvent,
    ModRequest,
    ModResult,
    ModResultError,
    ModResultOk,
    ModSessionEndEvent,
    ModSessionIdEvent,
    ModStepEvent,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
    ModWireError,
    mod_version_at_least,
    structure_result,
)

__all__ = ["LinkCoreStatistics", "CallOutcome", "LinkCore", "LinkState", "SubscriberQueue"]

log = logging.getLogger("router.modlink")

#: How many events a subscriber's queue holds by default before it sheds
#: snapshots. A step streams at most ten snapshots a second (``mod-protocol.ts``, ``step``),
#: so this is well over ten seconds of one step for a reader that stalls.
DEFAULT_SUBSCRIBER_CAPACITY = 256


@attrs.frozen(kw_only=True)
class LinkState:
    """What the link knows of its mod and session, as of the last event.

    ``version_ok`` is ``None`` until ``hello`` names a version, then whether
    it is at least ``MOD_MIN_CLAUDE_VERSION``. ``session_id`` is the current
    one (a ``/clear`` moves it; the socket stays); ``hello_session_id`` is the
    one the socket is named for. ``ended`` is the reason of the last
    ``session-end``, cleared by the next ``session-id``.
    """

    instance: str | None = None
    claude_version: str | None = None
    version_ok: bool | None = None
    interactive: bool | None = None
    hello_session_id: str | None = None
    session_id: str | None = None
    model: str | None = None
    turn_running: bool = False
    turn_id: str | None = None
    ended: str | None = None


@attrs.frozen
class CallOutcome:
    """How a call ended: ``value`` (typed by the call) or ``error``."""

    request_id: str
    value: Any = None
    error: Exception | None = None


@attrs.define
class _Pending:
    request: ModRequest
    queued: bool = True


class SubscriberQueue:
    """One subscriber's bounded queue of events (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_SUBSCRIBER_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a subscriber's queue holds at least one event")
        self.capacity = capacity
        self._events: collections.deque[ModEvent] = collections.deque()
        self.shed = 0
        self.overflowed = False
        self.closed = False

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        state = "overflowed" if self.overflowed else "closed" if self.closed else "open"
        return f"<SubscriberQueue {state} {len(self._events)}/{self.capacity} shed={self.shed}>"

    def push(self, event: ModEvent) -> None:
        if self.overflowed or self.closed:
            return
        if len(self._events) >= self.capacity and not self._shed_one():
            self.overflowed = True
            return
        self._events.append(event)

    def pop(self) -> ModEvent | None:
        return self._events.popleft() if self._events else None

    def _shed_one(self) -> bool:
        """Drop one step snapshot: the oldest one a later snapshot of the same
        step supersedes, else the oldest one. False when there is none."""
        latest: dict[tuple[str, int], int] = {}
        oldest = None
        for position, event in enumerate(self._events):
            if isinstance(event, ModStepEvent):
                latest[(event.turn_id, event.index)] = position
                if oldest is None:
                    oldest = position
        if oldest is None:
            return False
        victim = oldest
        for position, event in enumerate(self._events):
            if isinstance(event, ModStepEvent) and latest[(event.turn_id, event.index)] != position:
                victim = position
                break
        del self._events[victim]
        self.shed += 1
        return True


@attrs.frozen
class LinkCoreStatistics:
    """What a :class:`LinkCore` holds: the instance on the link, requests queued
    and pending, subscribers, and the posts refused, results dropped and
    events accepted so far."""

    instance: str | None
    queued: int
    pending: int
    subscribers: int
    refused_posts: int
    dropped_results: int
    events_accepted: int


class LinkCore:
    """The mod link's sans-IO state machine (see the module docstring)."""

    def __init__(self, *, new_id: Callable[[], str] | None = None) -> None:
        self._new_id = new_id or (lambda: uuid.uuid4().hex)
        self._queue: collections.OrderedDict[str, ModRequest] = collections.OrderedDict()
        self._pending: dict[str, _Pending] = {}
        self._subscribers: list[SubscriberQueue] = []
        self.state = LinkState()
        self.closed = False
        # Counters for statistics() and tests.
        self.refused_posts = 0
        self.dropped_results = 0
        self.events_accepted = 0

    def __repr__(self) -> str:
        return (
            f"<LinkCore instance={self.state.instance!r} queued={len(self._queue)} "
            f"pending={len(self._pending)} subscribers={len(self._subscribers)}"
            f"{' closed' if self.closed else ''}>"
        )

    # ----------------------------------------------------------------- the claim

    def admit(self, instance: str | None) -> bool:
        """Whether a post naming ``instance`` (``None``: no header) may be
        served: it names no instance, the holder, or the link is unclaimed.
        Changes nothing except the refusal count; :meth:`claim` takes the
        link once the post has proved good."""
        if instance is None or self.state.instance in (None, instance):
            return True
        self.refused_posts += 1
        return False

    def claim(self, instance: str | None) -> bool:
        """Apply the claim of a good post: the first instance named holds the
        link. False (and nothing changed) when another instance claimed it
        while this post was being read; the post must then be refused whole."""
        if not self.admit(instance):
            return False
        if instance is not None and self.state.instance is None:
            self.state = attrs.evolve(self.state, instance=instance)
            log.info("mod instance %s holds the link", instance)
        return True

    # ----------------------------------------------------------------- calls

    def start_call(self, call: str, args: Any = None) -> ModRequest:
        """Queue a request for ``call`` and record it as pending. Raises
        :class:`ModWireError` for an unknown call or an argument of the wrong
        type, and changes nothing then."""
        if self.closed:
            raise RuntimeError("the link is closed")
        request = ModRequest(id=self._new_id(), call=call, args=args)  # type: ignore[arg-type]
        self._queue[request.id] = request
        self._pending[request.id] = _Pending(request)
        return request

    @property
    def has_work(self) -> bool:
        return bool(self._queue)

    def take_requests(self) -> list[ModRequest]:
        """Every queued request, for one poll; the queue is left empty."""
        taken = list(self._queue.values())
        self._queue.clear()
        for request in taken:
            self._pending[request.id].queued = False
        return taken

    def send_failed(self, requests: Iterable[ModRequest]) -> list[ModRequest]:
        """The poll these requests were taken for never got its answer out
        (its client went away, its write failed): h11's ``send_failed``.
        Each one whose call is still pending and not queued again goes back
        to the front of the queue, in its order, for the next poll; one whose
        caller gave up or that was answered meanwhile stays gone. Returns the
        requests queued again."""
        back = [r for r in requests if (p := self._pending.get(r.id)) is not None and not p.queued]
        for request in reversed(back):
            self._queue[request.id] = request
            self._queue.move_to_end(request.id, last=False)
            self._pending[request.id].queued = True
        return back

    def abandon_call(self, request_id: str) -> None:
        """The caller gave up (deadline, cancellation): forget the call, and
        unqueue it if no poll took it. A late result is then dropped."""
        self._pending.pop(request_id, None)
        self._queue.pop(request_id, None)

    def accept_results(
        self, results: Iterable[ModResult], broken: dict[str, str] | None = None
    ) -> list[CallOutcome]:
        """Settle the pending calls these results answer. ``broken`` maps the
        id of a result that named an id but was malformed to why; its call
        fails with :class:`ModBadResult`. Results for ids not pending are
        dropped."""
        from router.modlink.errors import ModBadResult  # the errors carry trio's TooSlowError: loaded on use

        outcomes = []
        answers: list[tuple[str, Callable[[_Pending], CallOutcome]]] = []
        for result in results:
            answers.append((result.id, lambda pending, result=result: self._settle(pending, result)))
        for request_id, why in (broken or {}).items():
            answers.append(
                (
                    request_id,
                    lambda pending, why=why: CallOutcome(
                        pending.request.id,
                        error=ModBadResult(pending.request.call, f"the mod's result is malformed: {why}"),
                    ),
                )
            )
        for request_id, settle in answers:
            pending = self._pending.pop(request_id, None)
            if pending is None:
                self.dropped_results += 1
                log.info("dropped a result for %r: no call of that id is waiting", request_id)
                continue
            self._queue.pop(request_id, None)
            outcomes.append(settle(pending))
        return outcomes

    @staticmethod
    def _settle(pending: _Pending, result: ModResult) -> CallOutcome:
        from router.modlink.errors import ModBadResult, ModCallError

        call = pending.request.call
        if isinstance(result, ModResultError):
            return CallOutcome(result.id, error=ModCallError(call, result.error))
        assert isinstance(result, ModResultOk)
        try:
            return CallOutcome(result.id, value=structure_result(call, result.value))
        except ModWireError as exc:
            return CallOutcome(result.id, error=ModBadResult(call, f"the mod's result is malformed: {exc}"))

    # ----------------------------------------------------------------- events

    def accept_events(self, events: Iterable[ModEvent]) -> None:
        """Apply each event to the state and push it to every subscriber."""
        for event in events:
            self.events_accepted += 1
            self._apply(event)
            for subscriber in self._subscribers:
                subscriber.push(event)

    def _apply(self, event: ModEvent) -> None:
        state = self.state
        if isinstance(event, ModHelloEvent):
            state = attrs.evolve(
                state,
                claude_version=event.claude_version,
                version_ok=mod_version_at_least(event.claude_version, MOD_MIN_CLAUDE_VERSION),
                interactive=event.interactive,
                hello_session_id=event.session_id,
                session_id=event.session_id,
            )
        elif isinstance(event, ModSessionIdEvent):
            state = attrs.evolve(state, session_id=event.session_id, ended=None)
        elif isinstance(event, ModSessionEndEvent):
            state = attrs.evolve(state, ended=event.reason, turn_running=False, turn_id=None)
        elif isinstance(event, ModTurnStartEvent):
            state = attrs.evolve(state, turn_running=True, turn_id=event.turn_id)
        elif isinstance(event, ModTurnCompleteEvent):
            if state.turn_id in (None, event.turn_id):
                state = attrs.evolve(state, turn_running=False, turn_id=None)
        elif isinstance(event, ModStepEvent):
            state = attrs.evolve(state, model=event.model)
        elif isinstance(event, ModModelEvent):
            state = attrs.evolve(state, model=event.model)
        self.state = state

    def subscribe(self, capacity: int = DEFAULT_SUBSCRIBER_CAPACITY) -> SubscriberQueue:
        queue = SubscriberQueue(capacity)
        if self.closed:
            queue.closed = True
        else:
            self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: SubscriberQueue) -> None:
        queue.closed = True
        if queue in self._subscribers:
            self._subscribers.remove(queue)

    # ----------------------------------------------------------------- closing

    def close(self) -> list[str]:
        """The link stops: close every subscriber and return the ids of the
        calls still pending (their callers are told the link closed)."""
        self.closed = True
        for queue in self._subscribers:
            queue.closed = True
        self._subscribers.clear()
        ids = list(self._pending)
        self._pending.clear()
        self._queue.clear()
        return ids

    def statistics(self) -> LinkCoreStatistics:
        return LinkCoreStatistics(
            instance=self.state.instance,
            queued=len(self._queue),
            pending=len(self._pending),
            subscribers=len(self._subscribers),
            refused_posts=self.refused_posts,
            dropped_results=self.dropped_results,
            events_accepted=self.events_accepted,
        )