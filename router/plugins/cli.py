"""``router plugins``, ``router limits`` and ``router routes``.

Each shows its settings file with the file's revision, and ``set`` applies a
patch made against that revision::

    router plugins [--json]
    router plugins set --file PATCH     # {"revision", "plugins"?, "options"?}
    router routes [--json]
    router routes set --file PATCH      # {"revision", "instances"?, "models"?}
    router limits [--json]
    router limits set --file PATCH      # {"revision", "limits"?, "reset"?}
    router limits reset PATH [PATH...]  # tokens.instances.coder

These read and write the settings directory directly: they need no channel,
no running router and no session, so a person can always switch a channel
back on. Exit status: 0 done, 1 refused (the code and what to do on stderr),
2 a usage error or a patch file that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from wire.json import JsonError, dumps, loads

from router.plugins.broker import Broker
from router.plugins.kinds import KINDS
from router.plugins.limit_checks import Limits, apply_limits_patch, format_path
from router.plugins.loader import LoadedModule, Loader, check_paths
from router.plugins.models import MAX_SETTINGS_BYTES, LimitsSettings, ModelEntry, PluginsSettings, RoutesSettings, read_capped, read_settings
from router.errors import Refusal
from router.plugins.routing import CheckRoute, Route, apply_routes_patch, check_route, instance_routes
from router.plugins.settings import (
    Document,
    SettingsDir,
    apply_plugins_patch,
    parse_patch,
    default_actor,
    default_data_dir,
    default_settings_dir,
    settings_of,
    redact,
)
from router.plugins.usage import JsonlRecords, TableRecords, utc_now

__all__ = [
    "configure_limits",
    "configure_plugins",
    "configure_routes",
    "run_limits",
    "run_plugins",
    "run_routes",
]


# --------------------------------------------------------------------------- common


def _common(parser: argparse.ArgumentParser, *, sub: bool) -> None:
    default = argparse.SUPPRESS if sub else None
    parser.add_argument("--settings", metavar="DIR", default=default,
                        help="the settings directory (default $ROUTER_SETTINGS_DIR, else "
                        "$XDG_CONFIG_HOME/router, else ~/.config/router)")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if sub else False,
                        help="print JSON")


def _set_parser(subparsers: Any, what: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("set", help=f"apply a patch to the {what} settings")
    parser.add_argument("--file", required=True, metavar="PATCH",
                        help='a JSON patch: {"revision": "<from the show command>", ...}')
    parser.add_argument("--actor", help="who is making the change (default: your login name)")
    _common(parser, sub=True)
    return parser


def _settings(args: argparse.Namespace) -> SettingsDir:
    return SettingsDir(args.settings or default_settings_dir())


def _refused(command: str, refusal: Refusal, *, as_json: bool = False) -> int:
    """A refusal: one line on stderr, and with ``--json`` its JSON spelling,
    ``{"error": code, "message": sentence}``, on stdout (docs/cli.md)."""
    print(f"router {command}: refused: {refusal.code}: {refusal.message}", file=sys.stderr)
    if as_json:
        _print_json(refusal.to_json())
    return 1


def _turn_records(where: str | None) -> list[dict[str, Any]] | int:
    """The turn records of ``--records``: a file, or a PostgreSQL database's
    table; 2 (printed) when the database cannot be read."""
    from router.store.db import is_postgres_url
    from router.errors import Refusal as StoreRefusal

    if where is None or not is_postgres_url(where):
        # A data directory (as `router serve --data-dir` takes) means its usage.jsonl.
        path = Path(where) / "usage.jsonl" if where and Path(where).is_dir() else where
        return JsonlRecords(path or default_data_dir() / "usage.jsonl").read()
    try:
        records = TableRecords(where)
    except StoreRefusal as refused:
        print(f"router limits: {refused.code}: {refused.message}", file=sys.stderr)
        return 2
    try:
        return records.read()
    finally:
        records.close()


def _read_patch(command: str, path: str, *, as_json: bool = False) -> Any | int:
    try:
        data = read_capped(path)
        text = "" if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"router {command}: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if data is None:
        return _refused(command, Refusal(code="invalid-patch", message=f"{path} is larger than "
                                         f"{MAX_SETTINGS_BYTES} bytes; a patch is small"), as_json=as_json)
    try:
        return loads(text)
    except JsonError as exc:
        return _refused(command, Refusal(code="invalid-patch",
                                         message=f"{path} is not JSON ({exc}); fix the file"), as_json=as_json)


def _read(command: str, settings: SettingsDir, name: str, *, as_json: bool = False) -> Document | int:
    document = settings.read(name)
    if isinstance(document, Refusal):
        return _refused(command, document, as_json=as_json)
    return document


def _print_json(value: Any) -> None:
    print(dumps(value))


def _apply(command: str, settings: SettingsDir, name: str, patch: Any, actor: str | None,
           compute: Callable[[Any], Any], *, as_json: bool) -> int:
    document = settings.update(name, patch.get("revision"), compute, actor=actor or default_actor())
    if isinstance(document, Refusal):
        return _refused(command, document, as_json=as_json)
    if as_json:
        _print_json({"revision": document.revision})
    else:
        print(f"{name} is now at revision {document.revision}")
    return 0


# --------------------------------------------------------------------------- plugins


def configure_plugins(parser: argparse.ArgumentParser) -> None:
    _common(parser, sub=False)
    subparsers = parser.add_subparsers(dest="action")
    _set_parser(subparsers, "plugins")


def run_plugins(args: argparse.Namespace, *, root: str | None = None) -> int:
    settings = _settings(args)
    if getattr(args, "action", None) == "set":
        return _set_plugins(args, settings, root=root)
    document = _read("plugins", settings, "plugins.json", as_json=args.json)
    if isinstance(document, int):
        return document
    typed = settings_of(document, PluginsSettings)
    if args.json:
        plugins = {kind: switch.value for kind, switch in (typed.switches.by_kind or {}).items()}
        _print_json({"revision": document.revision, "plugins": plugins, "options": redact(typed.options)})
        return 0
    _print_plugins(settings, document, typed)
    return 0


def _set_plugins(args: argparse.Namespace, settings: Any, *, root: str | None) -> int:
    """``router plugins set``: the patch read, checked and applied."""
    patch = _read_patch("plugins set", args.file, as_json=args.json)
    if isinstance(patch, int):
        return patch
    parsed = parse_patch(patch, "plugins")
    if isinstance(parsed, Refusal):
        return _refused("plugins set", parsed, as_json=args.json)
    return _apply(
        "plugins set", settings, "plugins.json", patch, args.actor,
        lambda current: apply_plugins_patch(
            current, patch, module_exists=lambda kind, name: check_paths(kind, name, root=root)
        ),
        as_json=args.json,
    )


def _print_plugins(settings: Any, document: Any, typed: PluginsSettings) -> None:
    """``router plugins`` for a person: each kind, then each module's options."""
    source = "" if document.exists else " (defaults: the file does not exist yet)"
    print(f"{settings.path / 'plugins.json'} revision {document.revision}{source}")
    width = max(len(k) for k in KINDS)
    for kind in KINDS:
        switch = typed.switches.get(kind)
        shown = "off" if switch is None else ", ".join(switch.names) or "off"
        if switch is not None and switch.refusal is not None:
            shown = f"{dumps(switch.value)} (refused: {switch.refusal.code})"
        print(f"  {kind.ljust(width)}  {shown}")
    for kind, per_module in typed.options.items():
        for name, opts in per_module.items():
            print(f"  options {kind}/{name}: {dumps(redact(opts))}")


# --------------------------------------------------------------------------- routes


def configure_routes(parser: argparse.ArgumentParser) -> None:
    _common(parser, sub=False)
    subparsers = parser.add_subparsers(dest="action")
    _set_parser(subparsers, "routes")


def _route_checker(plugins: PluginsSettings, *, root: str | None) -> CheckRoute:
    switched_on = plugins.listed("harness")
    broker = Broker(log=lambda entry: None)

    def load_harness(name: str) -> LoadedModule | Refusal:
        loader = Loader(root=root, log=lambda entry: None)
        result = loader.load({"harness": [name]}, only=["harness"])
        return result.refused[0].refusal if result.refused else loader.modules("harness")[0]

    def check(route: Route, models: Mapping[str, ModelEntry]) -> Any:
        return check_route(route, switched_on=switched_on, load_harness=load_harness,
                           models=models, broker=broker,
                           options=plugins.module_options("harness", route.harness))

    return check


def _route_row(typed: RoutesSettings, name: str, check: CheckRoute) -> dict[str, Any]:
    """One instance's routes and each route's check, as ``router routes`` shows them."""
    routes = instance_routes(typed, name)
    row: dict[str, Any] = {"instance": name}
    if isinstance(routes, Refusal):
        row["primary"] = {"status": routes.code, "message": routes.message}
        return row
    row["account"] = routes.account
    for which, route in (("primary", routes.primary), ("fallback", routes.fallback)):
        if isinstance(route, Refusal):
            row[which] = {"status": route.code, "message": route.message}
        elif route is not None:
            answer = check(route, typed.models)
            row[which] = {**route.to_json(), "status": "ok"}
            if isinstance(answer, Refusal):
                row[which].update(status=answer.code, message=answer.message)
    return row


def _print_routes(settings: SettingsDir, document: Document, models: Mapping[str, ModelEntry],
                  shown: list[dict[str, Any]]) -> None:
    print(f"{settings.path / 'routes.json'} revision {document.revision}")
    print("  models: " + (", ".join(f"{m} ({s.provider})" for m, s in models.items()) or "none"))
    for row in shown:
        print(f"  {row['instance']}" + (f" (account {row['account']})" if row.get("account") else ""))
        for which in ("primary", "fallback"):
            route = row.get(which)
            if route is None:
                continue
            described = "/".join(route[f] for f in ("harness", "model", "thinking") if f in route)
            status = route["status"] + (f": {route['message']}" if "message" in route else "")
            print(f"    {which}: {described or '-'}  [{status}]")


def run_routes(args: argparse.Namespace, *, root: str | None = None) -> int:
    settings = _settings(args)
    plugins_doc = _read("routes", settings, "plugins.json", as_json=args.json)
    if isinstance(plugins_doc, int):
        return plugins_doc
    check = _route_checker(settings_of(plugins_doc, PluginsSettings), root=root)
    if getattr(args, "action", None) == "set":
        patch = _read_patch("routes set", args.file, as_json=args.json)
        if isinstance(patch, int):
            return patch
        parsed = parse_patch(patch, "routes")
        if isinstance(parsed, Refusal):
            return _refused("routes set", parsed, as_json=args.json)
        return _apply("routes set", settings, "routes.json", patch, args.actor,
                      lambda current: apply_routes_patch(current, patch, check=check),
                      as_json=args.json)
    document = _read("routes", settings, "routes.json", as_json=args.json)
    if isinstance(document, int):
        return document
    typed = settings_of(document, RoutesSettings)
    shown = [_route_row(typed, name, check) for name in typed.instances]
    if args.json:
        # The document's parts as written (a person's notes included), beside
        # what the checks read from them.
        written = document.value if type(document.value) is dict else {}
        _print_json({"revision": document.revision, "models": _written(written, "models"),
                     "instances": _written(written, "instances"), "checks": shown})
    else:
        _print_routes(settings, document, typed.models, shown)
    return 0


def _written(document: dict[str, Any], key: str) -> Any:
    """A part of a document as written, for showing (``{}`` when it is not an object)."""
    part = document.get(key)
    return part if type(part) is dict else {}


# --------------------------------------------------------------------------- limits


def configure_limits(parser: argparse.ArgumentParser) -> None:
    _common(parser, sub=False)
    parser.add_argument("--records", metavar="DIR|FILE", default=None,
                        help="the turn records: a data directory (its usage.jsonl), a file (default <data "
                        "dir>/usage.jsonl), or postgresql://… for those of "
                        "a router run with --store postgresql://…)")
    subparsers = parser.add_subparsers(dest="action")
    _set_parser(subparsers, "limits")
    reset = subparsers.add_parser("reset", help="count one or more limits from now")
    reset.add_argument("paths", nargs="+", metavar="PATH", help="a limit's path, such as "
                       "tokens.instances.coder")
    reset.add_argument("--revision", help="refuse unless limits.json is still at this revision")
    reset.add_argument("--actor", help="who is making the change (default: your login name)")
    _common(reset, sub=True)


def _limit_checks(settings: SettingsDir, *, root: str | None) -> tuple[list[str], Any, Limits] | Refusal:
    document = settings.read("plugins.json")
    if isinstance(document, Refusal):
        return document
    plugins = settings_of(document, PluginsSettings)
    loader = Loader(root=root, log=lambda entry: None)
    loader.load(plugins.switches, only=["limit-check"])
    return list(plugins.listed("limit-check")), loader.modules("limit-check"), Limits(broker=Broker(log=lambda e: None),
                                                              log=lambda e: None)


def _checked_limits_patch(
    current: Any, limits_patch: Any, reset: Any, checks: tuple[list[str], Any, Limits]
) -> Any:
    if type(current) is not dict:  # the writer needs an object to write the new tree into
        return Refusal(code="invalid-settings", message="limits.json is not an object; fix it by hand")
    limits = read_settings(current, LimitsSettings).limits
    result = apply_limits_patch(limits, limits_patch, reset, utc_now())
    if isinstance(result, Refusal):
        return result
    new_limits, changes = result
    # Every switched-on check reports on the new limits before they are
    # stored: a limit a check cannot read is refused now, not at a launch.
    switched_on, modules, composer = checks
    for entry in composer.report(switched_on=switched_on, modules=modules, limits=new_limits,
                                 records=[], now=utc_now()):
        if entry["status"] == "check-failed":
            return Refusal(code=entry["code"],
                           message=f"the limit check {entry['check']} cannot read the new limits "
                           f"({entry['code']}); fix the patch")
    return {**current, "limits": new_limits}, changes


def _change_limits(args: argparse.Namespace, settings: Any, action: str, checks: Any) -> int:
    """``router limits set`` (a patch) or ``router limits reset`` (paths)."""
    command = f"limits {action}"
    if action == "set":
        patch = _read_patch(command, args.file, as_json=args.json)
        if isinstance(patch, int):
            return patch
        parsed = parse_patch(patch, "limits")
        if isinstance(parsed, Refusal):
            return _refused(command, parsed, as_json=args.json)
        limits_patch, reset = patch.get("limits"), patch.get("reset")
    else:
        current = _read(command, settings, "limits.json", as_json=args.json)
        if isinstance(current, int):
            return current
        patch = {"revision": args.revision or current.revision}
        limits_patch, reset = None, [p.split(".") for p in args.paths]
    return _apply(command, settings, "limits.json", patch, args.actor,
                  lambda current: _checked_limits_patch(current, limits_patch, reset, checks),
                  as_json=args.json)


def run_limits(args: argparse.Namespace, *, root: str | None = None) -> int:
    settings = _settings(args)
    checks = _limit_checks(settings, root=root)
    if isinstance(checks, Refusal):
        return _refused("limits", checks, as_json=args.json)
    action = getattr(args, "action", None)
    if action in ("set", "reset"):
        return _change_limits(args, settings, action, checks)
    document = _read("limits", settings, "limits.json", as_json=args.json)
    if isinstance(document, int):
        return document
    switched_on, modules, composer = checks
    records = _turn_records(args.records)
    if isinstance(records, int):
        return records
    limits = settings_of(document, LimitsSettings).limits
    report = composer.report(switched_on=switched_on, modules=modules, limits=limits, records=records,
                             now=utc_now())
    if args.json:
        # As written: ``null`` when limits.json has no ``limits`` object.
        written = document.value.get("limits") if type(document.value) is dict else None
        _print_json({"revision": document.revision, "limits": written, "report": report})
        return 0
    print(f"{settings.path / 'limits.json'} revision {document.revision}")
    if not report:
        print("  no limits are set")
    for entry in report:
        print(f"  {format_path(entry['path'])}: {entry['text']}")
    return 0
