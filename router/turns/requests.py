"""The send request: "deliver this text into this session", from any surface.

Two edges take it, each in its own spelling, and both become one
:class:`SendRequest` through one converter:

- the HTTP API's ``POST /sessions/<id>/messages`` body
  (:func:`send_request_from_body`): ``{text, eventId?, kind?: "person" |
  "card", messageId?, wait?}``, camelCase, the session in the path; a bad
  body refuses ``bad-body``;
- the MCP tool ``send_message`` (:func:`send_request_from_tool`):
  ``{session, text, event_id?, card?, wait?}``, as its input schema
  publishes it; bad arguments refuse ``bad-arguments``.

Each edge's shape is a frozen attrs class (the API's :class:`ApiSendBody`;
the tool's is :class:`SendRequest` itself) structured by :data:`converter`
(built by :func:`make_converter` on the wires' ``Builder``): strict leaves (a
``wait`` of ``1`` or ``"true"`` is refused, never read as true), unknown keys
refused, an optional key either absent or of its type (``null`` is refused,
as before). A refusal is a :class:`router.errors.Refusal` whose message
names the failing key::

    bad-body: POST /sessions/<id>/messages takes {...}: wait: expected a boolean, got a string

Hostile input: nothing here descends into a value it does not expect (every
field is a leaf), so a value nested 10,000 levels deep is refused by its
type at the top, and the body's JSON is read by ``wire.json.loads``, which
refuses a text nested past the interpreter's limit as not JSON.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Final, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override

from wire._convert import Builder, camel
from wire.json import dumps

from router._body import json_object
from router.errors import Refusal

__all__ = [
    "API_SHAPE",
    "MAX_MESSAGE_DEPTH",
    "TOOL_SHAPE",
    "ApiSendBody",
    "SendRequest",
    "converter",
    "make_converter",
    "rpc_refusal",
    "send_request_from_body",
    "send_request_from_tool",
    "structuring_problem",
]

#: How each edge says what it takes, at the head of its refusals.
API_SHAPE: Final = ("POST /sessions/<id>/messages takes "
                    "{text, eventId?, kind?: 'person'|'card', messageId?, wait?}")
TOOL_SHAPE: Final = "send_message takes {session, text, event_id?, card?, wait?}"


class RequestShapeError(ValueError):
    """A send request's key of the wrong type or value."""


@attrs.frozen(kw_only=True)
class SendRequest:
    """One delivery, as the user-turn router's ``send`` takes it."""

    session: str
    text: str
    event_id: str | None = None
    card: bool = False
    message_id: str | None = None
    wait: bool = False

    def send_arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``TurnRouter.send`` after its two
        positional ones (``session``, ``text``)."""
        return {"event_id": self.event_id, "card": self.card, "message_id": self.message_id,
                "wait": self.wait}

    def to_args(self) -> dict[str, Any]:
        """As a plain object (what a channel carries to the core)."""
        return attrs.asdict(self)

    def api_body(self) -> dict[str, Any]:
        """As the API's body (what a router forwards to the session's holder)."""
        body: dict[str, Any] = {"text": self.text, "kind": "card" if self.card else "person", "wait": self.wait}
        if self.event_id is not None:
            body["eventId"] = self.event_id
        if self.message_id is not None:
            body["messageId"] = self.message_id
        return body

    @classmethod
    def from_args(cls, args: Any) -> SendRequest:
        """Back from :meth:`to_args` (the core's side of a channel)."""
        return cls(**{field.name: args[field.name] for field in attrs.fields(cls)})


@attrs.frozen(kw_only=True)
class ApiSendBody:
    """The API's body (camelCase keys on the wire)."""

    text: str
    event_id: str | None = None
    kind: Literal["person", "card"] = "person"
    message_id: str | None = None
    wait: bool = False


def make_converter() -> cattrs.Converter:
    """The send request's converter: strict leaves, and each edge's class
    with its spelling and no key it does not name."""
    builder = Builder(RequestShapeError, tags={}, detailed=True)
    conv = builder.conv
    # The API's body is its own class (camelCase, ``kind``, no session); the
    # tool's arguments are a SendRequest as the tool spells it (snake_case,
    # no ``message_id``: the tool does not take one).
    for cls, key, omit in ((ApiSendBody, camel, ()), (SendRequest, str, ("message_id",))):
        attrs.resolve_types(cls)
        overrides = {name: override(omit=True) for name in omit}
        for field in attrs.fields(cls):
            if field.name in omit:
                continue
            # A key whose default is None is optional, and present it is a
            # string: null is refused (as before), never read as "absent".
            hook = conv.get_structure_hook(str) if field.default is None else None
            overrides[field.name] = override(rename=key(field.name), struct_hook=hook)
        structure = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **overrides)
        builder.register(cls, structure, conv.get_unstructure_hook(cls))
    return conv


converter: Final = make_converter()


def structuring_problem(exc: BaseException, spell: Callable[[str], str]) -> str:
    """The first failing key of a structuring error (spelled as its edge
    spells it) and what is wrong (the API's other bodies say it the same
    way: :mod:`router.api.bodies`)."""
    key = ""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        if isinstance(exc, cattrs.ForbiddenExtraKeysError):
            break
        exc = exc.exceptions[0]
        names = [note.name for note in getattr(exc, "__notes__", ()) if hasattr(note, "name")]
        key = spell(names[0]) if names else key
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown field(s) {', '.join(map(repr, sorted(exc.extra_fields)))}"
    if isinstance(exc, KeyError):
        return f"{key!r} is required"
    return f"{key}: {exc}" if key else str(exc)


def _structure(value: object, cls: type, code: str, shape: str, spell: Callable[[str], str]) -> Any:
    try:
        return converter.structure(value, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        return Refusal(code, f"{shape}: {structuring_problem(exc, spell)}")


def send_request_from_body(raw: bytes, session: str) -> SendRequest | Refusal:
    """The API's ``POST /sessions/<session>/messages`` body (its bytes), or
    the ``bad-body`` refusal saying what is wrong."""
    try:
        value = json_object(raw, what=API_SHAPE)
    except Refusal as refused:
        return refused
    body = _structure(value, ApiSendBody, "bad-body", API_SHAPE, camel)
    if isinstance(body, Refusal):
        return body
    return SendRequest(session=session, text=body.text, event_id=body.event_id,
                       card=body.kind == "card", message_id=body.message_id, wait=body.wait)


def send_request_from_tool(arguments: object) -> SendRequest | Refusal:
    """The MCP ``send_message`` tool's arguments, or the ``bad-arguments``
    refusal saying what is wrong."""
    if type(arguments) is not dict:
        return Refusal("bad-arguments", f"{TOOL_SHAPE}: the arguments must be an object")
    return _structure(arguments, SendRequest, "bad-arguments", TOOL_SHAPE, str)


# --------------------------------------------------------------------------- MCP lines

#: The deepest a client's JSON-RPC message may nest. The MCP SDK reads each
#: line with pydantic's JSON reader, which refuses past about 200 levels
#: (measured: 200 fails, 100 passes), and then drops the message without an
#: answer, so the client would wait for ever. Below that, with room: a tool
#: call's envelope is 4 levels and our tools' arguments are flat.
MAX_MESSAGE_DEPTH: Final = 128

#: JSON's strings, numbers, literals and structural characters, for a scan
#: that skips string contents at C speed.
_TOKENS: Final = re.compile(
    rb'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|[\[\]{}:,]')


def _scan(line: bytes) -> tuple[int, bytes | None]:
    """How deep ``line`` nests, and the raw top-level ``id`` (a number or a
    string) if one is seen. Never recursive."""
    depth = deepest = 0
    key: bytes | None = None
    found: bytes | None = None
    after_id = False  # the next token is the value of the top-level "id"
    for match in _TOKENS.finditer(line):
        token = match.group()
        if after_id:
            after_id = False
            if found is None and token[:1] in b'"-0123456789':
                found = token
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
        elif depth == 1 and token == b":":
            after_id = key == b'"id"'
        elif depth == 1 and token != b",":
            key = token
    return deepest, found


def rpc_refusal(line: bytes, *, too_long: bool = False) -> bytes | None:
    """The JSON-RPC error to answer for a client's line the SDK would drop
    unanswered (nested deeper than :data:`MAX_MESSAGE_DEPTH`, or longer
    than the reader takes when ``too_long``, ``line`` then being its head),
    or ``None`` for a line to hand to the SDK. The answer carries the
    request's id when the line shows one, else ``null`` (JSON-RPC 2.0,
    "Invalid Request"); its message starts with our code."""
    if not too_long and line.count(b"[") + line.count(b"{") <= MAX_MESSAGE_DEPTH:
        return None  # cannot nest deeper than it has brackets
    deepest, request_id = _scan(line)
    if too_long:
        message = "too-large: the message is longer than the router reads; send less"
    elif deepest > MAX_MESSAGE_DEPTH:
        message = f"too-deep: the message nests deeper than {MAX_MESSAGE_DEPTH} levels"
    else:
        return None
    error = {"code": -32600, "message": message}  # JSON-RPC 2.0: Invalid Request
    text = '{"jsonrpc": "2.0", "id": %s, "error": %s}\n' % (
        (request_id or b"null").decode("utf-8", errors="replace"), dumps(error))
    return text.encode("utf-8")
