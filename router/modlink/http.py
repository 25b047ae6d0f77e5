"""The mod link's HTTP/1.1 server: h11, one task per connection.

Theory of operation
-------------------

:func:`serve_connection` runs one connection in one task: h11 reads a
request head, :class:`Exchange` hands the route its method, path and
headers, reads its body on request (:meth:`Exchange.body`), and lets a poll
wait for work while watching the socket (:meth:`Exchange.hold`); the route
returns an :class:`Answer`, whose bytes are written by hand (see
:func:`serve_connection`), the rest of an unread body is
drained, and the connection waits for its next request (keep-alive) or
closes. There is no task per request, no nursery per connection and no
timer task: every deadline is a cancel scope around the read it bounds.

This replaced Hypercorn and Quart-Trio (``docs/bench.md``, "Mod link",
third pass): their two HTTP exchanges per call were most of a call's CPU,
and their tasks and contexts most of a held poll's memory. What it keeps
of them on the wire, so the mod and every test see the same server:

- the path as Werkzeug read it from Hypercorn's scope: the target's query
  cut off, an absolute-form target's scheme and authority dropped,
  percent-decoded, leading slashes collapsed to one (``GET healthz`` and
  ``GET //healthz`` are ``/healthz``; ``*`` is ``/*``); the method upper-
  cased; ``HEAD`` answered as ``GET`` without the body, ``OPTIONS`` of a
  route answered 200 with its ``Allow``;
- what Hypercorn refused before any app ran (a request h11 refuses, a
  target that is not ASCII, two ``Host`` headers, ``Upgrade: websocket``)
  is a 400 with no body and ``connection: close``, then the close (any
  other upgrade, ``h2c`` included, is answered in HTTP/1.1, declining it);
- a ``Host`` that Werkzeug could not encode as IDNA is 400 ``bad-host``
  (``router/_hypercorn.py``'s check, the same rule);
- ``Expect: 100-continue`` gets its ``100`` before the body is read.

The body budget
---------------

A body is held whole until its route is done with it, and one may be 32 MiB:
ten at once were 447 MB. Every server of the process shares one
:class:`BodyBudget` (:data:`BODY_BUDGET_BYTES` in all; a link may be given
its own): a body takes its declared ``Content-Length`` from the budget before
a byte of it is read (a chunked one, each chunk as it comes), and gives it
back once its answer is written. A declared body that does not fit waits for
room up to :data:`BODY_BUDGET_WAIT` seconds, then is refused 503
``link-busy`` (its bytes read and dropped, as any refused body's); a chunk
of a chunked body that does not fit is refused at once. The mod sends it
again.
One body of the largest size always fits.

Left out on purpose: HTTP/2 (Hypercorn spoke it, prior knowledge and
``h2c``; the mod speaks HTTP/1.1 through Node's ``http``), the ``date`` and
``server`` headers, and Hypercorn's close after 1,000 requests on one
connection.

Error handling: nothing a peer sends raises out of :func:`serve_connection`:
h11's protocol errors are answered 400 and close the connection, a peer
that goes away ends it quietly, and a failure of ours (a bug) is logged
with its traceback and ends that connection only.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Final, Sequence
from urllib.parse import unquote

import attrs
import h11
import trio

from wire.json import dumps

__all__ = [
    "BODY_BUDGET_BYTES",
    "BODY_BUDGET_WAIT",
    "BODY_TIMEOUT",
    "HEAD_TIMEOUT",
    "KEEP_ALIVE_TIMEOUT",
    "MAX_BODY_BYTES",
    "Answer",
    "BodyBudget",
    "Exchange",
    "PeerGone",
    "serve_connection",
]

#: The largest body a post may have. claude-envoy 1.19.0 ``hooks/mod-protocol.ts`` sets none; a row with a picture
#: in it is the biggest thing the mod posts, and Claude Code caps a picture
#: well below this (our choice).
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
#: Largest request head: Hypercorn's ``h11_max_incomplete_size`` default
#: (16 KiB), which the link ran with.
MAX_HEAD_BYTES: Final = 16 * 1024
#: Bytes asked of the socket per read (ours: a poll or a batch of events
#: is one read).
RECEIVE_BUFFER: Final = 64 * 1024
#: Time an idle connection waits for the first byte of its next request:
#: Hypercorn's ``keep_alive_timeout`` default (5 s), which the link ran with.
KEEP_ALIVE_TIMEOUT: Final = 5.0
#: Time for a request head to arrive in full once it began. Node's
#: ``http.Server`` ``headersTimeout`` default (60 s); Hypercorn set none.
HEAD_TIMEOUT: Final = 60.0
#: Time for a body to arrive in full once the route reads it: the link's
#: Quart ``BODY_TIMEOUT`` (60 s).
BODY_TIMEOUT: Final = 60.0

#: The bytes of bodies every server of the process holds at once (ours: two
#: bodies of the largest size, so one always fits while another is read).
BODY_BUDGET_BYTES: Final = 2 * MAX_BODY_BYTES
#: Seconds a body waits for room in the budget before it is refused 503
#: ``link-busy`` (ours: a few of the link's small posts finish in that time;
#: a mod that is refused sends again).
BODY_BUDGET_WAIT: Final = 5.0

_JSON: Final = b"application/json"
#: Werkzeug's description of a 408, which the link answered (as its
#: ``bad-request`` refusal) for a body slower than ``BODY_TIMEOUT``.
_SLOW_BODY: Final = (
    "The server closed the network connection because the browser didn't finish the request within the specified time."
)


class PeerGone(Exception):
    """The peer closed (or broke) the connection: nothing is answered."""


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

    def statistics(self) -> dict[str, int]:
        return {"total": self.total, "used": self.used, "peak": self.peak, "refused": self.refused,
                "waiting": self.waiting}

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
class Answer:
    """A response: ``status``, ``body`` (``content_type``), extra headers.
    ``unwritten`` is called when the answer could not be written (the peer
    went away first): the poll's requests go back then."""

    status: int
    body: bytes
    content_type: bytes = _JSON
    headers: tuple[tuple[bytes, bytes], ...] = ()
    unwritten: Callable[[], None] | None = None


def refusal(status: int, code: str, message: str) -> Answer:
    """The link's refusal shape, ``{"error": code, "message": sentence}``."""
    from wire.json import dumps  # wire is pure; imported here to keep this module's imports HTTP only

    return Answer(status, dumps({"error": code, "message": message}).encode())


def request_path(target: bytes) -> str | None:
    """The path a route is matched on, as Werkzeug read it from Hypercorn's
    scope (see the module docstring); None for a target that is not ASCII."""
    if not target.isascii():
        return None
    text = target.decode("ascii").split("?", 1)[0]
    if not text.startswith("/") and "://" in text:
        # Absolute form: drop the scheme and the authority.
        rest = text.split("://", 1)[1]
        slash = rest.find("/")
        text = rest[slash:] if slash >= 0 else ""
    return "/" + unquote(text).lstrip("/")


def _host_problem(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """``"twice"`` for two ``Host`` headers (Hypercorn's 400), ``"bad"``
    for one Werkzeug cannot encode (lower case, the port apart, IDNA), or
    None."""
    hosts = [value for name, value in headers if name == b"host"]
    if len(hosts) > 1:
        return "twice"
    try:
        (hosts[0] if hosts else b"").decode("latin-1").lower().partition(":")[0].encode("idna")
    except UnicodeError:
        return "bad"
    return None


_BAD_HOST: Final = refusal(400, "bad-host", "the Host header is not a host name")


class Exchange:
    """One request on a connection, for the route that answers it."""

    __slots__ = ("_budget", "_conn", "_stream", "headers", "method", "path", "reserved")

    def __init__(
        self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, path: str,
        headers: list[tuple[bytes, bytes]], budget: BodyBudget | None = None,
    ) -> None:
        self._stream = stream
        self._conn = conn
        self._budget = SHARED_BODY_BUDGET if budget is None else budget
        #: Bytes of the budget this request holds (given back once answered).
        self.reserved = 0
        self.method = request.method.decode("ascii").upper()
        self.path = path
        self.headers = headers

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

    async def body(self) -> bytes | Answer:
        """The whole body, or the refusal to answer: 413 ``too-large`` past
        ``MAX_BODY_BYTES`` (declared or read), 503 ``link-busy`` when the
        body budget has no room for it, 408 when it is slower than
        ``BODY_TIMEOUT``. Raises :class:`PeerGone` when the peer ends the
        connection before the body does."""
        conn = self._conn
        declared = self.header(b"content-length")
        if declared is not None and int(declared) > MAX_BODY_BYTES:  # h11 checked it is digits
            return _TOO_LARGE
        if declared is not None and int(declared):
            if not await self._budget.take(int(declared)):
                return _BUSY
            self.reserved = int(declared)
        if conn.they_are_waiting_for_100_continue:
            await self._stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks: list[bytes] = []
        size = 0
        deadline = None
        while True:
            event = conn.next_event()
            if type(event) is h11.Data:
                size += len(event.data)
                if size > MAX_BODY_BYTES:
                    return _TOO_LARGE
                if size > self.reserved:  # chunked: each chunk as it comes
                    if not self._budget.try_take(size - self.reserved):
                        self._budget.refused += 1
                        return _BUSY
                    self.reserved = size
                chunks.append(event.data)
            elif type(event) is h11.EndOfMessage:
                return b"".join(chunks)
            elif event is h11.NEED_DATA:
                # A deadline only once the body must be waited for: one
                # that came with its head is taken without a scope.
                deadline = deadline or trio.current_time() + BODY_TIMEOUT
                with trio.move_on_at(deadline):
                    await _receive(self._stream, conn)
                    continue
                return refusal(408, "bad-request", _SLOW_BODY)
            elif type(event) is h11.ConnectionClosed:
                raise PeerGone

    async def hold(self, held: set[trio.CancelScope]) -> None:
        """Wait until woken: until a scope this puts in ``held`` is
        cancelled (the link's wake-up), or the caller's own scope ends it.
        Meanwhile the socket is watched: a peer that closes raises
        :class:`PeerGone` at once, so a poll nobody will read takes no
        work. Bytes that arrive instead (a pipelined request) are kept for
        h11, and from then on this hold no longer watches."""
        wake = trio.CancelScope()
        held.add(wake)
        try:
            with wake:
                if self._conn.their_state is not h11.DONE or self._conn.trailing_data[0]:
                    await trio.sleep_forever()  # bytes are waiting already: nothing to watch for
                await trio.lowlevel.wait_readable(self._stream.socket)
                data = await self._stream.receive_some(RECEIVE_BUFFER)
                if not data:
                    raise PeerGone
                self._conn.receive_data(data)
                await trio.sleep_forever()
        finally:
            held.discard(wake)


_TOO_LARGE: Final = refusal(413, "too-large", f"the body is larger than {MAX_BODY_BYTES} bytes")
_BUSY: Final = refusal(503, "link-busy", "the link is reading as many bodies as it holds at once; "
                                         "send this again in a moment")


async def _receive(stream: trio.SocketStream, conn: h11.Connection) -> None:
    """One read into h11; :class:`PeerGone` at EOF inside a body."""
    data = await stream.receive_some(RECEIVE_BUFFER)
    conn.receive_data(data)
    if not data and conn.their_state is h11.SEND_BODY:
        raise PeerGone


async def _next_event(stream: trio.SocketStream, conn: h11.Connection) -> object:
    """h11's next event, reading as it needs; :class:`PeerGone` at EOF
    before the message ended."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            if type(event) is h11.ConnectionClosed:
                raise PeerGone
            return event
        await _receive(stream, conn)


Route = Callable[[Exchange], Awaitable[Answer]]


def _connection() -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)


async def serve_connection(stream: trio.SocketStream, route: Route, log: logging.Logger,
                           budget: BodyBudget | None = None) -> None:
    """Serve HTTP/1.1 on ``stream`` with ``route`` until the peer closes,
    a request asks to close, or the idle wait ends (see the module
    docstring). Closes the stream on every exit.

    h11 reads each request; the answer is written here, by hand (the
    status line, our few headers, the body: what h11 would write, at a
    third of its cost, ``docs/bench.md``), so h11's connection, whose side
    of the exchange never saw the answer, is not carried to the next
    request: each request gets a fresh one (a few µs), fed what the last
    one read past its request. ``budget`` bounds the bodies held at once
    (default: the process's :data:`SHARED_BODY_BUDGET`)."""
    conn: h11.Connection | None = _connection()
    try:
        while conn is not None:
            conn = await _serve_one(stream, conn, route, budget)
    except (PeerGone, trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:  # a bug of ours: this connection only
        log.exception("a mod link connection failed; it was closed, and the link goes on")
    finally:
        await trio.aclose_forcefully(stream)


async def _serve_one(stream: trio.SocketStream, conn: h11.Connection, route: Route,
                     budget: BodyBudget | None) -> h11.Connection | None:
    """Read, answer and finish one request: the connection for the next
    one, or None to close. The request's share of the body budget is given
    back on every exit, once it is answered."""
    held: list[Exchange] = []
    try:
        return await _exchange(stream, conn, route, budget, held)
    finally:
        for exchange in held:
            exchange.release()


async def _exchange(stream: trio.SocketStream, conn: h11.Connection, route: Route, budget: BodyBudget | None,
                    held: list[Exchange]) -> h11.Connection | None:
    """:func:`_serve_one`'s work; the request's exchange goes in ``held``."""
    try:
        request = await _read_head(stream, conn)
        if request is None:
            return None
        # h11's Headers is a Sequence: iterating it is Python-level
        # indexing, so it is read into a list once, for every look below.
        headers = list(request.headers)
        path = request_path(request.target)
        host = _host_problem(headers)
        if path is None or host == "twice" or _asks_websocket(headers):
            await stream.send_all(_BARE_400)
            return None
        if host:
            answer = _BAD_HOST
        else:
            held.append(Exchange(stream, conn, request, path, headers, budget))
            answer = await route(held[0])
    except h11.RemoteProtocolError:
        # Hypercorn's answer to what h11 refuses: 400, no body, close.
        await stream.send_all(_BARE_400)
        return None
    keep_alive = _keep_alive(request, headers)
    try:
        await stream.send_all(_response(answer, request.method == b"HEAD", not keep_alive))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        if answer.unwritten is not None:
            answer.unwritten()
        raise PeerGone from None
    except BaseException:
        # Cancelled (the link stops) or a bug while writing: not written.
        if answer.unwritten is not None:
            answer.unwritten()
        raise
    if not keep_alive or not await _drain(stream, conn):
        return None
    following, closed = conn.trailing_data
    fresh = _connection()
    if following:
        fresh.receive_data(following)
    if closed:
        fresh.receive_data(b"")  # h11's EOF
    return fresh


async def _read_head(stream: trio.SocketStream, conn: h11.Connection) -> h11.Request | None:
    """The next request's head; None when the peer closed between requests
    or the idle wait (``KEEP_ALIVE_TIMEOUT``) ended. Once its first bytes
    are here the rest has ``HEAD_TIMEOUT``."""
    deadline = trio.current_time() + KEEP_ALIVE_TIMEOUT
    started = bool(conn.trailing_data[0])
    while True:
        event = conn.next_event()
        if type(event) is h11.Request:
            return event
        if type(event) is h11.ConnectionClosed:
            return None
        data = None
        with trio.move_on_at(deadline):
            data = await stream.receive_some(RECEIVE_BUFFER)
        if data is None:
            return None
        if not started:
            started = True
            deadline = trio.current_time() + HEAD_TIMEOUT
        conn.receive_data(data)


def _keep_alive(request: h11.Request, headers: list[tuple[bytes, bytes]]) -> bool:
    """h11's rule: HTTP/1.1, and no ``close`` among the ``Connection``
    tokens."""
    if request.http_version < b"1.1":
        return False
    for name, value in headers:
        if name == b"connection" and b"close" in (token.strip().lower() for token in value.split(b",")):
            return False
    return True


def _asks_websocket(headers: list[tuple[bytes, bytes]]) -> bool:
    """``Upgrade: websocket``: Hypercorn made a WebSocket of it, which the
    link's app refused, and answered 400. (Any other upgrade, ``h2c``
    included, is answered as a plain request, which declines it.)"""
    return any(name == b"upgrade" and value.strip().lower() == b"websocket" for name, value in headers)


#: Hypercorn's answer to a request it refused before any app ran.
_BARE_400: Final = b"HTTP/1.1 400 \r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def _response(answer: Answer, head_only: bool, close: bool) -> bytes:
    """The answer's bytes, as h11 writes a response with these headers
    (status line without a reason phrase)."""
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


async def _drain(stream: trio.SocketStream, conn: h11.Connection) -> bool:
    """Read and drop what is left of a body the route did not read (a 404,
    a 409, a 413), so the connection can take the next request: at most
    ``MAX_BODY_BYTES`` more, within ``BODY_TIMEOUT``. Whether it ended."""
    if conn.their_state is not h11.SEND_BODY:
        return conn.their_state is h11.DONE  # the common case: no scope
    size = 0
    try:
        with trio.move_on_after(BODY_TIMEOUT):
            while conn.their_state is h11.SEND_BODY and size <= MAX_BODY_BYTES:
                event = await _next_event(stream, conn)
                if type(event) is h11.Data:
                    size += len(event.data)
    except h11.RemoteProtocolError:
        return False  # answered already: nothing more to say
    return conn.their_state is h11.DONE
