"""No function in ``router/`` or ``wire/`` above cyclomatic complexity 20
(radon's grade D or worse), plug-in modules included.

A function past that point has too many paths to read, or to test, one by
one: split it along its steps (docs/contributing.md says how to measure).
"""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity", reason="radon is in the test extras")

ROOT = Path(__file__).resolve().parent.parent
#: The highest complexity allowed: radon's grade C ends at 20.
LIMIT = 20


def test_no_function_is_too_complex() -> None:
    too_complex = []
    for top in ("router", "wire"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for block in radon.cc_visit(path.read_text()):
                if block.complexity > LIMIT:
                    where = path.relative_to(ROOT).as_posix()
                    too_complex.append(f"{where}:{block.lineno} {block.fullname} ({block.complexity})")
    assert too_complex == []
