"""The container daemon protocol: types, parsers and rules.

The wire between a host (which owns the durable record of a session) and the
daemon in a container (which runs the agent): one WebSocket per session at
``/sessions/<url-encoded id>``. The daemon speaks first with ``hello``; the host
answers with ``open`` when the daemon does not hold the session's generation,
then ``replay``, then delivers ``prompt``s. Everything the daemon produces for a
session is a numbered ``frame``, kept until the host acknowledges it.

Spec: ``protocol.d.ts`` of npm ``agents@0.32.0`` and, where it is silent, the
reference parsers of the same package (``dist/protocol-*.js``). A test runs
those reference parsers on a generated corpus and compares every answer with
ours (``tests/wire/test_container_parity.py``).

Theory of operation
-------------------

Every type of ``protocol.d.ts`` is a frozen, slotted attrs class with snake_case
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
return a message or ``None``, at any depth and size. Structuring errors are
caught in one place (:func:`structure_or_none`). A text nested deeper than
``wire.json.MAX_DEPTH`` (256) is ``None`` before anything is parsed, and
every check of a JSON-valued field (``is_json``, ``isEvent``) walks it
without recursion; the reference (V8) reads much deeper values, and the
difference is a refusal, the safe side of it.
"""

from __future__ import annotations

from typing import Any, Callable, Final, Literal, Mapping, NewType, Sequence, TypeAlias, Union

import attrs
import cattrs

from wire._convert import Builder, Count, Json, Number, camel, identity
from wire.json import (ABSENT, MAX_SAFE_INTEGER, Absent, JsonError, JsonValue, NotFinite, dumps, is_json, js_length, loads,
                       loads_finite)

# --------------------------------------------------------------------------- constants
# Values from ``protocol.d.ts`` and the reference (``protocol-*.js``) of npm
# ``agents@0.32.0``, under their names there.

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


#: ``CONTAINER_ENV`` of ``protocol.d.ts``.
CONTAINER_ENV: Final = ContainerEnv()

# --------------------------------------------------------------------------- field types
# Types the converter gives strict hooks, so an annotation says which rule the
# wire applies: ``Count``, ``Number`` and ``Json`` (from ``wire._convert``,
# shared with the mod wire), and this one of the container's own.
#
# Optional fields follow ``wire._convert``'s one rule: the default is what
# "absent" means, and the rest of the annotation is what a present key holds.
# ``model: str | None = None`` may be left out but is never null (the
# reference refuses null there, and so do we); ``options: Json | Absent =
# ABSENT`` may be left out, and null is a value of its own.

#: An adapter event as the reference checks it (``isEvent``), kept as the
#: plain JSON object it is; :data:`ContainerEvent` is its typed view.
EventValue = NewType("EventValue", dict)


def _extra() -> Any:
    """The ``extra`` attribute: unknown wire fields the reference keeps."""
    return attrs.field(factory=dict, kw_only=True, repr=False)


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

    model: str | None = None
    options: Json | Absent = ABSENT
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
    output: Json | Absent = ABSENT


ContainerPart: TypeAlias = Union[TextPart, ReasoningPart, ImagePart, ToolPart]


@attrs.frozen(kw_only=True)
class ContainerMessage:
    """A transcript message. Emitted again under the same id to update it."""

    id: str
    role: Literal["user", "assistant"]
    parts: tuple[ContainerPart, ...]
    #: The operation the message belongs to.
    operation_id: str | None = None
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

    input_tokens: float | None = None
    output_tokens: float | None = None
    cost_usd: float | None = None


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

    operation_id: str | None = None


@attrs.frozen(kw_only=True)
class Configure:
    settings: ContainerSettings


@attrs.frozen(kw_only=True)
class Ack:
    """Frames up to ``seq`` are stored; the daemon may forget them."""

    seq: Count


@attrs.frozen(kw_only=True)
class Answer:
    """A person's answer to an ask the adapter raised (a ``raw`` event
    ``{"type": "ask", "askId", ...}``). Ours, not the reference's: only an
    adapter that raises asks (the ACP adapter) is ever sent one
    (docs/container-protocol.md, "Asks")."""

    ask_id: str
    decision: Literal["allow", "deny"]


HostMessage: TypeAlias = Union[Restore, Open, Replay, Prompt, Abort, Configure, Ack, Answer]

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
    Answer: ("type", "answer"),
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
    Restore, Open, Replay, Prompt, Abort, Configure, Ack, Answer,
)  # fmt: skip

#: Every tagged union (its members are its arguments), and its name in errors.
_UNIONS: dict[Any, str] = {
    ContainerInputPart: "an input part",
    ContainerPart: "a message part",
    ContainerEvent: "an event",
    ContainerOutcome: "an outcome",
    DaemonFrame: "a frame",
    DaemonMessage: "a daemon message",
    HostMessage: "a host message",
}


class WireError(ValueError):
    """A value does not have the shape the wire requires."""


def is_event(value: object) -> bool:
    """The reference's ``isEvent``: an adapter event the wire carries."""
    return _event_shape(value) and is_json(value)


def _event_shape(value: object) -> bool:
    """:func:`is_event` but for the :func:`is_json` walk (for a value read
    by :func:`wire.json.loads_finite`, which needs none)."""
    if type(value) is not dict or type(value.get("type")) is not str:
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


def make_converter() -> cattrs.Converter:
    """Build the container wire's converter. :data:`converter` is one.

    Strict leaves, arrays, nullable and optional fields, tagged unions and
    camelCase classes come from :class:`wire._convert.Builder`; what is the
    container's own is here: adapter events checked as ``isEvent``, the
    operation union, the input union, and ``extra``.
    """
    build = Builder(WireError, tags=_TAGS, detailed=False)
    conv = build.conv

    def structure_event(value: object, _: Any) -> dict:
        if not is_event(value):
            build.fail(value, "an adapter event")
        return value  # type: ignore[return-value]

    conv.register_structure_hook(EventValue, structure_event)
    conv.register_unstructure_hook(EventValue, identity)

    # Unions before the classes: a class's generated hook looks up its
    # fields' hooks once, when it is made, and the union hooks resolve their
    # members only when called.
    for union, what in _UNIONS.items():
        build.union(union, what)
    _register_operation_union(build)
    _register_input(conv)

    # Classes: unknown fields kept in ``extra`` where the reference keeps them.
    for cls in _CLASSES:
        if "extra" in attrs.fields_dict(cls):
            _register_with_extra(build, cls)
        else:
            build.classes(cls)
    return conv


def _register_with_extra(build: Builder, cls: type) -> None:
    """Hooks for a class whose unknown wire fields the reference keeps: the
    shared class hooks (:meth:`Builder.register`), plus ``extra`` filled on
    the way in and written back, after the known fields, on the way out."""
    structure_fields, unstructure_fields = build.class_hooks(cls, omit=("extra",))
    tag = _TAGS.get(cls)
    known = frozenset(
        [camel(f.name) for f in attrs.fields(cls) if f.name != "extra"] + ([tag[0]] if tag else [])
    )
    fail, what = build.fail, build.what(cls)

    def structure(value: object, _: Any) -> Any:
        if type(value) is not dict:
            fail(value, what)
        instance = structure_fields(value, cls)
        if not known.issuperset(value):  # type: ignore[arg-type]
            # The instance is new and not yet shared: filling in the unknown
            # fields here keeps the generated hook as cattrs made it.
            extra = {k: v for k, v in value.items() if k not in known}  # type: ignore[union-attr]
            object.__setattr__(instance, "extra", extra)
        return instance

    def unstructure(instance: Any) -> dict:
        body = unstructure_fields(instance)
        if tag is not None:
            body = {tag[0]: tag[1], **body}
        if instance.extra:
            body.update(instance.extra)
        return body

    build.conv.register_structure_hook(cls, structure)
    build.conv.register_unstructure_hook(cls, unstructure)


def _register_operation_union(build: Builder) -> None:
    # ``status`` is the tag, but two of its values (queued, running) share a
    # class, which keeps the value as an attribute.
    conv = build.conv

    def structure(value: object, _: Any) -> DaemonOperation:
        if type(value) is not dict:
            build.fail(value, "an operation (an object)")
        status = value.get("status")  # type: ignore[union-attr]
        if status == "settled":
            return conv.structure(value, SettledOperation)
        return conv.structure(value, PendingOperation)

    conv.register_structure_hook(DaemonOperation, structure)
    build.unstructure_by_class(DaemonOperation)


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
    finite = True
    try:
        try:
            value = loads_finite(text)
        except NotFinite:  # rare: the converter says whether the infinity is where it may not be
            value, finite = loads(text), False
    except JsonError:
        return None
    fast = _plain_frame(value, finite=finite)
    if fast is not None:
        return fast
    return structure_or_none(value, DaemonMessage)


def _plain_frame(value: object, *, finite: bool = False) -> FrameMessage | None:
    """The commonest daemon messages, a ``start``, ``event``, ``settle`` or
    ``persist`` frame with no unknown field, built directly; None for
    anything else, which the converter then reads. The same object the
    converter would build (the same checks: a count, a string or null,
    ``isEvent``, ``isJson``, the outcome's status), at a fraction of the
    cost (cattrs' union and class hooks are ~4 µs a frame).
    ``finite``: ``value`` came from :func:`wire.json.loads_finite`, so every
    part of it passes :func:`is_json` and the walk is skipped."""
    if type(value) is not dict or len(value) != 3 or value.get("type") != "frame":
        return None
    seq = value.get("seq")
    frame = value.get("frame")
    if type(seq) is not int or not 0 <= seq <= MAX_SAFE_INTEGER or type(frame) is not dict:
        return None
    plain = _plain_frame_body(frame, _event_shape if finite else is_event, _always if finite else is_json)
    return None if plain is None else FrameMessage(seq=seq, frame=plain)


def _plain_frame_body(frame: dict[str, Any], event_check: Callable[[object], bool],
                      json_check: Callable[[object], bool]) -> DaemonFrame | None:
    """The frame of :func:`_plain_frame`, or None when it is not plain."""
    kind = frame.get("kind")
    operation_id = frame.get("operationId")
    if kind == "event" and len(frame) == 3 and "operationId" in frame:
        event = frame.get("event")
        if (operation_id is None or type(operation_id) is str) and event_check(event):
            return EventFrame(operation_id=operation_id, event=event)
    elif kind == "start" and len(frame) == 2 and type(operation_id) is str:
        return StartFrame(operation_id=operation_id)
    elif kind == "settle" and len(frame) == 3 and type(operation_id) is str:
        return _plain_settle(operation_id, frame.get("outcome"))
    elif kind == "persist" and len(frame) == 2:
        return _plain_persist(frame.get("entries"), json_check)
    return None


def _plain_settle(operation_id: str, outcome: object) -> SettleFrame | None:
    plain = _plain_outcome(outcome)
    return None if plain is None else SettleFrame(operation_id=operation_id, outcome=plain)


def _plain_persist(entries: object, json_check: Callable[[object], bool]) -> PersistFrame | None:
    if type(entries) is list and all(map(json_check, entries)):
        return PersistFrame(entries=tuple(entries))
    return None


def _always(value: object) -> bool:
    return True


def _plain_outcome(value: object) -> Done | Unanswered | None:
    """A settle frame's outcome with no unknown field, or None."""
    if type(value) is not dict or len(value) != 2:
        return None
    status = value.get("status")
    if status == "done":
        text = value.get("text")
        return Done(text=text) if type(text) is str else None
    if status == "unanswered":
        reason = value.get("reason")
        return Unanswered(reason=reason) if type(reason) is str else None
    return None


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
