"""Shared fixtures. Feature-specific fixtures live beside their tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

import pytest


@pytest.fixture
def runtime_dir() -> Iterator[str]:
    """A fresh private run directory (0700) under /tmp (short, for mod link
    socket paths), removed afterwards."""
    path = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    os.chmod(path, 0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(runtime_dir: str) -> dict[str, str]:
    """The environment a mod link resolves its socket path from."""
    return {"XDG_RUNTIME_DIR": runtime_dir}


@pytest.fixture(autouse=True)
def private_runtime_dir(runtime_dir: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with a run directory of its own (``XDG_RUNTIME_DIR``):
    the routers it starts, in process or as processes, bind their local
    sockets there (``router.board.local``), never in the user's own, and no
    test sees another's routers."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime_dir)
    return runtime_dir
