"""The ACP adapter against a real ACP agent process (the tiny fake agent in
tests/support/fake_acp_agent.py, for the hostile and fault cases): a prompt
answered, a tool call shown, a permission ask answered allow and deny or
left to expire, an abort mid-turn, the agent killed mid-turn, a restore that
loads the agent's session in a new adapter, and bad input: malformed
JSON-RPC, unknown methods, a response to nothing, an agent that never
answers ``initialize``, a flood of updates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from router.daemon.adapter import AdapterContext, AdapterTurn
from router.daemon.adapters.acp import AcpAdapter, AcpSession
from tests.support.polling import until
from wire.container import ContainerSettings, Done, Unanswered, is_event

AGENT = str(Path(__file__).resolve().parent.parent / "support" / "fake_acp_agent.py")


class Recorder:
    def __init__(self, restore: tuple[Any, ...] = ()) -> None:
        self.events: list[Any] = []
        self.persisted: list[Any] = []
        self.logs: list[tuple[str, str]] = []
        self.context = AdapterContext(
            session="s1", settings=ContainerSettings(), restore=restore,
            emit=self._emit, persist=self.persisted.extend, log=lambda level, text: self.logs.append((level, text)),
        )

    def _emit(self, event: Any) -> None:
        assert is_event(event), event
        self.events.append(event)

    def of(self, kind: str) -> list[Any]:
        return [event for event in self.events if event["type"] == kind]

    def asks(self) -> list[dict[str, Any]]:
        return [e["value"] for e in self.of("raw") if e["value"]["type"] == "ask"]

    def last_message(self) -> dict[str, Any]:
        return self.of("message")[-1]["message"]


def adapter(tmp_path: Path, **options: Any) -> AcpAdapter:
    env = {"FAKE_ACP_STATE": str(tmp_path)} | options.pop("env", {})
    return AcpAdapter([sys.executable, AGENT], env=env, cwd=str(tmp_path), **options)


async def turn(session: AcpSession, text: str, op: str = "op1") -> Any:
    with trio.fail_after(30):
        return await session.run(AdapterTurn(operation_id=op, input=text))


async def test_a_prompt_is_answered_with_deltas_a_message_and_usage(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        outcome = await turn(session, "hello")
        assert outcome == Done(text="echo: hello (turn 1)")
        assert [e["delta"] for e in record.of("text-delta")] == ["echo: hello ", "(turn 1)"]
        assert record.last_message()["parts"] == [{"type": "text", "text": "echo: hello (turn 1)"}]
        assert record.last_message()["id"] == "op1:assistant"
        assert record.of("usage") == [{"type": "usage", "inputTokens": 3, "outputTokens": 2}]
        assert record.persisted == [{"kind": "acp-session", "sessionId": session.acp_session}]
        # The same process answers the next turn.
        assert await turn(session, "again", "op2") == Done(text="echo: again (turn 2)")
        assert session.statistics().starts == 1
    finally:
        await session.close()


async def test_a_tool_call_and_a_plan_are_tool_parts(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        assert await turn(session, "tool") == Done(text="listed")
        parts = record.last_message()["parts"]
        assert parts[0] == {"type": "tool", "toolCallId": "t1", "toolName": "List files",
                            "input": {"command": "ls"}, "state": "done", "output": "a.txt"}
        assert parts[1]["toolName"] == "plan" and parts[1]["state"] == "done"
        assert parts[1]["input"] == {"entries": [{"content": "look", "priority": "high", "status": "completed"}]}
        assert parts[2] == {"type": "text", "text": "listed"}
    finally:
        await session.close()


@pytest.mark.parametrize(("decision", "said"), [("allow", "selected yes"), ("deny", "selected no")])
async def test_a_permission_request_is_an_ask_answered_as_the_option(tmp_path: Path, decision: str,
                                                                      said: str) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        async with trio.open_nursery() as nursery:
            outcome: list[Any] = []

            async def run() -> None:
                outcome.append(await turn(session, "ask"))

            nursery.start_soon(run)
            with trio.fail_after(30):
                await until(lambda: bool(record.asks()))
            ask = record.asks()[0]
            assert ask["tool"] == "Run rm" and ask["input"] == {"command": "rm x"} and ask["toolCallId"] == "t2"
            assert [o["kind"] for o in ask["options"]] == ["allow_once", "allow_always", "reject_once"]
            assert session.answer(ask["askId"], decision)
            assert not session.answer(ask["askId"], decision)  # the first answer wins
        assert outcome == [Done(text=said)]
        ended = [e["value"] for e in record.of("raw") if e["value"]["type"] == "ask-ended"]
        assert ended == [{"type": "ask-ended", "askId": ask["askId"], "state": "answered", "decision": decision}]
    finally:
        await session.close()


async def test_an_ask_nobody_answers_is_cancelled_at_its_deadline(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path, ask_deadline=0.5).open(record.context)
    try:
        assert await turn(session, "ask") == Done(text="cancelled")
        ended = [e["value"] for e in record.of("raw") if e["value"]["type"] == "ask-ended"]
        assert [e["state"] for e in ended] == ["expired"]
    finally:
        await session.close()


async def test_an_abort_mid_turn_sends_session_cancel_and_the_agent_lives_on(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        with trio.move_on_after(30) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn, session, "slow")
                await until(lambda: bool(record.of("text-delta")))
                scope.cancel()
        pid = session.process.pid if session.process else None
        assert pid is not None and session.process.returncode is None  # answered cancel: kept
        assert record.last_message()["parts"] == [{"type": "text", "text": "working"}]
        assert await turn(session, "next", "op2") == Done(text="echo: next (turn 2)")
        assert session.process is not None and session.process.pid == pid
    finally:
        await session.close()


async def test_an_abort_while_an_ask_waits_answers_it_cancelled(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        with trio.move_on_after(30) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn, session, "ask")
                await until(lambda: bool(record.asks()))
                scope.cancel()
        ended = [e["value"] for e in record.of("raw") if e["value"]["type"] == "ask-ended"]
        assert [e["state"] for e in ended] == ["cancelled"]
        assert session.waiting_asks() == []
        assert await turn(session, "next", "op2") == Done(text="echo: next (turn 2)")
    finally:
        await session.close()


async def test_an_agent_that_dies_mid_turn_settles_it_with_its_words_and_starts_again(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        outcome = await turn(session, "die")
        assert isinstance(outcome, Unanswered)
        assert "exited with status 3" in outcome.reason and "dying on purpose" in outcome.reason
        # The next turn starts it again and loads the same ACP session.
        acp_session = session.acp_session
        assert await turn(session, "back", "op2") == Done(text="echo: back (turn 2)")
        assert session.acp_session == acp_session
        assert session.statistics().starts == 2
    finally:
        await session.close()


async def test_a_restored_session_loads_its_conversation_in_a_new_agent(tmp_path: Path) -> None:
    first = Recorder()
    session = await adapter(tmp_path).open(first.context)
    try:
        assert await turn(session, "one") == Done(text="echo: one (turn 1)")
    finally:
        await session.close()
    second = Recorder(restore=tuple(first.persisted))
    restored = await adapter(tmp_path).open(second.context)
    try:
        assert await turn(restored, "two", "op2") == Done(text="echo: two (turn 2)")
        # The replay while loading is not shown again.
        assert all("replayed" not in e["delta"] for e in second.of("text-delta"))
        assert restored.acp_session == session.acp_session
    finally:
        await restored.close()


async def test_hostile_output_is_refused_and_the_turn_goes_on(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        # -32601: the agent's unknown request was answered "method not found".
        assert await turn(session, "garbage") == Done(text="still here (-32601)")
        assert session.peer is not None
        reasons = " / ".join(session.peer.malformed)
        assert "not JSON" in reasons and "never made" in reasons
        assert session.statistics().dropped_updates == 1
        assert any("does not match the ACP schema" in text for _, text in record.logs)
        assert await turn(session, "after", "op2") == Done(text="echo: after (turn 2)")
    finally:
        await session.close()


async def test_a_flood_of_updates_is_read_to_the_end(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path).open(record.context)
    try:
        assert await turn(session, "flood 5000") == Done(text="." * 5000)
        assert len(record.of("text-delta")) == 5000
    finally:
        await session.close()


async def test_an_agent_that_never_answers_initialize_meets_the_deadline(tmp_path: Path) -> None:
    record = Recorder()
    session = await adapter(tmp_path, env={"FAKE_ACP_MODE": "mute"}, start_deadline=1.0).open(record.context)
    try:
        outcome = await turn(session, "hello")
        assert isinstance(outcome, Unanswered)
        assert "did not answer initialize" in outcome.reason
        assert session.process is None  # ended, started again next turn
    finally:
        await session.close()


async def test_an_agent_that_cannot_start_says_why(tmp_path: Path) -> None:
    record = Recorder()
    session = await AcpAdapter([str(tmp_path / "no-such-agent")]).open(record.context)
    outcome = await turn(session, "hello")
    assert isinstance(outcome, Unanswered) and "could not start" in outcome.reason
    await session.close()
