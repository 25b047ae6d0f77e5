"""The layers import one way: ``wire`` is pure (stdlib, attrs, cattrs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = ("wire", "wire.json", "wire.container", "wire.mod")


@pytest.mark.parametrize("module", PURE)
def test_wire_loads_no_io_framework(module):
    probe = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('trio', 'router', 'hypercorn', 'quart', 'quart_trio', 'trio_websocket', 'httpx', 'anyio', 'mcp', 'sqlite3'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0 and f"No module named '{module}'" in done.stderr:
        pytest.skip(f"{module} does not exist yet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"{module} pulled in {done.stdout.strip()}"
