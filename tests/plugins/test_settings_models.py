"""The settings documents through the converter: strict leaves, refusals that
name the failing path, and hostile input at any depth or size."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.plugins.limit_checks import apply_limits_patch
from router.plugins.models import MAX_DEPTH, nests_deeper
from router.plugins.routing import apply_routes_patch, parse_routes
from router.plugins.settings import SettingsDir, apply_plugins_patch, parse_patch

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
ROUTES = {"models": {"m": {"provider": "p"}},
          "instances": {"coder": {"harness": "echo", "model": "m", "thinking": "off"}}}


def exists(kind: str, name: str) -> None:
    return None


def no_check(route, models) -> None:
    return None


def nested(depth: int, leaf: object = 1) -> object:
    """A value ``depth`` levels deep, alternating arrays and objects."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    "patch, code, message",
    [
        ({"revision": "r", "instances": {"a": {"harness": 1}}}, "invalid-routes",
         'the routes patch: instances["a"].harness: expected a non-empty string, got 1'),
        ({"revision": "r", "instances": {"a": {"harness": "echo", "model": True}}}, "invalid-routes",
         'the routes patch: instances["a"].model: expected a non-empty string, got true'),
        ({"revision": "r", "instances": {"a": {"fallback": {"thinking": ""}}}}, "invalid-routes",
         'the routes patch: instances["a"].fallback.thinking: expected a non-empty string, got ""'),
        ({"revision": "r", "models": {"m": {"provider": "p", "x": 1}}}, "invalid-routes",
         'the routes patch: models["m"]: keys it does not take: x'),
        ({"revision": "r", "instances": []}, "invalid-patch",
         "the routes patch: instances: expected an object, got an array"),
        ({"revision": 7, "models": {}}, "invalid-patch",
         "the routes patch: revision: expected a string, got a number"),
    ],
)
def test_a_routes_patch_refusal_names_the_path(patch, code: str, message: str) -> None:
    refusal = apply_routes_patch(ROUTES, patch, check=no_check)
    assert isinstance(refusal, Refusal)
    assert refusal.code == code
    assert refusal.message.startswith(message), refusal.message


def test_a_plugins_patch_refusal_names_the_path() -> None:
    refusal = apply_plugins_patch({}, {"revision": "r", "options": {"harness": {"container": [1]}}},
                                  module_exists=exists)
    assert refusal.code == "invalid-patch"
    assert refusal.message.startswith(
        'the plugins patch: options["harness"]["container"]: expected an object, got an array')


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"a": {"limit": "5"}}, 'limits.json: limits["a"]["limit"]: expected a non-negative integer, got "5"'),
        ({"a": {"limit": True}}, 'limits.json: limits["a"]["limit"]: expected a non-negative integer, got true'),
        ({"a": {"b": {"limit": 1, "reset": {"x": 1}}}},
         'limits.json: limits["a"]["b"]["reset"]: expected a plain value, got an object'),
    ],
)
def test_limits_are_strict_and_named_by_path(patch, message: str) -> None:
    refusal = apply_limits_patch({}, patch, None, T0)
    assert refusal.code == "invalid-limits"
    assert refusal.message == message


def test_a_stored_route_of_the_wrong_type_names_the_file_and_path() -> None:
    refusal = parse_routes({"instances": {"coder": {"harness": "echo", "model": 3}}}, "coder")
    assert refusal.code == "invalid-settings"
    assert refusal.message.startswith('routes.json: instances["coder"].model: expected a string')
    # Another instance's mistake does not refuse this one.
    doc = {"instances": {"a": {"harness": 3}, "coder": ROUTES["instances"]["coder"]}}
    assert not isinstance(parse_routes(doc, "coder"), Refusal)


def test_nests_deeper_is_iterative() -> None:
    assert not nests_deeper(nested(MAX_DEPTH))
    assert nests_deeper(nested(MAX_DEPTH + 1))
    assert nests_deeper(nested(100_000))


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
@pytest.mark.parametrize("name", ["plugins.json", "routes.json", "limits.json"])
def test_a_deep_settings_file_refuses(tmp_path: Path, name: str, depth: int) -> None:
    (tmp_path / name).write_text("[" * depth + "]" * depth)
    refusal = SettingsDir(tmp_path).read(name)
    assert isinstance(refusal, Refusal) and refusal.code == "invalid-settings"


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
def test_deep_patches_refuse(depth: int) -> None:
    deep = nested(depth)
    plugins = apply_plugins_patch({}, {"revision": "r", "options": {"harness": {"echo": {"a": deep}}}},
                                  module_exists=exists)
    assert plugins.code == "invalid-patch"
    routes = apply_routes_patch(ROUTES, {"revision": "r", "instances": {"a": deep}}, check=no_check)
    assert routes.code == "invalid-patch"
    limits = apply_limits_patch({}, {"a": deep}, None, T0)
    assert limits.code == "invalid-patch"
    for what in ("plugins", "routes", "limits"):
        assert parse_patch({"revision": "r", "x": deep}, what).code == "invalid-patch"


@pytest.mark.parametrize("depth", [100, 1_000])
def test_a_deep_stored_document_refuses_a_write(depth: int) -> None:
    deep = nested(depth)
    assert apply_plugins_patch({"options": deep}, {"revision": "r", "plugins": {"harness": []}},
                               module_exists=exists).code == "invalid-settings"
    assert apply_routes_patch({"models": deep}, {"revision": "r", "models": {"m": None}},
                              check=no_check).code == "invalid-settings"
    assert apply_limits_patch({"a": deep}, {"b": {"limit": 1}}, None, T0).code == "invalid-settings"


def test_a_huge_patch_is_refused_or_applied_without_a_crash() -> None:
    many = {f"i{n}": {"harness": "echo", "model": "m", "thinking": "off"} for n in range(20_000)}
    new, changes = apply_routes_patch(ROUTES, {"revision": "r", "instances": many}, check=no_check)
    assert len(new["instances"]) == 20_001 and len(changes) == 20_000
    many["i7"] = {"harness": "echo", "model": ["m"]}
    refusal = apply_routes_patch(ROUTES, {"revision": "r", "instances": many}, check=no_check)
    assert refusal.message.startswith('the routes patch: instances["i7"].model:')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=25,
)
revisioned = st.fixed_dictionaries({"revision": st.text(max_size=4)}, optional={
    "plugins": json_values, "options": json_values, "instances": json_values,
    "models": json_values, "limits": json_values, "reset": json_values,
})


@settings(max_examples=300, deadline=None)
@given(patch=st.one_of(json_values, revisioned), current=json_values)
def test_writers_answer_a_value_or_a_refusal_on_any_input(patch, current) -> None:
    for answer in (
        apply_plugins_patch(current, patch, module_exists=exists),
        apply_routes_patch(current, patch, check=no_check),
        apply_limits_patch(current if type(current) is dict else {}, patch, None, T0),
        apply_limits_patch({}, None, patch, T0),
    ):
        assert isinstance(answer, Refusal) or (type(answer) is tuple and len(answer) == 2)
    for what in ("plugins", "routes", "limits"):
        parsed = parse_patch(patch, what)
        assert not isinstance(parsed, Refusal) or parsed.code.startswith("invalid-")


@settings(max_examples=100, deadline=None)
@given(setting=json_values)
def test_parse_routes_never_raises(setting) -> None:
    answer = parse_routes({"instances": {"coder": setting}}, "coder")
    assert isinstance(answer, Refusal) or answer.instance == "coder"
