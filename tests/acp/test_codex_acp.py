"""The ACP adapter against a second real ACP agent: npm
``@zed-industries/codex-acp-linux-x64`` 0.16.0 (the Codex ACP agent, a
native binary), its model provider pointed at the fake Responses API
(tests/fakes/openai.py) by a ``config.toml`` in its ``CODEX_HOME``.

A command asking for escalation (``sandbox_permissions:
"require_escalated"``) raises ``session/request_permission`` with the
options ``approved`` (allow_once), ``approved-execpolicy-amendment``
(allow_always) and ``abort`` (reject_once). codex-acp 0.16.0 does not know
the fake's model and says so as the turn's first text ("Model metadata for
... not found"): the tests read the end of the answer.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from router.daemon.adapter import AdapterTurn
from router.daemon.adapters.acp import AcpAdapter
from tests.acp.test_adapter import Recorder
from tests.fakes.openai import FakeResponses, ResponsesReply
from tests.support.npm import CODEX_ACP_SPEC, require_npm_package
from tests.support.polling import until
from wire.container import Done


@pytest.fixture(scope="module")
def codex_acp() -> str:
    binary = require_npm_package(CODEX_ACP_SPEC) / "bin" / "codex-acp"
    # npm pack's tarball keeps no execute bit on this build.
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return str(binary)


@pytest.fixture
async def fake_openai(nursery: trio.Nursery) -> FakeResponses:
    fake = FakeResponses(fallback=ResponsesReply(text="fallback answer"))
    await nursery.start(fake.run)
    return fake


def codex_env(tmp_path: Path, url: str) -> dict[str, str]:
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "gateway"\n[model_providers.gateway]\nname = "gateway"\n'
        f'base_url = "{url}/v1"\nenv_key = "OPENAI_API_KEY"\nwire_api = "responses"\n'
    )
    return {"HOME": str(home), "CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-fake", "RUST_LOG": "error"}


async def run_turn(session: Any, op: str, text: str) -> Any:
    with trio.fail_after(60):
        return await session.run(AdapterTurn(operation_id=op, input=text))


async def test_codex_acp_answers_shows_tools_asks_and_loads_its_session(codex_acp, fake_openai, tmp_path: Path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = codex_env(tmp_path, str(fake_openai.url))
    record = Recorder()
    session = await AcpAdapter([codex_acp], env=env, cwd=str(workspace)).open(record.context)
    try:
        fake_openai.script(ResponsesReply(text="Noted: fig."))
        outcome = await run_turn(session, "op1", "Remember fig.")
        assert isinstance(outcome, Done) and outcome.text.endswith("Noted: fig.")
        assert session.agent_info is not None and session.agent_info["name"] == "codex-acp" and session.load_session
        for op, decision, file in (("op2", "allow", "allowed.txt"), ("op3", "deny", "denied.txt")):
            # "abort" (deny) ends Codex's turn: no model call follows it.
            fake_openai.script(
                ResponsesReply(call=("exec_command", {"cmd": f"touch {file}", "sandbox_permissions": "require_escalated",
                                                      "justification": "make the file"})),
                *([ResponsesReply(text="made it")] if decision == "allow" else []),
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_turn, session, op, "make the file")
                with trio.fail_after(60):
                    await until(lambda: len(record.asks()) == {"op2": 1, "op3": 2}[op])
                ask = record.asks()[-1]
                assert {o["kind"] for o in ask["options"]} == {"allow_once", "allow_always", "reject_once"}
                assert session.answer(ask["askId"], decision)
            assert (workspace / file).exists() is (decision == "allow")
            if decision == "allow":  # the command ran: a tool part, done
                [tool] = [p for p in record.last_message()["parts"] if p["type"] == "tool"]
                assert tool["toolName"] == "touch allowed.txt" and tool["state"] == "done"
    finally:
        await session.close()
    # A new adapter (a restored session): session/load, the model sees fig.
    again = Recorder(restore=tuple(record.persisted))
    restored = await AcpAdapter([codex_acp], env=env, cwd=str(workspace)).open(again.context)
    try:
        fake_openai.script(ResponsesReply(text="It was fig."))
        outcome = await run_turn(restored, "op4", "Which fruit?")
        assert isinstance(outcome, Done) and outcome.text.endswith("It was fig.")
        texts = [part.get("text") for item in fake_openai.requests[-1].json["input"] if item.get("type") == "message"
                 for part in item.get("content", [])]
        assert "Remember fig." in texts
    finally:
        await restored.close()


async def test_codex_acp_abort_mid_turn_and_killed_mid_turn(codex_acp, fake_openai, tmp_path: Path):
    """Mid-turn is a turn waiting on its permission request: an abort there
    cancels it and the agent lives on; a kill there settles the turn
    unanswered with how it ended, and the next turn starts the agent again
    on its session (the model sees the earlier turn)."""
    import os
    import signal

    from wire.container import Unanswered

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = codex_env(tmp_path, str(fake_openai.url))
    record = Recorder()
    session = await AcpAdapter([codex_acp], env=env, cwd=str(workspace)).open(record.context)

    def asks_to_touch(file: str) -> ResponsesReply:
        return ResponsesReply(call=("exec_command", {"cmd": f"touch {file}", "sandbox_permissions": "require_escalated",
                                                     "justification": "make the file"}))

    try:
        fake_openai.script(ResponsesReply(text="Noted: plum."))
        outcome = await run_turn(session, "op1", "Remember plum.")
        assert isinstance(outcome, Done) and outcome.text.endswith("Noted: plum.")
        # Abort while the turn waits on its ask.
        fake_openai.script(asks_to_touch("aborted.txt"))
        with trio.move_on_after(120) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_turn, session, "op2", "make the file")
                with trio.fail_after(60):
                    await until(lambda: len(record.asks()) == 1)
                scope.cancel()
        assert scope.cancelled_caught and not (workspace / "aborted.txt").exists()
        assert session.process is not None and session.process.returncode is None  # it lives on
        pid = session.process.pid
        # Killed while the turn waits on its ask.
        fake_openai.script(asks_to_touch("killed.txt"))
        outcomes: list[Any] = []
        async with trio.open_nursery() as nursery:
            async def go() -> None:
                outcomes.append(await run_turn(session, "op3", "make the other file"))

            nursery.start_soon(go)
            with trio.fail_after(60):
                await until(lambda: len(record.asks()) == 2)
            os.killpg(pid, signal.SIGKILL)
        assert isinstance(outcomes[0], Unanswered) and "SIGKILL" in outcomes[0].reason, outcomes
        assert not (workspace / "killed.txt").exists()
        # The next turn starts it again and loads the same session.
        fake_openai.script(ResponsesReply(text="It was plum."))
        outcome = await run_turn(session, "op4", "Which fruit?")
        assert isinstance(outcome, Done) and outcome.text.endswith("It was plum.")
        assert session.statistics().starts == 2
        texts = [part.get("text") for item in fake_openai.requests[-1].json["input"] if item.get("type") == "message"
                 for part in item.get("content", [])]
        assert "Remember plum." in texts
    finally:
        await session.close()
