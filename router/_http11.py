"""One HTTP/1.1 server loop on h11, shared by the mod link and the daemon's front.

Theory of operation
-------------------

:func:`serve_connection` runs one connection in one task: h11 reads a
request head, an :class:`Exchange` hands the handler its method, target and
headers, reads its body on request (:meth:`Exchange.body`), and lets a held
request wait for work while watching the socket (:meth:`Exchange.hold`);
the handler returns an :class:`HttpAnswer`, whose bytes are written by hand
(:func:`response_bytes`), the rest of an unread body is drained, and the
connection waits for its next request (keep-alive) or closes. A handler
that takes the connection over (the daemon's WebSocket upgrade, from
:attr:`Exchange.raw`, the bytes read for this request) returns ``None``
once it is done with it, and the connection closes. There is no task per
request, no nursery per connection and no timer task: every deadline is a
cancel scope around the read it bounds.

What each server may set (:class:`HttpLimits`): the wait for a first request's
first byte, the keep-alive wait for a later one's, the time for a head once
its first byte came (a head over ``max_head`` bytes is refused by h11), the
time and size for a body (past ``max_body``: 413 from :meth:`Exchange.body`,
or the connection closed when the handler left it unread), and the
connections served at once (:func:`accept_loop`: past it, accepting waits).
A request h11 refuses is answered by the server's ``bad_request`` (the mod
link: a bare 400, as Hypercorn; the daemon: h11's reason, as Node) and the
connection closed. Keep-alive ends on ``Connection: close``, on HTTP/1.0,
on an :class:`HttpAnswer` with ``close``, and on the idle wait.

The body budget
---------------

A body is held whole until its handler is done with it. Every server of the
process shares one :class:`BodyBudget` (:data:`BODY_BUDGET_BYTES` in all;
one may be given its own): a body takes its declared ``Content-Length``
from the budget before a byte of it is read (a chunked one, each chunk as
it comes), and gives it back once its answer is written. A declared body
that does not fit waits for room up to :data:`BODY_BUDGET_WAIT` seconds,
then is refused 503 ``link-busy`` (its bytes read and dropped, as any
refused body's); a chunk of a chunked body that does not fit is refused at
once. One body of the largest size always fits.

The answer is written by hand (the status line, the answer's few headers,
the body: what h11 writes for them, byte for byte, at a third of its cost,
``docs/bench.md``, "Mod link"), so h11's connection, whose side of the
exchange never saw the answer, is not carried to the next request: each
request gets a fresh one (a few µs), fed what the last one read past it.

Error handling: nothing a peer sends raises out of :func:`serve_connection`:
h11's protocol errors are answered and close the connection, a peer that
goes away ends it quietly, and a failure of ours (a bug) is logged with its
traceback to the server's logger and ends that connection only.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Awaitable, Callable, Final

import attrs
import h11
import trio

from router.errors import Refusal
from wire.json import dumps

__all__ = ["BodyBudgetStatistics", 
    "BODY_BUDGET_BYTES",
    "BODY_BUDGET_WAIT",
    "HttpAnswer",
    "BodyBudget",
    "Exchange",
    "HttpLimits",
    "PeerGone",
    "accept_loop",
    "refusal",
    "response_bytes",
    "serve_connection",
]

#: Bytes asked of the socket per read (ours: a poll or a batch of events
#: is one read).
RECEIVE_BUFFER: Final = 64 * 1024
#: The bytes of bodies every server of the process holds at once (ours: two
#: bodies of the mod link's largest, 32 MiB, so one always fits while
#: another is read).
BODY_BUDGET_BYTES: Final = 64 * 1024 * 1024
#: Seconds a body waits for room in the budget before it is refused 503
#: ``link-busy`` (ours: a few of the link's small posts finish in that time;
#: a client that is refused sends again).
BODY_BUDGET_WAIT: Final = 5.0
#: Accept errors that mean "out of descriptors or memory for now": the
#: listener waits and tries again instead of stopping (trio's
#: ``serve_listeners`` rule, ``ACCEPT_CAPACITY_ERRNOS``), for
#: :data:`ACCEPT_SLEEP` seconds (trio's 100 ms).
ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_SLEEP: Final = 0.1

_JSON: Final = b"application/json"
#: Werkzeug's description of a 408, which the mod link answered (as its
#: ``bad-request`` refusal) for a body slower than its deadline.
_SLOW_BODY: Final = (
    "The server closed the network connection because the browser didn't finish the request within the specified time."
)


@attrs.frozen
class HttpLimits:
    """One server's deadlines (seconds) and sizes (bytes); see the module
    docstring."""

    #: Wait for a connection's first request to begin.
    first_wait: float
    #: Wait for a later request to begin (keep-alive).
    idle: float
    #: Time for a head to arrive once its first byte did.
    head: float
    #: Time for a body to arrive once it is read (or drained).
    body: float
    max_head: int
    max_body: int
    #: Connections served at once by :func:`accept_loop`.
    connections: int


class PeerGone(Exception):
    """The peer closed (or broke) the connection: nothing is answered."""


@attrs.frozen
class BodyBudgetStatistics:
    """A :class:`BodyBudget`'s bytes: the total, used now, the peak, the
    bodies refused, and the takers waiting."""

    total: int
    used: int
    peak: int
    refused: int
    waiting: int


class BodyBudget:
    """The bytes of request bodies held at once, bounded (see the module
    docstring). :meth:`take` waits for room, :meth:`try_take` does not;
    :meth:`give` hands bytes back and wakes the waiters."""

    def __init__(self, total: int = BODY_BUDGET_BYTES, *, wait: float = BODY_BUDGET_WAIT) -> None:
        if total < 1 or wait < 0:
            raise ValueError("a body budget is a positive number of bytes and a wait of 0 s or more")
        self.total = total
        self.wait = wait
        self.used = 0
        self.peak = 0
        self.refused = 0
        #: Bodies waiting for room now.
        self.waiting = 0
        self._changed = trio.Event()

    def __repr__(self) -> str:
        return f"<BodyBudget {self.used}/{self.total} bytes, {self.refused} refused>"

    def statistics(self) -> BodyBudgetStatistics:
        return BodyBudgetStatistics(total=self.total, used=self.used, peak=self.peak, refused=self.refused,
                                    waiting=self.waiting)
    def try_take(self, size: int) -> bool:
        if self.used + size > self.total:
            return False
        self.used += size
        self.peak = max(self.peak, self.used)
        return True

    async def take(self, size: int) -> bool:
        """Take ``size`` bytes, waiting up to :attr:`wait` seconds for room;
        False (counted as refused) when there was none."""
        self.waiting += 1
        try:
            with trio.move_on_after(self.wait):
                while not self.try_take(size):
                    if size > self.total:
                        break
                    await self._changed.wait()
                else:
                    return True
        finally:
            self.waiting -= 1
        self.refused += 1
        return False

    def give(self, size: int) -> None:
        if size:
            self.used -= size
            self._changed.set()
            self._changed = trio.Event()


#: The budget every server of this process shares unless given its own.
SHARED_BODY_BUDGET: Final = BodyBudget()


@attrs.frozen
class HttpAnswer:
    """A response: ``status``, ``body`` (``content_type``; none when empty),
    extra headers, and whether the connection closes after it.
    ``unwritten`` is called when the answer could not be written (the peer
    went away first): a held poll's requests go back then."""

    status: int
    body: bytes
    content_type: bytes = _JSON
    headers: tuple[tuple[bytes, bytes], ...] = ()
    unwritten: Callable[[], None] | None = None
    close: bool = False


def refusal(status: int, code: str, message: str) -> HttpAnswer:
    """The JSON refusal shape of the HTTP edges, ``{"error": code, "message": sentence}``."""
    return HttpAnswer(status, dumps(Refusal(code, message).to_json()).encode())


#: A bare refusal: 400, no body, ``connection: close`` (Hypercorn's answer
#: to a request it refused before any app ran; the mod link keeps it).
BARE_400: Final = HttpAnswer(400, b"", content_type=b"", close=True)


def bare_400(error: h11.RemoteProtocolError) -> HttpAnswer:
    return BARE_400


def response_bytes(answer: HttpAnswer, head_only: bool, close: bool) -> bytes:
    """The answer's bytes, as h11 writes a response with these headers
    (status line without a reason phrase; ``connection: close`` last)."""
    parts = [b"HTTP/1.1 %d \r\n" % answer.status]
    parts += [name + b": " + value + b"\r\n" for name, value in answer.headers]
    if answer.content_type:
        parts.append(b"content-type: " + answer.content_type + b"\r\n")
    parts.append(b"content-length: %d\r\n" % len(answer.body))
    if close:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    if not head_only:
        parts.append(answer.body)
    return b"".join(parts)


class Exchange:
    """One request on a connection, for the handler that answers it.
    ``path`` is for the handler to set (the loop does not read it)."""

    __slots__ = ("_budget", "_conn", "_limits", "headers", "method", "path", "raw", "request", "reserved", "stream",
                 "target")

    def __init__(
        self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, raw: bytes,
        limits: HttpLimits, budget: BodyBudget,
    ) -> None:
        self.stream = stream
        self._conn = conn
        self._limits = limits
        self._budget = budget
        self.request = request
        #: The bytes read for this request so far: its head and what came
        #: with it (for a handler that takes the connection over).
        self.raw = raw
        #: Bytes of the budget this request holds (given back once answered).
        self.reserved = 0
        self.method = request.method.decode("ascii").upper()
        self.target: bytes = request.target
        self.path: str | None = None
        # h11's Headers is a Sequence: iterating it is Python-level
        # indexing, so it is read into a list once, for every look.
        self.headers: list[tuple[bytes, bytes]] = list(request.headers)

    def release(self) -> None:
        """Give the request's share of the body budget back."""
        self._budget.give(self.reserved)
        self.reserved = 0

    def header(self, name: bytes) -> str | None:
        """The first value of header ``name`` (lower case), as text."""
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None

    def rest(self) -> bytes:
        """What h11 holds past the head of a request it paused at (an
        upgrade's: the peer's first bytes of the new protocol)."""
        return self._conn.trailing_data[0]

    def keep_alive(self) -> bool:
        """h11's rule: HTTP/1.1, and no ``close`` among the ``Connection``
        tokens."""
        if self.request.http_version < b"1.1":
            return False
        for name, value in self.headers:
            if name == b"connection" and b"close" in (token.strip().lower() for token in value.split(b",")):
                return False
        return True

    async def body(self) -> bytes | HttpAnswer:
        """The whole body, or the refusal to answer: 413 ``too-large`` past
        ``max_body`` (declared or read), 503 ``link-busy`` when the body
        budget has no room for it, 408 when it is slower than the body
        deadline. Raises :class:`PeerGone` when the peer ends the connection
        before the body does."""
        conn, most = self._conn, self._limits.max_body
        refused = await self._reserve_declared(most)
        if refused is not None:
            return refused
        if conn.they_are_waiting_for_100_continue:
            await self.stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks: list[bytes] = []
        size = 0
        deadline = None
        while True:
            event = conn.next_event()
            if type(event) is h11.Data:
                size += len(event.data)
                refused = self._count(size, most)
                if refused is not None:
                    return refused
                chunks.append(event.data)
            elif type(event) is h11.EndOfMessage:
                return b"".join(chunks)
            elif event is h11.NEED_DATA:
                # A deadline only once the body must be waited for: one
                # that came with its head is taken without a scope.
                deadline = deadline or trio.current_time() + self._limits.body
                with trio.move_on_at(deadline):
                    await _receive(self.stream, conn)
                    continue
                return refusal(408, "bad-request", _SLOW_BODY)
            elif type(event) is h11.ConnectionClosed:
                raise PeerGone

    async def _reserve_declared(self, most: int) -> HttpAnswer | None:
        """Refuse a declared ``content-length`` past ``most`` (413), or take
        it from the body budget at once (503 when it has no room)."""
        declared = self.header(b"content-length")
        if declared is not None and int(declared) > most:  # h11 checked it is digits
            return _too_large(most)
        if declared is not None and int(declared):
            if not await self._budget.take(int(declared)):
                return _BUSY
            self.reserved = int(declared)
        return None

    def _count(self, size: int, most: int) -> HttpAnswer | None:
        """The body read so far is ``size`` bytes: 413 past ``most``; past
        what is reserved (a chunked body), the rest taken from the budget
        as it comes, 503 when it has no room."""
        if size > most:
            return _too_large(most)
        if size > self.reserved:
            if not self._budget.try_take(size - self.reserved):
                self._budget.refused += 1
                return _BUSY
            self.reserved = size
        return None

    async def hold(self, held: set[trio.CancelScope]) -> None:
        """Wait until woken: until a scope this puts in ``held`` is
        cancelled (the server's wake-up), or the caller's own scope ends it.
        Meanwhile the socket is watched: a peer that closes raises
        :class:`PeerGone` at once, so a request nobody will read takes no
        work. Bytes that arrive instead (a pipelined request) are kept for
        h11, and from then on this hold no longer watches."""
        wake = trio.CancelScope()
        held.add(wake)
        try:
            with wake:
                if self._conn.their_state is not h11.DONE or self._conn.trailing_data[0]:
                    await trio.sleep_forever()  # bytes are waiting already: nothing to watch for
                await trio.lowlevel.wait_readable(self.stream.socket)
                data = await self.stream.receive_some(RECEIVE_BUFFER)
                if not data:
                    raise PeerGone
                self._conn.receive_data(data)
                await trio.sleep_forever()
        finally:
            held.discard(wake)


def _too_large(most: int) -> HttpAnswer:
    return refusal(413, "too-large", f"the body is larger than {most} bytes")


_BUSY: Final = refusal(503, "link-busy", "the link is reading as many bodies as it holds at once; "
                                         "send this again in a moment")


async def _receive(stream: trio.abc.Stream, conn: h11.Connection) -> None:
    """One read into h11; :class:`PeerGone` at EOF inside a body."""
    data = await stream.receive_some(RECEIVE_BUFFER)
    conn.receive_data(data)
    if not data and conn.their_state is h11.SEND_BODY:
        raise PeerGone


#: A handler: the answer, or None once it took the connection over and is
#: done with it.
Handler = Callable[[Exchange], Awaitable["Answer | None"]]


@attrs.define
class _Server:
    """What every request of one connection is served with."""

    handler: Handler
    limits: HttpLimits
    budget: BodyBudget
    bad_request: Callable[[h11.RemoteProtocolError], HttpAnswer]


async def serve_connection(
    stream: trio.SocketStream,
    handler: Handler,
    log: logging.Logger,
    *,
    limits: HttpLimits,
    budget: BodyBudget | None = None,
    bad_request: Callable[[h11.RemoteProtocolError], HttpAnswer] = bare_400,
) -> None:
    """Serve HTTP/1.1 on ``stream`` with ``handler`` until the peer closes,
    a request or its answer asks to close, the handler takes the connection,
    or the idle wait ends (see the module docstring). Closes the stream on
    every exit. ``budget`` bounds the bodies held at once (default: the
    process's :data:`SHARED_BODY_BUDGET`); ``bad_request`` is the answer to
    a request h11 refuses."""
    server = _Server(handler, limits, SHARED_BODY_BUDGET if budget is None else budget, bad_request)
    conn: h11.Connection | None = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head)
    wait = limits.first_wait
    try:
        while conn is not None:
            conn = await _serve_one(stream, conn, server, wait)
            wait = limits.idle
    except (PeerGone, trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:  # a bug of ours: this connection only
        log.exception("a connection failed; it was closed, and the server goes on")
    finally:
        await trio.aclose_forcefully(stream)


async def _serve_one(stream: trio.SocketStream, conn: h11.Connection, server: _Server,
                     wait: float) -> h11.Connection | None:
    """Read, answer and finish one request: the connection for the next
    one, or None to close. The request's share of the body budget is given
    back on every exit, once it is answered."""
    held: list[Exchange] = []
    try:
        return await _exchange(stream, conn, server, wait, held)
    finally:
        for exchange in held:
            exchange.release()


async def _exchange(stream: trio.SocketStream, conn: h11.Connection, server: _Server, wait: float,
                    held: list[Exchange]) -> h11.Connection | None:
    """:func:`_serve_one`'s work; the request's exchange goes in ``held``."""
    try:
        head = await _read_head(stream, conn, server.limits, wait)
        if head is None:
            return None
        exchange = Exchange(stream, conn, head[0], head[1], server.limits, server.budget)
        held.append(exchange)
        answer = await server.handler(exchange)
        if answer is None:
            return None  # taken over, and done with
    except h11.RemoteProtocolError as error:
        await stream.send_all(response_bytes(server.bad_request(error), False, True))
        return None
    keep_alive = not answer.close and exchange.keep_alive()
    try:
        await stream.send_all(response_bytes(answer, exchange.request.method == b"HEAD", not keep_alive))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        if answer.unwritten is not None:
            answer.unwritten()
        raise PeerGone from None
    except BaseException:
        # Cancelled (the server stops) or a bug while writing: not written.
        if answer.unwritten is not None:
            answer.unwritten()
        raise
    if not keep_alive or not await _drain(stream, conn, server.limits):
        return None
    following, closed = conn.trailing_data
    fresh = h11.Connection(h11.SERVER, max_incomplete_event_size=server.limits.max_head)
    if following:
        fresh.receive_data(following)
    if closed:
        fresh.receive_data(b"")  # h11's EOF
    return fresh


async def _read_head(stream: trio.SocketStream, conn: h11.Connection, limits: HttpLimits,
                     wait: float) -> tuple[h11.Request, bytes] | None:
    """The next request's head and the bytes read for it; None when the peer
    closed between requests or the wait for its first byte ended. Once its
    first bytes are here the rest has ``limits.head``."""
    deadline = trio.current_time() + wait
    raw = [conn.trailing_data[0]]
    started = bool(raw[0])
    while True:
        event = conn.next_event()
        if type(event) is h11.Request:
            return event, b"".join(raw)
        if type(event) is h11.ConnectionClosed:
            return None
        data = None
        with trio.move_on_at(deadline):
            data = await stream.receive_some(RECEIVE_BUFFER)
        if data is None:
            return None
        if not started:
            started = True
            deadline = trio.current_time() + limits.head
        raw.append(data)
        conn.receive_data(data)


async def _drain(stream: trio.SocketStream, conn: h11.Connection, limits: HttpLimits) -> bool:
    """Read and drop what is left of a body the handler did not read (a 404,
    a 409, a 413), so the connection can take the next request: at most
    ``max_body`` more, within the body deadline. Whether it ended."""
    if conn.their_state is not h11.SEND_BODY:
        return conn.their_state is h11.DONE  # the common case: no scope
    size = 0
    try:
        with trio.move_on_after(limits.body):
            while conn.their_state is h11.SEND_BODY and size <= limits.max_body:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    await _receive(stream, conn)
                elif type(event) is h11.Data:
                    size += len(event.data)
                elif type(event) is h11.ConnectionClosed:
                    raise PeerGone
    except h11.RemoteProtocolError:
        return False  # answered already: nothing more to say
    return conn.their_state is h11.DONE


async def accept_loop(
    listener: trio.SocketListener,
    connections: trio.Nursery,
    serve: Callable[[trio.SocketStream], Awaitable[None]],
    log: logging.Logger,
    limits: HttpLimits,
) -> None:
    """Accept on ``listener`` and run ``serve(stream)`` for each connection
    as a task of ``connections``, at most ``limits.connections`` at once
    (past it, accepting waits for one to end). Out of descriptors or
    memory, it waits :data:`ACCEPT_SLEEP` and tries again; any other accept
    error raises."""
    limiter = trio.CapacityLimiter(limits.connections)
    while True:
        token = object()
        await limiter.acquire_on_behalf_of(token)
        try:
            stream = await listener.accept()
        except OSError as exc:
            limiter.release_on_behalf_of(token)
            if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                raise
            log.error("cannot accept (%s); trying again", os.strerror(exc.errno))
            await trio.sleep(ACCEPT_SLEEP)
            continue
        except BaseException:
            limiter.release_on_behalf_of(token)
            raise
        connections.start_soon(_serve_limited, serve, stream, limiter, token)


async def _serve_limited(serve: Callable[[trio.SocketStream], Awaitable[None]], stream: trio.SocketStream,
                         limiter: trio.CapacityLimiter, token: object) -> None:
    try:
        await serve(stream)
    finally:
        limiter.release_on_behalf_of(token)
