"""The ``router`` console script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from router.cli import COMMANDS


def _router() -> list[str]:
    script = Path(sys.executable).parent / "router"
    return [str(script)] if script.exists() else [sys.executable, "-m", "router"]


def test_help_lists_every_command():
    done = subprocess.run([*_router(), "--help"], capture_output=True, text=True, check=True)
    for name in COMMANDS:
        assert f"  {name} " in done.stdout


def test_an_unknown_command_is_a_usage_error():
    done = subprocess.run([*_router(), "frobnicate"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "unknown command 'frobnicate'" in done.stderr

