"""One session's link task: the Trio layer over :class:`HostLinkCore` (the
link's state across connections, :mod:`router.host.connection`) and
:class:`ConnectionRules` (one connection's reconcile and apply,
:mod:`router.host.reconcile`).

A :class:`SessionLink` is started by its owner (the
:class:`~router.host.host.Host`, seen here only as the small
:class:`LinkOwner` protocol) in the owner's nursery when a session has work
(or a subscriber), and runs until the session is closed or the host stops.
Its task runs the connect loop itself. Each connection gets a nursery of
its own with one task, the connection's reader (the WebSocket,
:mod:`router._websocket`, has no task of its own), so dropping a
connection cancels exactly that connection's task; the link's own task is
the connection's driver. An idle live link is two tasks.

Theory of operation
-------------------

Connect loop: wait for ``/healthz`` (backoff 250 ms → 2 s), dial (10 s), read
``hello`` (10 s); reconcile and deliver; then drive until the socket drops.
What to do when a connection ends is the core's decision (pause, dial at
once, or give up). The whole loop runs inside the **give-up scope**, a
cancel scope whose deadline the core moves (infinite while a connection is
live); when it fires, the link has been unreachable for ``give_up_after``
and fails with the last error.

One connection: a reader task moves messages from the socket into a bounded
inbox (a deque; backpressure: a slow store stops the reader, and then
nothing reads the socket); the driver (the connection's main
task, the only owner of the connection core and the only writer) takes
everything queued, applies it in **one store transaction** (one batch),
then, with the transaction committed, notifies (settle waiters, live
subscribers: plain synchronous calls, so a cancellation cannot fall between
commit and notice) and sends (acks). Requests from the API (deliver, abort,
configure, redial) are recorded in the link core and wake the driver; the
core's rules (a reconcile does what was asked before it, a take hands out
the rest once) are why nothing asked is lost to a race with a connection
coming up.

The reader also pings the daemon from ``hello`` on (its receive runs under
a deadline that is the next ping's time). A ping unanswered in
``ping_timeout`` (or stuck behind a send a daemon that stopped reading will
never take) drops the connection: it wakes the driver and cancels the send
in progress, the only place the driver waits on the network. Only sends are
cancelled, never a store transaction or the notices after it.

A peer cannot crash the session: a message that does not parse is logged
and dropped; ``error`` messages are logged; a store error or a bug ends the
connection, logged with its traceback, and the next one starts from the
record after a backoff that keeps growing while the fault recurs.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import math
from typing import Any, Awaitable, Callable, Final, Iterator, Protocol, Sequence

import attrs
import trio

from router.store.db import database_errors
from router._fanout import FanOut, FanOutSubscription, Lagged
from router._peerlog import cut
from router.host.connection import GiveUp, HostLinkCore, LinkState, Pause, Redial, Requests
from router.host.events import HostEvent, OperationResult
from router.host.link import (
    Backoff,
    DaemonEndpoint,
    LinkDropped,
    LinkError,
    LinkUnreachable,
    SessionSocket,
    closed_error,
    dial,
    read_hello,
    wait_healthy,
)
from router.host.reconcile import ConnectionRules, Effects, UnreadableFrame, frame_seq, is_store_failure
from router.host.settings import HostSettings
from router.host.store import Store
from router._websocket import WebSocket, WebSocketClosed
from wire.container import Abort, AdapterInfo, Answer, ErrorMessage, Hello, dump_message, parse_daemon_message

log = logging.getLogger(__name__)

#: Most daemon messages applied in one transaction.
MAX_BATCH: Final = 512
#: Daemon messages queued between the reader and the driver.
INBOX_SIZE: Final = 1024
#: Live event batches a subscriber may fall behind before it is dropped.
SUBSCRIBER_BUFFER: Final = 4096

#: How the link waits for a daemon's ``/healthz`` (a parameter, so a test
#: can put a daemon on virtual time).
HealthWait = Callable[..., Awaitable[None]]
#: Where the link dials, asked before every dial (the host's: the session's
#: own endpoint, or its launcher's daemon, which it may wait for).
EndpointOf = Callable[[], Awaitable[DaemonEndpoint]]

__all__ = ["SessionLinkStatistics", "EventsLagged", "LinkOwner", "SessionLink"]


class LinkOwner(Protocol):
    """What a :class:`SessionLink` needs from whoever started it (the
    :class:`~router.host.host.Host`)."""

    def backoff(self) -> Backoff:
        """A fresh reconnect backoff for a new link."""

    def settled(self, session: str, results: Sequence[OperationResult]) -> None:
        """Operations settled (committed): wake their waiters."""

    def failed(self, link: SessionLink) -> None:
        """The link gave up (:attr:`SessionLink.failure`)."""

    def ended(self, link: SessionLink) -> None:
        """The link's task returned (closed, failed, or the host stopped)."""


class _Redial(Exception):
    """Control flow: drop this connection and dial again at once."""


class EventsLagged(Lagged):
    """A subscriber fell too far behind the live events and was dropped."""


def _events_lagged(session: str) -> Callable[[], EventsLagged]:
    def make() -> EventsLagged:
        return EventsLagged(
            "events-lagged",
            f"the event stream of session {session!r} fell over {SUBSCRIBER_BUFFER} batches "
            "behind and was closed; open a new one (its snapshot catches up)",
            session=session,
        )

    return make


class _Inbox:
    """The daemon's messages between a connection's reader and its driver:
    a deque and, only while it is full, one event (a memory channel was
    two objects and a state per connection). The reader puts and
    wakes the driver (the link's ``_wake``); the driver takes batches."""

    __slots__ = ("_queue", "_drained", "ended", "closed")

    def __init__(self) -> None:
        self._queue: collections.deque[Any] = collections.deque()
        self._drained: trio.Event | None = None
        #: The reader has returned; ``closed`` says how the daemon closed.
        self.ended = False
        self.closed: WebSocketClosed | None = None

    def put(self, messages: list[Any]) -> None:
        self._queue.extend(messages)

    @property
    def full(self) -> bool:
        return len(self._queue) >= INBOX_SIZE

    async def wait_drained(self) -> None:
        """Until the driver took some (backpressure on the socket)."""
        self._drained = trio.Event()
        await self._drained.wait()

    def take(self, most: int) -> list[Any]:
        """Up to ``most`` queued messages, oldest first."""
        queue = self._queue
        if len(queue) <= most:
            batch = list(queue)
            queue.clear()
        else:
            batch = [queue.popleft() for _ in range(most)]
        if batch and self._drained is not None:
            self._drained.set()
            self._drained = None
        return batch


@attrs.frozen
class SessionLinkStatistics:
    """Where a :class:`SessionLink` is: its core's state, the daemon's runtime,
    connections made, the backoff's attempt, internal failures, frames
    applied, subscribers, requests pending, the give-up deadline and the
    last error's code."""

    state: str
    runtime_id: str | None
    connections: int
    attempt: int
    internal_failures: int
    frames_applied: int
    subscribers: int
    pending: int
    give_up_deadline: float | None
    last_error: str | None


class SessionLink:
    """A session's connection to the daemon; see the module docstring."""

    def __init__(
        self,
        owner: LinkOwner,
        session: str,
        *,
        store: Store,
        endpoint: DaemonEndpoint | None,
        settings: HostSettings,
        health_wait: HealthWait = wait_healthy,
        endpoint_of: EndpointOf | None = None,
    ) -> None:
        self.owner = owner
        self.session = session
        self.store = store
        #: The endpoint of the current (or last) dial.
        self.endpoint = endpoint
        self._endpoint_of = endpoint_of
        self.settings = settings
        self._health_wait = health_wait
        self.core = HostLinkCore(backoff=owner.backoff(), give_up_after=settings.give_up_after)
        self._state_changed = trio.Event()
        self._subscribers: FanOut[list[HostEvent]] = FanOut(
            buffer=SUBSCRIBER_BUFFER, lagged_error=_events_lagged(session)
        )
        self.frames_applied = 0
        #: Wakes the driver of the live connection (a request, a message, a drop).
        self._wake = trio.Event()
        #: Wakes a backoff pause (a redial).
        self._wake_pause = trio.Event()
        #: The scope of a send in progress, which the heartbeat cancels: a
        #: daemon that stops reading blocks sends, and must not hold the
        #: session forever.
        self._sending: trio.CancelScope | None = None
        #: The scope of finding and health-checking the endpoint, which a
        #: redial cancels (a replaced daemon: dial the new one at once).
        self._finding: trio.CancelScope | None = None
        self._give_up: trio.CancelScope | None = None
        self._scope: trio.CancelScope | None = None
        self._stop_requested = False
        self._done = trio.Event()

    def __repr__(self) -> str:
        return (
            f"<SessionLink {self.session!r} {self.state} runtime={self.runtime_id!r} "
            f"connections={self.core.connections} applied={self.frames_applied} "
            f"subscribers={len(self._subscribers)}>"
        )

    # ------------------------------------------------------------------ what it shows

    @property
    def state(self) -> LinkState:
        """``idle`` (not started), ``connecting``, ``live`` (reconciled),
        ``backoff``, ``failed`` (see :attr:`failure`), ``closed``."""
        return self.core.state

    @property
    def failure(self) -> LinkError | None:
        """Why the link gave up, when it did (``state == "failed"``)."""
        return self.core.failure

    @property
    def last_error(self) -> LinkError | None:
        return self.core.last_error

    @property
    def runtime_id(self) -> str | None:
        return self.core.runtime_id

    @property
    def adapter(self) -> AdapterInfo | None:
        """The adapter the daemon named in its last ``hello`` (id, version,
        capabilities); None until a connection reached ``hello``. Kept
        across reconnects, so it says what the session last ran on."""
        return self.core.adapter

    @property
    def connections(self) -> int:
        """How many connections were reconciled."""
        return self.core.connections

    @property
    def subscribers(self) -> int:
        """How many live subscribers the session's events have."""
        return len(self._subscribers)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop_requested

    def _moved(self) -> None:
        """The core changed: tell ``wait_state`` and move the give-up scope."""
        self._state_changed.set()
        self._state_changed = trio.Event()
        if self._give_up is not None:
            self._give_up.deadline = self.core.give_up_deadline

    async def wait_state(self, *states: LinkState) -> LinkState:
        """Wait until the link is in one of ``states``; returns it."""
        while self.state not in states:
            await self._state_changed.wait()
        return self.state

    def statistics(self) -> SessionLinkStatistics:
        core = self.core
        return SessionLinkStatistics(
            state=core.state,
            runtime_id=core.runtime_id,
            connections=core.connections,
            attempt=core.backoff.attempt,
            internal_failures=core.internal_failures,
            frames_applied=self.frames_applied,
            subscribers=len(self._subscribers),
            pending=core.pending(),
            give_up_deadline=core.give_up_deadline,
            last_error=None if core.last_error is None else core.last_error.code,
        )
    # ------------------------------------------------------------------ API side

    def request_deliver(self) -> None:
        """Hand the session's undelivered operations to the daemon."""
        self.core.ask_deliver()
        self._wake.set()

    def request_configure(self) -> None:
        """Send the session's stored settings."""
        self.core.ask_configure()
        self._wake.set()

    def request_abort(self, operation_ids: list[str]) -> None:
        """Tell the daemon to stop these operations (settled here already).

        Each by id, never the daemon's abort-everything: a request may be
        sent after operations submitted later were delivered, and those
        must not be stopped. An abort for an operation the daemon settled or
        does not know changes nothing there. Sent in the order given."""
        if operation_ids:
            self.core.ask_abort(operation_ids)
            self._wake.set()

    def request_answer(self, ask_id: str, decision: str) -> None:
        """Send a person's answer to an ask the session's adapter raised
        (on the live connection, or the next one)."""
        self.core.ask_answer(ask_id, decision)
        self._wake.set()

    def reconnect(self) -> None:
        """Drop the current connection (if any) and dial again at once: the
        next ``hello`` is reconciled against the record as it is now."""
        self.core.ask_redial()
        self._wake.set()
        self._wake_pause.set()
        if self._finding is not None:
            self._finding.cancel(reason="a redial was asked")

    def emit(self, events: list[HostEvent] | tuple[HostEvent, ...]) -> None:
        """Hand a batch of events to every live subscriber, without waiting."""
        if events:
            self._subscribers.publish(list(events))

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[FanOutSubscription[list[HostEvent]]]:
        """A live subscription to the session's event batches (see
        :class:`router._fanout.FanOut`)."""
        with self._subscribers.subscribe() as subscription:
            yield subscription

    def stop(self) -> None:
        """Close the link (also when its task has not started yet)."""
        self._stop_requested = True
        if self._scope is not None:
            self._scope.cancel(reason="the session was closed")

    async def wait_closed(self) -> None:
        await self._done.wait()

    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: trio.TaskStatus[SessionLink] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the connect loop until stopped.

        Resource handling: the connect loop runs in this task; every
        connection's nursery and socket are closed when its block ends, and every subscriber's stream
        ends when this returns. Error handling: link failures are handled
        here (retry or :attr:`failure`); nothing a peer sends escapes."""
        try:
            with trio.CancelScope() as self._scope:
                if self._stop_requested:
                    self._scope.cancel(reason="the session was closed")
                task_status.started(self)
                # The connect loop runs in this task (no nursery of its
                # own: one task fewer per idle link).
                await self._connect_loop()
        finally:
            self.core.closed()
            self._moved()
            self._subscribers.close()
            self._done.set()
            self.owner.ended(self)

    async def _connect_loop(self) -> None:
        core = self.core
        with trio.CancelScope() as self._give_up:
            core.started(trio.current_time())
            self._moved()
            while True:
                decision = await self._one_attempt()
                self._moved()
                if type(decision) is GiveUp:
                    self._failed(decision.error)
                    return
                if type(decision) is Pause:
                    # No checkpoint since the decision: a redial asked from
                    # here on sets this event.
                    self._wake_pause = trio.Event()
                    if not core.redial_asked:
                        with trio.move_on_after(decision.seconds):
                            await self._wake_pause.wait()
        if self._give_up.cancelled_caught:
            self._failed(core.gave_up())
            self._moved()

    async def _one_attempt(self) -> GiveUp | Pause | Redial:
        core = self.core
        core.attempt()
        self._moved()
        try:
            await self._one_connection()
        except _Redial:
            return core.ended(None, now=trio.current_time())
        except LinkError as error:
            if error.retry:
                log.info("session %r: %s", self.session, error)
            return self._short_lived(core.ended(error, now=trio.current_time()))
        except Exception as error:
            # A store error or a bug in one connection must not take the
            # session (or the host) down: log it with its traceback, and
            # start again from the record after a backoff, which does not
            # start over: a fault that recurs is retried at the cap.
            log.exception("session %r: the connection failed in the host (not the daemon)", self.session)
            failure = LinkDropped("internal-error", f"the host failed on this connection: {error!r}")
            return self._short_lived(core.ended(failure, now=trio.current_time(), internal=True))
        raise AssertionError("a connection always ends with an exception")  # pragma: no cover

    def _short_lived(self, decision: GiveUp | Pause | Redial) -> GiveUp | Pause | Redial:
        """Say so when a reconciled connection ended before it counted as
        healthy: the backoff keeps growing (``HostLinkCore``), and the line
        names the side that failed (the error's own words say which: the
        daemon closed, the host closed, the network lost it)."""
        core = self.core
        lived = core.last_lived
        if type(decision) is Pause and lived is not None and lived < core.healthy_after:
            log.warning(
                "session %r: the connection ended %.1f s after its reconcile (%s); "
                "dialling again in %.1f s (pause %d)",
                self.session, lived, core.last_error, decision.seconds, core.backoff.attempt,
            )  # fmt: skip
        core.last_lived = None
        return decision

    def _failed(self, error: LinkError) -> None:
        log.warning("session %r: giving up: %s", self.session, error)
        self.owner.failed(self)

    # ------------------------------------------------------------------ one connection

    async def _one_connection(self) -> None:
        """Dial, reconcile, drive, until the connection ends; always raises
        (a :class:`LinkError`, :class:`_Redial`, or a failure of ours)."""
        settings = self.settings
        await self._find_endpoint()
        assert self.endpoint is not None
        ended: BaseException | None = None
        # The nursery's body keeps its own errors and re-raises them after
        # the nursery, so they come out whole rather than in an exception
        # group (nurseries are strict).
        async with trio.open_nursery() as nursery:
            socket: SessionSocket | None = None
            try:
                socket = await dial(self.endpoint, self.session, connect_timeout=settings.connect_timeout)
                hello = await read_hello(socket.ws, self.endpoint, timeout=settings.hello_timeout)
                self.core.hello_received()
                self._moved()
                inbox = _Inbox()
                nursery.start_soon(self._reader, socket.ws, inbox, name=f"session {self.session!r} reader")
                core = ConnectionRules(
                    self.session, on_container_lost=settings.on_container_lost, ack_every=settings.ack_every
                )
                await self._connected(socket.ws, core, hello)
                await self._drive(socket.ws, core, inbox)
            except (LinkError, _Redial, *database_errors()) as error:
                ended = error
            finally:
                if socket is not None:
                    await socket.close()
                nursery.cancel_scope.cancel()
        if ended is not None:
            raise ended
        raise LinkDropped("link-dropped", "the session socket closed")  # pragma: no cover

    async def _find_endpoint(self) -> None:
        """Ask where to dial (a launched daemon may be starting: this waits
        for it), then wait for its health; a redial asked meanwhile (the
        daemon was replaced) cuts both short with :class:`_Redial`."""
        with trio.CancelScope() as scope:
            self._finding = scope
            try:
                if self.core.redial_asked:
                    scope.cancel()
                if self._endpoint_of is not None:
                    self.endpoint = await self._endpoint_of()
                if self.endpoint is None:
                    raise LinkUnreachable("no-endpoint", f"session {self.session!r} has no daemon to dial")
                await self._health_wait(self.endpoint, timeout=self.settings.health_wait,
                                        failed=self.core.attempt_failed)
            finally:
                self._finding = None
        if scope.cancelled_caught:
            raise _Redial()

    async def _connected(self, ws: WebSocket, core: ConnectionRules, hello: Hello) -> None:
        self.core.reconciling()
        store = self.store
        reconciled = await store.transact(core.hello, hello, retry=False)
        self._commit(reconciled)  # before the next checkpoint: settles are told
        effects = reconciled + await store.transact(core.deliver, retry=False)
        self.core.reconciled(hello.runtime_id, hello.adapter, now=trio.current_time())
        self._moved()
        await self._send(ws, effects)

    async def _drive(self, ws: WebSocket, core: ConnectionRules, inbox: _Inbox) -> None:
        while True:
            self._wake = trio.Event()
            interrupt = self.core.interrupt()
            if interrupt is not None:
                raise _Redial() if type(interrupt) is Redial else interrupt
            requests = self.core.take()
            if requests is not None:
                await self._run_requests(ws, core, requests)
            batch = inbox.take(MAX_BATCH)
            if batch:
                await self._apply(ws, core, batch)
            elif inbox.ended:
                if inbox.closed is not None:
                    raise closed_error(inbox.closed, self.endpoint)
                raise LinkDropped("link-dropped", "the session socket closed")
            if not batch and requests is None:
                await self._wake.wait()

    async def _apply(self, ws: WebSocket, core: ConnectionRules, batch: list[Any]) -> None:
        messages = self._parse(batch)
        if messages:
            try:
                effects = await self.store.transact(core.receive, messages, retry=False)
            except Exception as error:
                if is_store_failure(error):
                    raise
                # A frame that cannot be applied (or a bug): rolled back,
                # the core unchanged. Again, one savepoint a frame, passing
                # any frame that raises; what raises then is not a frame's.
                effects = await self.store.transact(functools.partial(core.receive, careful=True), messages,
                                                    retry=False)
            self.frames_applied = core.frames_applied
            self._commit(effects)
            await self._send(ws, effects)

    async def _run_requests(self, ws: WebSocket, core: ConnectionRules, requests: Requests) -> None:
        store = self.store
        effects = Effects(sends=tuple(Abort(operation_id=core.wire_id(op)) for op in requests.aborts)
                          + tuple(Answer(ask_id=ask, decision=decision)  # type: ignore[arg-type]
                                  for ask, decision in requests.answers))
        if requests.deliver:
            effects = effects + await store.transact(core.deliver, retry=False)
        if requests.configure:
            effects = effects + await store.transact(core.configure, retry=False)
        self._commit(effects)
        await self._send(ws, effects)

    def _parse(self, batch: list[Any]) -> list[Any]:
        """The batch's messages as the core takes them. What does not parse
        is never the end of the connection: a frame (its top level has a
        ``seq``) is handed on as :class:`UnreadableFrame`, to be passed and
        recorded in its place; anything else is logged and dropped."""
        messages = []
        for at, raw in enumerate(batch):
            batch[at] = None  # each text let go once parsed: a big one is not held twice
            text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
            del raw
            message = self._parse_one(text)
            del text
            if message is None:
                continue
            if type(message) is ErrorMessage:
                log.warning("session %r: the daemon reports an error: %s", self.session, cut(message.message))
            elif type(message) is Hello:
                log.warning("session %r: ignored a second hello on one connection", self.session)
            else:
                messages.append(message)
        return messages

    def _parse_one(self, text: str) -> Any:
        try:
            message = parse_daemon_message(text)
            reason = "it is not a daemon message the wire knows"
        except Exception as error:  # the parser's contract is None; a bug there must not end the session
            message, reason = None, f"the parser failed on it: {error!r:.200}"
        if message is not None:
            return message
        seq = frame_seq(text)
        if seq is None:
            log.warning("session %r: dropped a message that does not parse (%s): %.120r", self.session, reason, text)
            return None
        log.warning("session %r: frame %d does not parse (%s); passing it: %.120r", self.session, seq, reason, text)
        return UnreadableFrame(seq=seq, reason=f"it does not parse: {reason}", text=text)

    async def _reader(self, ws: WebSocket, inbox: _Inbox) -> None:
        """Move messages from the socket into ``inbox`` (every message one
        read of the socket completes, at once; waiting while the inbox is
        full: a slow store stops the reader, and the reader stops reading
        the socket), and ping the daemon every ``ping_interval``.

        The heartbeat lives in this task (fewer tasks per idle
        link): the receive runs in a cancel scope whose deadline is the next
        ping's time, or, while a ping is unanswered, its pong's due time.
        A ping unanswered for ``ping_timeout`` drops the connection (a
        half-open TCP connection would otherwise hold a session forever:
        the daemon never drops a quiet socket, and neither side writes
        while idle). A ping stuck behind a send that cannot go out (a
        daemon that stopped reading) counts as unanswered, and the send is
        cancelled."""
        settings = self.settings
        interval = math.inf if settings.ping_interval is None else settings.ping_interval
        ping_at = trio.current_time() + interval
        pong_due = math.inf
        ws.reader_task = True
        try:
            while True:
                with trio.CancelScope(deadline=pong_due if ws.awaiting_pong else ping_at):
                    while True:
                        if inbox.full:
                            await inbox.wait_drained()
                        inbox.put(await ws.receive())
                        self._wake.set()
                now = trio.current_time()
                if ws.awaiting_pong:
                    if now >= pong_due:
                        self._ping_timed_out()
                        return
                elif now >= ping_at:
                    ping_at, pong_due = now + interval, now + settings.ping_timeout
                    with trio.move_on_after(settings.ping_timeout) as scope:
                        await ws.ping()
                    if scope.cancelled_caught:
                        self._ping_timed_out()
                        return
        except WebSocketClosed as error:
            inbox.closed = error
        finally:
            inbox.ended = True
            self._wake.set()

    def _ping_timed_out(self) -> None:
        """Drop the connection: a ping went unanswered (the driver woken, a
        send in progress cancelled)."""
        timeout = self.settings.ping_timeout
        self.core.ping_timed_out(
            LinkDropped("ping-timeout", f"the daemon did not answer a ping within {timeout:g} s")
        )
        self._wake.set()
        if self._sending is not None:
            self._sending.cancel()

    def _commit(self, effects: Effects) -> None:
        """After a transaction committed: tell waiters and subscribers.
        Synchronous on purpose (no checkpoint between commit and notice)."""
        if effects.settled:
            self.owner.settled(self.session, effects.settled)
        self.emit(effects.events)

    async def _send(self, ws: WebSocket, effects: Effects) -> None:
        if not effects.sends:
            return
        with trio.CancelScope() as self._sending:
            try:
                # One write for the batch (acks, prompts, aborts).
                await ws.send_messages([dump_message(message) for message in effects.sends])
            except WebSocketClosed as error:
                raise closed_error(error, self.endpoint) from None
            finally:
                self._sending = None
        interrupt = self.core.interrupt()
        if isinstance(interrupt, LinkError):
            raise interrupt  # the heartbeat gave up while we sent
