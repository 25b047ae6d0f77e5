"""Fixtures for the end-to-end tests with the real Claude Code binary."""

from __future__ import annotations

import pytest

from tests.e2e_claude.helpers import ClaudeSetup, claude_environment, started_binary
from tests.fakes.anthropic import FakeAnthropic


@pytest.fixture(scope="session")
def claude_binary():
    return started_binary()


@pytest.fixture
async def fake_api(nursery):
    fake = FakeAnthropic()
    await nursery.start(fake.run)
    return fake


@pytest.fixture
async def claude(claude_binary, fake_api, tmp_path) -> ClaudeSetup:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(claude_binary)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    homes = tmp_path / "homes"
    return ClaudeSetup(
        binary=claude_binary,
        bin_dir=bin_dir,
        workspace=workspace,
        homes=homes,
        env=claude_environment(fake_api.url, bin_dir),
    )
