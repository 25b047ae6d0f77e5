"""A JSON-RPC peer on Trio streams: the thin layer around
:class:`router.acp.jsonrpc.JsonRpcConnection`.

Theory of operation
-------------------
The peer owns the connection object; :meth:`RpcPeer.pump` is the one reader
(run it in a task for as long as answers are wanted; it returns at the end
of the input). Requests go out with :meth:`start` (a :class:`PendingCall` to
wait on) or :meth:`call`; requests that come in are handed to ``on_request``
in a task each (inside :meth:`pump`'s nursery), whose return value is the
result and whose :class:`RpcError` is the error answer; notifications go to
``on_notification`` at once, in order; malformed input is logged, answered
when JSON-RPC says to, and never ends the pump.

Writes take turns on a ``StrictFIFOLock`` and are shielded under
:data:`WRITE_DEADLINE`, so a cancellation never leaves half a line on the
wire; a peer that does not read for that long is broken
(:class:`PeerClosed`).

Error handling: the end of input or a broken pipe fails every pending call
with :class:`PeerClosed`; an error answer raises :class:`RpcError`.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Final

import attrs
import trio

from router.acp.jsonrpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    ErrorResponse,
    JsonRpcConnection,
    JsonRpcStatistics,
    Malformed,
    Notification,
    Request,
    Response,
)

__all__ = ["RpcPeerStatistics", "PeerClosed", "PendingCall", "RpcError", "RpcPeer", "WRITE_DEADLINE"]

log = logging.getLogger("router.acp")

#: Seconds one write may wait for the peer to read (ours: a line is small;
#: a peer that reads nothing for this long is stuck).
WRITE_DEADLINE: Final = 10.0


class RpcError(Exception):
    """An error answer: JSON-RPC's code, message and data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class PeerClosed(Exception):
    """The peer's input ended or its pipe broke before an answer came."""


class PendingCall:
    """A request sent and its answer, once it comes."""

    def __init__(self, id: int, method: str) -> None:
        self.id = id
        self.method = method
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<PendingCall {self.id} {self.method} done={self.done.is_set()}>"

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()

    async def wait(self) -> Any:
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


RequestHandler = Callable[[Request], Awaitable[Any]]
NotificationHandler = Callable[[Notification], None]


async def _no_requests(request: Request) -> Any:
    raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")


@attrs.frozen
class RpcPeerStatistics:
    """What an :class:`RpcPeer` did: its connection's figures, whether it is
    closed, and the calls waiting for an answer."""

    connection: JsonRpcStatistics
    closed: bool
    calls: int


class RpcPeer:
    """One JSON-RPC peer over a send and a receive stream."""

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        on_request: RequestHandler = _no_requests,
        on_notification: NotificationHandler = lambda notification: None,
        name: str = "peer",
    ) -> None:
        self.connection = JsonRpcConnection()
        self._send = send
        self._receive = receive
        self.on_request = on_request
        self.on_notification = on_notification
        self.name = name
        self._lock = trio.StrictFIFOLock()
        self._calls: dict[int, PendingCall] = {}
        self.closed = False
        #: The reasons of the last malformed inputs (newest last; a few kept).
        self.malformed: list[str] = []

    def __repr__(self) -> str:
        return f"<RpcPeer {self.name} closed={self.closed} {self.connection!r}>"

    def statistics(self) -> RpcPeerStatistics:
        return RpcPeerStatistics(connection=self.connection.statistics(), closed=self.closed, calls=len(self._calls))
    # ------------------------------------------------------------------ output

    async def write(self, data: bytes) -> None:
        """Send one or more whole lines (shielded, under WRITE_DEADLINE)."""
        if self.closed:
            raise PeerClosed(f"the {self.name} has gone")
        with trio.CancelScope(shield=True):
            async with self._lock:
                try:
                    with trio.fail_after(WRITE_DEADLINE):
                        await self._send.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as exc:
                    self._close()
                    raise PeerClosed(f"the {self.name} stopped reading its input ({type(exc).__name__})") from None

    async def start(self, method: str, params: Any = None) -> PendingCall:
        id, data = self.connection.request(method, params)
        pending = PendingCall(id, method)
        self._calls[id] = pending
        try:
            await self.write(data)
        except PeerClosed as exc:
            pending.settle(error=exc)
        return pending

    async def call(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its answer. On cancellation the
        answer is no longer awaited (a late one is logged as malformed)."""
        pending = await self.start(method, params)
        try:
            return await pending.wait()
        finally:
            if not pending.done.is_set():
                self.forget(pending)

    def forget(self, pending: PendingCall) -> None:
        self._calls.pop(pending.id, None)
        self.connection.forget(pending.id)

    async def notify(self, method: str, params: Any = None) -> None:
        await self.write(self.connection.notify(method, params))

    async def respond(self, id: Any, result: Any) -> None:
        await self.write(self.connection.respond(id, result))

    async def respond_error(self, id: Any, code: int, message: str, data: Any = None) -> None:
        await self.write(self.connection.respond_error(id, code, message, data))

    # ------------------------------------------------------------------ input

    async def pump(self) -> None:
        """Read until the input ends; incoming requests are served in tasks
        of this call's nursery (cancelled with it)."""
        async with trio.open_nursery() as nursery:
            while not self.closed:
                try:
                    data = await self._receive.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    self._close()
                    break
                self.connection.receive_data(data)
                await self._dispatch(nursery)
            nursery.cancel_scope.cancel()

    async def _dispatch(self, nursery: trio.Nursery) -> None:
        while (event := self.connection.next_event()) is not None:
            kind = type(event)
            if kind is Notification:
                try:
                    self.on_notification(event)  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - a handler bug never ends the pump
                    log.exception("%s: a notification handler failed on %s", self.name, event.method)
            elif kind is Request:
                nursery.start_soon(self._serve, event, name=f"acp-request-{event.method}")
            elif kind is Response:
                pending = self._calls.pop(event.id, None)  # type: ignore[union-attr]
                if pending is not None:
                    pending.settle(result=event.result)  # type: ignore[union-attr]
            elif kind is ErrorResponse:
                pending = self._calls.pop(event.id, None)  # type: ignore[union-attr]
                if pending is not None:
                    pending.settle(error=RpcError(event.code, event.message, event.data))  # type: ignore[union-attr]
            elif kind is Malformed:
                self._malformed(event)  # type: ignore[arg-type]
                if event.reply is not None:  # type: ignore[union-attr]
                    try:
                        await self.write(event.reply)  # type: ignore[union-attr]
                    except PeerClosed:
                        pass

    def _malformed(self, event: Malformed) -> None:
        log.warning("%s: %s", self.name, event.reason)
        self.malformed = [*self.malformed[-9:], event.reason]

    async def _serve(self, request: Request) -> None:
        try:
            result = await self.on_request(request)
        except RpcError as exc:
            await self._answer_error(request, exc.code, exc.message, exc.data)
            return
        except Exception as exc:  # noqa: BLE001 - the peer gets an internal error, the pump lives on
            log.exception("%s: the handler of %s failed", self.name, request.method)
            await self._answer_error(request, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}")
            return
        try:
            await self.respond(request.id, result)
        except PeerClosed:
            pass

    async def _answer_error(self, request: Request, code: int, message: str, data: Any = None) -> None:
        try:
            await self.respond_error(request.id, code, message, data)
        except PeerClosed:
            pass

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pending in self._calls.values():
            pending.settle(error=PeerClosed(f"the {self.name} closed its output before answering {pending.method}"))
        self._calls.clear()
