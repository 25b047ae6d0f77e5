"""The MCP server's wire checks, sans I/O: each line the client sends, and
each tool call's arguments (``router mcp``, :mod:`router.mcp`).

**Lines.** The MCP SDK (which served ``router mcp`` before this module)
dropped, without an answer, a request it could not read: params that are
not an object, a string holding a lone surrogate, a ``jsonrpc`` other than
``"2.0"``, no ``method``, trailing bytes after the JSON (a NUL), a line
that is not JSON at all; its client would wait for ever. :func:`check_line`
decides first, for every line, one of three:

- hand it on to :class:`McpServerWire`'s JSON-RPC reader (a well-formed
  request, notification or response; an unknown method is answered
  ``-32601`` and a bad ``tools/call`` envelope ``-32602`` there);
- answer it here with JSON-RPC 2.0's error (section 5.1): ``-32700`` a
  line that is not JSON text (not UTF-8 included), ``-32600`` not a
  request object (``jsonrpc``, ``method``, ``id`` of the wrong kind, a
  lone surrogate outside ``params``), ``-32602`` ``params`` not an object
  or holding a lone surrogate. The answer carries the request's id when
  one can be read (the JSON value that starts a line with trailing bytes
  counts: a client matches answers by id), else ``null``; its message
  starts with our code, ``bad-request: …``;
- drop it, logged: a notification (no ``id``) is never answered, however
  malformed (JSON-RPC 2.0, section 4.1).

Nothing here raises on any input (a hypothesis test drives it with hostile
lines, tests/cli/test_mcp_lines.py).

**Tool arguments.** One attrs class per tool, structured by
:data:`converter` (the wires' ``Builder``: strict leaves, no key a class
does not name, an optional key absent or of its type); ``send_message`` is
:class:`router.turns.requests.SendRequest`, shared with the API. A bad
call is refused ``bad-arguments`` with the failing key.

**The server.** :class:`McpServerWire` is the MCP server side of the stdio
wire, sans I/O (bytes in with :meth:`~McpServerWire.receive_data`, bytes
out of :meth:`~McpServerWire.data_to_send`, the tool calls to run out of
:meth:`~McpServerWire.next_call`). Every line passes :func:`check_line`
(and :func:`router.turns.requests.rpc_refusal` for one nested too deep or
too long) before :class:`router.acp.jsonrpc.JsonRpcConnection` reads it,
which keeps the ids (a second request with the id of one in flight is
``-32600``) and frames the answers. What it answers, as the MCP SDK
(``mcp`` 2.3.0, ``mcp/server/runner.py``) answered for the router:

- ``initialize``: the protocol version the client asks for when it is one
  of :data:`HANDSHAKE_PROTOCOL_VERSIONS`, else the newest of them;
  ``serverInfo``, ``capabilities.tools`` and the instructions; params
  without ``protocolVersion``, ``capabilities`` and ``clientInfo`` are
  ``-32602``. ``ping`` at any time; every other request before
  ``initialize`` (or ``notifications/initialized``) is ``-32602``;
- ``tools/list``: every tool, name, description and input schema (one
  page; a cursor is ignored);
- ``tools/call``: a :class:`ToolCallRequest` for the Trio layer, answered with
  :meth:`~McpServerWire.tool_result` (``content`` one text, ``isError``);
  params without a string ``name``, or ``arguments`` that are not an
  object, are ``-32602``;
- ``notifications/cancelled``: a :class:`Cancelled` for the call it names
  while that call runs; the call is then never answered (its
  :meth:`~McpServerWire.tool_result` writes nothing), as the SDK never
  answered one;
- any other method ``-32601``; any other notification, and any response,
  dropped.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override
from cattrs.v import format_exception

from router.errors import Refusal
from wire._convert import Builder

__all__ = ["PARSE_ERROR", "INVALID_REQUEST", "INVALID_PARAMS", "METHOD_NOT_FOUND", "HANDSHAKE_PROTOCOL_VERSIONS",
           "Cancelled", "Checked", "McpServerWire", "ToolCallRequest", "check_line", "converter", "tool_arguments"]

#: JSON-RPC 2.0, section 5.1.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
METHOD_NOT_FOUND: Final = -32601


@attrs.frozen
class Checked:
    """What to do with one line: ``forward`` (the text for the JSON-RPC reader), or
    ``answer`` (our JSON-RPC error line), or neither (dropped); ``why``
    says what was wrong, for the log."""

    forward: str | None = None
    answer: bytes | None = None
    why: str | None = None


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` holds a lone surrogate
    (iterative: ``value`` may nest deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif type(item) is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _valid_id(value: Any) -> bool:
    """A request id the SDK takes: a string (of valid text) or a whole number."""
    if type(value) is str:
        return not _has_lone_surrogate(value)
    return type(value) is int


def _error(request_id: Any, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": f"bad-request: {message}"}}
    return (json.dumps(body, ensure_ascii=True) + "\n").encode("ascii")


def _leading(text: str) -> Any:
    """The JSON value that starts ``text`` (with bytes after it), or None."""
    try:
        return json.JSONDecoder().raw_decode(text.lstrip(" \t\r"))[0]
    except (ValueError, RecursionError):
        return None


def _loads(text: str) -> Any:
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=constant)


def check_line(line: bytes) -> Checked:
    """The decision for one line of the client (see the module docstring)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return Checked(answer=_error(None, PARSE_ERROR, "the line is not UTF-8 text"), why="not UTF-8")
    if not text.strip():
        return Checked(why="an empty line")
    try:
        message = _loads(text)
    except (ValueError, RecursionError):
        return _not_json(text)
    if type(message) is not dict:
        return Checked(answer=_error(None, INVALID_REQUEST, "a message is one JSON object (no batches)"),
                       why="not an object")
    if "id" not in message:  # a notification: never answered
        problem = _problem(message, is_request=False)
        return Checked(why=f"a notification: {problem}") if problem else Checked(forward=text)
    if not _valid_id(message["id"]):
        return Checked(answer=_error(None, INVALID_REQUEST, "the id must be a string or a whole number"),
                       why="a bad id")
    if "method" not in message and ("result" in message or "error" in message):
        return Checked(forward=text)  # the client's answer to a request of ours
    problem = _problem(message, is_request=True)
    if problem is None:
        return Checked(forward=text)
    code, sentence = problem
    return Checked(answer=_error(message["id"], code, sentence), why=sentence)


def _not_json(text: str) -> Checked:
    """The decision for a line that is not one JSON text: a notification
    (JSON and bytes after it) is dropped, anything else answered."""
    leading = _leading(text)
    if type(leading) is dict and "id" not in leading:
        return Checked(why="a notification with bytes after its JSON")
    found = leading["id"] if type(leading) is dict and _valid_id(leading["id"]) else None
    return Checked(answer=_error(found, PARSE_ERROR, "the line is not one JSON text (bytes after it, or "
                                 "not JSON at all)"), why="not JSON")


def _problem(message: dict[str, Any], *, is_request: bool) -> tuple[int, str] | None:
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'jsonrpc must be "2.0"'
    if type(message.get("method")) is not str:
        return INVALID_REQUEST, "method must be a string"
    if _has_lone_surrogate(message["method"]):
        return INVALID_REQUEST, "method holds a lone surrogate (not text)"
    if "params" in message and type(message["params"]) is not dict:
        return INVALID_PARAMS, "params must be an object"
    if _has_lone_surrogate(message.get("params")):
        return INVALID_PARAMS, "a string in params holds a lone surrogate (not text)"
    if any(_has_lone_surrogate(key) for key in message):
        return INVALID_REQUEST, "a key holds a lone surrogate (not text)"
    return None


# --------------------------------------------------------------------------- tool arguments


class ArgumentError(ValueError):
    """A tool argument of the wrong type or value."""


def _non_empty(_: Any, attribute: attrs.Attribute, value: str) -> None:
    if not value:
        raise ArgumentError(f"{attribute.name}: expected a non-empty string")


@attrs.frozen(kw_only=True)
class NoArguments:
    """``list_sessions``, ``limits_report``, ``list_asks``."""


@attrs.frozen(kw_only=True)
class ReadMessages:
    session: str = attrs.field(validator=_non_empty)
    router: str | None = attrs.field(default=None, validator=attrs.validators.optional(_non_empty))


@attrs.frozen(kw_only=True)
class AbortArguments:
    session: str = attrs.field(validator=_non_empty)
    operation_id: str | None = attrs.field(default=None, validator=attrs.validators.optional(_non_empty))
    router: str | None = attrs.field(default=None, validator=attrs.validators.optional(_non_empty))


@attrs.frozen(kw_only=True)
class WebSearch:
    query: str = attrs.field(validator=_non_empty)


@attrs.frozen(kw_only=True)
class AnswerAskArguments:
    ask: str = attrs.field(validator=_non_empty)
    decision: Literal["allow", "deny"]


#: Each tool's arguments class (``send_message``'s is the API's SendRequest, checked there).
TOOL_CLASSES: Final[dict[str, type]] = {
    "list_sessions": NoArguments,
    "read_messages": ReadMessages,
    "abort": AbortArguments,
    "web_search": WebSearch,
    "limits_report": NoArguments,
    "list_asks": NoArguments,
    "answer_ask": AnswerAskArguments,
}


def make_converter() -> cattrs.Converter:
    """The tools' converter: strict leaves, no unknown key, an optional key
    absent or of its type (``null`` refused)."""
    builder = Builder(ArgumentError, tags={}, detailed=True)
    conv = builder.conv
    for cls in set(TOOL_CLASSES.values()):
        attrs.resolve_types(cls)
        overrides = {field.name: override(struct_hook=conv.get_structure_hook(str))
                     for field in attrs.fields(cls) if field.default is None}
        structure = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **overrides)
        builder.register(cls, structure, conv.get_unstructure_hook(cls))
    return conv


converter: Final = make_converter()


def _format(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, ArgumentError):
        return str(exc)  # the wire's own words: "expected a string, got a number"
    return format_exception(exc, type_)


def _first_problem(exc: BaseException) -> str:
    """The first failing key of a structuring error, and what is wrong
    (cattrs' ``transform_error``: ``<what> @ arguments.<key>``)."""
    if not isinstance(exc, cattrs.BaseValidationError):
        return str(exc)
    messages = cattrs.transform_error(exc, path="arguments", format_exception=_format)
    return "; ".join(messages) or str(exc)


def tool_arguments(name: str, arguments: object) -> Any:
    """The arguments of tool ``name`` as its class (None for a tool this
    module does not check: ``send_message``), or the ``bad-arguments``
    refusal naming what is wrong."""
    cls = TOOL_CLASSES.get(name)
    if cls is None:
        return None
    if type(arguments) is not dict:
        return Refusal("bad-arguments", f"{name}: the arguments must be an object")
    try:
        return converter.structure(arguments, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        return Refusal("bad-arguments", f"{name}: {_first_problem(exc)}")


# --------------------------------------------------------------------------- the server


#: The protocol versions the ``initialize`` handshake negotiates, oldest to
#: newest: ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` of the MCP SDK
#: (``mcp`` 2.3.0; a test holds them equal). Its newer ``2026-07-28`` has no
#: handshake (a stateless envelope per request); a client that asks for it
#: in ``initialize`` gets the newest of these, as the SDK's server answers.
HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

#: The head of a line too long to read, scanned for its request's id.
_HEAD_BYTES: Final = 65536


@attrs.frozen
class ToolCallRequest:
    """A ``tools/call`` to run: answer it with :meth:`McpServerWire.tool_result`."""

    id: int | str
    name: str
    arguments: dict[str, Any]


@attrs.frozen
class Cancelled:
    """The client cancelled the call ``id`` while it runs: stop it (it is
    never answered)."""

    id: int | str


@attrs.frozen(kw_only=True)
class McpWireStatistics:
    """What :meth:`McpServerWire.statistics` answers."""

    initialized: bool
    running: int
    refused_lines: int
    rpc: Any


class McpServerWire:
    """The MCP server side of one stdio wire (see the module docstring)::

        wire = McpServerWire(tools, server_info={"name": "router", "version": "0.1.0"}, instructions="...")
        wire.receive_data(chunk)          # then, until None:
        wire.next_call()                  # ToolCallRequest / Cancelled
        out = wire.data_to_send()         # write these bytes, in order
        wire.tool_result(call.id, text, is_error=False)
    """

    def __init__(self, tools: list[dict[str, Any]], *, server_info: dict[str, str], instructions: str,
                 max_line: int) -> None:
        from router.acp import JsonRpcConnection
        from wire.lines import LineSplitter

        self._tools = {"tools": tools}
        self._info = server_info
        self._instructions = instructions
        self._lines = LineSplitter(max_line=max_line)
        self._rpc = JsonRpcConnection(max_line=max_line + 1)
        self._out = bytearray()
        self._events: list[ToolCallRequest | Cancelled] = []
        #: The calls handed out and not answered yet.
        self._running: set[int | str] = set()
        #: The first bytes of the line being read (for a too-long line's id).
        self._head = bytearray()
        self.initialized = False
        self.protocol_version: str | None = None
        self._refused = 0

    def __repr__(self) -> str:
        return f"<McpServerWire initialized={self.initialized} running={len(self._running)}>"

    def statistics(self) -> McpWireStatistics:
        return McpWireStatistics(initialized=self.initialized, running=len(self._running),
                                 refused_lines=self._refused, rpc=self._rpc.statistics())

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the client."""
        self._keep_head(data)
        dropped = self._lines.dropped
        for line in self._lines.feed(data):
            self._line(line)
        if self._lines.dropped != dropped:
            self._refuse(bytes(self._head), too_long=True)
            self._head.clear()

    def close(self) -> None:
        """The client closed its end: its last line, when it had no newline."""
        last = self._lines.close()
        if last is not None and last.strip():
            self._line(last)

    def _keep_head(self, data: bytes) -> None:
        end = data.rfind(b"\n")
        if end >= 0:
            self._head[:] = data[end + 1:end + 1 + _HEAD_BYTES]
        elif len(self._head) < _HEAD_BYTES:
            self._head += data[:_HEAD_BYTES - len(self._head)]

    def _refuse(self, line: bytes, *, too_long: bool = False) -> bool:
        """Answer (or drop) a line the JSON-RPC reader is not to see; False
        when it is one to read."""
        from router.turns.requests import rpc_refusal

        reply = rpc_refusal(line, too_long=too_long)
        if reply is None and not too_long:
            checked = check_line(line)
            if checked.forward is not None:
                return False
            reply = checked.answer
        self._refused += 1
        if reply is not None:
            self._out += reply
        return True

    def _line(self, line: bytes) -> None:
        from router.acp import Malformed, Notification, Request

        if self._refuse(line):
            return
        self._rpc.receive_data(line + b"\n")
        while (event := self._rpc.next_event()) is not None:
            if isinstance(event, Request):
                self._request(event.id, event.method, event.params if event.params is not None else {})
            elif isinstance(event, Notification):
                self._notification(event.method, event.params if event.params is not None else {})
            elif isinstance(event, Malformed) and event.reply is not None:
                self._out += event.reply
            # A response: this server asks nothing, so it answers nothing.

    def _request(self, id: int | str, method: str, params: dict[str, Any]) -> None:
        if method == "ping":
            self._out += self._rpc.respond(id, {})
        elif method == "initialize":
            self._initialize(id, params)
        elif method not in ("tools/list", "tools/call"):
            self._out += self._rpc.respond_error(id, METHOD_NOT_FOUND, "Method not found", method)
        elif not self.initialized:
            self._out += self._rpc.respond_error(id, INVALID_PARAMS, "bad-request: initialize comes first")
        elif method == "tools/list":
            self._out += self._rpc.respond(id, self._tools)
        else:
            self._call(id, params)

    def _initialize(self, id: int | str, params: dict[str, Any]) -> None:
        asked, client = params.get("protocolVersion"), params.get("clientInfo")
        if type(asked) is not str or type(params.get("capabilities")) is not dict or type(client) is not dict \
                or type(client.get("name")) is not str or type(client.get("version")) is not str:
            self._out += self._rpc.respond_error(id, INVALID_PARAMS, "bad-request: initialize names protocolVersion, "
                                                 "capabilities and clientInfo {name, version}")
            return
        version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else HANDSHAKE_PROTOCOL_VERSIONS[-1]
        self.initialized, self.protocol_version = True, version
        self._out += self._rpc.respond(id, {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                                            "serverInfo": self._info, "instructions": self._instructions})

    def _call(self, id: int | str, params: dict[str, Any]) -> None:
        name, arguments = params.get("name"), params.get("arguments")
        if arguments is None:
            arguments = {}
        if type(name) is not str or type(arguments) is not dict:
            self._out += self._rpc.respond_error(id, INVALID_PARAMS, "bad-request: tools/call names a tool (a "
                                                 "string) and its arguments (an object)")
            return
        self._running.add(id)
        self._events.append(ToolCallRequest(id, name, arguments))

    def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/initialized":
            self.initialized = True
            if self.protocol_version is None:
                self.protocol_version = HANDSHAKE_PROTOCOL_VERSIONS[-1]
        elif method == "notifications/cancelled":
            request = params.get("requestId")
            if _valid_id(request) and request in self._running:
                self._running.discard(request)
                self._rpc.abandon(request)
                self._events.append(Cancelled(request))

    # ------------------------------------------------------------------ output

    def next_call(self) -> ToolCallRequest | Cancelled | None:
        """The next call to run or to stop, or None."""
        return self._events.pop(0) if self._events else None

    def tool_result(self, id: int | str, text: str, *, is_error: bool = False) -> None:
        """Answer the call ``id`` (one text; ``is_error`` for a tool error);
        nothing when it was abandoned."""
        if id not in self._running:
            return
        self._running.discard(id)
        result = {"content": [{"type": "text", "text": text}], "isError": is_error}
        self._out += self._rpc.respond(id, result)

    def data_to_send(self) -> bytes:
        """The bytes to write now, in order (and forget)."""
        out = bytes(self._out)
        self._out.clear()
        return out
