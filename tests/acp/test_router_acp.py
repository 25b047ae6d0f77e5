"""``router acp`` against an ACP client from the official SDK (npm
``@agentclientprotocol/sdk`` 2.4.0, tests/support/acp_client.mjs) and a real
``router serve``: the board listed, a session loaded with its transcript
replayed, a prompt answered, a permission ask answered from the client (and
the agent getting that option), a prompt cancelled, an unknown session
refused. The session is itself an ACP agent (the fake one, through
``router daemon --adapter acp:fake``): ACP both ways."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from tests.acp.test_adapter import AGENT
from tests.api.processes import REPO, ROUTER, environment, send, serve
from tests.host.test_launched_processes import launch
from tests.support.npm import node_binary, require_npm_install

CLIENT = Path(__file__).resolve().parent.parent / "support" / "acp_client.mjs"
SDK_SPEC = "@agentclientprotocol/sdk@2.4.0"


def texts(updates: list[dict], kind: str) -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_an_sdk_client_attaches_prompts_answers_an_ask_and_cancels(tmp_path: Path, decision: str) -> None:
    sdk = require_npm_install(SDK_SPEC)
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin",
                    "launcher": "process"},
        "options": {"harness": {"acp": {"agents": {"fake": [sys.executable, AGENT]}}}},
    }))
    async with serve(tmp_path) as served:
        await launch(served, "s1", "--harness", "acp:fake")
        status, answer, err = await send(served.url, "s1", "first words", "--event-id", "e1", token=served.token)
        assert status == 0 and answer["reply"]["text"] == "echo: first words (turn 1)", (answer, err)
        with trio.fail_after(120):
            done = await trio.run_process(
                [node_binary(), str(CLIENT), str(sdk), "s1", decision, "--", *ROUTER, "acp"],
                capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
            )
        if done.returncode != 0:
            (tmp_path / "client.err").write_bytes(done.stderr)
        assert done.returncode == 0, (done.stdout, done.stderr, served.log())
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["initialize"]["protocolVersion"] == 1
    assert result["initialize"]["agentCapabilities"]["loadSession"] is True
    assert "s1" in [s["sessionId"] for s in result["list"]["sessions"]]
    # The transcript replayed on load: the person's words and the answer.
    assert texts(result["loadUpdates"], "user_message_chunk") == "first words"
    assert texts(result["loadUpdates"], "agent_message_chunk") == "echo: first words (turn 1)"
    hello, ask, slow = result["prompts"]
    assert hello["stopReason"] == "end_turn"
    assert texts(hello["updates"], "agent_message_chunk") == "echo: hello (turn 2)"
    assert texts(hello["updates"], "user_message_chunk") == ""  # the client's own prompt is not echoed
    # The ask went to the client; the agent got the option it chose.
    [permission] = result["permissions"]
    assert permission["toolCall"]["rawInput"] == {"command": "rm x"}
    assert ask["stopReason"] == "end_turn"
    said = "selected yes" if decision == "allow" else "selected no"
    assert said in texts(ask["updates"], "agent_message_chunk")
    assert [u["sessionUpdate"] for u in ask["updates"]].count("tool_call") == 1
    assert slow["stopReason"] == "cancelled"
    assert result["unknown"]["code"] == -32000 and "unknown-session" in result["unknown"]["message"]
