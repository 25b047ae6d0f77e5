"""The ACP adapter against a real ACP agent: npm
``@zed-industries/claude-code-acp`` 0.16.2 (Claude Code 2.1.44's runtime
inside, from ``@anthropic-ai/claude-agent-sdk``), installed at test time into
the test cache, pointed at the fake Messages API (tests/fakes/anthropic.py).

Offline it needs ``ANTHROPIC_BASE_URL`` and a key, and ``IS_SANDBOX=1`` when
run as root (its Claude Code refuses ``--dangerously-skip-permissions`` as
root otherwise, and ``session/new`` fails "Query closed before response
received"). A read-only command (``echo``) runs without asking; ``touch``
raises ``session/request_permission``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from router.daemon.adapter import AdapterTurn
from router.daemon.adapters.acp import AcpAdapter, AcpSession
from tests.acp.test_adapter import Recorder
from tests.e2e_claude.test_daemon import connect
from tests.fakes.anthropic import FakeAnthropic, slow_reply, text_reply, tool_reply
from tests.support.daemons import spawn_daemon
from tests.support.npm import CLAUDE_CODE_ACP_SPEC, node_binary, require_npm_install
from tests.support.polling import until
from wire.container import Done, Unanswered


@pytest.fixture(scope="module")
def agent_command() -> list[str]:
    package = require_npm_install(CLAUDE_CODE_ACP_SPEC)
    return [node_binary(), str(package / "dist" / "index.js")]


@pytest.fixture
async def fake_api(nursery: trio.Nursery) -> FakeAnthropic:
    # Claude Code also asks a small model for summaries: whatever is not
    # scripted gets this answer.
    fake = FakeAnthropic(fallback=text_reply("fallback answer"))
    await nursery.start(fake.run)
    return fake


@pytest.fixture
def agent_env(fake_api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": str(fake_api.url),
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "IS_SANDBOX": "1",
    }


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


async def run_turn(session: AcpSession, op: str, text: str) -> Any:
    with trio.fail_after(120):
        return await session.run(AdapterTurn(operation_id=op, input=text))


async def test_a_prompt_a_tool_call_and_asks_answered_allow_and_deny(agent_command, agent_env, workspace,
                                                                      fake_api):
    record = Recorder()
    session = await AcpAdapter(agent_command, env=agent_env, cwd=str(workspace)).open(record.context)
    try:
        fake_api.script(text_reply("Hello from the fake API."))
        assert await run_turn(session, "op1", "Say hello") == Done(text="Hello from the fake API.")
        assert record.last_message()["parts"] == [{"type": "text", "text": "Hello from the fake API."}]
        assert session.agent_info is not None and session.agent_info["name"] == "@zed-industries/claude-code-acp"
        assert session.load_session

        for op, decision, file in (("op2", "allow", "allowed.txt"), ("op3", "deny", "denied.txt")):
            fake_api.script(tool_reply("Bash", {"command": f"touch {file}", "description": "Make a file"}))
            outcome: list[Any] = []
            async with trio.open_nursery() as nursery:
                async def go(op: str = op) -> None:
                    outcome.append(await run_turn(session, op, "make the file"))

                nursery.start_soon(go)
                with trio.fail_after(120):
                    await until(lambda: len(record.asks()) == {"op2": 1, "op3": 2}[op])
                ask = record.asks()[-1]
                assert ask["input"]["command"] == f"touch {file}"
                assert {o["kind"] for o in ask["options"]} >= {"allow_once", "reject_once"}
                assert session.answer(ask["askId"], decision)
            assert isinstance(outcome[0], Done)
            [tool] = [p for p in record.last_message()["parts"] if p["type"] == "tool"]
            assert tool["input"]["command"] == f"touch {file}"
            assert tool["state"] == ("done" if decision == "allow" else "error")
            assert (workspace / file).exists() is (decision == "allow")
    finally:
        await session.close()


async def test_an_abort_mid_turn_cancels_and_a_killed_agent_starts_again_on_its_session(agent_command, agent_env,
                                                                                        workspace, fake_api):
    record = Recorder()
    session = await AcpAdapter(agent_command, env=agent_env, cwd=str(workspace)).open(record.context)
    try:
        fake_api.script(text_reply("Noted: kumquat."))
        assert await run_turn(session, "op1", "Remember the word kumquat.") == Done(text="Noted: kumquat.")
        # Abort mid-turn: session/cancel, the agent answers, and lives on.
        fake_api.script(slow_reply())
        with trio.move_on_after(120) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_turn, session, "op2", "Talk slowly.")
                await until(lambda: any(e["messageId"] == "op2:assistant" for e in record.of("text-delta")))
                scope.cancel()
        assert session.process is not None and session.process.returncode is None
        pid = session.process.pid
        # Killed mid-turn: unanswered with how it ended.
        fake_api.script(slow_reply())
        outcome: list[Any] = []
        async with trio.open_nursery() as nursery:
            async def go() -> None:
                outcome.append(await run_turn(session, "op3", "Talk slowly again."))

            nursery.start_soon(go)
            await until(lambda: any(e["messageId"] == "op3:assistant" for e in record.of("text-delta")))
            os.killpg(pid, signal.SIGKILL)
        assert isinstance(outcome[0], Unanswered) and "SIGKILL" in outcome[0].reason
        # The next turn starts it again and loads the same session.
        fake_api.script(text_reply("It was kumquat."))
        assert await run_turn(session, "op4", "Which word?") == Done(text="It was kumquat.")
        assert session.statistics().starts == 2
        last = [r for r in fake_api.messages_requests() if "Which word?" in r.texts()][-1]
        assert "Remember the word kumquat." in last.texts()
    finally:
        await session.close()


async def test_the_daemon_runs_the_agent_and_a_restore_resumes_its_conversation(agent_command, agent_env,
                                                                               workspace, fake_api):
    env = {**agent_env, "ROUTER_CLI_CWD": str(workspace)}
    fake_api.script(text_reply("I will remember tangerine."))
    async with spawn_daemon("ours", adapter="acp", agent=tuple(agent_command), env=env) as daemon:
        async with connect(daemon, "chat-1") as client:
            hello = await client.open()
            assert hello["adapter"]["id"] == "acp"
            await client.prompt("op-1", "Remember the word tangerine.")
            with trio.fail_after(120):
                outcome = await client.settled("op-1")
            assert outcome == {"status": "done", "text": "I will remember tangerine."}
            persisted = client.persisted()
            assert [e["kind"] for e in persisted] == ["acp-session"]
            # The agent writes its session's transcript after it answers; a
            # daemon stopped before that write would leave nothing to load
            # (seen in a full run). A person's daemon lives on; here the
            # condition is awaited before the stop.
            home = Path(agent_env["HOME"])
            written = f"{persisted[0]['sessionId']}.jsonl"

            def transcript_written() -> bool:
                return any("I will remember tangerine." in path.read_text(errors="replace")
                           for path in home.glob(f".claude/projects/*/{written}"))

            with trio.fail_after(60):
                await until(transcript_written, step=0.05)
    # A new daemon: the session comes back from its entries and loads.
    fake_api.script(text_reply("The word was tangerine."))
    async with spawn_daemon("ours", adapter="acp", agent=tuple(agent_command), env=env) as daemon:
        async with connect(daemon, "chat-1") as client:
            await client.open(restore=persisted)
            await client.prompt("op-2", "Which word?")
            with trio.fail_after(120):
                outcome = await client.settled("op-2")
    assert outcome == {"status": "done", "text": "The word was tangerine."}
    last = [r for r in fake_api.messages_requests() if "Which word?" in r.texts()][-1]
    assert "Remember the word tangerine." in last.texts()
