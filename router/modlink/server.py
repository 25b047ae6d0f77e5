"""The mod link's server: a small h11 server (:mod:`router.modlink.http`) on
the session's private Unix socket, over the sans-IO
:class:`~router.modlink.core.LinkCore`. The link's own task accepts, and
each connection is one task in the link's nursery; a held poll is that task
waiting in a cancel scope the link cancels when work is queued.

One :class:`ModLink` per Claude Code session, living in that session's
nursery::

    link = ModLink(session_id)
    path = await nursery.start(link.run)
    value = await link.call("session.model", deadline=10)
    with link.events() as events:
        async for event in events:
            ...

Routes (claude-envoy 1.19.0 ``hooks/mod-protocol.ts``): ``GET /healthz`` answers ``{"link": MOD_HEALTH_MARKER}``;
``POST /events {events}`` and ``POST /results {results}`` answer
``{"ok": true}``; ``POST /requests`` answers ``{requests}``, held while
nothing is queued for up to ``MOD_POLL_HOLD_MS`` and answered the moment work
is queued. Every post is first put to the instance claim (409 when another mod
instance holds the link, and nothing of it applied). A body that is not JSON,
or not the route's shape, gets 400 and ``{"error": code, "message": sentence}``
and nothing of it is applied; within a good body an event of an unknown kind
is passed on raw and a malformed event is skipped with a warning.

Error handling: nothing a peer sends raises out of a route; an unexpected
exception in a route is logged and answered 500, and the link goes on.
Starting raises :class:`ModLinkRefused` (and binds nothing) when the socket's
directory is not private, or a live server already answers on the path.

Resource handling: :meth:`ModLink.run` binds the socket (mode 0600, in a 0700
directory), serves until cancelled, and on every exit removes the socket file
if it is still the one it bound, fails the calls still waiting with
:class:`ModLinkClosed` and ends every subscription.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from functools import partial
from typing import Any, Awaitable, Callable, Final, Mapping

import attrs
import h11
import trio

from router._unix import bind_private_socket, make_private_directory, remove_if_bound
from router.modlink.core import (DEFAULT_SUBSCRIBER_CAPACITY, CallOutcome, LinkCore, LinkCoreStatistics, LinkState,
                                  SubscriberQueue)
from router.modlink.errors import ModCallTimeout, ModLinkClosed, ModLinkRefused, ModSubscriberOverflow
from router._http11 import accept_loop
from router.modlink.http import (
    SHARED_BODY_BUDGET,
    HttpAnswer,
    BodyBudget,
    Exchange,
    PeerGone,
    link_limits,
    refusal,
    serve_connection,
)
from wire.json import JsonError, dumps, loads
from wire.mod import (
    MOD_CAPABILITY_ASKS,
    MOD_HEALTH_MARKER,
    MOD_INSTANCE_HEADER,
    MOD_POLL_HOLD_MS,
    MOD_ROUTE_EVENTS,
    MOD_ROUTE_HEALTH,
    MOD_ROUTE_REQUESTS,
    MOD_ROUTE_RESULTS,
    MOD_STATUS_TAKEN,
    MOD_URL_BASE,
    ModEvent,
    ModWireError,
    converter,
    read_events,
    read_results,
    resolve_mod_socket_path,
)

__all__ = ["ModLinkStatistics", "ModLink", "Subscription", "probe_health"]

log = logging.getLogger("router.modlink")
#: The connections' logger (a bug in one is logged here).
http_log = logging.getLogger("router.modlink.http")

#: How long the stale-socket probe waits for ``GET /healthz``. A live server
#: answers it from memory at once; one second is ample on a loaded machine
#: and short enough not to hold a session's start up (our choice).
PROBE_TIMEOUT = 1.0

#: How long a call waits for the mod's answer unless told otherwise (our
#: choice: six poll holds, so a mod between two polls is always reached).
DEFAULT_CALL_DEADLINE = 30.0

#: ``GET /healthz``'s answer. ``capabilities`` is ours, not ``mod-protocol.ts``'s: a
#: mod that knows the asks raises one only at a server that names them.
_HEALTH: Final = HttpAnswer(200, dumps({"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}).encode())
_OK: Final = HttpAnswer(200, b'{"ok":true}')
_INSTANCE: Final = MOD_INSTANCE_HEADER.lower().encode("ascii")


def _json(value: Any) -> HttpAnswer:
    return HttpAnswer(200, dumps(value).encode())


async def probe_health(path: str, *, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether a live mod link server answers ``GET /healthz`` with the marker
    on ``path`` within ``timeout``. Any failure (refused, no answer, another
    answer) is ``False``: the socket is stale."""
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_unix_socket(path)
        except OSError:
            return False
        async with stream:
            connection = h11.Connection(h11.CLIENT)
            host = MOD_URL_BASE.split("//", 1)[1]
            try:
                await stream.send_all(
                    connection.send(
                        h11.Request(
                            method="GET",
                            target=MOD_ROUTE_HEALTH,
                            headers=[("Host", host), ("Connection", "close")],
                        )
                    )
                    + connection.send(h11.EndOfMessage())
                )
                status = None
                body = b""
                while True:
                    event = connection.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        connection.receive_data(data)
                        if not data and connection.their_state is not h11.SEND_BODY:
                            break
                        continue
                    if isinstance(event, h11.Response):
                        status = event.status_code
                    elif isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > 65536:
                            return False
                    elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                        break
                if status != 200:
                    return False
                answer = loads(body.decode("utf-8"))
                return type(answer) is dict and answer.get("link") == MOD_HEALTH_MARKER
            except (OSError, trio.BrokenResourceError, h11.ProtocolError, UnicodeDecodeError, JsonError):
                return False
    return False


class Subscription:
    """One subscriber's view of the link's events: an async iterator over a
    bounded queue (see :class:`~router.modlink.core.SubscriberQueue`).

    Iteration ends when the link stops (after the queued events), and raises
    :class:`ModSubscriberOverflow` once a reader that fell too far behind has
    read what was kept. Use it as a context manager to unsubscribe on exit.
    """

    def __init__(self, link: "ModLink", queue: SubscriberQueue) -> None:
        self._link = link
        self._queue = queue
        self._lot = trio.lowlevel.ParkingLot()

    def __repr__(self) -> str:
        return f"<Subscription {self._queue!r}>"

    @property
    def shed(self) -> int:
        """How many step snapshots this subscriber lost to its bound."""
        return self._queue.shed

    def _wake(self) -> None:
        self._lot.unpark_all()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._link._unsubscribe(self)

    def __aiter__(self) -> "Subscription":
        return self

    async def __anext__(self) -> ModEvent:
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            event = self._queue.pop()
            if event is not None:
                # Popped: from here on a cancellation must not lose it.
                await trio.lowlevel.cancel_shielded_checkpoint()
                return event
            if self._queue.overflowed:
                raise ModSubscriberOverflow(
                    f"this subscriber fell more than {self._queue.capacity} events behind and lost events; "
                    "subscribe again and read the link's state"
                )
            if self._queue.closed:
                raise StopAsyncIteration
            await self._lot.park()


@attrs.define
class _Waiter:
    event: trio.Event = attrs.field(factory=trio.Event)
    outcome: CallOutcome | None = None


@attrs.frozen
class ModLinkStatistics:
    """What a :class:`ModLink` is doing: its core's figures, whether it serves,
    and its long polls (waiting now; answered with work, expired, unwritten)."""

    core: LinkCoreStatistics
    serving: bool
    polls_waiting: int
    polls_with_work: int
    polls_expired: int
    polls_unwritten: int


class ModLink:
    """The mod link of one Claude Code session (see the module docstring).

    ``env`` defaults to ``os.environ``; ``hold`` (seconds) to
    ``MOD_POLL_HOLD_MS``. Raises :class:`ModLinkRefused` (``no-socket-path``)
    at once when the environment names no socket path for the session.
    """

    def __init__(
        self,
        session_id: str,
        *,
        env: Mapping[str, str] | None = None,
        hold: float = MOD_POLL_HOLD_MS / 1000,
        probe_timeout: float = PROBE_TIMEOUT,
        subscriber_capacity: int = DEFAULT_SUBSCRIBER_CAPACITY,
        core: LinkCore | None = None,
        body_budget: BodyBudget | None = None,
    ) -> None:
        resolution = resolve_mod_socket_path(session_id, os.environ if env is None else env)
        if resolution.path is None:
            assert resolution.refusal is not None
            raise ModLinkRefused("no-socket-path", resolution.refusal)
        self.session_id = session_id
        self.path: str = resolution.path
        self.hold = hold
        self.probe_timeout = probe_timeout
        self.subscriber_capacity = subscriber_capacity
        #: The bytes of request bodies held at once: the process's budget, every
        #: link's together, unless this link is given its own (docs/modlink.md).
        self.body_budget = SHARED_BODY_BUDGET if body_budget is None else body_budget
        self._core = core or LinkCore()
        self._waiters: dict[str, _Waiter] = {}
        self._subscriptions: dict[SubscriberQueue, Subscription] = {}
        #: The wake-up scopes of the polls held now (:meth:`Exchange.hold`).
        self._held: set[trio.CancelScope] = set()
        self._serving = False
        self._closed = False
        # Poll counters: how each held poll ended (tests assert on these).
        self.polls_with_work = 0
        self.polls_expired = 0
        #: Polls whose answer was not written, their requests queued again.
        self.polls_unwritten = 0

    def __repr__(self) -> str:
        status = "closed" if self._closed else "serving" if self._serving else "idle"
        return f"<ModLink {status} {self.path} {self._core!r} polls_waiting={len(self._held)}>"

    # ----------------------------------------------------------------- public API

    @property
    def state(self) -> LinkState:
        """The link's state as of the last event (a frozen snapshot)."""
        return self._core.state

    def statistics(self) -> ModLinkStatistics:
        return ModLinkStatistics(
            core=self._core.statistics(),
            serving=self._serving,
            polls_waiting=len(self._held),
            polls_with_work=self.polls_with_work,
            polls_expired=self.polls_expired,
            polls_unwritten=self.polls_unwritten,
        )
    async def call(self, name: str, args: Any = None, *, deadline: float = DEFAULT_CALL_DEADLINE) -> Any:
        """Ask the mod to make call ``name`` and return its typed result.

        ``deadline`` is in seconds from now. Raises :class:`ModCallError` when
        the mod answers ``ok: false``, :class:`ModBadResult` when its answer is
        not the call's shape, :class:`ModCallTimeout` when the deadline passes
        first (a late answer is then dropped), :class:`ModLinkClosed` when the
        link stops, and ``wire.mod.ModWireError`` for an unknown call or an
        argument of the wrong type.
        """
        if self._closed:
            raise ModLinkClosed("the mod link is closed")
        request = self._core.start_call(name, args)
        waiter = self._waiters[request.id] = _Waiter()
        self._wake_polls()
        try:
            with trio.move_on_after(deadline) as scope:
                await waiter.event.wait()
        finally:
            # On every exit, Cancelled included: a call nobody waits for is
            # forgotten, so its late answer is dropped.
            del self._waiters[request.id]
            if waiter.outcome is None:
                self._core.abandon_call(request.id)
        if waiter.outcome is None:
            if self._closed:
                raise ModLinkClosed(f"the mod link closed before the mod answered {name}")
            assert scope.cancelled_caught
            raise ModCallTimeout(name, deadline)
        if waiter.outcome.error is not None:
            raise waiter.outcome.error
        return waiter.outcome.value

    def events(self, *, capacity: int | None = None) -> Subscription:
        """Subscribe to the link's events from now on."""
        queue = self._core.subscribe(capacity or self.subscriber_capacity)
        subscription = Subscription(self, queue)
        if not queue.closed:
            self._subscriptions[queue] = subscription
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        self._core.unsubscribe(subscription._queue)
        self._subscriptions.pop(subscription._queue, None)
        subscription._wake()

    # ----------------------------------------------------------------- running

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Check the directory, replace a stale socket, bind, and serve until
        cancelled; ``task_status.started(path)`` once the socket listens."""
        if self._closed or self._serving:
            raise RuntimeError("a ModLink runs once")
        sock = await self._bind()
        bound = os.stat(self.path)
        self._serving = True
        try:
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
            async with trio.open_nursery() as connections:
                log.info("mod link for session %s serving on %s", self.session_id, self.path)
                task_status.started(self.path)
                await self._accept(listener, connections)
        finally:
            self._serving = False
            self._close()
            sock.close()
            self._remove_socket(bound)

    async def _accept(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
        """The listener: this task accepts (the shared loop's
        :func:`~router._http11.accept_loop`: out of descriptors it waits and
        tries again), and each connection is a task of ``connections`` (no
        listener task or nursery of its own)."""
        await accept_loop(listener, connections, self._serve, log, link_limits())

    async def _serve(self, stream: trio.SocketStream) -> None:
        await serve_connection(stream, self._route, http_log, self.body_budget)

    async def _bind(self) -> socket.socket:
        directory = os.path.dirname(self.path)
        self._check_directory(directory)
        try:
            existing = os.lstat(self.path)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if not stat.S_ISSOCK(existing.st_mode):
                raise ModLinkRefused(
                    "not-a-socket",
                    f"{self.path} exists and is not a socket; remove it if no mod link should be there",
                    path=self.path,
                )
            if await probe_health(self.path, timeout=self.probe_timeout):
                raise ModLinkRefused(
                    "link-in-use",
                    f"a live mod link server already answers on {self.path}; "
                    "stop it first (one server serves one session)",
                    path=self.path,
                )
            log.info("replacing stale socket %s", self.path)
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        return bind_private_socket(self.path, refusal=ModLinkRefused)

    def _check_directory(self, directory: str) -> None:
        """Create the private directory (0700) when missing; refuse unless it
        is a real directory, owned by this user, mode 0700."""
        make_private_directory(directory, refusal=ModLinkRefused)

    def _remove_socket(self, bound: os.stat_result) -> None:
        remove_if_bound(self.path, bound)

    def _close(self) -> None:
        self._closed = True
        for request_id in self._core.close():
            waiter = self._waiters.get(request_id)
            if waiter is not None:
                waiter.event.set()
        for subscription in list(self._subscriptions.values()):
            subscription._wake()
        self._subscriptions.clear()
        self._wake_polls()

    def _wake_polls(self) -> None:
        """Wake every held poll: work was queued, or the link closes."""
        for wake in self._held:
            wake.cancel()

    # ----------------------------------------------------------------- the routes

    async def _route(self, exchange: Exchange) -> HttpAnswer:
        """The answer to one request: its route's, or 404, 405, the
        ``OPTIONS`` of a route (200 with its ``Allow``, as Quart answered
        it), or 500 for a failure of ours (logged; the link goes on)."""
        entry = _ROUTES.get(exchange.path)
        if entry is None:
            return refusal(404, "not-found", f"{exchange.path} is not a route of the mod link")
        method, allow, serve = entry
        if exchange.method == "OPTIONS":
            return HttpAnswer(200, b"", content_type=b"text/html; charset=utf-8", headers=((b"allow", allow),))
        if exchange.method != method and not (method == "GET" and exchange.method == "HEAD"):
            return refusal(405, "method-not-allowed", f"{exchange.method} is not allowed on {exchange.path}")
        try:
            return await serve(self, exchange)
        except (PeerGone, h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            raise  # the connection's, not the route's
        except Exception:
            log.exception("mod link route %s failed", exchange.path)
            return refusal(500, "internal", "the mod link failed on this post; it was logged, and the link goes on")

    def _settle(self, outcomes: list[CallOutcome]) -> None:
        for outcome in outcomes:
            waiter = self._waiters.get(outcome.request_id)
            if waiter is not None:
                waiter.outcome = outcome
                waiter.event.set()

    def _publish(self, events: list[ModEvent]) -> None:
        self._core.accept_events(events)
        for subscription in self._subscriptions.values():
            subscription._wake()

    async def _admit_and_read(self, exchange: Exchange, route: str) -> tuple[str | None, Any, HttpAnswer | None]:
        """The instance the post names, and its body as JSON: ``(instance,
        value, None)`` or ``(instance, None, refusal)``. Claims nothing; the
        route calls :meth:`_claim` once the body has proved good."""
        # An empty header names no instance, as a missing one.
        instance = (exchange.header(_INSTANCE) or "").strip() or None
        if not self._core.admit(instance):
            return instance, None, self._taken()
        raw = await exchange.body()
        if isinstance(raw, HttpAnswer):
            return instance, None, raw
        if route == MOD_ROUTE_REQUESTS and not raw.strip():
            return instance, {}, None
        try:
            return instance, loads(raw.decode("utf-8")), None
        except (UnicodeDecodeError, JsonError) as exc:
            return instance, None, refusal(400, "not-json", f"the body of POST {route} is not JSON text: {exc}")

    def _claim(self, instance: str | None) -> HttpAnswer | None:
        """Claim the link for a good post, or the 409 when another instance
        took it while this post was read."""
        return None if self._core.claim(instance) else self._taken()

    def _taken(self) -> HttpAnswer:
        return refusal(
            MOD_STATUS_TAKEN,
            "taken",
            f"another mod instance ({self._core.state.instance}) holds this link; one server serves one mod",
        )

    async def _read_post(self, exchange: Exchange, route: str, read: Any, shape: str) -> tuple[Any, HttpAnswer | None]:
        """A post's body, admitted, read by ``read`` and claimed:
        ``(read's value, None)``, or ``(None, refusal)`` and nothing
        applied."""
        instance, body, refused = await self._admit_and_read(exchange, route)
        if refused is not None:
            return None, refused
        try:
            value = read(body)
        except ModWireError as exc:
            return None, refusal(400, "bad-body", f"POST {route} takes {shape}: {exc}")
        return value, self._claim(instance)

    async def _serve_health(self, exchange: Exchange) -> HttpAnswer:
        return _HEALTH

    async def _serve_events(self, exchange: Exchange) -> HttpAnswer:
        value, refused = await self._read_post(exchange, MOD_ROUTE_EVENTS, read_events, "{events: [...]}")
        if refused is not None:
            return refused
        accepted, skipped = value
        for why in skipped:
            log.warning("skipped a malformed mod event: %s", why)
        self._publish(accepted)
        return _OK

    async def _serve_results(self, exchange: Exchange) -> HttpAnswer:
        value, refused = await self._read_post(exchange, MOD_ROUTE_RESULTS, read_results, "{results: [...]}")
        if refused is not None:
            return refused
        good, broken, skipped = value
        for why in skipped:
            log.warning("skipped a mod result with no id: %s", why)
        for request_id, why in broken.items():
            log.warning("the mod's result for %s is malformed: %s", request_id, why)
        self._settle(self._core.accept_results(good, broken))
        return _OK

    async def _serve_requests(self, exchange: Exchange) -> HttpAnswer:
        """The poll: every queued request at once, or held up to
        ``self.hold`` until one is queued. A poll whose answer is not
        written (its client went away, the write failed, or the link
        stopped while writing) puts its requests back
        (:meth:`LinkCore.send_failed`), so the next poll gets them and no
        caller waits out its deadline for work a dead poll took."""
        instance, body, refused = await self._admit_and_read(exchange, MOD_ROUTE_REQUESTS)
        if refused is not None:
            return refused
        if type(body) is not dict:
            # ``mod-protocol.ts`` gives the poll no body; we take none or an object.
            return refusal(400, "bad-body", f"POST {MOD_ROUTE_REQUESTS} takes no body or a JSON object")
        if (refused := self._claim(instance)) is not None:
            return refused
        taken = self._core.take_requests()
        if not taken and not self._closed:
            # A client that goes away mid-hold ends it (PeerGone, out of
            # hold): it took no work, and counts as neither.
            with trio.move_on_after(self.hold) as hold:
                while not taken and not self._closed:
                    await exchange.hold(self._held)
                    taken = self._core.take_requests()
            if hold.cancelled_caught:
                self.polls_expired += 1
            else:
                self.polls_with_work += 1
        elif taken:
            self.polls_with_work += 1
        answer = _json({"requests": [converter.unstructure(item) for item in taken]})
        return attrs.evolve(answer, unwritten=partial(self._unwritten, taken)) if taken else answer

    def _unwritten(self, taken: list[Any]) -> None:
        self.polls_unwritten += 1
        back = self._core.send_failed(taken)
        if back:
            self._wake_polls()
        log.info("a poll's answer was not written; %d of its %d requests queued again", len(back), len(taken))


#: Each route: its method, its ``Allow`` (as Quart answered ``OPTIONS``),
#: and the method of :class:`ModLink` that serves it.
_ROUTES: Final[dict[str, tuple[str, bytes, Callable[[ModLink, Exchange], Awaitable[HttpAnswer]]]]] = {
    MOD_ROUTE_HEALTH: ("GET", b"OPTIONS, GET, HEAD", ModLink._serve_health),
    MOD_ROUTE_EVENTS: ("POST", b"OPTIONS, POST", ModLink._serve_events),
    MOD_ROUTE_RESULTS: ("POST", b"OPTIONS, POST", ModLink._serve_results),
    MOD_ROUTE_REQUESTS: ("POST", b"OPTIONS, POST", ModLink._serve_requests),
}
