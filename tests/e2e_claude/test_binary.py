"""A Claude Code binary that is there but does not start fails the tests with
its stderr; only an impossible fetch may skip."""

from __future__ import annotations

import pytest

from tests.e2e_claude.helpers import started_binary


def test_a_binary_that_fails_to_start_is_a_failure_with_its_stderr(tmp_path, monkeypatch):
    broken = tmp_path / "claude"
    broken.write_text("#!/bin/sh\necho 'error: cannot load libfoo.so' >&2\nexit 127\n")
    broken.chmod(0o755)
    monkeypatch.setenv("ROUTER_CLAUDE_BINARY", str(broken))
    with pytest.raises(pytest.fail.Exception, match=r"exit 127\):\nstderr: error: cannot load libfoo.so"):
        started_binary()


def test_a_binary_that_cannot_be_executed_is_a_failure(tmp_path, monkeypatch):
    broken = tmp_path / "claude"
    broken.write_text("not a program")
    broken.chmod(0o644)
    monkeypatch.setenv("ROUTER_CLAUDE_BINARY", str(broken))
    with pytest.raises(pytest.fail.Exception, match="could not start"):
        started_binary()
