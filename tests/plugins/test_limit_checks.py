"""Limits: composing checks, failing closed, reports, and the limits writer."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from router.plugins.broker import Broker
from router.plugins.limit_checks import Limits, apply_limits_patch, limit_paths
from router.plugins.loader import Loader

from .conftest import write_module

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
SINCE = "2026-01-01T00:00:00.000Z"
LIMITS = {"tokens": {"instances": {"coder": {"limit": 100, "since": SINCE}},
                     "providers": {"anthropic": {"limit": 1000, "since": SINCE}}}}
SUBJECT = {"instance": "coder", "provider": "anthropic", "model": "m", "account": None}

#: One limit-check module per way a check can fail, each failing in all
#: three functions the same way.
FAILING = {
    "raises": ("raise RuntimeError('database gone')", "check-threw"),
    "raises-coded": ("raise Refusal('quota-store-down', 'the quota store is down')",
                     "quota-store-down"),
    "raises-badly-coded": ("raise Refusal('Not A Code', 'x')", "check-threw"),
    "wrong-shape": ("return {'allow': 'yes', 'stop': 'no'}", "malformed-answer"),
    "wrong-path": (None, "malformed-answer"),
    "awaitable": (None, "malformed-answer"),
}

TEMPLATE = """
from router.errors import Refusal
INTERFACE_VERSION = 2
{prefix}def may_launch(args):
    {body}
{prefix}def must_stop(args):
    {body}
{prefix}def report(args):
    {body}
"""


WRONG_PATH = """
INTERFACE_VERSION = 2
HIT = {"path": ["tokens", "nowhere"], "limit": 1, "count": 2, "unknown_turns": 0}
def may_launch(args): return {"allow": False, "hit": HIT}
def must_stop(args): return {"stop": True, "hit": HIT}
def report(args):
    return [{"path": ["tokens", "nowhere"], "limit": 1, "since": None, "not_enforced": "x"}]
"""


def failing_source(name: str) -> str:
    body, _ = FAILING[name]
    if name == "wrong-path":
        return WRONG_PATH
    if body is None:
        return TEMPLATE.format(prefix="async ", body="return {'allow': True}")
    return TEMPLATE.format(prefix="", body=body)


@pytest.fixture
def checks(tree: Path) -> Loader:
    for name in FAILING:
        write_module(tree, "limit-check", name, failing_source(name))
    write_module(tree, "limit-check", "allows", """
        INTERFACE_VERSION = 2
        def may_launch(args): return {"allow": True}
        def must_stop(args): return {"stop": False}
        def report(args): return []
    """)
    write_module(tree, "limit-check", "mutates", """
        INTERFACE_VERSION = 2
        def may_launch(args):
            args["limits"].clear(); args["records"].append("junk"); return {"allow": True}
        def must_stop(args):
            args["limits"].clear(); return {"stop": False}
        def report(args):
            args["limits"].clear(); return []
    """)
    return Loader(root=str(tree), log=lambda entry: None)


def composer(log: list) -> Limits:
    return Limits(broker=Broker(log=log.append), log=log.append)


def ask(loader: Loader, names: list[str], log: list, records=()):
    loader.load({"limit-check": [n for n in names if n != "ghost"]}, only=["limit-check"])
    limits = composer(log)
    common = dict(switched_on=names, modules=loader.modules("limit-check"), limits=LIMITS,
                  records=list(records), now=NOW)
    return (
        limits.may_launch(subject=SUBJECT, **common),
        limits.must_stop(subject=SUBJECT, **common),
        limits.report(**common),
    )


@pytest.mark.parametrize("name", [*FAILING, "ghost"])
def test_every_way_a_check_can_fail_closes(checks: Loader, name: str) -> None:
    expected = FAILING[name][1] if name in FAILING else "not-loaded"
    log: list = []
    refusal, stop, report = ask(checks, ["allows", name], log)
    assert refusal.code == "limit-check-failed"
    assert f'"{name}"' in refusal.message and expected in refusal.message
    assert stop.reason == f"limit-check-failed: {name} check failed: {expected}"
    assert stop.failure.code == expected
    assert [e["status"] for e in report] == ["check-failed", "check-failed"]
    assert {e["text"] for e in report} == {f"check failed: {expected}"}
    assert [e["event"] for e in log if "event" in e].count("launch-refused") == 1
    assert any(e.get("event") == "session-stop" and e["code"] == expected for e in log)


def test_an_awaitable_answer_is_never_run(checks: Loader, recwarn) -> None:
    ask(checks, ["awaitable"], [])
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_checks_get_a_copy_of_their_arguments(checks: Loader) -> None:
    records = [{"instance": "coder", "at": SINCE, "usage": None}]
    refusal, stop, report = ask(checks, ["mutates", "allows"], [], records)
    assert refusal is None and stop is None
    assert LIMITS["tokens"]["instances"]["coder"]["limit"] == 100
    assert records == [{"instance": "coder", "at": SINCE, "usage": None}]
    assert [e["status"] for e in report] == ["not-enforced", "not-enforced"]


def test_no_checks_allow_everything_and_enforce_nothing(checks: Loader) -> None:
    refusal, stop, report = ask(checks, [], [])
    assert (refusal, stop) == (None, None)
    assert [e["reason"] for e in report] == ["no switched-on limit check counts it"] * 2


def usage(n: int) -> dict:
    return {"input": n, "output": 0, "cache_creation": 0, "cache_read": 0}


def test_a_hit_refuses_the_launch_and_stops_with_the_reason(tree: Path) -> None:
    loader = Loader(root=str(tree), log=lambda e: None)
    records = [{"instance": "coder", "provider": "anthropic", "at": "2026-02-01T00:00:00Z",
                "usage": usage(150)}]
    log: list = []
    refusal, stop, report = ask(loader, ["token-limit"], log, records)
    assert refusal.code == "limit-reached"
    assert refusal.message.startswith("limit: token-limit tokens.instances.coder limit 100 count 150")
    assert stop.reason == "limit: token-limit tokens.instances.coder limit 100 count 150"
    assert stop.hit == {"path": ["tokens", "instances", "coder"], "limit": 100, "count": 150,
                        "unknown_turns": 0}
    assert [(e["status"], e.get("count")) for e in report] == [("counted", 150), ("counted", 150)]


def test_report_composes_not_enforced_reasons(tree: Path) -> None:
    write_module(tree, "limit-check", "shrugs", """
        INTERFACE_VERSION = 2
        def may_launch(args): return {"allow": True}
        def must_stop(args): return {"stop": False}
        def report(args):
            return [{"path": ["tokens", "providers", "anthropic"], "limit": 1000,
                     "since": None, "not_enforced": "it does not count providers"}]
    """)
    loader = Loader(root=str(tree), log=lambda e: None)
    loader.load({"limit-check": ["shrugs"]}, only=["limit-check"])
    report = composer([]).report(switched_on=["shrugs"], modules=loader.modules("limit-check"),
                                 limits=LIMITS, records=[], now=NOW)
    assert [e["status"] for e in report] == ["not-enforced", "not-enforced"]
    assert report[1]["text"] == "not enforced: shrugs: it does not count providers"


def test_limit_paths_walk_the_tree_in_order() -> None:
    tree = {"tokens": {"models": {"p": {"m": {"limit": 1}}}, "instances": {"a": {"limit": 2}}}}
    assert [p for p, _ in limit_paths(tree)] == [("tokens", "models", "p", "m"),
                                                ("tokens", "instances", "a")]


# --------------------------------------------------------------------------- the writer

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
T1 = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)


def test_since_is_set_when_a_limit_is_added_and_kept_when_it_changes() -> None:
    added, changes = apply_limits_patch({}, {"tokens": {"instances": {"a": {"limit": 5}}}}, None, T0)
    assert added == {"tokens": {"instances": {"a": {"limit": 5, "since": "2026-01-01T00:00:00.000Z"}}}}
    assert changes == {"tokens.instances.a": {"old": None, "new": added["tokens"]["instances"]["a"]}}
    changed, _ = apply_limits_patch(added, {"tokens": {"instances": {"a": {"limit": 9}}}}, None, T1)
    assert changed["tokens"]["instances"]["a"] == {"limit": 9, "since": "2026-01-01T00:00:00.000Z"}
    reset, _ = apply_limits_patch(changed, None, [["tokens", "instances", "a"]], T1)
    assert reset["tokens"]["instances"]["a"]["since"] == "2026-02-01T00:00:00.000Z"
    removed, _ = apply_limits_patch(reset, {"tokens": {"instances": {"a": None}}}, None, T1)
    assert removed == {"tokens": {"instances": {}}}


@pytest.mark.parametrize(
    "patch, reset, code",
    [
        ({"tokens": {"instances": {"a": {"limit": 5, "since": "2020-01-01T00:00:00Z"}}}}, None,
         "since-fixed"),
        ({"tokens": {"instances": {"b": {"limit": 5, "since": "2020-01-01T00:00:00Z"}}}}, None,
         "since-fixed"),
        (None, [["tokens", "instances", "zz"]], "unknown-limit"),
        (None, None, "empty-patch"),
        ({"tokens": {"instances": {"a": {"limit": -1}}}}, None, "invalid-limits"),
        ({"tokens": {"instances": {"a": {"limit": True}}}}, None, "invalid-limits"),
        ({"tokens": {"instances": {"a": 5}}}, None, "invalid-limits"),
        ({"tokens": 3}, None, "invalid-limits"),
        ("limits", None, "invalid-patch"),
        (None, "tokens.instances.a", "invalid-patch"),
    ],
)
def test_limits_writer_refusals(patch, reset, code: str) -> None:
    current = {"tokens": {"instances": {"a": {"limit": 5, "since": "2026-01-01T00:00:00.000Z"}}}}
    assert apply_limits_patch(current, patch, reset, T1).code == code
