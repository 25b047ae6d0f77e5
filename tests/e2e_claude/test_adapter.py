"""The Claude Code adapter driving the real ``claude`` binary, through the
adapter interface (``AdapterContext``), against the fake Messages API."""

from __future__ import annotations

import pytest
import trio

from router.daemon.adapter import AdapterTurn
from router.daemon.adapters import claude_code
from router.daemon.adapters.process_per_turn import CliSession
from tests.daemon.adapters.helpers import Recorder, alive
from tests.e2e_claude.helpers import ClaudeSetup, processes_in
from tests.fakes.anthropic import Usage, bad_request, overloaded, slow_reply, text_reply, tool_reply
from wire.container import ContainerSettings, Done, Unanswered


def make_adapter(claude: ClaudeSetup, *, homes: str = "a", **options):
    return claude_code.make_adapter(
        program=str(claude.binary),
        homes=claude.homes / homes,
        cwd=claude.workspace,
        env=claude.env,
        **options,
    )


async def open_session(claude: ClaudeSetup, recorder: Recorder, **options) -> CliSession:
    restore = options.pop("restore", ())
    settings = options.pop("settings", None)
    return await make_adapter(claude, **options).open(recorder.context(restore=restore, settings=settings))


async def turn(session: CliSession, text: str, operation_id: str = "op-1"):
    return await session.run(AdapterTurn(operation_id=operation_id, input=text))


async def test_a_text_answer_streams_and_settles_done(claude, fake_api):
    fake_api.script(text_reply("Hello from the fake API, in pieces.", chunk_chars=6, usage=Usage(input_tokens=33, output_tokens=9)))
    recorder = Recorder()
    session = await open_session(claude, recorder)
    outcome = await turn(session, "Say hello.")
    assert outcome == Done(text="Hello from the fake API, in pieces.")

    deltas = recorder.of_type("text-delta")
    assert len(deltas) > 1 and "".join(d["delta"] for d in deltas) == "Hello from the fake API, in pieces."
    messages = recorder.of_type("message")
    assert messages[-1]["message"]["parts"] == [{"type": "text", "text": "Hello from the fake API, in pieces."}]
    assert messages[-1]["message"]["id"] == deltas[0]["messageId"]
    # Deltas come before the message they build.
    kinds = [e["type"] for e in recorder.events]
    assert kinds.index("message") > kinds.index("text-delta")
    (usage,) = recorder.of_type("usage")
    assert usage["inputTokens"] == 33 and usage["outputTokens"] == 9 and usage["costUsd"] > 0

    (request,) = fake_api.messages_requests()
    assert request.stream and "Say hello." in request.texts()
    assert request.headers["x-api-key"] == "sk-ant-test-not-a-real-key"
    # Only the Messages API was reached.
    assert {(r.method, r.path) for r in fake_api.requests} == {("POST", "/v1/messages")}


async def test_a_tool_call_runs_in_the_workspace_and_finishes_with_its_output(claude, fake_api):
    fake_api.script(
        tool_reply("Bash", {"command": "echo hello-from-bash && pwd", "description": "Greet"}, text="Running it."),
        text_reply("It printed hello-from-bash."),
    )
    recorder = Recorder()
    session = await open_session(claude, recorder)
    outcome = await turn(session, "Run echo.")
    assert outcome == Done(text="It printed hello-from-bash.")
    tool_parts = [
        part for event in recorder.of_type("message") for part in event["message"]["parts"] if part["type"] == "tool"
    ]
    assert [part["state"] for part in tool_parts] == ["running", "done"]
    assert tool_parts[0]["toolName"] == "Bash" and tool_parts[0]["input"]["command"] == "echo hello-from-bash && pwd"
    assert tool_parts[1]["output"].splitlines() == ["hello-from-bash", str(claude.workspace)]
    # The API got the tool's result back on the second call.
    second = fake_api.messages_requests()[1]
    assert any("hello-from-bash" in text for text in second.texts())


async def test_the_session_id_is_persisted_and_the_next_turn_resumes(claude, fake_api):
    fake_api.script(text_reply("I will remember tangerine."), text_reply("The word was tangerine."))
    recorder = Recorder()
    session = await open_session(claude, recorder)
    await turn(session, "Remember the word tangerine.")
    states = [entry["values"] for entry in recorder.persisted if entry.get("kind") == "state"]
    assert len(states) == 1 and states[0]["sessionId"]
    files = [entry for entry in recorder.persisted if entry.get("kind") == "file"]
    assert any(entry["path"].endswith(f"{states[0]['sessionId']}.jsonl") for entry in files)

    outcome = await turn(session, "Which word?", "op-2")
    assert outcome == Done(text="The word was tangerine.")
    second = fake_api.messages_requests()[-1]
    texts = second.texts()
    assert "Remember the word tangerine." in texts
    assert "I will remember tangerine." in texts
    assert texts.index("I will remember tangerine.") < texts.index("Which word?")
    assert session.state["sessionId"] == states[0]["sessionId"]


async def test_a_new_container_resumes_from_the_persisted_entries(claude, fake_api):
    fake_api.script(text_reply("Noted: kumquat."), text_reply("It was kumquat."))
    first = Recorder()
    session = await open_session(claude, first, homes="container-1")
    await turn(session, "Remember kumquat.")
    await session.close()

    second = Recorder()
    moved = await open_session(claude, second, homes="container-2", restore=first.persisted)
    assert moved.home != session.home
    outcome = await turn(moved, "What was it?", "op-2")
    assert outcome == Done(text="It was kumquat.")
    texts = fake_api.messages_requests()[-1].texts()
    assert "Remember kumquat." in texts and "Noted: kumquat." in texts


async def test_abort_during_a_slow_stream_interrupts_and_leaves_no_process(claude, fake_api):
    fake_api.script(slow_reply())
    recorder = Recorder()
    session = await open_session(claude, recorder)
    pids: list[int] = []
    cancelled: list[bool] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                try:
                    await turn(session, "Talk slowly.")
                except trio.Cancelled:
                    cancelled.append(True)
                    raise

            nursery.start_soon(run)
            await recorder.wait_for(lambda event: event["type"] == "text-delta")
            assert session.process is not None
            pids.append(session.process.pid)
            scope.cancel()
    assert cancelled == [True]
    assert not alive(pids[0])
    assert processes_in(claude.workspace) == []
    # The session survives the abort: its id is kept for the next turn.
    assert session.state.get("sessionId")


async def test_an_overloaded_api_settles_unanswered_with_a_readable_reason(claude, fake_api):
    fake_api.fallback = overloaded(should_retry=False)
    session = await open_session(claude, Recorder())
    outcome = await turn(session, "Hello?")
    assert isinstance(outcome, Unanswered)
    assert "529" in outcome.reason and "Overloaded" in outcome.reason


async def test_a_bad_request_settles_unanswered_with_the_api_message(claude, fake_api):
    fake_api.fallback = bad_request("messages.0: the fake refuses this request", should_retry=False)
    session = await open_session(claude, Recorder())
    outcome = await turn(session, "Hello?")
    assert isinstance(outcome, Unanswered)
    assert "400" in outcome.reason and "the fake refuses this request" in outcome.reason


async def test_a_resume_the_cli_cannot_find_fails_with_its_stderr(claude, fake_api):
    session = await open_session(claude, Recorder(), restore=[{"kind": "state", "values": {"sessionId": "00000000-0000-4000-8000-000000000000"}}])
    outcome = await turn(session, "Hello?")
    assert isinstance(outcome, Unanswered)
    assert "00000000-0000-4000-8000-000000000000" in outcome.reason
    assert fake_api.messages_requests() == []


async def test_the_model_setting_reaches_the_api(claude, fake_api):
    fake_api.script(text_reply("ok"))
    session = await open_session(claude, Recorder(), settings=ContainerSettings(model="claude-sonnet-4-5", options={"effort": "low"}))
    assert await turn(session, "Hi") == Done(text="ok")
    assert fake_api.messages_requests()[0].json["model"] == "claude-sonnet-4-5"
