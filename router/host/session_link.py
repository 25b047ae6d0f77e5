"""One session's link task: the Trio layer over :class:`ConnectionCore`.

A :class:`SessionLink` is started by the :class:`~router.host.host.Host`
in its nursery when a session has work (or a subscriber) and runs until the
session is closed or the host stops. It owns one nursery, and in it one
task: the connect loop. Each connection gets a nursery of its own (the
WebSocket's reader task, and ours), so dropping a connection cancels exactly
that connection's tasks.

Theory of operation
-------------------

Connect loop: wait for ``/healthz`` (backoff 250 ms → 2 s), dial (10 s), read
``hello`` (10 s); reconcile and deliver; then drive until the socket drops.
Retryable failures (:class:`~router.host.link.LinkError` with
``retry``) pause for a capped exponential backoff with jitter, reset after
every connection that reached ``hello``; failures that cannot heal
(``unauthorized``, ``protocol-mismatch``), and unreachability beyond the
host's ``give_up_after``, end the loop and are kept in :attr:`failure`,
where ``wait`` reports them. :meth:`reconnect` (after a ``reset``) drops the
connection and dials again at once.

One connection: a reader task moves messages from the socket into a bounded
memory channel (backpressure: a slow store stops the reader, and then
trio-websocket stops reading the socket); the driver (the connection's main
task, the only owner of the core and the only writer) takes everything
queued, applies it in **one store transaction** (one batch), then, with the
transaction committed, notifies (settle waiters, live subscribers: plain
synchronous calls, so a cancellation cannot fall between commit and notice)
and sends (acks). Commands from the API (deliver, abort, configure) are
recorded on the link and wake the driver; a connection clears them when it
starts its reconcile (which does their work), so what is asked after that
point is done after the reconcile, and nothing asked is lost to a race with
a connection coming up.

A heartbeat task pings the daemon from ``hello`` on. A ping unanswered in
``ping_timeout`` (or stuck behind a send a daemon that stopped reading will
never take) drops the connection: it wakes the driver and cancels the send
in progress, the only place the driver waits on the network. Only sends are
cancelled, never a store transaction or the notices after it.

A peer cannot crash the session: a message that does not parse is logged
and dropped; ``error`` messages are logged; a store error ends the
connection (the next one starts from the record).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Final, Literal

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from router._fanout import FanOut, Lagged
from router.host.events import HostEvent
from router.host.link import (
    LinkDropped,
    LinkError,
    LinkUnreachable,
    SessionSocket,
    closed_error,
    dial,
    read_hello,
    wait_healthy,
)
from router.host.reconcile import ConnectionCore, Effects
from wire.container import Abort, AdapterInfo, ErrorMessage, Hello, dump_message, parse_daemon_message

if TYPE_CHECKING:
    from router.host.host import Host

log = logging.getLogger(__name__)

#: Most daemon messages applied in one transaction.
MAX_BATCH: Final = 512
#: Daemon messages queued between the reader and the driver.
INBOX_SIZE: Final = 1024
#: Live event batches a subscriber may fall behind before it is dropped.
SUBSCRIBER_BUFFER: Final = 4096

State = Literal["idle", "connecting", "live", "backoff", "failed", "closed"]


class _Reconnect(Exception):
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


class SessionLink:
    """A session's connection to the daemon; see the module docstring."""

    def __init__(self, host: Host, session: str) -> None:
        self.host = host
        self.session = session
        self._state: State = "idle"
        self._state_changed = trio.Event()
        #: Why the link gave up, when it did (``state == "failed"``).
        self.failure: LinkError | None = None
        self.runtime_id: str | None = None
        #: The adapter the daemon named in its last ``hello`` (id, version,
        #: capabilities); None until a connection reached ``hello``. Kept
        #: across reconnects, so it says what the session last ran on.
        self.adapter: AdapterInfo | None = None
        #: Live subscribers of this session's events (see :mod:`router._fanout`).
        self.subscribers: FanOut[list[HostEvent]] = FanOut(
            buffer=SUBSCRIBER_BUFFER, lagged_error=_events_lagged(session)
        )
        self.connections = 0
        self.frames_applied = 0
        self.last_error: LinkError | None = None
        self._core: ConnectionCore | None = None
        #: Work the API asked for, done by the driver of the live
        #: connection. Cleared when a connection starts its reconcile (which
        #: does all of it); what is asked after that point is done after it.
        self._want_deliver = False
        self._want_configure = False
        self._want_aborts: dict[str, None] = {}  # ordered, no repeats
        self._wake = trio.Event()
        #: Set by the heartbeat when the live connection stopped answering;
        #: the driver raises it. ``_sending`` is the scope of a send in
        #: progress, which the heartbeat cancels: a daemon that stops
        #: reading blocks sends, and must not hold the session forever.
        self._dropped: LinkError | None = None
        self._sending: trio.CancelScope | None = None
        self._retry_now = trio.Event()
        #: Bumped by :meth:`reconnect`; a connection reconciled under an
        #: older epoch is dropped and dialled again.
        self._epoch = 0
        self._conn_epoch = 0
        self._retry_epoch = 0
        self._reached = False
        self._scope: trio.CancelScope | None = None
        self._stop_requested = False
        self._done = trio.Event()

    def __repr__(self) -> str:
        return (
            f"<SessionLink {self.session!r} {self.state} runtime={self.runtime_id!r} "
            f"connections={self.connections} applied={self.frames_applied} "
            f"subscribers={len(self.subscribers)}>"
        )

    @property
    def state(self) -> State:
        """``idle`` (not started), ``connecting``, ``live`` (reconciled),
        ``backoff``, ``failed`` (see :attr:`failure`), ``closed``."""
        return self._state

    def _set_state(self, state: State) -> None:
        if state != self._state:
            self._state = state
            self._state_changed.set()
            self._state_changed = trio.Event()

    async def wait_state(self, *states: State) -> State:
        """Wait until the link is in one of ``states``; returns it."""
        while self._state not in states:
            await self._state_changed.wait()
        return self._state

    def statistics(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "runtime_id": self.runtime_id,
            "connections": self.connections,
            "frames_applied": self.frames_applied,
            "subscribers": len(self.subscribers),
            "queued_aborts": len(self._want_aborts),
            "last_error": None if self.last_error is None else self.last_error.code,
        }

    # ------------------------------------------------------------------ API side

    def request_deliver(self) -> None:
        """Hand the session's undelivered operations to the daemon."""
        self._want_deliver = True
        self._wake.set()

    def request_configure(self) -> None:
        """Send the session's stored settings."""
        self._want_configure = True
        self._wake.set()

    def request_abort(self, operation_ids: list[str]) -> None:
        """Tell the daemon to stop these operations (settled here already).

        Each by id, never the daemon's abort-everything: a request may be
        sent after operations submitted later were delivered, and those
        must not be stopped. An abort for an operation the daemon settled or
        does not know changes nothing there. Sent in the order given."""
        if operation_ids:
            for operation_id in operation_ids:
                self._want_aborts[operation_id] = None
            self._wake.set()

    def reconnect(self) -> None:
        """Drop the current connection (if any) and dial again at once: the
        next ``hello`` is reconciled against the record as it is now."""
        self._epoch += 1
        self._wake.set()
        self._retry_now.set()

    def emit(self, events: list[HostEvent] | tuple[HostEvent, ...]) -> None:
        """Hand a batch of events to every live subscriber, without waiting."""
        if events:
            self.subscribers.publish(list(events))

    def stop(self) -> None:
        """Close the link (also when its task has not started yet)."""
        self._stop_requested = True
        if self._scope is not None:
            self._scope.cancel(reason="the session was closed")

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop_requested

    async def wait_closed(self) -> None:
        await self._done.wait()

    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: trio.TaskStatus[SessionLink] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the connect loop until stopped.

        Resource handling: one nursery for the session; every connection's
        socket is closed when its block ends, and every subscriber's stream
        ends when this returns. Error handling: link failures are handled
        here (retry or :attr:`failure`); nothing a peer sends escapes."""
        try:
            with trio.CancelScope() as self._scope:
                if self._stop_requested:
                    self._scope.cancel(reason="the session was closed")
                async with trio.open_nursery() as nursery:
                    task_status.started(self)
                    nursery.start_soon(self._connect_loop, name=f"session {self.session!r} link")
        finally:
            self._set_state("closed" if self.failure is None else "failed")
            self._core = None
            self.subscribers.close()
            self._done.set()
            self.host._link_ended(self)

    async def _connect_loop(self) -> None:
        backoff = self.host._backoff()
        # Since when no connection reached ``hello`` (from the first try).
        unreachable_since: float | None = trio.current_time()
        while True:
            self._set_state("connecting")
            self._reached = False
            health_wait = self.host.settings.health_wait
            give_up = self.host.settings.give_up_after
            if give_up is not None and unreachable_since is not None:
                # The health wait does not outlast the give-up deadline.
                left = unreachable_since + give_up - trio.current_time()
                health_wait = max(0.0, min(health_wait, left))
            try:
                await self._one_connection(health_wait)
            except _Reconnect:
                backoff.reset()
                unreachable_since = None
                self._retry_epoch = self._epoch
                self._retry_now = trio.Event()
                continue
            except LinkError as error:
                self.last_error = error
                if not error.retry:
                    self._fail(error)
                    return
                log.info("session %r: %s", self.session, error)
            except Exception as error:
                # A store error or a bug in one connection must not take the
                # session (or the host) down: log it, and start again from
                # the record after a backoff.
                log.exception("session %r: the connection failed", self.session)
                self.last_error = LinkDropped("internal-error", f"the connection failed: {error!r}")
            if self._reached:
                backoff.reset()
                unreachable_since = None
            now = trio.current_time()
            if unreachable_since is None:
                unreachable_since = now
            give_up = self.host.settings.give_up_after
            if give_up is not None and not self._reached and now - unreachable_since >= give_up:
                error = self.last_error or LinkUnreachable("daemon-unreachable", "no daemon answered")
                self._fail(
                    LinkUnreachable(
                        error.code,
                        f"{error.message}; gave up after {give_up:g} s without a connection",
                    )
                )
                return
            self._set_state("backoff")
            delay = backoff.next()
            if give_up is not None:
                delay = min(delay, max(0.0, unreachable_since + give_up - now))
            if self._retry_epoch == self._epoch:
                with trio.move_on_after(delay):
                    await self._retry_now.wait()
            self._retry_epoch = self._epoch
            self._retry_now = trio.Event()

    def _fail(self, error: LinkError) -> None:
        log.warning("session %r: giving up: %s", self.session, error)
        self.failure = error
        self._set_state("failed")
        self.host._link_failed(self)

    # ------------------------------------------------------------------ one connection

    async def _one_connection(self, health_wait: float) -> None:
        """Dial, reconcile, drive, until the connection ends; always raises
        (a :class:`LinkError`, or :class:`_Reconnect`). Sets ``_reached``
        once the ``hello`` is reconciled."""
        host = self.host
        endpoint = host.endpoint
        await wait_healthy(endpoint, timeout=health_wait)
        ended: BaseException | None = None
        # The nursery's body keeps its own errors and re-raises them after
        # the nursery, so they come out whole rather than in an exception
        # group (nurseries are strict).
        async with trio.open_nursery() as nursery:
            socket: SessionSocket | None = None
            try:
                socket = await dial(nursery, endpoint, self.session, connect_timeout=host.settings.connect_timeout)
                ws = socket.ws
                hello = await read_hello(ws, endpoint, timeout=host.settings.hello_timeout)
                self._dropped = None
                if host.settings.ping_interval is not None:
                    nursery.start_soon(self._heartbeat, ws, name=f"session {self.session!r} heartbeat")
                core = ConnectionCore(
                    self.session,
                    on_container_lost=host.settings.on_container_lost,
                    ack_every=host.settings.ack_every,
                )
                await self._connected(ws, core, hello)
                await self._drive(ws, core, nursery)
            except (LinkError, _Reconnect, sqlite3.Error) as error:
                ended = error
            finally:
                self._core = None
                self.runtime_id = None
                if socket is not None:
                    await socket.close()
                nursery.cancel_scope.cancel()
        if ended is not None:
            raise ended
        raise LinkDropped("link-dropped", "the session socket closed")  # pragma: no cover

    async def _connected(self, ws: WebSocketConnection, core: ConnectionCore, hello: Hello) -> None:
        store = self.host.store
        self._want_deliver = self._want_configure = False
        self._want_aborts.clear()
        self._conn_epoch = self._epoch
        reconciled = await store.transact(core.hello, hello)
        self._commit(reconciled)  # before the next checkpoint: settles are told
        effects = reconciled + await store.transact(core.deliver)
        self._core = core
        self._reached = True
        self.runtime_id = hello.runtime_id
        self.adapter = hello.adapter
        self.connections += 1
        self._set_state("live")
        await self._send(ws, effects)

    async def _drive(self, ws: WebSocketConnection, core: ConnectionCore, nursery: trio.Nursery) -> None:
        send, receive = trio.open_memory_channel[Any](INBOX_SIZE)
        closed: list[ConnectionClosed] = []
        nursery.start_soon(self._reader, ws, send, closed, name=f"session {self.session!r} reader")
        store = self.host.store
        with receive:
            while True:
                self._wake = trio.Event()
                if self._epoch != self._conn_epoch:
                    raise _Reconnect()
                if self._dropped is not None:
                    raise self._dropped
                commands = self._take_requests()
                if commands:
                    await self._run_requests(ws, core, commands)
                batch: list[Any] = []
                ended = False
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except trio.WouldBlock:
                        break
                    except trio.EndOfChannel:
                        ended = True
                        break
                if batch:
                    messages = self._parse(batch)
                    if messages:
                        effects = await store.transact(core.receive, messages)
                        self.frames_applied = core.frames_applied
                        self._commit(effects)
                        await self._send(ws, effects)
                if ended:
                    if closed:
                        raise closed_error(closed[0], self.host.endpoint)
                    raise LinkDropped("link-dropped", "the session socket closed")
                if not batch and not commands:
                    await self._wake.wait()

    def _take_requests(self) -> tuple[bool, bool, tuple[str, ...]] | None:
        if not (self._want_deliver or self._want_configure or self._want_aborts):
            return None
        taken = (self._want_deliver, self._want_configure, tuple(self._want_aborts))
        self._want_deliver = self._want_configure = False
        self._want_aborts.clear()
        return taken

    async def _run_requests(
        self, ws: WebSocketConnection, core: ConnectionCore, requests: tuple[bool, bool, tuple[str, ...]]
    ) -> None:
        deliver, configure, aborts = requests
        store = self.host.store
        effects = Effects(sends=tuple(Abort(operation_id=op) for op in aborts))
        if deliver:
            effects = effects + await store.transact(core.deliver)
        if configure:
            effects = effects + await store.transact(core.configure)
        self._commit(effects)
        await self._send(ws, effects)

    def _parse(self, batch: list[Any]) -> list[Any]:
        messages = []
        for text in batch:
            if not isinstance(text, str):
                text = text.decode("utf-8", "replace")
            message = parse_daemon_message(text)
            if message is None:
                log.warning("session %r: dropped a message that does not parse: %.120r", self.session, text)
            elif type(message) is ErrorMessage:
                log.warning("session %r: the daemon reports an error: %s", self.session, message.message)
            elif type(message) is Hello:
                log.warning("session %r: ignored a second hello on one connection", self.session)
            else:
                messages.append(message)
        return messages

    async def _reader(
        self,
        ws: WebSocketConnection,
        send: trio.MemorySendChannel[Any],
        closed: list[ConnectionClosed],
    ) -> None:
        async with send:
            while True:
                try:
                    text = await ws.get_message()
                except ConnectionClosed as error:
                    closed.append(error)
                    self._wake.set()
                    return
                try:
                    await send.send(text)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the driver ended this connection
                self._wake.set()

    async def _heartbeat(self, ws: WebSocketConnection) -> None:
        """Ping every ``ping_interval``; a ping unanswered for
        ``ping_timeout`` drops the connection (a half-open TCP connection
        would otherwise hold a session forever: the daemon never drops a
        quiet socket, and neither side writes while idle). A ping stuck
        behind a send that cannot go out (a daemon that stopped reading)
        counts as unanswered, and the send is cancelled."""
        settings = self.host.settings
        assert settings.ping_interval is not None
        while True:
            await trio.sleep(settings.ping_interval)
            with trio.move_on_after(settings.ping_timeout) as scope:
                try:
                    await ws.ping()
                except (ConnectionClosed, trio.BrokenResourceError):
                    return  # the reader reports the close
            if scope.cancelled_caught:
                self._dropped = LinkDropped(
                    "ping-timeout",
                    f"the daemon did not answer a ping within {settings.ping_timeout:g} s",
                )
                self._wake.set()
                if self._sending is not None:
                    self._sending.cancel()
                return

    def _commit(self, effects: Effects) -> None:
        """After a transaction committed: tell waiters and subscribers.
        Synchronous on purpose (no checkpoint between commit and notice)."""
        if effects.settled:
            self.host._settled(self.session, effects.settled)
        self.emit(effects.events)

    async def _send(self, ws: WebSocketConnection, effects: Effects) -> None:
        if not effects.sends:
            return
        with trio.CancelScope() as self._sending:
            try:
                for message in effects.sends:
                    await ws.send_message(dump_message(message))
            except ConnectionClosed as error:
                raise closed_error(error, self.host.endpoint) from None
            except trio.BrokenResourceError:
                raise LinkDropped("link-dropped", "the session socket broke while sending") from None
            finally:
                self._sending = None
        if self._dropped is not None:
            raise self._dropped  # the heartbeat gave up while we sent

