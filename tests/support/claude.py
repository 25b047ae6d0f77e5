"""The real Claude Code binary, fetched once into the test cache.

npm ``@anthropic-ai/claude-code-linux-x64`` ships Claude Code's native build
as ``package/claude`` (about 400 MB unpacked for 2.1.332). :func:`claude_binary_path`
fetches it through :mod:`tests.support.npm` (``npm pack`` into
``$ROUTER_TEST_CACHE`` or ``~/.cache/router-tests``, keyed by version) and
returns the binary's path, executable.

:func:`require_claude` is the form for tests: a skip that says why when the
fetch is impossible (no ``npm``, no registry), a failure under
``ROUTER_REQUIRE_NPM=1`` (CI sets it). Only the *fetch* may skip: a binary
that is there but fails to start is the test's failure, with its stderr.
"""

from __future__ import annotations

import os
import platform
import stat
from pathlib import Path

from tests.support.npm import NpmUnavailable, npm_package

#: The pinned Claude Code build.
CLAUDE_CODE_VERSION = "2.1.332"

#: Environment override: a ``claude`` binary to use instead of the fetched one.
CLAUDE_BINARY_ENV = "ROUTER_CLAUDE_BINARY"


def claude_package_spec() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if arch is None or platform.system() != "Linux":
        raise NpmUnavailable(f"no Claude Code build is pinned for {platform.system()} {machine}")
    return f"@anthropic-ai/claude-code-linux-{arch}@{CLAUDE_CODE_VERSION}"


def claude_binary_path() -> Path:
    """The binary's path; raises :class:`NpmUnavailable` when it cannot be had."""
    override = os.environ.get(CLAUDE_BINARY_ENV)
    if override:
        return Path(override)
    package = npm_package(claude_package_spec())
    binary = package / "claude"
    if not binary.is_file():
        raise NpmUnavailable(f"{claude_package_spec()} has no package/claude")
    mode = binary.stat().st_mode
    wanted = mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
    if mode != wanted:  # tar may drop the bit, depending on the umask
        binary.chmod(wanted)
    return binary


def require_claude() -> Path:
    """:func:`claude_binary_path` for tests: skip (fail under CI) when the
    fetch is impossible."""
    import pytest

    try:
        return claude_binary_path()
    except NpmUnavailable as exc:
        if os.environ.get("ROUTER_REQUIRE_NPM") == "1":
            pytest.fail(f"the Claude Code binary is required but unavailable: {exc}")
        pytest.skip(f"the Claude Code binary is unavailable: {exc}")
