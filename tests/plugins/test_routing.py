"""Harness routing: every refusal code, primary and fallback, and the record."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import trio

from router.plugins.broker import Broker
from router.plugins.loader import Loader
from router.plugins.models import PluginsSettings, RoutesSettings, read_settings
from router.errors import Refusal
from router.plugins.routing import Route, apply_routes_patch, check_route, plan_launch

from .conftest import write_module

FAKE = """
import trio
INTERFACE_VERSION = 1

def levels(options):
    return options.get("levels", ["low", "high"])

def counts_account(options):
    return options.get("counts_account", False)

def reach(context):
    if context["options"].get("reach") == "bad":
        return ["not", "an", "object"]
    return {"via": "fake", "harness": context["route"]["harness"]}

def env(context):
    return {"FAKE_THINKING": context["route"]["thinking"]}

async def preflight(context):
    mode = context["options"].get("preflight")
    if mode == "fail":
        return {"code": "fake-broken", "message": "the fake binary is broken"}
    if mode == "crash":
        raise RuntimeError("kaboom")
    if mode == "malformed":
        return "fine, probably"
    if mode == "hang":
        await trio.sleep_forever()
    return None

async def version(context):
    if context["options"].get("version") == "crash":
        raise RuntimeError("no version")
    return "fake 1.0"
"""


@pytest.fixture
def root(tree: Path) -> str:
    write_module(tree, "harness", "fake-a", FAKE)
    write_module(tree, "harness", "fake-b", FAKE)
    write_module(tree, "harness", "broken", "raise ImportError('half installed')\n")
    return str(tree)


def docs(*, on=("fake-a", "fake-b", "broken"), options=None, route=None, fallback=None,
         models=None):
    instance = dict(route or {"harness": "fake-a", "model": "m1", "thinking": "low"})
    if fallback is not None:
        instance["fallback"] = fallback
    instance.setdefault("account", "acct")
    plugins_doc = {"plugins": {"harness": list(on)}, "options": {"harness": options or {}}}
    routes_doc = {"models": models or {"m1": {"provider": "p1"}, "m2": {"provider": "p2"}},
                  "instances": {"coder": instance}}
    return plugins_doc, routes_doc


FALLBACK = {"harness": "fake-b", "model": "m2", "thinking": "high"}


async def launch(root: str, plugins_doc, routes_doc, instance="coder", broker=None):
    def load_harness(name):
        loader = Loader(root=root, log=lambda entry: None)
        result = loader.load({"harness": [name]}, only=["harness"])
        return result.refused[0].refusal if result.refused else loader.modules("harness")[0]

    # As the layer reads them: each document through the settings converter.
    return await plan_launch(instance, plugins=read_settings(plugins_doc, PluginsSettings),
                             routes=read_settings(routes_doc, RoutesSettings),
                             load_harness=load_harness, broker=broker or Broker(log=lambda e: None),
                             env={"HOME": "/nowhere"}, session="s-1")


async def test_the_primary_route_launches_with_a_record(root: str) -> None:
    record = await launch(root, *docs(fallback=FALLBACK))
    assert (record.route, record.harness, record.model, record.thinking) == (
        "primary", "fake-a", "m1", "low")
    assert record.route_reason == "the primary route passed its checks"
    assert record.harness_version == "fake 1.0"
    assert record.provider == "p1"
    assert record.account is None  # fake-a does not spend an account
    assert record.reach == {"via": "fake", "harness": "fake-a"}
    assert record.env == {"FAKE_THINKING": "low"}
    assert record.subject() == {"instance": "coder", "provider": "p1", "model": "m1",
                                "account": None}


async def test_an_account_is_recorded_only_when_the_harness_spends_one(root: str) -> None:
    record = await launch(root, *docs(options={"fake-a": {"counts_account": True}}))
    assert record.account == "acct"


async def test_a_version_probe_that_fails_records_no_version(root: str) -> None:
    record = await launch(root, *docs(options={"fake-a": {"version": "crash"}}))
    assert record.route == "primary" and record.harness_version is None


@pytest.mark.parametrize(
    "change, code",
    [
        (lambda p, r: r["instances"].pop("coder"), "no-route"),
        (lambda p, r: r["instances"]["coder"].pop("model"), "no-route"),
        (lambda p, r: r["instances"]["coder"].update(harness="fake-b", model="", thinking=""),
         "no-route"),
        (lambda p, r: p["plugins"]["harness"].remove("fake-a"), "harness-off"),
        (lambda p, r: p["plugins"].pop("harness"), "harness-off"),
        (lambda p, r: r["instances"]["coder"].update(harness="broken"), "harness-refused"),
        (lambda p, r: r["instances"]["coder"].update(harness="ghost") or
         p["plugins"]["harness"].append("ghost"), "harness-refused"),
        (lambda p, r: r["instances"]["coder"].update(thinking="max"), "thinking-unsupported"),
        (lambda p, r: r["instances"]["coder"].update(model="m9"), "unknown-model"),
        (lambda p, r: p["options"]["harness"].update({"fake-a": {"levels": "low"}}),
         "harness-refused"),
        (lambda p, r: p["options"]["harness"].update({"fake-a": {"preflight": "fail"}}),
         "fake-broken"),
        (lambda p, r: p["options"]["harness"].update({"fake-a": {"preflight": "crash"}}),
         "preflight-failed"),
        (lambda p, r: p["options"]["harness"].update({"fake-a": {"preflight": "malformed"}}),
         "preflight-failed"),
        (lambda p, r: p["options"]["harness"].update({"fake-a": {"reach": "bad"}}),
         "harness-refused"),
    ],
)
async def test_primary_refusals_without_a_fallback(root: str, change, code: str) -> None:
    plugins_doc, routes_doc = docs()
    change(plugins_doc, routes_doc)
    refusal = await launch(root, plugins_doc, routes_doc)
    assert isinstance(refusal, Refusal), refusal
    assert refusal.code == code
    assert refusal.message


@pytest.mark.parametrize(
    "change, code",
    [
        (lambda p, r: p["plugins"]["harness"].remove("fake-a"), "harness-off"),
        (lambda p, r: r["instances"]["coder"].update(harness="broken"), "harness-refused"),
        (lambda p, r: r["instances"]["coder"].update(thinking="max"), "thinking-unsupported"),
        (lambda p, r: r["instances"]["coder"].update(model="m9"), "unknown-model"),
    ],
)
async def test_a_misconfigured_primary_never_falls_back(root: str, change, code: str) -> None:
    plugins_doc, routes_doc = docs(fallback=FALLBACK)
    change(plugins_doc, routes_doc)
    refusal = await launch(root, plugins_doc, routes_doc)
    assert refusal.code == code


async def test_a_failed_preflight_falls_back(root: str) -> None:
    record = await launch(root, *docs(fallback=FALLBACK,
                                      options={"fake-a": {"preflight": "fail"}}))
    assert (record.route, record.harness, record.model, record.thinking, record.provider) == (
        "fallback", "fake-b", "m2", "high", "p2")
    assert "fake-a/m1/low failed preflight: fake-broken" in record.route_reason


@pytest.mark.parametrize(
    "change, code",
    [
        (lambda p, r: p["plugins"]["harness"].remove("fake-b"), "harness-off"),
        (lambda p, r: r["instances"]["coder"]["fallback"].update(harness="broken"),
         "harness-refused"),
        (lambda p, r: r["instances"]["coder"]["fallback"].update(thinking="max"),
         "thinking-unsupported"),
        (lambda p, r: r["instances"]["coder"]["fallback"].update(model="m9"), "unknown-model"),
        (lambda p, r: p["options"]["harness"].update({"fake-b": {"preflight": "fail"}}),
         "fake-broken"),
        (lambda p, r: p["options"]["harness"].update({"fake-b": {"preflight": "crash"}}),
         "preflight-failed"),
        (lambda p, r: r["instances"]["coder"]["fallback"].pop("model"), "no-route"),
    ],
)
async def test_fallback_refusals_name_the_primarys_failure(root: str, change, code: str) -> None:
    plugins_doc, routes_doc = docs(fallback=copy.deepcopy(FALLBACK),
                                   options={"fake-a": {"preflight": "fail"}})
    change(plugins_doc, routes_doc)
    refusal = await launch(root, plugins_doc, routes_doc)
    assert isinstance(refusal, Refusal), refusal
    assert refusal.code == code
    assert "the primary route fake-a/m1/low failed preflight: fake-broken" in refusal.message


async def test_a_preflight_that_hangs_is_cancelled_at_the_deadline(root: str, autojump_clock) -> None:
    broker = Broker(deadlines={"preflight": 3}, log=lambda e: None)
    start = trio.current_time()
    plugins_doc, routes_doc = docs(fallback=FALLBACK, options={"fake-a": {"preflight": "hang"}})
    record = await launch(root, plugins_doc, routes_doc, broker=broker)
    assert record.route == "fallback"
    assert "failed preflight: deadline" in record.route_reason
    assert trio.current_time() - start == pytest.approx(3)


async def test_an_off_harness_is_never_loaded(root: str, tree: Path) -> None:
    marker = tree / "loaded"
    write_module(tree, "harness", "noisy", f"open({str(marker)!r}, 'w').close()\n" + FAKE)
    plugins_doc, routes_doc = docs(route={"harness": "noisy", "model": "m1", "thinking": "low"})
    assert (await launch(root, plugins_doc, routes_doc)).code == "harness-off"
    assert not marker.exists()


async def test_every_launch_loads_the_module_afresh(root: str, tree: Path) -> None:
    first = await launch(root, *docs())
    path = tree / "harness" / "fake-a" / "__init__.py"
    path.write_text(path.read_text().replace('"fake 1.0"', '"fake 2.0"'))
    second = await launch(root, *docs())
    assert (first.harness_version, second.harness_version) == ("fake 1.0", "fake 2.0")


# --------------------------------------------------------------------------- writing routes


def checker(root: str, plugins_doc):
    broker = Broker(log=lambda e: None)

    def load_harness(name):
        loader = Loader(root=root, log=lambda entry: None)
        result = loader.load({"harness": [name]}, only=["harness"])
        return result.refused[0].refusal if result.refused else loader.modules("harness")[0]

    def check(route: Route, models):
        return check_route(route, switched_on=plugins_doc["plugins"]["harness"],
                           load_harness=load_harness, models=models, broker=broker,
                           options=plugins_doc["options"]["harness"].get(route.harness))

    return check


@pytest.mark.parametrize(
    "instance, code",
    [
        ({"harness": "fake-a", "model": "m1", "thinking": "low",
          "fallback": {"harness": "fake-b", "model": "m2"}}, "partial-fallback"),
        ({"harness": "fake-a", "model": "m1", "thinking": "low", "colour": "red"}, "invalid-routes"),
        ({"harness": "fake-a", "model": 3, "thinking": "low"}, "invalid-routes"),
        ({"harness": "Fake", "model": "m1", "thinking": "low"}, "bad-name"),
        ({"harness": "off-one", "model": "m1", "thinking": "low"}, "harness-off"),
        ({"harness": "broken", "model": "m1", "thinking": "low"}, "harness-refused"),
        ({"harness": "fake-a", "model": "m1", "thinking": "max"}, "thinking-unsupported"),
        ({"harness": "fake-a", "model": "m7", "thinking": "low"}, "unknown-model"),
        ({"harness": "fake-a", "model": "m1", "thinking": "low",
          "fallback": {"harness": "fake-b", "model": "m7", "thinking": "low"}}, "unknown-model"),
        ("fake-a", "invalid-routes"),
    ],
)
def test_routes_writer_refusals(root: str, instance, code: str) -> None:
    plugins_doc, routes_doc = docs()
    patch = {"revision": "r", "instances": {"coder": instance}}
    refusal = apply_routes_patch(routes_doc, patch, check=checker(root, plugins_doc))
    assert isinstance(refusal, Refusal) and refusal.code == code, refusal


def test_routes_writer_checks_only_changed_routes(root: str) -> None:
    plugins_doc, routes_doc = docs()
    # coder's stored route names a harness that is now off: a patch that
    # leaves it alone still saves.
    plugins_doc["plugins"]["harness"] = ["fake-b"]
    patch = {"revision": "r", "instances": {"tester": {"harness": "fake-b", "model": "m2",
                                                       "thinking": "high"}},
             "models": {"m3": {"provider": "p3"}}}
    new, changes = apply_routes_patch(routes_doc, patch, check=checker(root, plugins_doc))
    assert new["instances"]["coder"] == routes_doc["instances"]["coder"]
    assert new["instances"]["tester"]["harness"] == "fake-b"
    assert new["models"]["m3"] == {"provider": "p3"}
    assert set(changes) == {"instances.tester", "models.m3"}
    # Changing coder's route re-checks it.
    patch = {"revision": "r", "instances": {"coder": {"harness": "fake-a", "model": "m2",
                                                      "thinking": "low"}}}
    assert apply_routes_patch(routes_doc, patch, check=checker(root, plugins_doc)).code == "harness-off"


def test_routes_writer_refuses_an_empty_patch(root: str) -> None:
    plugins_doc, routes_doc = docs()
    assert apply_routes_patch(routes_doc, {"revision": "r"},
                              check=checker(root, plugins_doc)).code == "empty-patch"
