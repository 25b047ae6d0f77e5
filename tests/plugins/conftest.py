"""Fixtures for the plug-in layer: a temporary copy of the plug-in tree, and
a helper that writes modules into it."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

import router.plugins.loader as loader_module

SHIPPED_ROOT = Path(loader_module.DEFAULT_ROOT)


def write_module(root: Path, kind: str, name: str, source: str) -> Path:
    """Write ``<root>/<kind>/<name>/__init__.py`` with ``source`` (dedented)."""
    directory = root / kind / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "__init__.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A temporary copy of the plug-in tree (core files and shipped modules),
    which the loader takes as its root in tests."""
    root = tmp_path / "plugins"
    shutil.copytree(
        SHIPPED_ROOT, root, symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return root


@pytest.fixture
def log() -> list[dict]:
    return []


USAGE_SOURCE_OK = textwrap.dedent("""
    INTERFACE_VERSION = 1

    async def read_turn(request, deps):
        return None
""")


@pytest.fixture
def settings_dir(tmp_path: Path) -> Path:
    path = tmp_path / "settings"
    path.mkdir()
    return path


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
