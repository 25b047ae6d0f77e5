"""JSON-RPC 2.0 over newline-delimited JSON, without I/O.

Theory of operation
-------------------
ACP (the Agent Client Protocol, protocol version 1) is JSON-RPC 2.0 with one
message per line on a stdio pair: the SDKs' ``ndJsonStream`` (npm
``@agentclientprotocol/sdk`` 2.4.0, ``dist/stream.js``) writes
``JSON.stringify(message) + "\\n"`` and reads lines. Both ends send requests,
so one :class:`JsonRpcConnection` serves an agent's client (the daemon's
adapter) and a client's agent (``router acp``) alike.

Bytes go in with :meth:`JsonRpcConnection.receive_data`; :meth:`next_event`
hands back what they meant, one event at a time:

- :class:`Request` (a method call with an ``id``: answer it with
  :meth:`respond` or :meth:`respond_error`);
- :class:`Notification` (no ``id``: no answer);
- :class:`Response` / :class:`ErrorResponse`: the answer to a request this
  side made with :meth:`request`, matched by id; the pending request is
  forgotten as it is returned;
- :class:`Malformed`: bytes that are not a JSON-RPC message (not JSON, not an
  object, a wrong ``jsonrpc``, a response to an id never sent or already
  answered, a line over the length bound). It carries the reply JSON-RPC
  says to send (``-32700`` parse error, ``-32600`` invalid request, with the
  id when one could be read), or None when the spec says to stay silent (a
  bad response is never answered).

Nothing the peer sends raises out of :meth:`next_event`: hostile input is a
:class:`Malformed` event with a reason, and the connection carries on (as
wsproto turns bad frames into events). What *this* side does wrong (answering
a request twice, or one never received) raises :class:`LocalProtocolError`.

Output is bytes to write, returned by each call: the Trio layer writes them
in order under its one writer lock.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Final, Union

import attrs

from wire.lines import LineSplitter

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_LINE_BYTES",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "ErrorResponse",
    "Event",
    "JsonRpcConnection",
    "JsonRpcStatistics",
    "LocalProtocolError",
    "Malformed",
    "Notification",
    "Request",
    "Response",
]

#: JSON-RPC 2.0's reserved error codes (jsonrpc.org/specification, section 5.1).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

#: The longest line kept (ours). A session replay or a large tool output can
#: be megabytes; past this bound a peer is flooding, and the line is dropped
#: whole (a ``Malformed`` event), so memory stays bounded.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024

RequestId = Union[int, str]


class LocalProtocolError(Exception):
    """This side misused the connection (a bug here, never the peer's)."""


@attrs.frozen
class Request:
    id: RequestId
    method: str
    params: Any = None


@attrs.frozen
class Notification:
    method: str
    params: Any = None


@attrs.frozen
class Response:
    id: RequestId
    #: The method of the request this answers.
    method: str
    result: Any = None


@attrs.frozen
class ErrorResponse:
    id: RequestId
    method: str
    code: int
    message: str
    data: Any = None


@attrs.frozen
class Malformed:
    """Input that is not a JSON-RPC message; ``reply`` is what to send back
    (bytes), or None when nothing is to be sent."""

    reason: str
    reply: bytes | None = None


Event = Union[Request, Notification, Response, ErrorResponse, Malformed]


def _frame(message: dict[str, Any]) -> bytes:
    # ensure_ascii keeps the line free of U+2028/U+2029 and lone surrogates
    # that a JavaScript peer's line splitter or UTF-8 decoder would trip on.
    return json.dumps(message, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii") + b"\n"


def _error(id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _frame({"jsonrpc": "2.0", "id": id, "error": error})


def _is_id(value: object) -> bool:
    # Numbers are integers here: a float id is allowed by JSON-RPC but
    # "SHOULD NOT" be used, and a bool is never one.
    return (type(value) is int) or (type(value) is str)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: One decoder for every line (``json.loads`` with an option builds a new
#: one per call); NaN and Infinity are refused, as JSON refuses them.
_DECODER: Final = json.JSONDecoder(parse_constant=_no_constants)


@attrs.frozen(kw_only=True)
class JsonRpcStatistics:
    """What :meth:`JsonRpcConnection.statistics` answers."""

    #: Messages received, sent, and lines that were no message.
    received: int
    sent: int
    malformed: int
    #: Requests sent and not answered; requests received and not answered.
    pending: int
    unanswered: int
    #: Bytes of a line not complete yet.
    buffered: int


class JsonRpcConnection:
    """One JSON-RPC 2.0 peer over newline-delimited JSON (see the module
    docstring)."""

    def __init__(self, *, max_line: int = MAX_LINE_BYTES) -> None:
        self._max_line = max_line
        self._lines = LineSplitter(max_line=max_line)
        self._events: deque[Event] = deque()
        self._next_id = 0
        #: id -> method of the requests this side sent and awaits.
        self._pending: dict[RequestId, str] = {}
        #: ids of the requests received and not yet answered.
        self._unanswered: set[RequestId] = set()
        self._stats = {"received": 0, "sent": 0, "malformed": 0}

    def __repr__(self) -> str:
        return (
            f"<JsonRpcConnection pending={len(self._pending)} unanswered={len(self._unanswered)} "
            f"received={self._stats['received']} malformed={self._stats['malformed']}>"
        )

    def statistics(self) -> JsonRpcStatistics:
        return JsonRpcStatistics(**self._stats, pending=len(self._pending), unanswered=len(self._unanswered),
                                 buffered=self._lines.buffered)

    @property
    def pending(self) -> dict[RequestId, str]:
        """The requests sent and not answered yet: id -> method."""
        return dict(self._pending)

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer; ``b""`` is never needed (a final
        line without a newline is not a message: the SDK ends every one)."""
        dropped = self._lines.dropped
        for line in self._lines.feed(data):
            self._line(line)
        if self._lines.dropped != dropped:
            self._malformed(f"a line longer than {self._max_line} bytes was dropped", None)

    def next_event(self) -> Event | None:
        """The next event, or None when the bytes so far hold no more."""
        return self._events.popleft() if self._events else None

    def _malformed(self, reason: str, reply: bytes | None) -> None:
        self._stats["malformed"] += 1
        self._events.append(Malformed(reason, reply))

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = _DECODER.decode(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            # UnicodeDecodeError is a ValueError.
            self._malformed(f"not JSON: {str(exc)[:200]}", _error(None, PARSE_ERROR, "Parse error"))
            return
        if type(message) is list:
            # Batches: ACP's SDKs never send one (ours: refused, one reply).
            self._malformed("a JSON-RPC batch (ACP sends one message a line)",
                            _error(None, INVALID_REQUEST, "Invalid Request: batches are not supported"))
            return
        if type(message) is not dict:
            self._malformed("a JSON value that is not an object", _error(None, INVALID_REQUEST, "Invalid Request"))
            return
        self._stats["received"] += 1
        self._message(message)

    def _message(self, message: dict[str, Any]) -> None:
        id = message.get("id")
        if message.get("jsonrpc") != "2.0":
            reply = _error(id, INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"") if (
                "method" in message and _is_id(id)) else None
            self._malformed("a message without jsonrpc \"2.0\"", reply)
            return
        if "method" in message:
            self._incoming(message, id)
        elif "result" in message or "error" in message:
            self._answer(message, id)
        else:
            self._malformed("an object that is neither a request nor a response",
                            _error(id if _is_id(id) else None, INVALID_REQUEST, "Invalid Request"))

    def _incoming(self, message: dict[str, Any], id: Any) -> None:
        method = message["method"]
        params = message.get("params")
        has_id = "id" in message
        if type(method) is not str or (params is not None and type(params) not in (dict, list)):
            reply = _error(id if _is_id(id) else None, INVALID_REQUEST, "Invalid Request: bad method or params")
            self._malformed("a request whose method is not a string or whose params are not structured",
                            reply if has_id else None)
            return
        if not has_id:
            self._events.append(Notification(method, params))
            return
        if not _is_id(id):
            self._malformed("a request whose id is not an integer or a string",
                            _error(None, INVALID_REQUEST, "Invalid Request: bad id"))
            return
        if id in self._unanswered:
            self._malformed(f"a request reusing the id {id!r} of one not yet answered",
                            _error(id, INVALID_REQUEST, "Invalid Request: id in use"))
            return
        self._unanswered.add(id)
        self._events.append(Request(id, method, params))

    def _answer(self, message: dict[str, Any], id: Any) -> None:
        if not _is_id(id) or id not in self._pending:
            # A response to nothing this side asked (or asked and was answered):
            # JSON-RPC never answers a response.
            self._malformed(f"a response to a request never made (id {id!r})", None)
            return
        error = message.get("error")
        if "error" in message:
            if type(error) is not dict or type(error.get("code")) is not int or type(error.get("message")) is not str:
                method = self._pending.pop(id)
                self._events.append(ErrorResponse(id, method, INTERNAL_ERROR, "the peer sent a malformed error",
                                                  error))
                return
            method = self._pending.pop(id)
            self._events.append(ErrorResponse(id, method, error["code"], error["message"], error.get("data")))
            return
        method = self._pending.pop(id)
        self._events.append(Response(id, method, message.get("result")))

    # ------------------------------------------------------------------ output

    def request(self, method: str, params: Any = None) -> tuple[int, bytes]:
        """A new request: its id (to match the answer) and the bytes to send."""
        self._next_id += 1
        id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        data = _frame(message)
        self._pending[id] = method
        self._stats["sent"] += 1
        return id, data

    def forget(self, id: RequestId) -> None:
        """Stop waiting for the answer to ``id`` (the caller gave up); a late
        answer is then a :class:`Malformed` event, as one never asked for."""
        self._pending.pop(id, None)

    def notify(self, method: str, params: Any = None) -> bytes:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._stats["sent"] += 1
        return _frame(message)

    def respond(self, id: RequestId, result: Any) -> bytes:
        self._take(id)
        self._stats["sent"] += 1
        return _frame({"jsonrpc": "2.0", "id": id, "result": result})

    def respond_error(self, id: RequestId, code: int, message: str, data: Any = None) -> bytes:
        self._take(id)
        self._stats["sent"] += 1
        return _error(id, code, message, data)

    def abandon(self, id: RequestId) -> None:
        """Never answer the request ``id`` received (the peer cancelled it);
        its id may be used again."""
        self._take(id)

    def _take(self, id: RequestId) -> None:
        if id not in self._unanswered:
            raise LocalProtocolError(f"no request {id!r} waits for an answer")
        self._unanswered.discard(id)
