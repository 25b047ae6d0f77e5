"""The private socket's front for an embedded router (``router mcp``): the
board survey's two routes answered on the one h11 loop
(:mod:`router._http11`), every other connection handed to the app, which
is built (loading Quart-Trio, Hypercorn and the API's routes) when the
first such connection comes.

Theory of operation
-------------------

Every local router's board survey (:func:`router.board.client.survey`: a
``router serve`` page, another Claude Code session's ``list_sessions``,
``router sessions``) asks each socket ``GET /router`` and ``GET
/sessions?scope=router`` (or ``scope=unshared``), and its asks survey
(:mod:`router.asks.remote`: ``list_asks``, ``router asks``, the page's
asks) ``GET /asks`` (or ``?all=1``). Served by the app, the
first survey would load 21 MiB into every embedded router (docs/bench.md,
"The command line and `router mcp`"). The front peeks at a connection's
first bytes (``MSG_PEEK``: nothing is consumed) and, when they are one of
:data:`SURVEY_TARGETS` asked with ``GET`` and ``Host: localhost``, answers
that one request itself and closes the connection (``Connection: close``:
a survey's next request comes on a new connection, and is peeked again).
Any other connection, whole and unread, goes to the app's Hypercorn through
a listener of handed-over connections (:class:`Handed`).

The two answers are the app's: ``GET /router`` is the router's
:class:`router.board.local.RouterInfo`; ``GET /sessions?scope=...`` goes
through the plug-in layer's channel dispatch (``x-router-channel``,
``webui`` when absent, so a switched-off channel refuses ``channel-off``)
to :meth:`router.board.service.LocalBoard.own`, a refusal answered at its
status from :data:`router.api.responses.STATUS`; ``GET /asks`` is
:func:`router.asks.list_asks` of the router's sessions.

Error handling: a peer that goes away, or sends what h11 refuses, ends its
connection only (:func:`router._http11.serve_connection`).
"""

from __future__ import annotations

import logging
import socket
from typing import Any, Awaitable, Callable, Final

import attrs
import trio

from router._http11 import HttpAnswer, Exchange, HttpLimits, serve_connection
from router.board.paths import INFO_ROUTE, LOCAL_HOST
from router.errors import Refusal
from wire.json import dumps

__all__ = ["FRONT_LIMITS", "SURVEY_TARGETS", "Front", "FrontStatistics", "Handed"]

log = logging.getLogger("router.board.http")

#: The requests the front answers itself: a board survey's and an asks
#: survey's (``GET``), by target.
SURVEY_TARGETS: Final = {
    INFO_ROUTE.encode(): None,
    b"/sessions?scope=router": "router",
    b"/sessions?scope=unshared": "unshared",
    b"/asks": "asks",
    b"/asks?all=1": "all-asks",
}
#: A survey's request line fits in this many bytes.
_PEEK_BYTES: Final = 512
#: The front's deadlines (seconds) and sizes: a survey is two small GETs.
FRONT_LIMITS: Final = HttpLimits(first_wait=30.0, idle=5.0, head=10.0, body=10.0, max_head=16 * 1024, max_body=0,
                             connections=256)
_CHANNEL_HEADER: Final = b"x-router-channel"


@attrs.frozen(kw_only=True)
class FrontStatistics:
    """What :meth:`Front.statistics` answers."""

    #: Requests answered by the front; connections handed to the app.
    answered: int
    handed: int
    #: Whether the app is built.
    app: bool


class Handed(trio.abc.Listener[trio.SocketStream]):
    """A listener whose connections were accepted elsewhere (by the front)
    and handed over, for the app's server to serve."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[trio.SocketStream](0)

    def __repr__(self) -> str:
        return f"<Handed {self._receive.statistics()!r}>"

    async def hand(self, stream: trio.SocketStream) -> None:
        await self._send.send(stream)

    async def accept(self) -> trio.SocketStream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the front stopped") from None

    async def aclose(self) -> None:
        await self._receive.aclose()


class Front:
    """One private socket's front (see the module docstring). ``serve_app``
    is started once, with the :class:`Handed` listener, when the first
    connection the front does not answer comes; it calls ``started()`` once
    it serves."""

    def __init__(self, *, info: dict[str, Any], router: Any, layer: Any, board: Any,
                 serve_app: Callable[..., Awaitable[None]]) -> None:
        self._info = dumps(info).encode()
        self._router = router
        self._layer = layer
        self._board = board
        self._serve_app = serve_app
        self.handed = Handed()
        self._app_started: trio.Event | None = None
        #: Requests answered here, and connections handed to the app.
        self.answered = 0
        self.handed_over = 0

    def __repr__(self) -> str:
        return f"<Front answered={self.answered} handed={self.handed_over} app={self._app_started is not None}>"

    def statistics(self) -> FrontStatistics:
        return FrontStatistics(answered=self.answered, handed=self.handed_over, app=self._app_started is not None)

    async def serve(self, stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        """One connection: answered here, or handed to the app (started in
        ``nursery`` the first time)."""
        if await self._is_survey(stream):
            await serve_connection(stream, self._answer, log, limits=FRONT_LIMITS)
            return
        if self._app_started is None:
            self._app_started = trio.Event()
            await nursery.start(self._serve_app, self.handed)
            self._app_started.set()
        await self._app_started.wait()
        self.handed_over += 1
        await self.handed.hand(stream)

    async def _is_survey(self, stream: trio.SocketStream) -> bool:
        """Whether the connection's first request is one of the survey's,
        read without consuming it (a peer that sends nothing in time, or
        closes, goes to the app, which deals with it as it always did)."""
        with trio.move_on_after(FRONT_LIMITS.first_wait):
            try:
                head = await stream.socket.recv(_PEEK_BYTES, socket.MSG_PEEK)
            except OSError:
                return False
            line, _, rest = head.partition(b"\r\n")
            method, _, tail = line.partition(b" ")
            target, _, version = tail.partition(b" ")
            if method != b"GET" or target not in SURVEY_TARGETS or version != b"HTTP/1.1":
                return False
            host = [value.strip() for name, _, value in (each.partition(b":") for each in rest.split(b"\r\n"))
                    if name.strip().lower() == b"host"]
            return host == [LOCAL_HOST.encode()]
        return False

    async def _answer(self, exchange: Exchange) -> HttpAnswer:
        self.answered += 1
        scope = SURVEY_TARGETS.get(exchange.target)
        if exchange.method != "GET" or exchange.target not in SURVEY_TARGETS or \
                exchange.header(b"host") != LOCAL_HOST:  # a pipelined request the peek did not see
            return HttpAnswer(400, b"", content_type=b"", close=True)
        if scope is None:
            return HttpAnswer(200, self._info, close=True)
        if scope in ("asks", "all-asks"):
            from router import asks

            listed = asks.list_asks(self._router.registry.sessions(), every=scope == "all-asks")
            return HttpAnswer(200, dumps({"asks": listed}).encode(), close=True)
        channel = (exchange.header(_CHANNEL_HEADER) or "").strip() or "webui"
        return await self._own(channel, scope)

    async def _own(self, channel: str, scope: str) -> HttpAnswer:
        """``GET /sessions?scope=...`` through the channel, as the app's
        route (:mod:`router.api.dispatch`) answers it."""
        from router.api.responses import status_of

        async def core(operation: str, args: Any) -> Any:
            try:
                return 200, {"sessions": await self._board.own(shared=scope == "router")}
            except Refusal as refusal:
                return status_of(refusal.code), refusal.to_json()

        answer = await self._layer.dispatch(channel, "list", {"scope": scope}, core)
        if isinstance(answer, Refusal):
            return HttpAnswer(status_of(answer.code), dumps(answer.to_json()).encode(), close=True)
        if type(answer.value) is not tuple:
            log.error("the %s channel answered %r, not the core's answer", channel, answer.value)
            refused = Refusal("channel-failed", f"the {channel} channel answered something other than the core's answer")
            return HttpAnswer(status_of(refused.code), dumps(refused.to_json()).encode(), close=True)
        status, body = answer.value
        return HttpAnswer(status, dumps(body).encode(), close=True)
