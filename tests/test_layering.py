"""The layers import one way, and the packages meet only at their faces.

- ``wire`` is pure: the standard library, attrs and cattrs. Importing any of
  its modules loads no I/O framework, no HTTP machinery and nothing of
  ``router`` (checked in a fresh interpreter, as trio's export test does).
- ``router.daemon`` and ``router.host`` are two programs, the two ends of the
  container protocol: neither imports the other.
- Every package of ``router`` has a face: its ``__init__`` (whose names load
  on first use, :mod:`router._face`) and the inner modules :data:`FACES`
  names public. Code outside a package imports it through that face, never
  another module inside it; ``router.daemon.adapters`` is public, as
  adapters are named by module.
- No import cycle among our modules, ``TYPE_CHECKING`` imports included,
  and none among the packages: read as one node each, the packages import
  one way. A command's module inside a package (``router.host.cli`` ...,
  what :data:`router.cli.COMMANDS` names) is the top of the stack, not part
  of its package's layer: nothing imports it, and it may use any package.
- Every sans-IO core (:data:`SANS_IO`) imports, in a fresh interpreter,
  with a finder that refuses trio, sqlite3, sockets and TLS: inputs in,
  effects out, no I/O loaded to get there. The cores of
  ``docs/architecture.md``'s table are all here, or in :data:`NOT_SANS_IO`
  with what keeps them from it.
- No module reaches another module's private attributes (a name starting with
  one underscore that the module itself does not define).

The import rules are read from the source with :mod:`ast`, so they see imports
inside functions too.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = ("wire", "wire.json", "wire.container", "wire.mod")
#: What a wire module may never load.
NOT_IN_WIRE = (
    "trio",
    "router",
    "hypercorn",
    "quart",
    "quart_trio",
    "trio_websocket",
    "httpx",
    "anyio",
    "mcp",
    "sqlite3",
    "h11",
    "wsproto",
)
#: Every package of ``router``: its ``__init__`` is its face, with the inner
#: modules other packages may import all the same (a package whose
#: ``__init__`` names nothing offers only these).
FACES: dict[str, tuple[str, ...]] = {
    "router.acp": (),
    "router.api": ("router.api.app", "router.api.config", "router.api.context", "router.api.server"),
    "router.asks": ("router.asks.remote",),
    "router.board": ("router.board.access", "router.board.client", "router.board.local", "router.board.paths",
                     "router.board.service", "router.board.state"),
    "router.cluster": (),
    "router.daemon": ("router.daemon.adapters",),
    "router.host": (),
    "router.limits": ("router.limits.shared",),
    "router.modlink": ("router.modlink.errors", "router.modlink.server"),
    "router.notify": ("router.notify.outbox", "router.notify.routes"),
    "router.plugins": ("router.plugins.broker", "router.plugins.channels", "router.plugins.layer",
                       "router.plugins.limit_checks", "router.plugins.loader", "router.plugins.models",
                       "router.plugins.routing", "router.plugins.settings", "router.plugins.usage",
                       "router.plugins.watched"),
    "router.record": (),
    "router.remote": (),
    "router.store": ("router.store.db", "router.store.sqlite", "router.store.worker"),
    "router.turns": ("router.turns.core", "router.turns.delivery_log", "router.turns.registry",
                     "router.turns.requests", "router.turns.router"),
    "router.worktrees": (),
}
#: The sans-IO cores: importing one loads none of :data:`NOT_IN_CORES`.
SANS_IO = (
    "router.acp.jsonrpc",
    "router.acp.updates",
    "router.asks.core",
    "router.board.changes",
    "router.board.kept",
    "router.board.state",
    "router.cluster.lease",
    "router.daemon.core",
    "router.host.connection",
    "router.host.events",
    "router.host.lifecycle",
    "router.limits.detect",
    "router.limits.schedule",
    "router.mcp_wire",
    "router.modlink.core",
    "router.notify.core",
    "router.remote.pairing",
    "router.turns.brackets",
    "router.turns.core",
    "router.turns.requests",
    "router.turns.resume",
    "router.worktrees.core",
)
#: Decisions docs/architecture.md names as cores whose module loads I/O
#: all the same, and why.
NOT_SANS_IO: dict[str, str] = {
    "router.host.reconcile": "it makes the host store's calls itself (router.host.store: sqlite3, its worker thread)",
    "router.remote.devices": "StreamBook shares its module with the devices' record (router.store.db: sqlite3)",
    "router.plugins.routing": "its decisions share the module with the plug-in calls through the broker (Trio)",
    "router.plugins.limit_checks": "its composition shares the module with the checks' calls through the broker (Trio)",
    "router.plugins.settings": "it reads and writes the settings files under a lock, and loads the usage records",
    "router.acp.projection": "its schema's package, agent-client-protocol 0.12.1, loads its asyncio transport",
}
#: What a sans-IO core may never load.
NOT_IN_CORES = ("trio", "anyio", "asyncio", "sqlite3", "_sqlite3", "socket", "ssl", "_ssl", "selectors", "httpx",
                "hypercorn", "quart", "quart_trio")
#: Private attributes reached across a module boundary on purpose, each with
#: its reason (none now: both ends of the container protocol use wsproto's
#: public API, router/_websocket.py).
ALLOWED_PRIVATE: dict[str, set[str]] = {}


@pytest.mark.parametrize("module", PURE)
def test_wire_loads_no_io_framework(module):
    probe = (
        f"import sys, {module}\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {NOT_IN_WIRE!r})\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"{module} pulled in {done.stdout.strip()}"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("router", "wire"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if any("-" in part for part in parts):
                continue  # plug-in modules: loaded by path, not imported by name
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _imports(name: str) -> set[str]:
    """Every module of ours ``name`` imports, wherever the import stands."""
    out: set[str] = set()
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return {module for module in out if module in MODULES and module != name}


def _commands() -> set[str]:
    """The modules :data:`router.cli.COMMANDS` names (read from the source)."""
    for node in ast.walk(TREES["router.cli"]):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "COMMANDS":
            return {module for module, _ in ast.literal_eval(node.value).values()}
    raise AssertionError("router.cli defines no COMMANDS")


COMMANDS = _commands()


def _package(name: str) -> str | None:
    return next((face for face in FACES if name == face or name.startswith(face + ".")), None)


def test_daemon_and_host_never_import_each_other():
    crossings = [
        f"{name} imports {target}"
        for name in MODULES
        for target in _imports(name)
        if {_package(name), _package(target)} == {"router.daemon", "router.host"}
    ]
    assert crossings == []


def test_packages_are_imported_through_their_faces():
    reached = []
    for name in MODULES:
        for target in _imports(name):
            face = _package(target)
            if face is None or face == _package(name) or target == face:
                continue
            if any(target == public or target.startswith(public + ".") for public in FACES[face]):
                continue
            reached.append(f"{name} imports {target}")
    assert reached == []


def test_no_import_cycles():
    graph = {name: _imports(name) for name in MODULES}
    # Packages import their own modules from __init__; an edge from a module
    # to its own package's face is that, not a cycle of ours.
    for name, targets in graph.items():
        targets -= {face for face in MODULES if name.startswith(face + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == []


def test_every_package_has_a_face():
    packages = {f"router.{path.parent.name}" for path in (ROOT / "router").glob("*/__init__.py")}
    assert sorted(packages ^ set(FACES)) == []
    named = {public for publics in FACES.values() for public in publics}
    assert sorted(public for public in named if public not in MODULES) == [], "a face names a module that is gone"


@pytest.mark.parametrize("package", sorted(FACES))
def test_a_face_loads_nothing_until_a_name_is_used(package):
    probe = (
        f"import sys, importlib\n"
        f"face = importlib.import_module({package!r})\n"
        f"loaded = sorted(m for m in sys.modules if m.startswith({package + '.'!r}))\n"
        "print(','.join(loaded))\n"
        "for name in getattr(face, '__all__', ()):\n"
        "    getattr(face, name)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]  # and every name of __all__ is found where its face says
    assert done.stdout.strip() == "", f"importing {package} loaded {done.stdout.strip()}"


def test_a_packaged_command_is_imported_by_no_module():
    inner = {command for command in COMMANDS if _package(command) is not None}
    importers = [f"{name} imports {target}" for name in MODULES for target in _imports(name) if target in inner]
    assert importers == []


def _layer(name: str) -> str:
    """A module's node in the package graph: its package, or itself (a
    top-level module, a command)."""
    if name in COMMANDS:
        return name
    return _package(name) or name


def test_no_package_cycles():
    graph: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in MODULES:
        for target in _imports(name):
            source, sink = _layer(name), _layer(target)
            if source != sink:
                graph[source].add(sink)
                why[source, sink].append(f"{name} -> {target}")
    # Tarjan's strongly connected components: a component of two or more
    # nodes is a cycle of packages.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    edges = [f"{a} -> {b}: {why[a, b][:3]}" for cycle in cycles for a in cycle for b in cycle if (a, b) in why]
    assert cycles == [], "\n".join(edges)


#: Installed in the probe's interpreter before the core is imported.
_REFUSER = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BANNED:
            raise ImportError(f'a sans-IO core loaded {name}')
        return None
BANNED = set(sys.argv[2:])
already = sorted(m for m in sys.modules if m.split('.')[0] in BANNED)
assert not already, already
sys.meta_path.insert(0, Refuse())
import importlib
importlib.import_module(sys.argv[1])
print('ok')
"""


@pytest.mark.parametrize("module", SANS_IO)
def test_a_sans_io_core_loads_no_io(module):
    done = subprocess.run([sys.executable, "-c", _REFUSER, module, *NOT_IN_CORES], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _cores_on_the_map() -> set[str]:
    """The modules the first column of docs/architecture.md's table of cores
    names (a bare file name is in the directory of the one before it)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("| core (sans-IO) |")
    rows = text[start:].split("\n\n", 1)[0].splitlines()[2:]
    found: set[str] = set()
    for row in rows:
        directory = ""
        for path in re.findall(r"`([a-z_/]+\.py)`", row.split("|")[1]):
            directory = path.rpartition("/")[0] if "/" in path else directory
            found.add(".".join(["router", *filter(None, directory.split("/")), path.rpartition("/")[2][:-3]]))
    return found


def test_every_core_on_the_map_is_sans_io_or_says_why_not():
    cores = _cores_on_the_map()
    assert len(cores) >= 10
    assert sorted(cores - set(SANS_IO) - set(NOT_SANS_IO)) == []
    assert sorted(set(SANS_IO) & set(NOT_SANS_IO)) == []


def _defined_private(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and type(node.value) is str:
            names.add(node.value)  # __slots__ entries
    return {name for name in names if name.startswith("_")}


def test_no_private_attribute_reached_across_modules():
    reached = []
    for name, tree in TREES.items():
        own = _defined_private(tree)
        rel = MODULES[name].relative_to(ROOT).as_posix()
        allowed = ALLOWED_PRIVATE.get(rel, set())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr in own or attr in allowed:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            reached.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert reached == []
