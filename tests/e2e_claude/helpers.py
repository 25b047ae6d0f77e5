"""Shared pieces of the end-to-end tests with the real ``claude`` binary."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attrs
import pytest

from tests.support.claude import require_claude


@attrs.frozen
class ClaudeSetup:
    """One test's Claude Code world: the binary on a private ``PATH``, a
    workspace, a place for session homes, and the environment that points the
    CLI at the fake API."""

    binary: Path
    bin_dir: Path
    workspace: Path
    homes: Path
    env: dict[str, str]


def started_binary() -> Path:
    """The fetched binary, checked to start: a binary that is there but does
    not run is the test's failure, with its stderr, never a skip."""
    binary = require_claude()
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        pytest.fail(f"the Claude Code binary {binary} could not start: {exc}")
    if done.returncode != 0:
        pytest.fail(
            f"the Claude Code binary {binary} failed to start (exit {done.returncode}):\n"
            f"stderr: {done.stderr.strip()}\nstdout: {done.stdout.strip()}"
        )
    return binary


def claude_environment(base_url: str, bin_dir: Path) -> dict[str, str]:
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
        # Only the fake API is ever reached.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Claude Code retries a failed request up to 10 times with backoff
        # (about three minutes for a 529, seen with 2.1.332); an error test
        # wants the first answer to be the last. Tests only: the adapter
        # itself leaves the CLI's retry policy alone.
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (each test has
    its own workspace, so these are the test's CLI processes and their tools)."""
    found = []
    target = str(directory.resolve())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cwd == target and state not in ("Z", "X"):
            found.append(int(entry))
    return found
