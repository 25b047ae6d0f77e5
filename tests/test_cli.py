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



def test_every_command_module_imports_and_takes_help():
    for name, (module, _) in COMMANDS.items():
        done = subprocess.run([*_router(), name, "--help"], capture_output=True, text=True)
        assert done.returncode == 0, f"router {name} --help: {done.stderr[-2000:]}"
        assert f"router {name}" in done.stdout


def test_version():
    from importlib.metadata import version

    done = subprocess.run([*_router(), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout == f"router {version('router')}\n"
