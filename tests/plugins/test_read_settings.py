"""The stored documents as the layer reads them: one converter turns any JSON
into typed settings, a bad entry carrying its refusal, and nothing after it
looks at the JSON again."""

from __future__ import annotations

import json

import attrs
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.plugins.defaults import LIMITS, PLUGINS, ROUTES
from router.plugins.kinds import KINDS
from router.plugins.loader import Loader
from router.plugins.models import (KindSwitch, LimitsSettings, ModelEntry, PluginsSettings, RoutesSettings,
                                   StoredInstance, TokenCounts, read_settings)
from router.plugins.routing import InstanceRoutes, instance_routes
from router.plugins.settings import SettingsDir, settings_of
from router.plugins.usage import TOKEN_KINDS

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=20,
)
names = st.sampled_from(["echo", "fake-a", "Bad", "", "a b", "x" * 3])
#: Kind settings near the real shape, and anything at all.
kind_values = st.one_of(json_values, names, st.lists(names | json_values, max_size=3))
plugins_documents = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "plugins": st.one_of(json_values, st.dictionaries(st.sampled_from([*KINDS, "bogus"]), kind_values)),
    "options": st.one_of(json_values, st.dictionaries(
        st.sampled_from([*KINDS, "bogus"]), st.one_of(json_values, st.dictionaries(names, json_values)))),
    "note": json_values,
}))
routes_values = st.dictionaries(st.sampled_from(["harness", "model", "thinking", "account", "fallback", "x"]),
                                st.one_of(json_values, names), max_size=5)
routes_documents = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "models": st.one_of(json_values, st.dictionaries(names, st.one_of(json_values, st.fixed_dictionaries(
        {}, optional={"provider": st.one_of(json_values, names)})))),
    "instances": st.one_of(json_values, st.dictionaries(names, st.one_of(json_values, routes_values))),
}))
limits_documents = st.one_of(json_values, st.fixed_dictionaries({}, optional={"limits": json_values}))


@settings(max_examples=300, deadline=None)
@given(document=plugins_documents)
def test_any_plugins_document_is_typed_settings(document) -> None:
    typed = read_settings(document, PluginsSettings)
    assert isinstance(typed, PluginsSettings)
    for kind in [*KINDS, "bogus"]:
        assert all(type(name) is str for name in typed.listed(kind))
        for name, options in typed.kind_options(kind).items():
            assert type(options) is dict and typed.module_options(kind, name) == options
        switch = typed.switches.get(kind)
        assert switch is None or switch.refusal is None or switch.refusal.code in (
            "invalid-plugins", "bad-name", "unknown-kind")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=plugins_documents)
def test_the_loader_refuses_with_a_code_or_loads_on_any_plugins_document(tmp_path: Path, document) -> None:
    # An empty plug-in tree: every name the setting lists is refused missing.
    loader = Loader(root=str(tmp_path), log=lambda entry: None)
    result = loader.load(read_settings(document, PluginsSettings).switches)
    assert all(type(entry.refusal) is Refusal and entry.refusal.code for entry in result.refused)


@settings(max_examples=300, deadline=None)
@given(document=routes_documents)
def test_any_routes_document_is_typed_settings(document) -> None:
    typed = read_settings(document, RoutesSettings)
    assert isinstance(typed, RoutesSettings)
    assert all(type(model) is ModelEntry and (model.provider is None or type(model.provider) is str)
               for model in typed.models.values())
    for name, stored in typed.instances.items():
        assert type(stored) is StoredInstance or stored.code in ("no-route", "invalid-settings")
        answer = instance_routes(typed, name)
        assert type(answer) is InstanceRoutes or answer.code in ("no-route", "invalid-settings")


@settings(max_examples=200, deadline=None)
@given(document=limits_documents)
def test_any_limits_document_is_typed_settings(document) -> None:
    limits = read_settings(document, LimitsSettings).limits
    assert type(limits) is dict
    if type(document) is dict and type(document.get("limits")) is dict:
        assert limits == document["limits"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=60), plugins_documents.map(lambda v: json.dumps(v).encode())))
def test_any_file_reads_as_typed_settings_or_a_refusal(tmp_path: Path, data: bytes) -> None:
    for name, cls in (("plugins.json", PluginsSettings), ("routes.json", RoutesSettings),
                      ("limits.json", LimitsSettings)):
        (tmp_path / name).write_bytes(data)
        document = SettingsDir(tmp_path).read(name)
        if isinstance(document, Refusal):
            assert document.code == "invalid-settings"
        assert isinstance(settings_of(document, cls), cls)


def test_the_defaults_read_as_before() -> None:
    plugins = read_settings(dict(PLUGINS), PluginsSettings)
    assert plugins.listed("harness") == ("echo",)
    assert plugins.listed("launcher") == ("in-process",)
    assert all(switch.refusal is None for switch in plugins.switches.by_kind.values())
    routes = read_settings(dict(ROUTES), RoutesSettings)
    assert routes.models == {"echo": ModelEntry(provider="echo")}
    assert routes.instances == {"default": StoredInstance(harness="echo", model="echo", thinking="off")}
    assert read_settings(dict(LIMITS), LimitsSettings).limits == {}


def test_a_bad_entry_costs_that_entry_only() -> None:
    plugins = read_settings({"plugins": {"harness": ["echo", "Bad"], "channel": ["cli"], "zz": 1},
                             "options": {"harness": {"echo": {"a": 1}, "other": [1]}, "channel": 3}},
                            PluginsSettings)
    harness = plugins.switches.get("harness")
    assert harness.refusal.code == "bad-name" and harness.bad == "Bad"
    assert plugins.switches.get("channel") == KindSwitch(value=["cli"], names=("cli",))
    assert plugins.switches.get("zz").refusal.code == "unknown-kind"
    # Options that are not objects read as none, as before.
    assert plugins.kind_options("harness") == {"echo": {"a": 1}}
    assert plugins.module_options("harness", "other") == {} and plugins.kind_options("channel") == {}

    routes = read_settings({"models": {"m": {"provider": 3}, "n": [], "o": {"provider": "p", "note": 1}},
                            "instances": {"a": {"harness": 3}, "b": [], "c": {"harness": "h", "x": 1}}},
                           RoutesSettings)
    assert routes.models == {"m": ModelEntry(provider=None), "o": ModelEntry(provider="p")}
    assert routes.instances["a"] == Refusal(
        "invalid-settings",
        'routes.json: instances["a"].harness: expected a string, got a number; fix it by hand')
    assert routes.instances["b"].code == "no-route"
    # A key the router does not read (a person's note) is kept in the file and ignored here.
    assert routes.instances["c"] == StoredInstance(harness="h")


def test_a_document_that_is_not_an_object_switches_nothing(tmp_path: Path) -> None:
    for value in ([], None, "x", {"plugins": None}, {"plugins": [1]}):
        plugins = read_settings(value, PluginsSettings)
        assert plugins.switches.by_kind is None
        result = Loader(root=str(tmp_path), log=lambda entry: None).load(plugins.switches)
        assert {entry.refusal.code for entry in result.refused} == {"invalid-plugins"}
        assert len(result.refused) == len(KINDS)
    # An absent "plugins" is every kind off, not refused.
    assert read_settings({}, PluginsSettings).switches.by_kind == {}


def test_a_counted_report_entry_names_the_token_kinds_the_records_count() -> None:
    assert tuple(attrs.fields_dict(TokenCounts)) == TOKEN_KINDS
