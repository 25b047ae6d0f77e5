"""``session/new`` through ``router acp``, from the official SDK's client
(tests/support/acp_client.mjs, mode ``new``) against a real ``router serve``
with a project listed, real git and tmux, on the echo harness: the client's
``cwd`` (the project's folder) starts a session in its own worktree, which
``router sessions`` lists with its branch and worktree, and a prompt to it
is answered; a ``cwd`` that is no project is refused with the router's code
(``not-a-project``) and the connection goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from tests.acp.test_router_acp import CLIENT, SDK_SPEC, texts
from tests.api.processes import REPO, ROUTER
from tests.support.npm import node_binary, require_npm_install
from tests.worktrees.helpers import Bench, git


@pytest.fixture
async def bench(tmp_path: Path) -> AsyncIterator[Bench]:
    made = Bench.make(tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def test_session_new_starts_a_session_in_a_worktree_and_a_prompt_is_answered(bench: Bench) -> None:
    sdk = require_npm_install(SDK_SPEC)
    code, _, err = await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    assert code == 0, err
    async with bench.serve():
        with trio.fail_after(120):
            done = await trio.run_process(
                [node_binary(), str(CLIENT), str(sdk), str(bench.repo), "new", "--", *ROUTER, "acp"],
                capture_stdout=True, capture_stderr=True, check=False, env=bench.env, cwd=REPO,
            )
        assert done.returncode == 0, (done.stdout, done.stderr, bench.log())
        result = json.loads(done.stdout.decode().strip().splitlines()[-1])
        session = result["new"]["sessionId"]
        made = result["new"]["_meta"]["router"]
        assert made["project"] == "proj" and made["harness"] == "echo", made
        listed = await bench.listed()
        assert session in listed, listed
        worktree = Path(listed[session]["worktree"])
        assert listed[session]["project"] == "proj" and listed[session]["branch"] == made["branch"]
        assert worktree == Path(made["worktree"]) and worktree.is_dir() and worktree != bench.repo
        assert git(worktree, "rev-parse", "--abbrev-ref", "HEAD").strip() == made["branch"]
        assert await bench.tmux_has(made["name"])
    assert result["prompt"]["stopReason"] == "end_turn", result
    assert "hello" in texts(result["prompt"]["updates"], "agent_message_chunk"), result["prompt"]
    refused = result["refused"]
    assert refused["code"] == -32000 and "not-a-project" in refused["message"], refused
    assert str(bench.root) in refused["message"], refused  # the router's sentence names the folder
    # The connection lived on: the board listed after the refusal, with the new session.
    assert session in [each["sessionId"] for each in result["list"]["sessions"]]
