"""The MCP server's wire checks, sans I/O: each line the client sends, and
each tool call's arguments (``router mcp``, :mod:`router.mcp`).

**Lines.** The MCP SDK drops, without an answer, a request it cannot read:
params that are not an object, a string holding a lone surrogate, a
``jsonrpc`` other than ``"2.0"``, no ``method``, trailing bytes after the
JSON (a NUL), a line that is not JSON at all. Its client would wait for
ever. :func:`check_line` decides first, for every line, one of three:

- hand it to the SDK (a well-formed request, notification or response;
  the SDK answers an unknown method ``-32601`` and a bad ``tools/call``
  envelope ``-32602`` itself);
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

__all__ = ["PARSE_ERROR", "INVALID_REQUEST", "INVALID_PARAMS", "Checked", "check_line", "converter",
           "tool_arguments"]

#: JSON-RPC 2.0, section 5.1.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602


@attrs.frozen
class Checked:
    """What to do with one line: ``forward`` (the text for the SDK), or
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
