"""No function in ``router/`` or ``wire/`` above cyclomatic complexity 15,
nor longer than 150 lines, plug-in modules, nested functions and methods of
classes defined inside functions included.

A function past either point has too many paths, or too many lines, to read
or to test one by one: split it along its steps (docs/contributing.md says how
to measure).

radon's ``cc_visit`` gives each top-level function and method its complexity
but folds nothing of a closure into its parent and lists closures only under
it; a route handler written inside a factory would go unmeasured. So every
``def`` anywhere in the tree is measured on its own, with radon's visitor run
over that one definition.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

visitors = pytest.importorskip("radon.visitors", reason="radon is in the test extras")

ROOT = Path(__file__).resolve().parent.parent
#: The highest complexity allowed: radon's grade C runs from 11 to 20; 15 is
#: its middle, the point past which our own splits have always read better.
LIMIT = 15
#: The most lines one function may span, from ``def`` to its last line,
#: docstring included: a screen and a half.
MAX_LINES = 150

#: Functions over a limit in files another engineer is rewriting this
#: session; each is split by its owner, and the entry removed when merged.
#: ``path:qualified name`` -> the owner. Empty: every function is within.
ALLOWED: dict[str, str] = {}

_FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef)


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function definition under ``tree`` with its dotted name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, _FUNCTION):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _complexity(node: ast.AST) -> int:
    """radon's cyclomatic complexity of one definition, closures left out."""
    visitor = visitors.ComplexityVisitor.from_ast(ast.Module(body=[node], type_ignores=[]))
    (function,) = visitor.functions
    return function.complexity


@cache
def measure() -> tuple[tuple[str, int, int], ...]:
    """``(path:name, complexity, lines)`` of every function in the tree."""
    found = []
    for top in ("router", "wire"):
        for path in sorted((ROOT / top).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=where)
            for name, node in _functions(tree):
                lines = node.end_lineno - node.lineno + 1
                found.append((f"{where}:{name}", _complexity(node), lines))
    return tuple(found)


def test_no_function_is_too_complex_or_too_long() -> None:
    over = [
        f"{name} (complexity {complexity}, {lines} lines)"
        for name, complexity, lines in measure()
        if (complexity > LIMIT or lines > MAX_LINES) and name not in ALLOWED
    ]
    assert over == []


def test_allowed_entries_are_still_needed() -> None:
    """An allow-list entry whose function is now within bounds is removed."""
    measured = {name: (complexity, lines) for name, complexity, lines in measure()}
    stale = [
        name
        for name in ALLOWED
        if name not in measured or (measured[name][0] <= LIMIT and measured[name][1] <= MAX_LINES)
    ]
    assert stale == []


def test_nested_functions_are_measured() -> None:
    """A closure's branches count for the closure, not its parent."""
    source = "def outer():\n    def inner(x):\n" + "".join(
        f"        if x == {n}:\n            return {n}\n" for n in range(LIMIT + 1)
    ) + "    return inner\n"
    found = {name: complexity for name, complexity in (
        (name, _complexity(node)) for name, node in _functions(ast.parse(source))
    )}
    assert found == {"outer": 1, "outer.inner": LIMIT + 2}
