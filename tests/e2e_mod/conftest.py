"""Fixtures for the real Claude Code binary with the router plug-in loaded."""

from __future__ import annotations

from typing import AsyncIterator

import pytest

from tests.e2e_claude.helpers import started_binary
from tests.e2e_mod.helpers import ModWorld, RouterApi, require_tmux
from tests.fakes.anthropic import FakeAnthropic, Respond, text_reply


@pytest.fixture(scope="session")
def claude_binary():
    return started_binary()


@pytest.fixture
async def fake_api(nursery) -> FakeAnthropic:
    # An unscripted request is answered, not failed: Claude Code may make
    # requests of its own (a title, a summary) around the ones a test scripts.
    fake = FakeAnthropic(fallback=Respond(lambda request: text_reply(f"answer to request {len(request.messages())}")))
    await nursery.start(fake.run)
    return fake


@pytest.fixture
async def world(claude_binary, fake_api) -> AsyncIterator[ModWorld]:
    require_tmux()
    made = ModWorld.make(claude_binary, fake_api.url)
    try:
        yield made
    finally:
        left = await made.close()
        assert not left, f"processes were left behind and had to be killed: {left}"


@pytest.fixture
async def router_api(world: ModWorld) -> AsyncIterator[RouterApi]:
    api = RouterApi(world.env)
    try:
        yield api
    finally:
        await api.aclose()
