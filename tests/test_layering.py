"""The layers import one way, and the packages meet only at their faces.

- ``wire`` is pure: the standard library, attrs and cattrs. Importing any of
  its modules loads no I/O framework, no HTTP machinery and nothing of
  ``router`` (checked in a fresh interpreter, as trio's export test does).
- ``router.daemon`` and ``router.host`` are two programs, the two ends of the
  container protocol: neither imports the other.
- Code outside a package imports it through its ``__init__`` (its public
  face), never a module inside it; ``router.daemon.adapters`` is public, as
  adapters are named by module.
- No import cycle among our modules, ``TYPE_CHECKING`` imports included.
- No module reaches another module's private attributes (a name starting with
  one underscore that the module itself does not define).

The last three are read from the source with :mod:`ast`, so they see imports
inside functions too.
"""

from __future__ import annotations

import ast
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
#: Packages whose modules only the package itself imports, and the
#: submodules that are public all the same.
FACES: dict[str, tuple[str, ...]] = {
    "router.daemon": ("router.daemon.adapters",),
    "router.host": (),
}
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
