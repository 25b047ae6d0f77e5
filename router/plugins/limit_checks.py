"""Limits: composing the switched-on limit checks, failing closed.

Theory of operation
-------------------

The settings' ``limits`` object is a tree; every object in it with a
``limit`` key is one limit, at the path of keys that leads to it
(``tokens.instances.coder``). The core does not know what a limit means:
the ``limit-check`` modules do. Each switched-on check is called, in the
order the settings list them, with a deep copy of its arguments::

    may_launch({limits, subject, records, now}) -> {"allow": True}
                                                | {"allow": False, "hit": HIT}
    must_stop({limits, subject, records, now})  -> {"stop": False}
                                                | {"stop": True, "hit": HIT}
    report({limits, records, now}) -> [ENTRY, ...]

    HIT   = {"path": [str, ...], "limit": n, "count": n, "unknown_turns": n}
    ENTRY = {"path", "limit", "since", "count", "kinds", "unknown_turns"[, "note"]}
          | {"path", "limit", "since", "not_enforced": str}

``subject`` is ``{instance, provider, model, account}``; ``records`` are the
turn records (see ``router.plugins.usage``); ``now`` is an ISO time. A path
must name a limit of ``limits`` whose ``limit`` is the answer's ``limit``. A
count is a non-negative integer or a string of digits. The shapes are
classes of the plug-in layer's converter (``models.LaunchAnswer``,
``StopAnswer``, ``ReportEntry``); only the paths are checked here, against
the tree.

Fail closed: a check that raises, answers in the wrong shape, answers with an
awaitable, or is switched on but not loaded *fails*. A failure refuses the
launch (``limit-check-failed``), stops the session at the end of its turn,
and shows every limit as ``check failed: <code>``. The code is the check's
own (a raised exception's kebab-case ``code``), else ``check-threw``,
``malformed-answer`` or ``not-loaded``. The first check that refuses or fails
decides; later checks are not asked (they could not change the answer).

Every decision here is synchronous and does no I/O: the checks are plain
functions over the data they are given.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from router.plugins.broker import Broker, ModuleAnswer
from router.plugins.loader import LoadedModule, Log, default_log
from router.plugins.models import (Json, LaunchAnswer, LimitTree, NonEmpty, NotAllowed, ReportEntry, StopAnswer, Stops,
                                   answer_as, is_count_like, nests_deeper, structure)
from router.errors import CarriesRefusal, Refusal
from router.plugins.usage import copy_json, iso, parse_time

__all__ = [
    "CheckFailure",
    "counting_window",
    "Limits",
    "MustStop",
    "apply_limits_patch",
    "format_path",
    "is_count_like",
    "limit_paths",
    "resolve_limit",
    "stop_reason",
]

Path = tuple[str, ...]


def limit_paths(limits: object, prefix: Path = ()) -> list[tuple[Path, dict[str, Any]]]:
    """Every limit in the tree, in document order: objects with a ``limit`` key."""
    found: list[tuple[Path, dict[str, Any]]] = []
    if type(limits) is not dict:
        return found
    if "limit" in limits:
        return [(prefix, limits)]
    for key, value in limits.items():
        if type(value) is dict:
            found += limit_paths(value, prefix + (key,))
    return found


def resolve_limit(limits: object, path: Sequence[str]) -> dict[str, Any] | None:
    node = limits
    for key in path:
        if type(node) is not dict or type(key) is not str or key not in node:
            return None
        node = node[key]
    return node if type(node) is dict and "limit" in node else None


def counting_window(limits: object) -> tuple[bool, dt.datetime | None]:
    """Which turn records can count for a limit of ``limits``: ``(False,
    None)`` when there is no limit (none can); else ``(True, start)``, the
    earliest ``since`` of any limit, or ``None`` (every record) when some
    limit's ``since`` cannot be read. A limit counts from its ``since`` on
    (the writer owns it), so a record before every limit's ``since`` counts
    for none; a record whose time cannot be read is always handed over
    (checks count it apart). This is what keeps a turn's end from costing
    every turn ever recorded."""
    starts = [parse_time(node.get("since")) for _, node in limit_paths(limits)]
    if not starts:
        return False, None
    if any(start is None for start in starts):
        return True, None
    return True, min(starts)  # type: ignore[type-var]


def format_path(path: Sequence[str]) -> str:
    return ".".join(path)


def stop_reason(check: str, hit: Mapping[str, Any]) -> str:
    return f"limit: {check} {format_path(hit['path'])} limit {hit['limit']} count {hit['count']}"


@attrs.frozen(kw_only=True)
class CheckFailure(CarriesRefusal):
    """A limit check that could not give an answer, and the refusal that says why."""

    check: str
    refusal: Refusal


@attrs.frozen(kw_only=True)
class MustStop:
    """A session must stop at the end of its turn."""

    check: str
    reason: str
    hit: Mapping[str, Any] | None = None
    failure: CheckFailure | None = None


# --------------------------------------------------------------------------- answers


def _check_path(path: Sequence[str], limit: object, limits: object) -> str | None:
    """What the shape cannot say: the path names a limit of ``limits`` whose
    ``limit`` is the answer's."""
    if not path:
        return "path is empty"
    target = resolve_limit(limits, path)
    if target is None:
        return f"path {format_path(path)} names no limit"
    if target["limit"] != limit:
        return f"limit {limit!r} is not the limit at {format_path(path)} ({target['limit']!r})"
    return None


def _check_decision(value: object, key: str, limits: object) -> str | None:
    """What is wrong with a ``may_launch`` (``key`` ``allow``) or
    ``must_stop`` (``stop``) answer, or ``None``: its shape through the
    plug-in layer's converter, then its hit's path against the tree."""
    parsed = answer_as(value, LaunchAnswer if key == "allow" else StopAnswer, what="the answer")
    if isinstance(parsed, Refusal):
        return parsed.message
    if isinstance(parsed, (NotAllowed, Stops)):
        return _check_path(parsed.hit.path, parsed.hit.limit, limits)
    return None


def _check_report(value: object, limits: object) -> str | None:
    """What is wrong with a ``report`` answer, or ``None``."""
    parsed = answer_as(value, tuple[ReportEntry, ...], what="the report")
    if isinstance(parsed, Refusal):
        return parsed.message
    for index, entry in enumerate(parsed):
        problem = _check_path(entry.path, entry.limit, limits)
        if problem is not None:
            return f"entry {index}: {problem}"
    return None


# --------------------------------------------------------------------------- composition


def _copy_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """A check's own copy of its arguments. The records (there may be many)
    are copied by :func:`~router.plugins.usage.copy_json`, several times
    faster than ``copy.deepcopy``; the rest by ``deepcopy``."""
    rest = copy.deepcopy({key: value for key, value in args.items() if key != "records"})
    if "records" in args:
        rest["records"] = [copy_json(record) for record in args["records"]]
    return rest



class Limits:
    """Asks the switched-on limit checks, and composes their answers.

    ``switched_on`` is the settings' ``limit-check`` list; ``modules`` what
    the loader actually loaded (a snapshot). A name switched on but not
    loaded is a failed check.
    """

    def __init__(self, *, broker: Broker, log: Log | None = None) -> None:
        self._broker = broker
        self._log = log or default_log

    def _ask(
        self, name: str, modules: Iterable[LoadedModule], function: str, args: Mapping[str, Any],
        check: Callable[[object], str | None],
    ) -> ModuleAnswer | CheckFailure:
        module = next((m for m in modules if m.name == name), None)
        if module is None:
            return CheckFailure(check=name, refusal=Refusal(
                "not-loaded",
                f'the limit check "{name}" is switched on but not loaded; see the '
                "plugin-refused log entry, or run `router plugins` to check the setting",
            ))
        answer = self._broker.call_sync(module, function, _copy_args(args),
                                        crash_code="check-threw")
        if isinstance(answer, Refusal):
            return CheckFailure(check=name, refusal=Refusal(answer.code, answer.message))
        problem = check(answer.value)
        if problem is not None:
            return CheckFailure(check=name, refusal=Refusal(
                "malformed-answer",
                f'{function} of the limit check "{name}" answered in the wrong shape: {problem}',
            ))
        return answer

    def _first_refusal(
        self, function: str, key: str, switched_on: Sequence[str],
        modules: Sequence[LoadedModule], args: Mapping[str, Any],
    ) -> tuple[str, CheckFailure | Mapping[str, Any]] | None:
        """Ask each check in order; the first failure or hit decides:
        ``(check, failure)`` or ``(check, hit)``; ``None`` when all pass."""
        limits = args["limits"]
        for name in switched_on:
            answer = self._ask(name, modules, function, args,
                               lambda v: _check_decision(v, key, limits))
            if isinstance(answer, CheckFailure):
                return name, answer
            if answer.value[key] != (key == "allow"):
                return name, answer.value["hit"]
        return None

    def may_launch(
        self,
        *,
        switched_on: Sequence[str],
        modules: Sequence[LoadedModule],
        limits: Mapping[str, Any],
        subject: Mapping[str, Any],
        records: Sequence[Mapping[str, Any]],
        now: dt.datetime,
    ) -> Refusal | None:
        """``None`` when the launch may start, else ``limit-reached`` or
        ``limit-check-failed``."""
        args = {"limits": limits, "subject": subject, "records": records, "now": iso(now)}
        decided = self._first_refusal("may_launch", "allow", switched_on, modules, args)
        if decided is None:
            return None
        name, why = decided
        if isinstance(why, CheckFailure):
            self._log({"event": "launch-refused", "check": name, "code": why.code,
                       "message": why.message, "subject": dict(subject)})
            return Refusal(
                code="limit-check-failed",
                message=f'the limit check "{name}" failed ({why.code}: {why.message}); '
                "launches are refused until it answers; fix it or switch it off with "
                "`router plugins set`",
            )
        self._log({"event": "launch-refused", "check": name, "hit": why, "subject": dict(subject)})
        return Refusal(
            code="limit-reached",
            message=f"{stop_reason(name, why)}; raise the limit or reset its count with "
            "`router limits set` before launching again",
        )

    def must_stop(
        self,
        *,
        switched_on: Sequence[str],
        modules: Sequence[LoadedModule],
        limits: Mapping[str, Any],
        subject: Mapping[str, Any],
        records: Sequence[Mapping[str, Any]],
        now: dt.datetime,
    ) -> MustStop | None:
        """``None`` when the session may go on after this turn."""
        args = {"limits": limits, "subject": subject, "records": records, "now": iso(now)}
        decided = self._first_refusal("must_stop", "stop", switched_on, modules, args)
        if decided is None:
            return None
        name, why = decided
        if isinstance(why, CheckFailure):
            stop = MustStop(check=name, reason=f"limit-check-failed: {name} check failed: {why.code}",
                        failure=why)
            self._log({"event": "session-stop", "check": name, "code": why.code,
                       "reason": stop.reason, "subject": dict(subject)})
        else:
            stop = MustStop(check=name, reason=stop_reason(name, why), hit=why)
            self._log({"event": "session-stop", "check": name, "hit": why,
                       "reason": stop.reason, "subject": dict(subject)})
        return stop

    def report(
        self,
        *,
        switched_on: Sequence[str],
        modules: Sequence[LoadedModule],
        limits: Mapping[str, Any],
        records: Sequence[Mapping[str, Any]],
        now: dt.datetime,
    ) -> list[dict[str, Any]]:
        """One entry per limit in ``limits``, in document order, each with a
        ``status``: ``counted``, ``not-enforced`` (with ``reason``) or
        ``check-failed`` (with ``code``), and a ``text`` to show."""
        args = {"limits": limits, "records": records, "now": iso(now)}
        counted: dict[Path, dict[str, Any]] = {}
        reasons: dict[Path, list[str]] = {}
        failure: CheckFailure | None = None
        for name in switched_on:
            answer = self._ask(name, modules, "report", args, lambda v: _check_report(v, limits))
            if isinstance(answer, CheckFailure):
                failure = answer
                self._log({"event": "report-failed", "check": name, "code": answer.code,
                           "message": answer.message})
                break
            for entry in answer.value:
                path = tuple(entry["path"])
                if "not_enforced" in entry:
                    reasons.setdefault(path, []).append(f"{name}: {entry['not_enforced']}")
                elif path not in counted:
                    counted[path] = {**entry, "check": name}
        out = []
        for path, node in limit_paths(limits):
            base = {"path": list(path), "limit": node["limit"]}
            if failure is not None:
                out.append({**base, "status": "check-failed", "code": failure.code,
                            "check": failure.check, "text": f"check failed: {failure.code}"})
            elif path in counted:
                entry = counted[path]
                text = f"{entry['count']} of {node['limit']} since {entry['since']}"
                if str(entry["unknown_turns"]) != "0":  # a count: the converter checked it
                    text += f" ({entry['unknown_turns']} turns of unknown usage not counted)"
                if "note" in entry:
                    text += f"; {entry['note']}"
                out.append({**base, "status": "counted", "since": entry["since"],
                            "count": entry["count"], "kinds": entry["kinds"],
                            "unknown_turns": entry["unknown_turns"], "check": entry["check"],
                            "text": text})
            else:
                reason = "; ".join(reasons.get(path, [])) or "no switched-on limit check counts it"
                out.append({**base, "status": "not-enforced", "reason": reason,
                            "text": f"not enforced: {reason}"})
        return out


# --------------------------------------------------------------------------- writing


def _merge(current: Any, patch: Any) -> Any:
    """Merge ``patch`` into ``current``: ``null`` removes, a limit (an object
    with ``limit``) replaces, other objects merge key by key."""
    if type(patch) is not dict or "limit" in patch or type(current) is not dict or "limit" in current:
        return copy.deepcopy(patch)
    merged = copy.deepcopy(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


def _parse_limits_patch(patch: object, reset: object) -> tuple[dict[str, Any], list[Path]] | Refusal:
    """The patch's limits tree and reset paths, shape-checked (see
    :class:`~router.plugins.models.LimitsPatch`)."""
    # The patch's tree may hold nulls (a removal); the merged tree is the
    # one checked as limits.
    tree = structure(patch, Mapping[str, Json] | None, what="the patch's limits",
                     code="invalid-patch")
    if isinstance(tree, Refusal):
        return tree
    paths = structure(reset, tuple[tuple[NonEmpty, ...], ...] | None, what="the patch's reset",
                      code="invalid-patch")
    if isinstance(paths, Refusal) or any(not p for p in paths or ()):
        return Refusal(code="invalid-patch",
                       message='reset is a list of limit paths, each a list of keys such as '
                       '["tokens", "instances", "coder"]')
    return tree or {}, [tuple(p) for p in paths or ()]


def _since_refusal(path: Path, node: dict[str, Any], before: Mapping[str, Any] | None,
                   stamp: str) -> Refusal | None:
    """Set ``node``'s ``since`` as the writer owns it, or refuse a patch that
    gives another."""
    if before is None:
        if "since" in node and node["since"] != stamp:
            return Refusal(code="since-fixed",
                           message=f"the new limit {format_path(path)} counts from now; leave out "
                           "its since")
        node["since"] = stamp
        return None
    if node.get("since", before.get("since")) != before.get("since"):
        return Refusal(code="since-fixed",
                       message=f"the since of {format_path(path)} moves only by a reset; leave it "
                       f"out or reset the limit (router limits reset {format_path(path)})")
    node["since"] = before.get("since", stamp)
    return None


def apply_limits_patch(
    current: Mapping[str, Any],
    patch: object,
    reset: object,
    now: dt.datetime,
) -> tuple[dict[str, Any], dict[str, Any]] | Refusal:
    """The new ``limits`` tree and the changes to log, or a refusal.

    ``since`` belongs to the writer: a limit that is added gets ``since`` =
    ``now``; a changed limit keeps its ``since``; a patch that gives a
    ``since`` other than the stored one is refused (``since-fixed``); only a
    ``reset`` (a list of paths, each a list of keys) moves a limit's
    ``since`` to ``now``.
    """
    parsed = _parse_limits_patch(patch, reset)
    if isinstance(parsed, Refusal):
        return parsed
    tree, paths = parsed
    if not tree and not paths:
        return Refusal(code="empty-patch",
                       message="the patch changes nothing: give limits to change or paths to reset")
    if nests_deeper(current):
        return Refusal(code="invalid-settings", message="limits.json nests too deep; fix it by hand")
    merged = _merge(dict(current), tree)
    checked = structure(merged, LimitTree, what="limits.json", code="invalid-limits", at="limits")
    if isinstance(checked, Refusal):
        return checked
    stamp = iso(now)
    old = {p: node for p, node in limit_paths(dict(current))}
    new = dict(limit_paths(merged))
    for path, node in new.items():
        refusal = _since_refusal(path, node, old.get(path), stamp)
        if refusal is not None:
            return refusal
    for path in paths:
        node = new.get(path)
        if node is None:
            return Refusal(code="unknown-limit",
                           message=f"there is no limit at {format_path(path)} to reset; "
                           "run `router limits` to see the limits")
        node["since"] = stamp
    changes = {}
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            changes[format_path(path)] = {"old": old.get(path), "new": new.get(path)}
    return merged, changes
