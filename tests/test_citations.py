"""The repository cites what a reader of it can find.

The upstream protocol documents are named by package, version and file
(npm ``agents@0.32.0`` ``protocol.d.ts``, claude-envoy 1.19.0
``hooks/mod-protocol.ts``, the Mosaic plug-in layer's README), never as a
nickname (nor in a test's name), and never as a document the repository does
not hold (the project's design card, a contract by its nickname); no
comment, docstring or page points at an issue number; and
``docs/bench.md`` names no ``/tmp`` folder in its commands.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The folders and files walked.
PLACES = (
    "router",
    "wire",
    "tests",
    "docs",
    "bench",
    "scripts",
    "plugin",
    "README.md",
    ".ci/run",
    "Dockerfile",
    "pyproject.toml",
)
#: Folders never walked (installed or generated).
SKIPPED = {".venv", "node_modules", "__pycache__", ".pytest_cache", ".hypothesis", ".git"}
#: Phrases forbidden everywhere. A random seed is never written with these.
FORBIDDEN = (
    (
        "a nickname for an upstream document",
        re.compile(r"(?<![a-z])the[ _]seeds?(?![a-z])|\bseed's\b|(?<!['\"])\bseeds'(?=\s)", re.IGNORECASE),
    ),
    (
        "a document outside the repository",
        re.compile(r"\b(?:DESIGN|STYLE|COMMON)\.md\b|\b[A-Z]+_CONTRACT\b"),
    ),
    ("an issue number", re.compile(r"\bissues? #?\d+", re.IGNORECASE)),
)
TMP = re.compile(r"/tmp/")
THIS = Path(__file__).resolve()


def walked() -> list[Path]:
    files: list[Path] = []
    for place in PLACES:
        path = ROOT / place
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            for item in sorted(path.rglob("*")):
                if item.is_file() and not SKIPPED.intersection(item.relative_to(ROOT).parts):
                    files.append(item)
    return [item for item in files if item.resolve() != THIS]


def lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        return []


def test_the_walk_sees_the_tree() -> None:
    names = {item.relative_to(ROOT).as_posix() for item in walked()}
    assert {"README.md", "wire/mod.py", "docs/bench.md", "tests/test_layering.py"} <= names
    assert "tests/test_citations.py" not in names


def test_no_nickname_and_no_issue_number() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}"
        for path in walked()
        for number, line in enumerate(lines(path), 1)
        for what, pattern in FORBIDDEN
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def test_bench_names_no_tmp_folder() -> None:
    path = ROOT / "docs" / "bench.md"
    found = [f"docs/bench.md:{number}: {line.strip()}" for number, line in enumerate(lines(path), 1) if TMP.search(line)]
    assert not found, "\n".join(found)
