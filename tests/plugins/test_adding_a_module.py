"""Adding a module changes no core file: a fixture harness and a fixture
usage source are added to a copy of the tree, switched on with
`router plugins set`, routed to with `router routes set`, and launched and
metered through the layer. Every file that was in the tree is unchanged."""

from __future__ import annotations

import argparse
import ast
import hashlib
from pathlib import Path

from router.plugins import cli
from router.plugins.kinds import KINDS
from router.plugins.layer import PluginLayer
from router.plugins.settings import SettingsDir
from router.plugins.usage import MemoryRecords

from .conftest import SHIPPED_ROOT, write_module

FIXTURE_HARNESS = """
INTERFACE_VERSION = 1

def levels(options):
    return ["calm", "frantic"]

def counts_account(options):
    return True

def reach(context):
    return {"via": "carrier-pigeon", "loft": context["options"].get("loft", "north")}

def env(context):
    return {"PIGEON_MOOD": context["route"]["thinking"]}

async def preflight(context):
    return None

async def version(context):
    return "pigeon 0.1"
"""

FIXTURE_SOURCE = """
INTERFACE_VERSION = 1

async def read_turn(request, deps):
    if request["reach"]["via"] != "carrier-pigeon":
        return None
    if request["mark"] is None:
        return {"mark": 0, "usage": None}
    return {"mark": 1, "usage": {"input": 7, "output": 0, "cache_creation": 0, "cache_read": 0}}
"""


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def namespace(settings: Path, action: str | None, file: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(settings=str(settings), json=False, action=action,
                              file=str(file) if file else None, actor="test", records=None)


def set_with(run, settings: Path, tmp_path: Path, root: str, show: str, patch: dict) -> None:
    import json

    document = SettingsDir(settings).read(show)
    file = tmp_path / "patch.json"
    file.write_text(json.dumps({"revision": document.revision, **patch}))
    assert run(namespace(settings, "set", file), root=root) == 0


async def test_a_new_harness_changes_no_core_file(tree: Path, tmp_path: Path) -> None:
    before = digest(tree)
    write_module(tree, "harness", "pigeon", FIXTURE_HARNESS)
    write_module(tree, "usage-source", "pigeon-log", FIXTURE_SOURCE)
    settings = tmp_path / "settings"
    root = str(tree)
    set_with(cli.run_plugins, settings, tmp_path, root, "plugins.json", {
        "plugins": {"harness": ["echo", "pigeon"], "usage-source": ["pigeon-log", "frames"]},
        "options": {"harness": {"pigeon": {"loft": "south"}}}})
    set_with(cli.run_routes, settings, tmp_path, root, "routes.json", {
        "models": {"homing-1": {"provider": "aviary"}},
        "instances": {"messenger": {"harness": "pigeon", "model": "homing-1",
                                    "thinking": "calm", "account": "coop"}}})

    layer = PluginLayer(settings=SettingsDir(settings), records=MemoryRecords(), root=root,
                        log=lambda entry: None)
    assert (await layer.reload()).refused == ()
    record = await layer.launch("messenger", session="s-9")
    assert (record.harness, record.route, record.harness_version) == ("pigeon", "primary",
                                                                      "pigeon 0.1")
    assert record.reach == {"via": "carrier-pigeon", "loft": "south"}
    assert (record.provider, record.account) == ("aviary", "coop")
    bracket = await layer.begin_turn(record)
    turn, stop = await layer.end_turn(bracket)
    assert (turn["source"], turn["usage"]["input"]) == ("pigeon-log", 7)
    assert stop is None

    after = digest(tree)
    added = {k for k in after if k not in before}
    assert added == {"harness/pigeon/__init__.py", "usage-source/pigeon-log/__init__.py"}
    assert {k: after[k] for k in before} == before


def test_no_core_code_names_a_shipped_module() -> None:
    """Core files (everything in router/plugins outside the kind directories)
    hold no string equal to a shipped module's name, docstrings aside; the
    defaults document is the one exception, and it is data."""
    shipped = {
        p.name for kind in KINDS for p in (SHIPPED_ROOT / kind).iterdir() if p.is_dir()
        and not p.name.startswith("_")
    }
    assert {"echo", "claude-code", "container", "frames", "token-limit", "cli"} <= shipped
    offenders = []
    for path in SHIPPED_ROOT.glob("*.py"):
        if path.name == "defaults.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and node.value in shipped):
                offenders.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert offenders == []
