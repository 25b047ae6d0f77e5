"""``docs/architecture.md`` is a map of the whole tree: its "Every module"
table names each module of ``router/`` and ``wire/`` once, and nothing that
is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `((?:router|wire)/[^`]+\.py)` \| (.+) \|$", re.MULTILINE)


def test_every_module_is_on_the_map_and_nothing_else() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = ROW.findall(text)
    paths = [path for path, _ in named]
    modules = sorted(path.relative_to(ROOT).as_posix() for top in ("router", "wire")
                     for path in (ROOT / top).rglob("*.py"))
    assert sorted(set(modules) - set(paths)) == [], "modules missing from docs/architecture.md's table"
    assert sorted(set(paths) - set(modules)) == [], "rows of docs/architecture.md naming no module"
    assert len(paths) == len(set(paths)), "a module named twice"
    assert all(role.strip() and role.strip() != "?" for _, role in named), "a module without its role"
