"""The settings documents and their patches, the typed settings the layer
reads, and the plug-in modules' answers, as attrs models through one cattrs
converter.

``plugins.json``, ``routes.json`` and ``limits.json`` (and the patches of
``router plugins|routes|limits set``) are read by structuring them into the
frozen classes below with :data:`converter`, built by :func:`make_converter`
on the wires' :class:`wire._convert.Builder`: strict leaves (a ``bool`` is
never a number, ``"1"`` is never a number, a count is an integer from 0 to
2**53 − 1), arrays only from JSON arrays, and a refusal that names the
failing path, as cattrs' ``transform_error`` does::

    invalid-routes: the routes patch: instances["coder"].model: expected a non-empty string, got a number

The models decide *shape* only. What a value means (a kind that is not a
kind, a module that is not in the tree, a harness that is off) is decided
after structuring, by the writers in ``settings``, ``routing`` and
``limits``, each with its own refusal code (``docs/plugins.md``).

What is stored is the JSON value that was checked, not the model written
back: a file keeps the bytes a person wrote (and so its revision) unless a
patch changes it, and a stored document may hold keys the router does not
read (a person's note): the document models take extra keys, the patch
models refuse them.

Reading, and modules' answers
-----------------------------

What the layer reads from a stored file is structured once more, into
:class:`PluginsSettings`, :class:`RoutesSettings` and :class:`LimitsSettings`
(:func:`read_settings`); the loader, the layer, routing, the commands and the
channels read those objects, never the JSON. Reading keeps today's rule that
one bad entry costs that entry only: a kind's setting becomes a
:class:`KindSwitch` carrying the loader's refusal (decided by the kind's own
``kinds.check_kind_setting``), an instance's route a :class:`StoredInstance`
or the refusal a launch of it gets; a part of the wrong type reads as empty.
So any JSON structures, and the hooks for these classes are written by hand
(``_read_settings_hooks``), in this one place.

A module's answer is foreign data too: :func:`answer_as` structures it with
the same converter, as ``malformed-answer`` naming the path when it does not
fit (search answers, a harness's ``reach``, a limit check's tagged answers).

Depth
-----

Every value is checked to nest at most :data:`MAX_DEPTH` levels before
anything else reads it (iteratively: the check itself cannot overflow the
stack). Module options are any JSON, and ``copy.deepcopy``, ``redact`` and
the limits tree's walkers recurse: a file or a patch nested a few hundred
levels deep would otherwise raise ``RecursionError`` instead of refusing.
"""

from __future__ import annotations

import copy
import typing
from typing import Any, Final, Literal, Mapping, NewType, TypeVar

import attrs
import cattrs
from cattrs.errors import ForbiddenExtraKeysError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn

from wire._convert import Builder, Json, describe
from wire.json import dumps

from router.errors import Refusal
from router.plugins.kinds import KINDS, check_kind_setting, is_name, names_of, unknown_kind

__all__ = [
    "AskRuleSetting",
    "AsksDocument",
    "AsksSetting",
    "MAX_DEPTH",
    "MAX_SETTINGS_BYTES",
    "read_capped",
    "FallbackSetting",
    "Allowed",
    "CountLike",
    "Counted",
    "GoesOn",
    "LaunchAnswer",
    "LimitHit",
    "NotAllowed",
    "NotEnforced",
    "ReportEntry",
    "StopAnswer",
    "Stops",
    "TokenCounts",
    "TurnAnswer",
    "TurnUsage",
    "is_count_like",
    "Names",
    "ReachAnswer",
    "SearchAnswer",
    "SearchResult",
    "answer_as",
    "KindSwitch",
    "KindSwitches",
    "LimitsSettings",
    "ModelEntry",
    "PluginsSettings",
    "RoutesSettings",
    "read_settings",
    "refusal_from",
    "Json",
    "LimitTree",
    "NonEmpty",
    "InstanceSetting",
    "LimitsPatch",
    "ModelSetting",
    "PluginsDocument",
    "PluginsPatch",
    "ProjectSetting",
    "ProjectsDocument",
    "RoutesDocument",
    "RoutesPatch",
    "SettingsShapeError",
    "StoredInstance",
    "StoredRoute",
    "converter",
    "make_converter",
    "nests_deeper",
    "shape_problem",
    "structure",
]

T = TypeVar("T")

#: The deepest nesting a settings document or patch may have. The deepest
#: shape the router itself reads is a limit under
#: ``limits.tokens.models.<provider>.<model>`` (6 levels); module options
#: are small objects. 64 is far above both and far below the interpreter's
#: recursion limit (1,000), which ``copy.deepcopy`` and the limits tree's
#: walkers would reach first.
MAX_DEPTH: Final = 64

#: The largest settings file or patch file read. Real ones are a few KiB;
#: a bigger one is a mistake (or hostile) and is refused unparsed.
MAX_SETTINGS_BYTES: Final = 4 * 1024 * 1024

#: A string that is not empty (a route's harness, model, thinking level).
NonEmpty = NewType("NonEmpty", str)
#: A key of the limits tree: a limit or a group of limits (see below).
LimitTree = NewType("LimitTree", dict)


class SettingsShapeError(ValueError):
    """A value of the wrong shape somewhere in a settings document."""


def nests_deeper(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` has arrays or objects nested more than ``limit``
    deep. Iterative, so any depth is answered."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            children: Any = node.values()
        elif type(node) in (list, tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def read_capped(path: Any) -> bytes | None:
    """A file's bytes, or ``None`` when it holds more than
    :data:`MAX_SETTINGS_BYTES` (read no further). Raises ``OSError``."""
    with open(path, "rb") as f:
        data = f.read(MAX_SETTINGS_BYTES + 1)
    return None if len(data) > MAX_SETTINGS_BYTES else data


# --------------------------------------------------------------------------- models


@attrs.frozen(kw_only=True)
class FallbackSetting:
    """A fallback in a routes patch: each field a non-empty string or
    ``null``/absent (a partial one is refused after structuring)."""

    harness: NonEmpty | None = None
    model: NonEmpty | None = None
    thinking: NonEmpty | None = None


@attrs.frozen(kw_only=True)
class InstanceSetting:
    """An instance's route in a routes patch."""

    harness: NonEmpty | None = None
    model: NonEmpty | None = None
    thinking: NonEmpty | None = None
    account: NonEmpty | None = None
    fallback: FallbackSetting | None = None


@attrs.frozen(kw_only=True)
class ModelSetting:
    provider: NonEmpty


@attrs.frozen(kw_only=True)
class RoutesPatch:
    revision: str
    instances: Mapping[NonEmpty, InstanceSetting | None] = attrs.field(factory=dict)
    models: Mapping[str, ModelSetting | None] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class StoredRoute:
    """A route as ``routes.json`` holds it. An empty string is "not set",
    as a missing key is (a launch then refuses ``no-route``)."""

    harness: str | None = None
    model: str | None = None
    thinking: str | None = None


@attrs.frozen(kw_only=True)
class StoredInstance:
    harness: str | None = None
    model: str | None = None
    thinking: str | None = None
    account: str | None = None
    fallback: StoredRoute | None = None


@attrs.frozen(kw_only=True)
class RoutesDocument:
    """``routes.json``: its instances are read one at a time (a launch of
    one instance is not refused for another's mistake)."""

    models: Mapping[str, Json] = attrs.field(factory=dict)
    instances: Mapping[str, Json] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PluginsPatch:
    """``{"revision", "plugins"?: {kind: setting | null}, "options"?: {kind:
    {name: object | null}}}``. A kind's setting is checked by its kind
    (``kinds.check_kind_setting``), after structuring."""

    revision: str
    plugins: Mapping[str, Json] = attrs.field(factory=dict)
    options: Mapping[str, Mapping[str, Mapping[str, Json] | None]] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PluginsDocument:
    plugins: Mapping[str, Json] = attrs.field(factory=dict)
    options: Mapping[str, Json] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class LimitsPatch:
    """``{"revision", "limits"?: tree, "reset"?: [[key, ...], ...]}``."""

    revision: str
    #: A patch of the tree: ``null`` removes; the merged tree is checked.
    limits: Mapping[str, Json] | None = None
    reset: tuple[tuple[NonEmpty, ...], ...] | None = None


@attrs.frozen(kw_only=True)
class AskRuleSetting:
    """One rule of ``asks.json``: a permission ask for ``tool`` whose input
    matches ``input`` (a shell-style pattern over the command, the file path,
    or the input's JSON; absent: any input) is answered ``decision`` with no
    person asked."""

    tool: NonEmpty
    decision: Literal["allow", "deny"]
    input: str | None = None


@attrs.frozen(kw_only=True)
class AsksSetting:
    """``asks.json``'s ``asks``: how long an ask waits for a person's answer
    (seconds; then Claude Code's own prompt comes up) and the rules."""

    deadline: float = 120.0
    rules: tuple[AskRuleSetting, ...] = ()


@attrs.frozen(kw_only=True)
class AsksDocument:
    asks: AsksSetting = attrs.field(factory=AsksSetting)


@attrs.frozen(kw_only=True)
class ProjectSetting:
    """One project of ``projects.json`` (:mod:`router.worktrees.projects`):
    a git repository's top-level folder, an absolute path."""

    path: NonEmpty


@attrs.frozen(kw_only=True)
class ProjectsDocument:
    """``projects.json``: the repositories sessions may be started in, by
    name."""

    projects: Mapping[NonEmpty, ProjectSetting] = attrs.field(factory=dict)


# --------------------------------------------------------------------------- read settings
#
# What the layer reads from a stored document, typed. These never refuse a
# whole document that is JSON: today's rule is that one bad entry costs that
# entry only (one kind keeps what it had, one instance refuses its launches),
# so a bad entry is structured into a value that carries its refusal, and a
# part of the wrong type reads as empty. Hooks: :func:`make_converter`.


@attrs.frozen(kw_only=True)
class KindSwitch:
    """One kind's setting under ``plugins`` as the loader reads it: the
    names it lists, in order (the strings of a list kind's array, a one-module
    kind's string), and why the loader refuses it, if it does
    (``invalid-plugins``, ``bad-name``, ``unknown-kind``) with the name at
    fault, when one is. Only a setting with no refusal switches its names on.
    ``null`` switches the kind off, as an absent key does."""

    value: Json
    names: tuple[str, ...] = ()
    refusal: Refusal | None = None
    bad: str | None = None


@attrs.frozen(kw_only=True)
class KindSwitches:
    """The ``plugins`` object: kind -> :class:`KindSwitch` (unknown kinds
    included, refused), or ``None`` when it is not an object (every kind is
    refused and keeps what it had)."""

    by_kind: Mapping[str, KindSwitch] | None

    def get(self, kind: str) -> KindSwitch | None:
        return None if self.by_kind is None else self.by_kind.get(kind)


#: Module options: kind -> module -> its options object.
KindOptions = Mapping[str, Mapping[str, Json]]


@attrs.frozen(kw_only=True)
class PluginsSettings:
    """``plugins.json`` as the layer reads it. A document that is not an
    object switches nothing (every kind refused); an absent ``plugins`` is
    every kind off. Options that are not objects (a kind's or a module's)
    read as none."""

    switches: KindSwitches
    options: Mapping[str, KindOptions] = attrs.field(factory=dict)

    def listed(self, kind: str) -> tuple[str, ...]:
        """The names ``kind``'s setting lists (see :class:`KindSwitch`)."""
        switch = self.switches.get(kind)
        return () if switch is None else switch.names

    def kind_options(self, kind: str) -> dict[str, Any]:
        """A copy of one kind's options, module name -> its options (the
        settings are shared by every reader of the same file revision, and a
        module may change what it is handed)."""
        return copy.deepcopy(dict(self.options.get(kind, {})))

    def module_options(self, kind: str, name: str) -> dict[str, Any]:
        """A copy of one module's options (``{}`` when none are set)."""
        return copy.deepcopy(dict(self.options.get(kind, {}).get(name, {})))


@attrs.frozen(kw_only=True)
class ModelEntry:
    """A configured model; a ``provider`` that is not a string reads as
    unknown."""

    provider: str | None = None


@attrs.frozen(kw_only=True)
class RoutesSettings:
    """``routes.json`` as a launch reads it: the configured models (an entry
    that is not an object is not one) and each instance's route, or the
    refusal a launch of that instance gets (``no-route`` for a setting that
    is not an object, ``invalid-settings`` naming the path for one of the
    wrong shape): one instance is never refused for another's mistake."""

    models: Mapping[str, ModelEntry] = attrs.field(factory=dict)
    instances: Mapping[str, "StoredInstance | Refusal"] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class LimitsSettings:
    """``limits.json`` as the limit checks read it: the ``limits`` tree
    (``{}`` when it is not an object). The tree is handed to the limit-check
    modules as JSON, their wire; :mod:`router.plugins.limit_checks` walks it."""

    limits: Mapping[str, Json] = attrs.field(factory=dict)


# --------------------------------------------------------------------------- plug-in answers
#
# A module's answer is foreign data too (a module is anyone's code): where it
# has a structure, it goes through the same converter (:func:`answer_as`).

#: A list of names a module answers (a harness's ``levels()``); a Python
#: module may answer a tuple as well as a list.
Names = NewType("Names", tuple)


@attrs.frozen(kw_only=True)
class ReachAnswer:
    """What a harness module's ``reach()`` holds beside any other JSON: how
    the session is reached."""

    via: str


@attrs.frozen(kw_only=True)
class SearchResult:
    """One result of a search answer: three strings, nothing else."""

    title: str
    url: str
    snippet: str


@attrs.frozen(kw_only=True)
class SearchAnswer:
    """A search-source module's answer: exactly these keys, strings
    throughout, ``total`` a count."""

    query: str
    total: int
    results: tuple[SearchResult, ...]


#: A count in a limit check's answer: a non-negative integer (not a bool) or
#: a string of digits (:func:`is_count_like`).
CountLike = NewType("CountLike", object)


def is_count_like(value: object) -> bool:
    """A non-negative integer (not a bool), or a non-empty string of digits."""
    if type(value) is int:
        return value >= 0  # type: ignore[operator]
    return type(value) is str and value.isascii() and value.isdigit()  # type: ignore[union-attr]


@attrs.frozen(kw_only=True)
class LimitHit:
    """The limit a check's answer says was reached. Its ``path`` must name a
    limit whose ``limit`` is this one (checked against the tree after)."""

    path: tuple[str, ...]
    limit: Json
    count: CountLike
    unknown_turns: CountLike


@attrs.frozen(kw_only=True)
class Allowed:
    """``may_launch``: the launch may start."""

    allow: Literal[True]


@attrs.frozen(kw_only=True)
class NotAllowed:
    """``may_launch``: refused, at the limit of ``hit``."""

    allow: Literal[False]
    hit: LimitHit


@attrs.frozen(kw_only=True)
class GoesOn:
    """``must_stop``: the session may go on after this turn."""

    stop: Literal[False]


@attrs.frozen(kw_only=True)
class Stops:
    """``must_stop``: the session stops at the end of its turn, at the limit
    of ``hit``."""

    stop: Literal[True]
    hit: LimitHit


#: ``may_launch`` and ``must_stop`` answers, told apart by their tag's value.
LaunchAnswer = Allowed | NotAllowed
StopAnswer = GoesOn | Stops
ANSWER_TAGS: Final[Mapping[type, tuple[str, object]]] = {
    Allowed: ("allow", True), NotAllowed: ("allow", False), GoesOn: ("stop", False), Stops: ("stop", True),
}


@attrs.frozen(kw_only=True)
class TokenCounts:
    """A counted entry's ``kinds``: the four token kinds
    (``usage.TOKEN_KINDS``), each a count."""

    input: CountLike
    output: CountLike
    cache_creation: CountLike
    cache_read: CountLike


@attrs.frozen(kw_only=True)
class NotEnforced:
    path: tuple[str, ...]
    limit: Json
    since: str | None
    not_enforced: str


@attrs.frozen(kw_only=True)
class Counted:
    path: tuple[str, ...]
    limit: Json
    since: str | None
    count: CountLike
    kinds: TokenCounts
    unknown_turns: CountLike
    note: str = ""


@attrs.frozen(kw_only=True)
class TurnUsage:
    """A turn's usage as a usage source answers it: the four token kinds
    (``usage.TOKEN_KINDS``), each a count, and nothing else."""

    input: int
    output: int
    cache_creation: int
    cache_read: int


@attrs.frozen(kw_only=True)
class TurnAnswer:
    """A usage source's ``read_turn`` answer when the turn is its own:
    exactly ``mark`` (any JSON) and ``usage`` (``null`` until it is known)."""

    mark: Json
    usage: TurnUsage | None


#: A ``report`` entry: :class:`NotEnforced` when it has ``not_enforced``.
ReportEntry = NotEnforced | Counted


#: Patches (and the answers with exact keys) refuse keys they do not take;
#: documents keep them.
PATCHES: Final = (FallbackSetting, InstanceSetting, ModelSetting, RoutesPatch, PluginsPatch,
                  LimitsPatch)
ANSWERS: Final = (SearchResult, SearchAnswer, LimitHit, Allowed, NotAllowed, GoesOn, Stops, TokenCounts,
                  NotEnforced, Counted, TurnUsage, TurnAnswer)
DOCUMENTS: Final = (ReachAnswer, StoredRoute, StoredInstance, RoutesDocument, PluginsDocument, AskRuleSetting, AsksSetting,
                    AsksDocument, ProjectSetting, ProjectsDocument)


# --------------------------------------------------------------------------- converter


def make_converter() -> cattrs.Converter:
    """The settings converter: the wires' strict leaves, objects keyed by
    strings, the limits tree, and the models above."""
    builder = Builder(SettingsShapeError, tags=ANSWER_TAGS, detailed=True)
    conv = builder.conv

    def structure_non_empty(value: object, _: Any) -> str:
        if type(value) is not str or not value:
            raise SettingsShapeError(f"expected a non-empty string, got {describe(value)}")
        return value  # type: ignore[return-value]

    conv.register_structure_hook(NonEmpty, structure_non_empty)

    builder.mappings()
    conv.register_structure_hook(LimitTree, lambda value, _: _structure_tree(value))
    _read_settings_hooks(conv)
    # A generated hook looks its fields' hooks up when it is made: each class
    # after the classes its fields name (the order of the tuples above).
    def structure_count_like(value: object, _: Any) -> object:
        if not is_count_like(value):
            raise SettingsShapeError(f"expected a count (a non-negative integer or a string of digits), "
                                     f"got {describe(value)}")
        return value

    conv.register_structure_hook(CountLike, structure_count_like)
    builder.union(LaunchAnswer, "a may_launch answer")
    builder.union(StopAnswer, "a must_stop answer")

    def structure_entry(value: object, _: Any) -> Any:
        if type(value) is not dict:
            builder.fail(value, "a report entry (an object)")
        return conv.structure(value, NotEnforced if "not_enforced" in value else Counted)  # type: ignore[operator]

    conv.register_structure_hook(ReportEntry, structure_entry)
    strings = conv.get_structure_hook(tuple[str, ...])
    conv.register_structure_hook(
        Names, lambda value, _: strings(list(value) if type(value) is tuple else value, tuple[str, ...]))
    for cls in PATCHES + ANSWERS + DOCUMENTS:
        attrs.resolve_types(cls)
        structure = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=cls not in DOCUMENTS)
        builder.register(cls, structure, conv.get_unstructure_hook(cls))
    return conv


def _object(value: object) -> dict:
    """A stored part that should be an object: itself, else empty."""
    return value if type(value) is dict else {}


def _kind_switch(key: str, value: object) -> KindSwitch:
    """One kind's setting, checked by its kind (``kinds.check_kind_setting``)."""
    kind = KINDS.get(key)
    if kind is None:
        return KindSwitch(value=value, refusal=unknown_kind(key))
    if value is None:
        return KindSwitch(value=None)
    refusal = check_kind_setting(kind, value)
    if refusal is None:
        return KindSwitch(value=value, names=tuple(names_of(kind, value)))
    if kind.switch == "one":
        listed: tuple[str, ...] = (value,) if type(value) is str else ()
    else:
        listed = tuple(n for n in value if type(n) is str) if type(value) is list else ()  # type: ignore[union-attr]
    bad = listed[0] if kind.switch == "one" and listed else None
    if refusal.code == "bad-name" and bad is None:
        bad = next((n for n in listed if not is_name(n)), None)
    return KindSwitch(value=value, names=listed, refusal=refusal, bad=bad)


def _switches(value: object) -> KindSwitches:
    if type(value) is not dict:
        return KindSwitches(by_kind=None)
    return KindSwitches(by_kind={key: _kind_switch(key, item) for key, item in value.items()})


def _plugins_settings(value: object) -> PluginsSettings:
    if type(value) is not dict:
        return PluginsSettings(switches=KindSwitches(by_kind=None))
    options = {
        kind: {name: opts for name, opts in per_module.items() if type(opts) is dict}
        for kind, per_module in _object(value.get("options")).items() if type(per_module) is dict
    }
    return PluginsSettings(switches=_switches(value.get("plugins", {})), options=options)


def _instance(conv: cattrs.Converter, name: str, setting: object) -> StoredInstance | Refusal:
    if type(setting) is not dict:
        return Refusal(code="no-route",
                       message=f'no route is set for instance "{name}"; set one with `router routes set`')
    try:
        return conv.structure(setting, StoredInstance)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        refusal = refusal_from(exc, what="routes.json", code="invalid-settings", at=f"instances[{dumps(name)}]")
        return Refusal(code=refusal.code, message=f"{refusal.message}; fix it by hand")


def _routes_settings(conv: cattrs.Converter, value: object) -> RoutesSettings:
    document = _object(value)
    models = {
        name: ModelEntry(provider=entry.get("provider") if type(entry.get("provider")) is str else None)
        for name, entry in _object(document.get("models")).items() if type(entry) is dict
    }
    instances = {name: _instance(conv, name, setting)
                 for name, setting in _object(document.get("instances")).items()}
    return RoutesSettings(models=models, instances=instances)


def _read_settings_hooks(conv: cattrs.Converter) -> None:
    """The stored documents as the layer reads them (see "read settings"
    above): any JSON value structures, a bad entry carrying its refusal."""
    conv.register_structure_hook(KindSwitches, lambda value, _: _switches(value))
    conv.register_structure_hook(PluginsSettings, lambda value, _: _plugins_settings(value))
    conv.register_structure_hook(RoutesSettings, lambda value, _: _routes_settings(conv, value))
    conv.register_structure_hook(
        LimitsSettings, lambda value, _: LimitsSettings(limits=_object(_object(value).get("limits"))))


def _structure_tree(value: object) -> dict:
    """The limits tree: every object is a limit (it has a ``limit`` key: a
    count, and plain values beside it) or a group of limits and groups.
    Iterative; the depth was bounded before."""
    if type(value) is not dict:
        raise SettingsShapeError(f"expected an object of limits, got {describe(value)}")
    stack: list[tuple[tuple[str, ...], object]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if type(node) is not dict:
            raise _at(path, f'expected a limit (an object with a "limit") or a group of limits, '
                      f"got {describe(node)}")
        if "limit" not in node:
            stack.extend((path + (key,), child) for key, child in reversed(node.items()))
            continue
        limit = node["limit"]
        if type(limit) is not int or limit < 0:
            raise _at(path + ("limit",), f"expected a non-negative integer, got {describe(limit)}")
        for key, item in node.items():
            if not (item is None or type(item) in (str, int, float, bool)):
                raise _at(path + (key,), f"expected a plain value, got {describe(item)}")
    return value


def _at(path: tuple[str, ...], message: str) -> Exception:
    """An error deep in the limits tree, with its path as cattrs' notes."""
    exc: Exception = SettingsShapeError(message)
    for key in reversed(path):
        exc.add_note(IterableValidationNote(f"Structuring @ key {key!r}", key, dict))
        exc = cattrs.IterableValidationError("While structuring a limits tree", [exc], dict)
    return exc


converter: Final = make_converter()


# --------------------------------------------------------------------------- errors


def _step(exc: BaseException) -> str | None:
    """The path step cattrs' notes give an error: ``.name`` or ``["key"]``
    or ``[index]``."""
    for note in getattr(exc, "__notes__", ()):
        name = getattr(note, "name", None)
        if type(name) is str:
            return f".{name}"
        if isinstance(note, IterableValidationNote):
            index = note.index
            return f"[{dumps(index) if type(index) is str else index}]"
        if type(note) is str and " @ index " in note:  # the wires' array hook
            return f"[{note.rsplit(' @ index ', 1)[1]}]"
    return None


def shape_problem(exc: BaseException) -> tuple[tuple[str, ...], str]:
    """``(path, sentence)`` of a structuring error: the first failing path
    under ``exc``, as steps (``(".instances", '["coder"]', ".model")`` reads
    ``instances["coder"].model``), and what is wrong there."""
    steps: list[str] = []
    while True:
        if isinstance(exc, ForbiddenExtraKeysError):
            keys = ", ".join(sorted(map(str, exc.extra_fields)))
            return tuple(steps), f"keys it does not take: {keys}"
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
            step = _step(exc)
            if step is not None:
                steps.append(step)
            continue
        if isinstance(exc, KeyError):  # a required key is missing; its note named it
            return tuple(steps), "required"
        return tuple(steps), str(exc)


def structure(value: object, cls: Any, *, what: str, code: str,
              inner_code: str | None = None, at: str = "") -> Any:
    """``value`` as a ``cls``, or a refusal ``code`` naming ``what`` (the
    file or patch) and the failing path; ``at`` is where ``value`` sits in
    ``what`` (``instances["coder"]``). ``inner_code``, when given, is the
    code of a failure two or more steps deep (inside ``instances``, say),
    where ``code`` is that of the envelope."""
    if nests_deeper(value):
        return Refusal(code=code, message=f"{what} nests deeper than {MAX_DEPTH} levels")
    try:
        return converter.structure(value, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        return refusal_from(exc, what=what, code=code, inner_code=inner_code, at=at)


def refusal_from(exc: BaseException, *, what: str, code: str, inner_code: str | None = None,
                 at: str = "") -> Refusal:
    """A structuring error as a refusal: ``<what>: <path>: <what is wrong>``
    (see :func:`structure`)."""
    steps, message = shape_problem(exc)
    where = (at + "".join(steps)).lstrip(".")
    chosen = inner_code if inner_code is not None and len(steps) >= 2 else code
    return Refusal(code=chosen, message=f"{what}: {where + ': ' if where else ''}{message}")


def answer_as(value: object, tp: Any, *, what: str) -> Any:
    """A module's answer as ``tp``, or a ``malformed-answer`` refusal naming
    ``what`` and the failing path."""
    return structure(value, tp, what=what, code="malformed-answer")


def read_settings(value: object, cls: type[T]) -> T:
    """A stored document's value (JSON, its depth checked when it was read)
    as the typed settings ``cls`` (:class:`PluginsSettings`,
    :class:`RoutesSettings`, :class:`LimitsSettings`). Never raises on JSON:
    a bad entry carries its refusal."""
    return converter.structure(value, cls)
