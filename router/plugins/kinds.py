"""The kind registry: every part the core calls out to, as a plug-in kind.

A *kind* names a job (read usage, check limits, search, carry a channel,
launch a harness), the interface version its modules are written against,
whether the settings switch on a list of its modules or exactly one, and the
functions every module of the kind exports. A *module* of a kind is a
directory ``router/plugins/<kind>/<name>/`` with an ``__init__.py``; the
settings file says which are switched on (see ``router.plugins.settings``).

Adding a kind, or changing a kind's functions, interface version or switch, is
a core change: an edit here, together with the core code that calls the kind.
Adding a *module* changes no core file.

What each function takes and answers is in ``docs/plugins.md``; in short:

``usage-source`` (1, list)
    ``async read_turn(request, deps) -> {"mark", "usage"} | None``
``limit-check`` (2, list)
    ``may_launch(args)``, ``must_stop(args)``, ``report(args)``: plain
    functions; an awaitable answer is a malformed one.
``search-source`` (1, one)
    ``async search(options, query, deps) -> {"query", "total", "results"}``
``channel`` (1, list)
    ``async dispatch(request, core) -> whatever core answered``
``harness`` (1, list)
    ``levels(options)``, ``counts_account(options)``, ``reach(context)``,
    ``env(context)`` plain; ``async preflight(context)``,
    ``async version(context)``.
``launcher`` (1, one)
    ``async start(context)``, ``async wait(context, container)``,
    ``async inspect(context, container)``, ``async stop(context, container)``,
    ``async remove_workspace(context)``: the daemon of a container session
    (``router.host.lifecycle`` decides when each is called).
``notifier`` (1, list)
    ``destinations(context)``, ``check(context)`` plain; ``async
    send(request, context)``: where notifications go (``router.notify``).
"""

from __future__ import annotations

import re
from typing import Final, Literal, Mapping

import attrs

from router.errors import Refusal

__all__ = [
    "KINDS",
    "NAME_PATTERN",
    "Function",
    "Kind",
    "check_kind_setting",
    "is_name",
    "names_of",
    "unknown_kind",
]

#: A module name: what may appear as a directory under a kind. Starting with
#: a letter keeps ``.``, ``..``, ``__pycache__`` and hidden files out.
NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9-]*$")


def is_name(value: object) -> bool:
    # fullmatch: `$` alone would let a trailing newline through.
    return type(value) is str and NAME_PATTERN.fullmatch(value) is not None


@attrs.frozen
class Function:
    """One function a module of a kind exports."""

    name: str
    #: ``True``: must be an ``async def`` (the loader checks it, since the
    #: broker can only cancel a coroutine). ``False``: a plain function; its
    #: answer is checked at call time, where an awaitable is malformed.
    is_async: bool


@attrs.frozen
class Kind:
    name: str
    interface: int
    switch: Literal["list", "one"]
    functions: tuple[Function, ...]
    summary: str

    @property
    def exports(self) -> tuple[str, ...]:
        return ("INTERFACE_VERSION", *(f.name for f in self.functions))


def _kind(name: str, interface: int, switch: Literal["list", "one"], summary: str, *fns: str) -> Kind:
    # "async name" marks an async function; bare names are plain functions.
    functions = tuple(
        Function(f.removeprefix("async "), f.startswith("async ")) for f in fns
    )
    return Kind(name, interface, switch, functions, summary)


#: Every kind, by name. The order is the order they are listed and loaded.
KINDS: Final[Mapping[str, Kind]] = {
    kind.name: kind
    for kind in (
        _kind(
            "usage-source", 1, "list",
            "reads what a session used in a turn",
            "async read_turn",
        ),
        _kind(
            "limit-check", 2, "list",
            "says whether a launch may start, whether a session must stop, "
            "and what each limit has counted",
            "may_launch", "must_stop", "report",
        ),
        _kind(
            "search-source", 1, "one",
            "answers web searches through the broker",
            "async search",
        ),
        _kind(
            "channel", 1, "list",
            "carries a person's session operations from a surface to the core",
            "async dispatch",
        ),
        _kind(
            "harness", 1, "list",
            "what the router needs to launch and reach a session on one harness",
            "levels", "counts_account", "reach", "env",
            "async preflight", "async version",
        ),
        _kind(
            "launcher", 1, "one",
            "starts, watches and stops the daemon of each container session",
            "async start", "async wait", "async inspect", "async stop", "async remove_workspace",
        ),
        _kind(
            "notifier", 1, "list",
            "tells the person when a session needs them (web push, apprise's services)",
            "destinations", "check", "async send",
        ),
    )
}


def unknown_kind(name: str) -> Refusal:
    """The refusal of a key of ``plugins`` (or of a patch) that is not a kind."""
    return Refusal(code="unknown-kind",
                   message=f'"{name}" is not a plug-in kind; the kinds are {", ".join(KINDS)}')


def names_of(kind: Kind, value: object) -> list[str]:
    """The names a (shape-checked) kind setting switches on, in order."""
    if value is None:
        return []
    if kind.switch == "one":
        return [value]  # type: ignore[list-item]
    return list(value)  # type: ignore[call-overload]


def check_kind_setting(kind: Kind, value: object) -> Refusal | None:
    """Check the shape of one kind's setting: a list of distinct names for a
    list kind, one name for a kind that switches on one module.

    Names are checked against :data:`NAME_PATTERN` here too, so a settings
    writer refuses them before they are stored; the loader reports the same
    fault as ``bad-name`` when it meets a name in a hand-edited file.
    """
    if kind.switch == "one":
        if type(value) is not str:
            return Refusal(
                code="invalid-plugins",
                message=f'the "{kind.name}" setting switches on one module: '
                f"give one name as a string, not {_describe(value)}",
            )
        names = [value]
    else:
        if type(value) is not list:
            return Refusal(
                code="invalid-plugins",
                message=f'the "{kind.name}" setting is a list of module names, '
                f"not {_describe(value)}; write [] to switch every module off",
            )
        names = value
        if any(type(n) is not str for n in names):
            return Refusal(
                code="invalid-plugins",
                message=f'the "{kind.name}" list holds something that is not a name; '
                "give module names as strings",
            )
        seen: set[str] = set()
        for name in names:
            if name in seen:
                return Refusal(
                    code="invalid-plugins",
                    message=f'the "{kind.name}" list names "{name}" twice; name each module once',
                )
            seen.add(name)
    for name in names:
        if not is_name(name):
            return Refusal(
                code="bad-name",
                message=f'"{name}" is not a module name: use lower-case letters, '
                "digits and hyphens, starting with a letter",
            )
    return None


def _describe(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
