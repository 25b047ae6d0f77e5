"""Every ``statistics()`` in ``router/`` answers a frozen attrs object named
``<Thing>Statistics``, as trio's do (``trio.Lock.statistics()`` ...): fields a
reader and a test name, no dict whose keys only the code knows."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@cache
def _statistics_methods() -> list[tuple[str, ast.FunctionDef, dict[str, ast.ClassDef]]]:
    found = []
    for path in sorted((ROOT / "router").rglob("*.py")):
        tree = ast.parse(path.read_text())
        classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "statistics":
                found.append((f"{path.relative_to(ROOT).as_posix()}:{node.lineno}", node, classes))
    return found


def _frozen(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(d).startswith(("attrs.frozen", "attr.frozen")) for d in cls.decorator_list)


def test_every_statistics_answers_a_statistics_class() -> None:
    wrong = [where for where, node, _ in _statistics_methods()
             if node.returns is None or not ast.unparse(node.returns).endswith("Statistics")]
    assert wrong == []


def test_each_statistics_class_is_frozen_attrs() -> None:
    every: dict[str, ast.ClassDef] = {}
    for _, _, classes in _statistics_methods():
        every.update(classes)
    named = {ast.unparse(node.returns).rsplit(".", 1)[-1] for _, node, _ in _statistics_methods() if node.returns}
    not_frozen = sorted(name for name in named if name in every and not _frozen(every[name]))
    assert not_frozen == []
