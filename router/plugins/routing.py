"""Harness routing: which harness, model and thinking level a launch uses.

Theory of operation
-------------------

``routes.json`` names, per instance, a *primary* route (``harness``,
``model``, ``thinking``) and optionally a ``fallback`` with the same three,
plus the instance's ``account``; and the configured ``models``, each with its
``provider``. A primary missing one of the three refuses ``no-route``; a
fallback missing some but not all is refused when routes are written
(``partial-fallback``), and a hand-edited one refuses ``no-route`` when it
is needed.

The launcher checks the primary route, in order:

1. ``harness-off``: the harness is not switched on (``plugins.harness``);
2. ``harness-refused``: its module did not load (the message names the
   module and the loader's code), or answered ``levels``/``counts_account``
   in the wrong shape;
3. ``thinking-unsupported``: the module's ``levels()`` lacks the level;
4. ``unknown-model``: the model is not one of the configured models;
5. preflight: ``await preflight(context)`` answers ``None`` or
   ``{"code", "message"}`` (the module's own code; a crash or wrong shape is
   ``preflight-failed``, a preflight that does not answer in time
   ``deadline``).

Checks 1–4 are configuration: a primary that fails one is refused, it never
falls back (fix the setting). Preflight is the machine's state (a missing
binary, an expired credential): a failed preflight falls back when a fallback
is set. The fallback goes through the same five checks; any refusal of it
carries its own code and names the primary's failure too.

A launch that passes gets a :class:`LaunchRecord`: the route taken
(``primary``/``fallback``), why, the harness's version, and what its module
says about reaching the session (``reach``) and its environment (``env``).

Each launch loads its harness module afresh (a new load executes the file
again), so an earlier load's module is never reused. Harness modules are
loaded only for a route being checked; an off harness is never loaded.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Awaitable, Callable, Mapping, Sequence

import attrs


from router.plugins.broker import Broker
from router.plugins.kinds import is_name
from router.plugins.loader import LoadedModule
from router.errors import Refusal, refusal_of
from router.plugins.models import (InstanceSetting, Json, ModelEntry, Names, PluginsSettings, ReachAnswer,
                                   RoutesDocument, RoutesSettings, StoredInstance, StoredRoute, answer_as,
                                   read_settings)
from router.plugins.settings import parse_change

__all__ = [
    "HarnessFacts",
    "LaunchRecord",
    "Route",
    "apply_routes_patch",
    "check_loaded_route",
    "check_route",
    "harness_facts",
    "instance_routes",
    "parse_routes",
    "plan_launch",
]

ROUTE_FIELDS = ("harness", "model", "thinking")


@attrs.frozen
class Route:
    harness: str
    model: str
    thinking: str

    def to_json(self) -> dict[str, str]:
        return {"harness": self.harness, "model": self.model, "thinking": self.thinking}

    def __str__(self) -> str:
        return f"{self.harness}/{self.model}/{self.thinking}"


@attrs.frozen(kw_only=True)
class InstanceRoutes:
    instance: str
    primary: Route | Refusal
    fallback: Route | Refusal | None
    account: str | None


def _route(value: StoredRoute | StoredInstance | None, what: str, instance: str) -> Route | Refusal | None:
    """A route from a setting; ``None`` when nothing of it is set (an empty
    string is not set)."""
    if value is None:
        return None
    present = [f for f in ROUTE_FIELDS if getattr(value, f)]
    if not present:
        return None
    if len(present) < len(ROUTE_FIELDS):
        missing = ", ".join(f for f in ROUTE_FIELDS if f not in present)
        return Refusal(
            code="no-route",
            message=f'the {what} route of instance "{instance}" has no {missing}; set harness, '
            "model and thinking with `router routes set`",
        )
    return Route(value.harness, value.model, value.thinking)  # type: ignore[arg-type]


def parse_routes(routes_doc: object, instance: str) -> InstanceRoutes | Refusal:
    """The routes a ``routes.json`` value sets for ``instance``
    (:func:`instance_routes` of the value structured)."""
    return instance_routes(read_settings(routes_doc, RoutesSettings), instance)


def instance_routes(routes: RoutesSettings, instance: str) -> InstanceRoutes | Refusal:
    """The routes ``routes.json`` sets for ``instance``: ``no-route`` when
    it sets none, ``invalid-settings`` (naming the path) when the
    instance's setting is of the wrong shape (the converter decided both)."""
    stored = routes.instances.get(instance)
    if stored is None:
        return Refusal(
            code="no-route",
            message=f'no route is set for instance "{instance}"; set one with `router routes set`',
        )
    if isinstance(stored, Refusal):
        return stored
    primary = _route(stored, "primary", instance)
    if primary is None:
        primary = Refusal(
            code="no-route",
            message=f'instance "{instance}" has no harness, model or thinking level; set them '
            "with `router routes set`",
        )
    return InstanceRoutes(
        instance=instance, primary=primary, fallback=_route(stored.fallback, "fallback", instance),
        account=stored.account or None,
    )


# --------------------------------------------------------------------------- checks


@attrs.frozen(kw_only=True)
class HarnessFacts:
    """What the core reads from a loaded harness module before a launch."""

    module: LoadedModule
    levels: tuple[str, ...]
    counts_account: bool


def harness_facts(broker: Broker, module: LoadedModule,
                  options: Mapping[str, Any] | None) -> HarnessFacts | Refusal:
    def refused(what: str) -> Refusal:
        return Refusal(
            code="harness-refused",
            message=f'the harness module "{module.name}" {what}; fix the module or route to '
            "another harness",
        )

    options = copy.deepcopy(dict(options or {}))
    levels = broker.call_sync(module, "levels", copy.deepcopy(options))
    if isinstance(levels, Refusal):
        return refused(f"failed in levels() ({levels.code}: {levels.message})")
    names = answer_as(levels.value, Names, what="levels()")
    if isinstance(names, Refusal):
        return refused(f"answered levels() with something other than a list of names ({names.message})")
    counts = broker.call_sync(module, "counts_account", options)
    if isinstance(counts, Refusal):
        return refused(f"failed in counts_account() ({counts.code}: {counts.message})")
    counts_account = answer_as(counts.value, bool, what="counts_account()")
    if isinstance(counts_account, Refusal):
        return refused("answered counts_account() with something other than true or false")
    return HarnessFacts(module=module, levels=names, counts_account=counts_account)


LoadHarness = Callable[[str], "LoadedModule | Refusal"]
#: What a launch loads a harness with: :meth:`Loader.load_async` behind it
#: (a plain :data:`LoadHarness` is taken too).
LoadHarnessAsync = Callable[[str], "Awaitable[LoadedModule | Refusal] | LoadedModule | Refusal"]


def _harness_off(route: Route, switched_on: Sequence[str]) -> Refusal | None:
    """Check 1: the route's harness is switched on."""
    if route.harness in switched_on:
        return None
    return Refusal(
        code="harness-off",
        message=f'the harness "{route.harness}" is not switched on; run `router plugins` and '
        f'`router plugins set --file PATCH` with "harness" listing every harness to keep on, '
        f'"{route.harness}" included',
    )


def check_loaded_route(
    route: Route, module: LoadedModule | Refusal, *, models: Mapping[str, ModelEntry], broker: Broker,
    options: Mapping[str, Any] | None = None,
) -> HarnessFacts | Refusal:
    """Checks 2–4 of a route whose harness module the loader answered."""
    if isinstance(module, Refusal):
        return Refusal(
            code="harness-refused",
            message=f'the harness module "{route.harness}" was refused by the loader '
            f"({module.code}: {module.message})",
        )
    facts = harness_facts(broker, module, options)
    if isinstance(facts, Refusal):
        return facts
    if route.thinking not in facts.levels:
        return Refusal(
            code="thinking-unsupported",
            message=f'the harness "{route.harness}" does not apply the thinking level '
            f'"{route.thinking}"; it applies {", ".join(facts.levels) or "none"}',
        )
    if route.model not in models:
        known = ", ".join(sorted(models)) or "none"
        return Refusal(
            code="unknown-model",
            message=f'the model "{route.model}" is not a configured model ({known}); add it to '
            "models with `router routes set`, or route to one of them",
        )
    return facts


def check_route(
    route: Route,
    *,
    switched_on: Sequence[str],
    load_harness: LoadHarness,
    models: Mapping[str, ModelEntry],
    broker: Broker,
    options: Mapping[str, Any] | None = None,
) -> HarnessFacts | Refusal:
    """Checks 1–4 of a route (no preflight), synchronously (the commands).
    Loads the harness module only when it is switched on. ``options`` are
    the harness module's options."""
    return _harness_off(route, switched_on) or check_loaded_route(
        route, load_harness(route.harness), models=models, broker=broker, options=options)


def harness_options(plugins_doc: object, harness: str) -> dict[str, Any]:
    """The options a ``plugins.json`` value holds for one harness module."""
    return read_settings(plugins_doc, PluginsSettings).module_options("harness", harness)


def harness_context(
    instance: str, route: Route, options: Mapping[str, Any], env: Mapping[str, str], session: str | None
) -> dict[str, Any]:
    return {
        "instance": instance,
        "session": session,
        "route": route.to_json(),
        "options": copy.deepcopy(dict(options)),
        "env": dict(env),
    }


async def preflight(
    broker: Broker, facts: HarnessFacts, context: Mapping[str, Any]
) -> Refusal | None:
    module = facts.module
    answer = await broker.call(module, "preflight", copy.deepcopy(dict(context)),
                               crash_code="preflight-failed")
    if isinstance(answer, Refusal):
        return answer
    value = answer.value
    if value is None:
        return None
    refusal = refusal_of(value, only=True)
    if refusal is not None:
        return refusal
    return Refusal(
        code="preflight-failed",
        message=f'the harness module "{module.name}" answered preflight in the wrong shape '
        '(expected null or {"code", "message"})',
    )


# --------------------------------------------------------------------------- launch


@attrs.frozen(kw_only=True)
class LaunchRecord:
    """A launch the checks allowed: what to start, and how to reach it."""

    instance: str
    session: str | None
    route: str  # "primary" | "fallback"
    route_reason: str
    harness: str
    model: str
    thinking: str
    provider: str | None
    account: str | None
    harness_version: str | None
    reach: Mapping[str, Any]
    env: Mapping[str, str]

    def subject(self) -> dict[str, Any]:
        """The limit checks' subject."""
        return {"instance": self.instance, "provider": self.provider, "model": self.model,
                "account": self.account}

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


async def _try_route(
    routes: InstanceRoutes,
    route: Route,
    *,
    plugins: PluginsSettings,
    models: Mapping[str, ModelEntry],
    load_harness: LoadHarnessAsync,
    broker: Broker,
    env: Mapping[str, str],
    session: str | None,
) -> tuple[HarnessFacts, dict[str, Any], Refusal | None] | Refusal:
    """Checks 1–4 (a refusal) then preflight (returned beside the facts, so
    the caller decides whether to fall back)."""
    options = plugins.module_options("harness", route.harness)
    off = _harness_off(route, plugins.listed("harness"))
    if off is not None:
        return off
    module = load_harness(route.harness)
    if inspect.isawaitable(module):
        module = await module
    facts = check_loaded_route(route, module, models=models, broker=broker, options=options)
    if isinstance(facts, Refusal):
        return facts
    context = harness_context(routes.instance, route, options, env, session)
    return facts, context, await preflight(broker, facts, context)


async def plan_launch(
    instance: str,
    *,
    plugins: PluginsSettings,
    routes: RoutesSettings,
    load_harness: LoadHarnessAsync,
    broker: Broker,
    env: Mapping[str, str],
    session: str | None = None,
) -> LaunchRecord | Refusal:
    """Route a launch of ``instance``: the checks above, then the record.
    Limits are asked by the caller, with the record's subject."""
    models = routes.models
    routes = instance_routes(routes, instance)  # type: ignore[assignment]
    if isinstance(routes, Refusal):
        return routes
    if isinstance(routes.primary, Refusal):
        return routes.primary
    kwargs = dict(plugins=plugins, models=models, load_harness=load_harness,
                  broker=broker, env=env, session=session)
    primary = await _try_route(routes, routes.primary, **kwargs)  # type: ignore[arg-type]
    if isinstance(primary, Refusal):
        return primary  # configuration: never falls back
    facts, context, failed = primary
    route, chosen, reason = routes.primary, "primary", "the primary route passed its checks"
    if failed is not None:
        if routes.fallback is None:
            return failed
        blame = f"the primary route {routes.primary} failed preflight: {failed}"
        if isinstance(routes.fallback, Refusal):
            return Refusal(code=routes.fallback.code, message=f"{routes.fallback.message}; {blame}")
        fallback = await _try_route(routes, routes.fallback, **kwargs)  # type: ignore[arg-type]
        if isinstance(fallback, Refusal):
            return Refusal(code=fallback.code, message=f"{fallback.message}; {blame}")
        facts, context, failed_again = fallback
        if failed_again is not None:
            return Refusal(code=failed_again.code,
                           message=f"the fallback route {routes.fallback} failed preflight: "
                           f"{failed_again.message}; {blame}")
        route, chosen, reason = routes.fallback, "fallback", blame
    return await _record(routes, route, chosen, reason, facts, context, models, broker, session)


async def _record(
    routes: InstanceRoutes, route: Route, chosen: str, reason: str, facts: HarnessFacts,
    context: Mapping[str, Any], models: Mapping[str, ModelEntry], broker: Broker, session: str | None,
) -> LaunchRecord | Refusal:
    module = facts.module
    reached = _reach_and_env(module, context, broker)
    if isinstance(reached, Refusal):
        return reached
    reach, env = reached
    version = await broker.call(module, "version", copy.deepcopy(dict(context)),
                                crash_code="version-failed")
    # A version probe that fails does not stop a launch that passed its
    # checks; the record says the version is unknown (None).
    named = None if isinstance(version, Refusal) else answer_as(version.value, str, what="version()")
    harness_version = None if isinstance(named, Refusal) else named
    model = models.get(route.model)
    return LaunchRecord(
        instance=routes.instance, session=session, route=chosen, route_reason=reason,
        harness=route.harness, model=route.model, thinking=route.thinking,
        provider=model.provider if model is not None else None,
        account=routes.account if facts.counts_account else None,
        harness_version=harness_version, reach=reach, env=env,
    )


def _reach_and_env(
    module: Any, context: Mapping[str, Any], broker: Broker
) -> tuple[dict[str, Any], dict[str, str]] | Refusal:
    """The harness module's ``reach()`` and ``env()`` answers, each checked."""

    def refused(what: str) -> Refusal:
        return Refusal(code="harness-refused",
                       message=f'the harness module "{module.name}" {what}; fix the module or '
                       "route to another harness")

    reach = broker.call_sync(module, "reach", copy.deepcopy(dict(context)))
    if isinstance(reach, Refusal):
        return refused(f"failed in reach() ({reach.code}: {reach.message})")
    via = answer_as(reach.value, Mapping[str, Json], what="reach()")
    if not isinstance(via, Refusal):
        via = answer_as(reach.value, ReachAnswer, what="reach()")
    if isinstance(via, Refusal):
        return refused(f'answered reach() with something other than a JSON object with "via" ({via.message})')
    env = broker.call_sync(module, "env", copy.deepcopy(dict(context)))
    if isinstance(env, Refusal):
        return refused(f"failed in env() ({env.code}: {env.message})")
    strings = answer_as(env.value, Mapping[str, str], what="env()")
    if isinstance(strings, Refusal):
        return refused(f"answered env() with something other than an object of strings ({strings.message})")
    return reach.value, strings


# --------------------------------------------------------------------------- writing


#: Checks 1–4 of a route against the configured models.
CheckRoute = Callable[[Route, Mapping[str, ModelEntry]], "HarnessFacts | Refusal"]


def _setting_refusal(name: str, setting: InstanceSetting) -> Refusal | None:
    """What the model cannot say about a route in a patch: a harness that is
    not a module name, a fallback that names only some of the three."""
    if setting.harness is not None and not is_name(setting.harness):
        return Refusal(code="bad-name",
                       message=f'instances.{name}.harness "{setting.harness}" is not a module name')
    fallback = setting.fallback
    if fallback is None:
        return None
    if fallback.harness is not None and not is_name(fallback.harness):
        return Refusal(code="bad-name", message=f'instances.{name}.fallback.harness '
                       f'"{fallback.harness}" is not a module name')
    given = [f for f in ROUTE_FIELDS if getattr(fallback, f)]
    if 0 < len(given) < len(ROUTE_FIELDS):
        return Refusal(code="partial-fallback",
                       message=f"the fallback of {name} names only {', '.join(given)}; a fallback "
                       "names harness, model and thinking, or nothing")
    return None


def _check_changed(name: str, new: RoutesSettings, old: RoutesSettings,
                   check: CheckRoute) -> Refusal | None:
    """Checks 1–4 on each route of ``name`` in ``new`` that differs from ``old``'s."""
    new_routes = instance_routes(new, name)
    if isinstance(new_routes, Refusal):  # not reached: the patch's shape was checked
        return new_routes
    old_routes = instance_routes(old, name)
    before = (None, None) if isinstance(old_routes, Refusal) else (old_routes.primary, old_routes.fallback)
    for route, was in zip((new_routes.primary, new_routes.fallback), before):
        if isinstance(route, Route) and route != was:
            answer = check(route, new.models)
            if isinstance(answer, Refusal):
                return Refusal(code=answer.code, message=f"instances.{name}: {answer.message}")
    return None


def apply_routes_patch(
    current: object, patch: object, *, check: CheckRoute
) -> tuple[dict[str, Any], dict[str, Any]] | Refusal:
    """The new ``routes.json`` value and its changes, or a refusal.

    ``patch`` is ``{"revision", "instances"?: {name: route | null},
    "models"?: {name: {"provider"} | null}}`` (its shape:
    :class:`~router.plugins.models.RoutesPatch`). A route replaces the
    instance's whole route. Every route the patch changes (a primary or a
    fallback that differs from the stored one) goes through
    ``check(route, models)``: the launcher's checks 1–4. A route the patch
    does not change is not checked.
    """
    parsed = parse_change(patch, "routes", current, RoutesDocument)
    if isinstance(parsed, Refusal):
        return parsed
    if not parsed.instances and not parsed.models:
        return Refusal(code="empty-patch",
                       message="the patch changes nothing: name at least one instance or model")
    # Both are objects now (parse_change structured them); what is stored is
    # the JSON as written, so the writer edits the JSON, not the models.
    stored: dict[str, Any] = current  # type: ignore[assignment]
    given: dict[str, Any] = patch  # type: ignore[assignment]
    before = read_settings(stored, RoutesSettings)
    new = copy.deepcopy(stored)
    instances = new.setdefault("instances", {})
    models = new.setdefault("models", {})
    changes: dict[str, Any] = {}
    for name, value in given.get("models", {}).items():
        changes[f"models.{name}"] = {"old": copy.deepcopy(models.get(name)), "new": value}
        if value is None:
            models.pop(name, None)
        else:
            models[name] = copy.deepcopy(value)
    for name, value in given.get("instances", {}).items():
        changes[f"instances.{name}"] = {"old": copy.deepcopy(instances.get(name)), "new": copy.deepcopy(value)}
        if value is None:
            instances.pop(name, None)
            continue
        after = read_settings({"models": models, "instances": {name: value}}, RoutesSettings)
        refusal = _setting_refusal(name, parsed.instances[name]) or _check_changed(
            name, after, before, check)
        if refusal is not None:
            return refusal
        instances[name] = copy.deepcopy(value)
    return new, changes
