"""Fetch npm packages once, at test time, into a cache outside the repository.

Nothing fetched here is ever committed. The cache directory is
``$ROUTER_TEST_CACHE`` when set, else ``~/.cache/router-tests``; each package
version is unpacked into a directory of its own, keyed by name and version,
and a finished unpack is renamed into place so an interrupted fetch never
leaves a half-written package behind.

When the fetch is impossible (no ``npm``, no registry), :func:`npm_package`
raises :class:`NpmUnavailable`; :func:`require_npm_package` turns that into a
``pytest.skip`` with the reason, or a failure when ``ROUTER_REQUIRE_NPM=1``
(CI sets it, so a missing peer can never turn a red run green).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path


class NpmUnavailable(RuntimeError):
    """The package could not be fetched; the message says why."""


def cache_root() -> Path:
    root = os.environ.get("ROUTER_TEST_CACHE") or os.path.expanduser("~/.cache/router-tests")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def npm_package(spec: str, *, timeout: float = 600.0) -> Path:
    """Return the unpacked ``package/`` directory of ``spec`` (``name@version``).

    The version must be exact: a cache keyed by a range would go stale.
    """
    name, _, version = spec.rpartition("@")
    if not name or not re.fullmatch(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?", version):
        raise ValueError(f"{spec!r} is not name@exact-version")
    target = cache_root() / "npm" / f"{name.replace('/', '__')}-{version}"
    package = target / "package"
    if package.is_dir():
        return package
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable(f"npm is not on PATH, so {spec} cannot be fetched")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as work:
        try:
            done = subprocess.run(
                [npm, "pack", spec, "--silent", "--pack-destination", work],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise NpmUnavailable(f"npm pack {spec} took longer than {timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise NpmUnavailable(f"npm pack {spec} failed: {' / '.join(tail)}")
        tarballs = list(Path(work).glob("*.tgz"))
        if len(tarballs) != 1:
            raise NpmUnavailable(f"npm pack {spec} left {len(tarballs)} tarballs, expected 1")
        unpacked = Path(work) / "unpacked"
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(unpacked, filter="tar")
        if not (unpacked / "package").is_dir():
            raise NpmUnavailable(f"the tarball of {spec} holds no package/ directory")
        try:
            os.rename(unpacked, target)
        except OSError:
            if not package.is_dir():  # lost a race to another fetch: theirs is as good
                raise
    return package


def npm_install(spec: str, *, timeout: float = 900.0) -> Path:
    """Return the installed ``node_modules/<name>`` directory of ``spec``
    (``name@exact-version``) with its dependencies (``npm install`` into a
    cache directory of its own; for packages that need their dependencies
    to run, such as ACP agents). Renamed into place when finished, as
    :func:`npm_package` does."""
    name, _, version = spec.rpartition("@")
    if not name or not re.fullmatch(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?", version):
        raise ValueError(f"{spec!r} is not name@exact-version")
    target = cache_root() / "npm-install" / f"{name.replace('/', '__')}-{version}"
    installed = target / "node_modules" / name
    if (installed / "package.json").is_file():
        return installed
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable(f"npm is not on PATH, so {spec} cannot be installed")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".install-") as work:
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", work, spec],
                cwd=work, capture_output=True, text=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise NpmUnavailable(f"npm install {spec} took longer than {timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise NpmUnavailable(f"npm install {spec} failed: {' / '.join(tail)}")
        try:
            os.rename(work, target)
        except OSError:
            if not (installed / "package.json").is_file():
                raise
        else:
            os.makedirs(work)  # for TemporaryDirectory's cleanup
    return installed


def require_npm_install(spec: str) -> Path:
    """:func:`npm_install` for tests: skip when impossible (fail under CI)."""
    import pytest

    try:
        return npm_install(spec)
    except NpmUnavailable as exc:
        if os.environ.get("ROUTER_REQUIRE_NPM") == "1":
            pytest.fail(f"required npm package unavailable: {exc}")
        pytest.skip(f"npm package unavailable: {exc}")


def require_npm_package(spec: str) -> Path:
    """:func:`npm_package` for tests: skip when the fetch is impossible (fail under CI)."""
    import pytest

    try:
        return npm_package(spec)
    except NpmUnavailable as exc:
        if os.environ.get("ROUTER_REQUIRE_NPM") == "1":
            pytest.fail(f"required npm package unavailable: {exc}")
        pytest.skip(f"npm package unavailable: {exc}")


#: The reference implementation of the container protocol.
AGENTS_SPEC = "agents@0.32.0"
#: The ACP agent (with Claude Code's runtime inside) the ACP adapter is tested against.
CLAUDE_CODE_ACP_SPEC = "@zed-industries/claude-code-acp@0.16.2"
#: The Codex ACP agent, its linux x64 build (a native binary, no dependencies).
CODEX_ACP_SPEC = "@zed-industries/codex-acp-linux-x64@0.16.0"
#: The Codex CLI (a native build) the Codex preset is tested against.
CODEX_SPEC = "@openai/codex@0.171.0-linux-x64"


def node_binary() -> str:
    """The ``node`` executable, or a skip (a failure under CI) when there is none."""
    import pytest

    node = shutil.which("node")
    if node is None:
        if os.environ.get("ROUTER_REQUIRE_NPM") == "1":
            pytest.fail("node is not on PATH; the reference peers need it")
        pytest.skip("node is not on PATH; the reference peers need it")
    return node
