"""The container daemon protocol: types, parsers and rules.

The wire between a host (which owns the durable record of a session) and the
daemon in a container (which runs the agent): one WebSocket per session at
``/sessions/<url-encoded id>``. The daemon speaks first with ``hello``; the host
answers with ``open`` when the daemon does not hold the session's generation,
then ``replay``, then delivers ``prompt``s. Everything the daemon produces for a
session is a numbered ``frame``, kept until the host acknowledges it.

Spec: ``container-protocol.d.ts`` (the seed) and, where it is silent, the
reference parsers of npm ``agents@0.32.0`` (``dist/protocol-*.js``). A test runs
those reference parsers on a generated corpus and compares every answer with
ours (``tests/wire/test_container_parity.py``).

Theory of operation
-------------------

Every type of the seed is a frozen, slotted attrs class with snake_case
attributes; :data:`converter` maps them to and from the wire's camelCase JSON.
Unions are tagged on ``type`` (messages and events), ``kind`` (frames) or
``status`` (outcomes and operations); the tag is not an attribute, the class
is.

Parsing follows the reference exactly, including where it keeps what it did
not check. The reference returns the *whole* parsed object for ``hello`` and
``frame`` messages, and for the settings and input parts inside host
messages, unknown fields included; it rebuilds only the top level of host
messages and of ``caught-up`` and ``error``. Classes of the first group carry
an ``extra`` attribute holding the unknown fields, which :data:`converter`
writes back, so ``converter.unstructure(parse_…(text))`` is the object the
reference hands its caller. Adapter events, persisted entries and ``raw``
values are opaque: plain JSON values, checked as the reference checks them
and passed through whole.

:func:`parse_host_message` and :func:`parse_daemon_message` never raise: they
return a message or ``None``. Structuring errors are caught in one place
(:func:`structure_or_none`).
"""

from __future__ import annotations

import typing
from typing import Any, Callable, Final, Literal, Mapping, NewType, Sequence, TypeAlias, Union

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from wire.json import (
    ABSENT,
    JsonError,
    JsonValue,
    dumps,
    is_count,
    is_json,
    js_length,
    loads,
)

# --------------------------------------------------------------------------- constants
# Values from the seed (container-protocol.d.ts) and the reference
# (protocol-*.js in npm agents@0.32.0), under the seed's names.

#: Bumped on any incompatible change.
CONTAINER_PROTOCOL_VERSION: Final = 1
#: The daemon answers ``200`` here once it accepts connections (no token).
CONTAINER_HEALTH_PATH: Final = "/healthz"
#: The session socket: ``/sessions/<encoded session id>``.
CONTAINER_SESSION_PATH: Final = "/sessions/"
#: The shared secret the host passes on every request.
CONTAINER_TOKEN_HEADER: Final = "x-cf-harness-token"
#: WebSocket close code: a newer connection for the session replaced this one.
CLOSE_REPLACED: Final = 4001
#: WebSocket close code: the request was not authorized.
CLOSE_UNAUTHORIZED: Final = 4003
#: Most JSON characters (UTF-16 code units) in one ``restore`` message or one
#: ``persist`` frame; a single larger entry travels alone. 256 KiB in the
#: reference.
MAX_CHUNK_CHARS: Final = 256 * 1024


@attrs.frozen
class ContainerEnv:
    """The environment variables a host starts a daemon's container with."""

    #: Shared secret for :data:`CONTAINER_TOKEN_HEADER`.
    token: str = "CF_HARNESS_TOKEN"
    #: This container's id, echoed in ``hello``.
    runtime_id: str = "CF_HARNESS_RUNTIME_ID"
    #: The port the daemon listens on.
    port: str = "CF_HARNESS_PORT"


#: The seed's ``CONTAINER_ENV``.
CONTAINER_ENV: Final = ContainerEnv()

# --------------------------------------------------------------------------- field types
# NewTypes the converter gives strict hooks, so an annotation says which rule
# the wire applies.

#: A count: an int, not a bool, 0 ≤ n ≤ 2**53 − 1 (``isCount``).
Count = NewType("Count", int)
#: Any finite JSON number (``createdAt``, usage figures).
Number = NewType("Number", float)
#: A JSON value with finite numbers only (``isJson``), passed through untouched.
Json = NewType("Json", object)
#: An adapter event as the reference checks it (``isEvent``), kept as the
#: plain JSON object it is; :data:`ContainerEvent` is its typed view.
EventValue = NewType("EventValue", dict)


def _extra() -> Any:
    """The ``extra`` attribute: unknown wire fields the reference keeps."""
    return attrs.field(factory=dict, kw_only=True, repr=False)


def _optional(present: Any, default: Any = None) -> Any:
    """A field the wire may leave out: ``default`` when absent (and then not
    written), and of type ``present`` when there. ``null`` is not absent."""
    return attrs.field(default=default, kw_only=True, metadata={"present": present})


# --------------------------------------------------------------------------- input

@attrs.frozen(kw_only=True)
class TextInputPart:
    text: str
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class ImageInputPart:
    #: IANA media type, such as ``image/png``.
    media_type: str
    #: Base64 bytes.
    data: str
    extra: Mapping[str, Any] = _extra()


ContainerInputPart: TypeAlias = Union[TextInputPart, ImageInputPart]
#: What a prompt carries: plain text, or parts.
ContainerInput: TypeAlias = Union[str, tuple[ContainerInputPart, ...]]
#: What a submission does when the session is already running.
ContainerWhenBusy: TypeAlias = Literal["followUp", "steer"]


@attrs.frozen(kw_only=True)
class ContainerSettings:
    """Per-session settings for the adapter; ``options`` is the adapter's own."""

    model: str | None = _optional(str)
    options: JsonValue = _optional(Json, ABSENT)
    extra: Mapping[str, Any] = _extra()


# --------------------------------------------------------------------------- transcript

@attrs.frozen(kw_only=True)
class TextPart:
    text: str


@attrs.frozen(kw_only=True)
class ReasoningPart:
    text: str


@attrs.frozen(kw_only=True)
class ImagePart:
    media_type: str
    data: str


@attrs.frozen(kw_only=True)
class ToolPart:
    tool_call_id: str
    tool_name: str
    input: Json
    state: Literal["running", "done", "error"]
    output: JsonValue = _optional(Json, ABSENT)


ContainerPart: TypeAlias = Union[TextPart, ReasoningPart, ImagePart, ToolPart]


@attrs.frozen(kw_only=True)
class ContainerMessage:
    """A transcript message. Emitted again under the same id to update it."""

    id: str
    role: Literal["user", "assistant"]
    parts: tuple[ContainerPart, ...]
    #: The operation the message belongs to.
    operation_id: str | None = _optional(str)
    #: Milliseconds since the epoch.
    created_at: Number


# --------------------------------------------------------------------------- events

@attrs.frozen(kw_only=True)
class TextDeltaEvent:
    """Live text for an assistant message that is still being written."""

    message_id: str
    delta: str


@attrs.frozen(kw_only=True)
class ReasoningDeltaEvent:
    message_id: str
    delta: str


@attrs.frozen(kw_only=True)
class MessageEvent:
    """A finished or updated transcript message. Stored by the host."""

    message: ContainerMessage


@attrs.frozen(kw_only=True)
class UsageEvent:
    """Token and cost figures, as the adapter counts them."""

    input_tokens: float | None = _optional(Number)
    output_tokens: float | None = _optional(Number)
    cost_usd: float | None = _optional(Number)


@attrs.frozen(kw_only=True)
class LogEvent:
    level: Literal["info", "warn", "error"]
    message: str


@attrs.frozen(kw_only=True)
class RawEvent:
    """Anything adapter-specific, passed through untouched."""

    value: Json


#: The typed view of an adapter event. Frames carry events as plain JSON
#: (:data:`EventValue`); ``converter.structure(event, ContainerEvent)`` reads
#: one, ``converter.unstructure(TextDeltaEvent(...))`` writes one.
ContainerEvent: TypeAlias = Union[
    TextDeltaEvent, ReasoningDeltaEvent, MessageEvent, UsageEvent, LogEvent, RawEvent
]

# --------------------------------------------------------------------------- outcomes

@attrs.frozen(kw_only=True)
class Done:
    """The operation finished with an answer."""

    text: str
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class Unanswered:
    """The operation ended without one, and why (``aborted``, an error...)."""

    reason: str
    extra: Mapping[str, Any] = _extra()


ContainerOutcome: TypeAlias = Union[Done, Unanswered]


@attrs.frozen(kw_only=True)
class PendingOperation:
    operation_id: str
    status: Literal["queued", "running"]
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class SettledOperation:
    operation_id: str
    outcome: ContainerOutcome
    extra: Mapping[str, Any] = _extra()


#: What the daemon knows about one operation it was given.
DaemonOperation: TypeAlias = Union[PendingOperation, SettledOperation]

# --------------------------------------------------------------------------- frames

@attrs.frozen(kw_only=True)
class StartFrame:
    operation_id: str
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class EventFrame:
    #: The running operation, or None between turns.
    operation_id: str | None
    event: EventValue
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class PersistFrame:
    """Adapter resume state to keep, in order."""

    entries: tuple[Json, ...]
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class SettleFrame:
    operation_id: str
    outcome: ContainerOutcome
    extra: Mapping[str, Any] = _extra()


#: One numbered thing the daemon produced for a session.
DaemonFrame: TypeAlias = Union[StartFrame, EventFrame, PersistFrame, SettleFrame]

# --------------------------------------------------------------------------- daemon → host

@attrs.frozen(kw_only=True)
class AdapterInfo:
    id: str
    version: str
    capabilities: tuple[str, ...]
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class Hello:
    protocol: Count
    runtime_id: str
    session: str
    adapter: AdapterInfo
    #: The generation of the open adapter session, or None if none is open.
    open: Count | None
    #: The newest frame number for this session in this container.
    last_seq: Count
    #: Every operation this container was given for the session.
    operations: tuple[DaemonOperation, ...]
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class FrameMessage:
    seq: Count
    frame: DaemonFrame
    extra: Mapping[str, Any] = _extra()


@attrs.frozen(kw_only=True)
class CaughtUp:
    """Every kept frame after the ``replay`` cursor has been sent."""

    last_seq: Count


@attrs.frozen(kw_only=True)
class ErrorMessage:
    message: str


DaemonMessage: TypeAlias = Union[Hello, FrameMessage, CaughtUp, ErrorMessage]

# --------------------------------------------------------------------------- host → daemon

@attrs.frozen(kw_only=True)
class Restore:
    """Part of the resume state for the next ``open`` of ``generation``."""

    generation: Count
    entries: tuple[Json, ...]


@attrs.frozen(kw_only=True)
class Open:
    """Open the adapter session; ignored when ``generation`` is already open."""

    generation: Count
    settings: ContainerSettings
    #: The last of the persisted entries, after any sent in ``restore``.
    restore: tuple[Json, ...]


@attrs.frozen(kw_only=True)
class Replay:
    """Send every kept frame after ``after``, then live frames."""

    after: Count


@attrs.frozen(kw_only=True)
class Prompt:
    """Queue an operation. Idempotent on ``operation_id``."""

    operation_id: str
    input: ContainerInput
    when_busy: ContainerWhenBusy


@attrs.frozen(kw_only=True)
class Abort:
    """Stop one operation, or every operation of the session (``None``)."""

    operation_id: str | None = _optional(str)


@attrs.frozen(kw_only=True)
class Configure:
    settings: ContainerSettings


@attrs.frozen(kw_only=True)
class Ack:
    """Frames up to ``seq`` are stored; the daemon may forget them."""

    seq: Count


HostMessage: TypeAlias = Union[Restore, Open, Replay, Prompt, Abort, Configure, Ack]

# --------------------------------------------------------------------------- converter

#: class -> (tag key, tag value) for every member of a tagged union.
_TAGS: dict[type, tuple[str, str]] = {
    TextInputPart: ("type", "text"),
    ImageInputPart: ("type", "image"),
    TextPart: ("type", "text"),
    ReasoningPart: ("type", "reasoning"),
    ImagePart: ("type", "image"),
    ToolPart: ("type", "tool"),
    TextDeltaEvent: ("type", "text-delta"),
    ReasoningDeltaEvent: ("type", "reasoning-delta"),
    MessageEvent: ("type", "message"),
    UsageEvent: ("type", "usage"),
    LogEvent: ("type", "log"),
    RawEvent: ("type", "raw"),
    Done: ("status", "done"),
    Unanswered: ("status", "unanswered"),
    SettledOperation: ("status", "settled"),
    StartFrame: ("kind", "start"),
    EventFrame: ("kind", "event"),
    PersistFrame: ("kind", "persist"),
    SettleFrame: ("kind", "settle"),
    Hello: ("type", "hello"),
    FrameMessage: ("type", "frame"),
    CaughtUp: ("type", "caught-up"),
    ErrorMessage: ("type", "error"),
    Restore: ("type", "restore"),
    Open: ("type", "open"),
    Replay: ("type", "replay"),
    Prompt: ("type", "prompt"),
    Abort: ("type", "abort"),
    Configure: ("type", "configure"),
    Ack: ("type", "ack"),
}

#: Every class, leaves first: a class's generated hooks capture its fields'
#: hooks when they are made, so a field's class must be registered before.
_CLASSES: tuple[type, ...] = (
    TextInputPart, ImageInputPart, ContainerSettings,
    TextPart, ReasoningPart, ImagePart, ToolPart, ContainerMessage,
    TextDeltaEvent, ReasoningDeltaEvent, MessageEvent, UsageEvent, LogEvent, RawEvent,
    Done, Unanswered, PendingOperation, SettledOperation,
    StartFrame, EventFrame, PersistFrame, SettleFrame,
    AdapterInfo, Hello, FrameMessage, CaughtUp, ErrorMessage,
    Restore, Open, Replay, Prompt, Abort, Configure, Ack,
)  # fmt: skip

_UNIONS: dict[Any, tuple[type, ...]] = {
    ContainerInputPart: (TextInputPart, ImageInputPart),
    ContainerPart: (TextPart, ReasoningPart, ImagePart, ToolPart),
    ContainerEvent: (TextDeltaEvent, ReasoningDeltaEvent, MessageEvent, UsageEvent, LogEvent, RawEvent),
    ContainerOutcome: (Done, Unanswered),
    DaemonFrame: (StartFrame, EventFrame, PersistFrame, SettleFrame),
    DaemonMessage: (Hello, FrameMessage, CaughtUp, ErrorMessage),
    HostMessage: (Restore, Open, Replay, Prompt, Abort, Configure, Ack),
}


class WireError(ValueError):
    """A value does not have the shape the wire requires."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _fail(value: object, what: str) -> typing.NoReturn:
    raise WireError(f"expected {what}, got {type(value).__name__}")


def _structure_str(value: object, _: Any) -> str:
    if type(value) is not str:
        _fail(value, "a string")
    return value  # type: ignore[return-value]


def _structure_count(value: object, _: Any) -> int:
    if not is_count(value):
        raise WireError(f"expected a count (an integer from 0 to 2**53 - 1), got {value!r:.40}")
    return value  # type: ignore[return-value]


def _structure_number(value: object, _: Any) -> float:
    if type(value) not in (int, float) or not is_json(value):
        _fail(value, "a finite number")
    return value  # type: ignore[return-value]


def _structure_json(value: object, _: Any) -> JsonValue:
    if not is_json(value):
        _fail(value, "a JSON value with finite numbers")
    return value


def is_event(value: object) -> bool:
    """The reference's ``isEvent``: an adapter event the wire carries."""
    if type(value) is not dict or type(value.get("type")) is not str or not is_json(value):
        return False
    kind = value["type"]
    if kind in ("text-delta", "reasoning-delta"):
        return type(value.get("messageId")) is str and type(value.get("delta")) is str
    if kind == "message":
        message = value.get("message")
        return (
            type(message) is dict
            and type(message.get("id")) is str
            and message.get("role") in ("user", "assistant")
            and type(message.get("parts")) is list
        )
    if kind == "usage":
        return True
    if kind == "log":
        return type(value.get("message")) is str
    if kind == "raw":
        return "value" in value
    return False


def _structure_event(value: object, _: Any) -> dict:
    if not is_event(value):
        _fail(value, "an adapter event")
    return value  # type: ignore[return-value]


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, __import__("types").UnionType)


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _literal_hook(tp: Any) -> Callable[[object, Any], str]:
    allowed = frozenset(typing.get_args(tp))

    def structure(value: object, _: Any) -> str:
        if type(value) is not str or value not in allowed:
            raise WireError(f"expected one of {sorted(allowed)}, got {value!r:.40}")
        return value

    return structure


def _is_homogeneous_tuple(tp: Any) -> bool:
    args = typing.get_args(tp)
    return typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis


def make_converter() -> cattrs.Converter:
    """Build the container wire's converter. :data:`converter` is one."""
    conv = cattrs.Converter(detailed_validation=False)

    # Strict leaves: the wire refuses what cattrs would coerce.
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook(Count, _structure_count)
    conv.register_structure_hook(Number, _structure_number)
    conv.register_structure_hook(Json, _structure_json)
    conv.register_structure_hook(EventValue, _structure_event)
    for leaf in (Json, EventValue):
        conv.register_unstructure_hook(leaf, lambda value: value)
    conv.register_structure_hook_factory(_is_literal, _literal_hook)

    # Arrays are JSON arrays (lists), never any other iterable.
    def tuple_structure(tp: Any) -> Callable[[object, Any], tuple]:
        item = typing.get_args(tp)[0]
        if item is Json:
            def structure_json_items(value: object, _: Any) -> tuple:
                if type(value) is not list or not all(is_json(each) for each in value):
                    _fail(value, "an array of JSON values")
                return tuple(value)

            return structure_json_items
        hook = conv.get_structure_hook(item)

        def structure_items(value: object, _: Any) -> tuple:
            if type(value) is not list:
                _fail(value, "an array")
            return tuple(hook(each, item) for each in value)

        return structure_items

    def tuple_unstructure(tp: Any) -> Callable[[tuple], list]:
        item = typing.get_args(tp)[0]
        if item in (str, Json):
            return list
        hook = conv.get_unstructure_hook(item)
        return lambda value: [hook(each) for each in value]

    conv.register_structure_hook_factory(_is_homogeneous_tuple, tuple_structure)
    conv.register_unstructure_hook_factory(_is_homogeneous_tuple, tuple_unstructure)

    # ``X | None`` with a required key: null is None, anything else is an X.
    def nullable_structure(tp: Any) -> Callable[[object, Any], Any]:
        (inner,) = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        hook = conv.get_structure_hook(inner)
        return lambda value, _: None if value is None else hook(value, inner)

    def is_nullable(tp: Any) -> bool:
        args = typing.get_args(tp)
        return _is_union(tp) and len(args) == 2 and type(None) in args

    conv.register_structure_hook_factory(is_nullable, nullable_structure)
    conv.register_unstructure_hook_factory(is_nullable, lambda tp: lambda value: value)

    # Tagged unions, dispatched on the tag's value. Registered before the
    # classes: a class's generated hook looks up its fields' hooks once, when
    # it is made, and the union hooks resolve their members only when called.
    for union, members in _UNIONS.items():
        _register_union(conv, union, members)
    _register_operation_union(conv)
    _register_input(conv)

    # Classes: camelCase keys, the tag written first, unknown fields kept in
    # ``extra`` where the reference keeps them.
    for cls in _CLASSES:
        _register_class(conv, cls)
    return conv


def _register_class(conv: cattrs.Converter, cls: type) -> None:
    overrides: dict[str, Any] = {}
    has_extra = False
    for field in attrs.fields(cls):
        if field.name == "extra":
            has_extra = True
            overrides["extra"] = override(omit=True)
            continue
        present = field.metadata.get("present")
        if present is None:
            overrides[field.name] = override(rename=_camel(field.name))
        else:
            overrides[field.name] = override(
                rename=_camel(field.name),
                omit_if_default=True,
                struct_hook=conv.get_structure_hook(present),
            )
    base_structure = make_dict_structure_fn(cls, conv, _cattrs_detailed_validation=False, **overrides)
    base_unstructure = make_dict_unstructure_fn(cls, conv, **overrides)
    tag = _TAGS.get(cls)
    known = frozenset(
        [_camel(f.name) for f in attrs.fields(cls) if f.name != "extra"] + ([tag[0]] if tag else [])
    )

    def structure(value: object, _: Any) -> Any:
        if type(value) is not dict:
            _fail(value, f"an object ({cls.__name__})")
        instance = base_structure(value, cls)
        if has_extra and not known.issuperset(value):  # type: ignore[arg-type]
            # The instance is new and not yet shared: filling in the unknown
            # fields here keeps the generated hook as cattrs made it.
            extra = {k: v for k, v in value.items() if k not in known}  # type: ignore[union-attr]
            object.__setattr__(instance, "extra", extra)
        return instance

    def unstructure(instance: Any) -> dict:
        body = base_unstructure(instance)
        if tag is not None:
            body = {tag[0]: tag[1], **body}
        if has_extra and instance.extra:
            body.update(instance.extra)
        return body

    conv.register_structure_hook(cls, structure)
    conv.register_unstructure_hook(cls, unstructure)


def _register_union(conv: cattrs.Converter, union: Any, members: tuple[type, ...]) -> None:
    (key,) = {_TAGS[member][0] for member in members}
    by_tag = {_TAGS[member][1]: member for member in members}

    def structure(value: object, _: Any) -> Any:
        if type(value) is not dict:
            _fail(value, "an object")
        tag = value.get(key)  # type: ignore[union-attr]
        member = by_tag.get(tag) if type(tag) is str else None
        if member is None:
            raise WireError(f"unknown {key} {tag!r:.40}")
        return conv.structure(value, member)

    conv.register_structure_hook(union, structure)
    conv.register_unstructure_hook(union, lambda value: conv.unstructure(value, type(value)))


def _register_operation_union(conv: cattrs.Converter) -> None:
    # ``status`` is the tag, but two of its values (queued, running) share a
    # class, which keeps the value as an attribute.
    def structure(value: object, _: Any) -> DaemonOperation:
        if type(value) is not dict:
            _fail(value, "an object")
        status = value.get("status")  # type: ignore[union-attr]
        if status == "settled":
            return conv.structure(value, SettledOperation)
        return conv.structure(value, PendingOperation)

    conv.register_structure_hook(DaemonOperation, structure)
    conv.register_unstructure_hook(DaemonOperation, lambda value: conv.unstructure(value, type(value)))


def _register_input(conv: cattrs.Converter) -> None:
    parts = tuple[ContainerInputPart, ...]

    def structure(value: object, _: Any) -> ContainerInput:
        if type(value) is str:
            return value  # type: ignore[return-value]
        return conv.structure(value, parts)

    def unstructure(value: ContainerInput) -> JsonValue:
        return value if type(value) is str else conv.unstructure(value, parts)

    conv.register_structure_hook(ContainerInput, structure)
    conv.register_unstructure_hook(ContainerInput, unstructure)


#: The container wire's converter: ``converter.unstructure(message)`` is the
#: wire JSON object, ``converter.structure(obj, T)`` the typed one.
converter: Final = make_converter()

#: What structuring raises on a value of the wrong shape. Caught here and
#: nowhere else on the parse path.
STRUCTURE_ERRORS: Final = (WireError, KeyError, TypeError, ValueError, cattrs.BaseValidationError)


def structure_or_none(value: object, tp: Any) -> Any:
    """``converter.structure(value, tp)``, or None when it does not fit."""
    try:
        return converter.structure(value, tp)
    except STRUCTURE_ERRORS:
        return None


# --------------------------------------------------------------------------- parsing

def parse_host_message(text: str) -> HostMessage | None:
    """One host → daemon message, or None when ``text`` is not one."""
    try:
        value = loads(text)
    except JsonError:
        return None
    return structure_or_none(value, HostMessage)


def parse_daemon_message(text: str) -> DaemonMessage | None:
    """One daemon → host message, or None when ``text`` is not one."""
    try:
        value = loads(text)
    except JsonError:
        return None
    return structure_or_none(value, DaemonMessage)


def dump_message(message: HostMessage | DaemonMessage) -> str:
    """The wire text of a message, as ``JSON.stringify`` would write it."""
    return dumps(converter.unstructure(message))


# --------------------------------------------------------------------------- rules

def input_text(input: ContainerInput | JsonValue) -> str:
    """The text of an input, with image parts left out (each still a line).

    Takes the typed input or its wire JSON. As the reference: the text parts'
    texts joined with newlines, every other part contributing an empty line.
    """
    if type(input) is str:
        return input
    texts = []
    for part in input:
        if type(part) is TextInputPart:
            texts.append(part.text)
        elif type(part) is dict and part.get("type") == "text":
            texts.append(part["text"])
        else:
            texts.append("")
    return "\n".join(texts)


def chunk_entries(entries: Sequence[JsonValue]) -> list[list[JsonValue]]:
    """Split entries, in order, into groups whose JSON stays within
    :data:`MAX_CHUNK_CHARS`, measured as the reference measures it (the sum of
    each entry's ``JSON.stringify(entry).length``). An entry larger than that
    is a group of its own. No entries, no groups."""
    groups: list[list[JsonValue]] = []
    group: list[JsonValue] = []
    size = 0
    for entry in entries:
        length = js_length(dumps(entry))
        if group and size + length > MAX_CHUNK_CHARS:
            groups.append(group)
            group, size = [], 0
        group.append(entry)
        size += length
    if group:
        groups.append(group)
    return groups
