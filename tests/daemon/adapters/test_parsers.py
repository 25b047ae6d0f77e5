"""The sans-IO parsers of the Claude Code and Codex presets, on recorded
output (``tests/fixtures/stream-json``: the real ``claude`` 2.1.332 against the
fake API; ``tests/fixtures/codex``: written from the reference parser), and on
hostile input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.daemon.adapters.claude_code import RESUME_PROMPT, ClaudeCodeParser, command as claude_command, prompt_digest
from router.daemon.adapters.process_per_turn import CliExit, CliTurn, CliUpdate, fold_state
from router.daemon.adapters.codex import CodexParser, command as codex_command
from tests.daemon.adapters.helpers import FIXTURES
from wire.container import ContainerSettings, Done, Unanswered, is_event
from wire.json import JsonError

STREAM_JSON = FIXTURES / "stream-json"
CODEX = FIXTURES / "codex"


def replay(parser, path: Path) -> tuple[list, dict, object]:
    events: list = []
    state: dict = {}
    outcome = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        update = parser.line(line)
        events.extend(update.events)
        state.update(update.state or {})
        if update.outcome is not None:
            outcome = update.outcome
    return events, state, outcome


def claude(name: str):
    return replay(ClaudeCodeParser("op-1", now=lambda: 1234), STREAM_JSON / f"{name}.jsonl")


def session_id_of(name: str) -> str:
    first = json.loads((STREAM_JSON / f"{name}.jsonl").read_text().splitlines()[0])
    return first["session_id"]


@pytest.mark.parametrize("path", sorted(STREAM_JSON.glob("*.jsonl")) + sorted(CODEX.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_event_of_every_fixture_is_a_container_event(path: Path):
    parser = CodexParser("op-1") if path.parent == CODEX else ClaudeCodeParser("op-1")
    events, _, _ = replay(parser, path)
    assert events
    assert all(is_event(event) for event in events), [e for e in events if not is_event(e)]


def test_claude_text_arrives_as_deltas_then_the_message_then_usage():
    events, state, outcome = claude("text")
    deltas = [e for e in events if e["type"] == "text-delta"]
    assert len(deltas) > 1
    assert "".join(d["delta"] for d in deltas) == "Hello from the fake API. This reply streams in pieces."
    assert [e["type"] for e in events][len(deltas):] == ["message", "usage"]
    message = events[len(deltas)]["message"]
    assert message == {
        "id": deltas[0]["messageId"],
        "role": "assistant",
        "parts": [{"type": "text", "text": "Hello from the fake API. This reply streams in pieces."}],
        "operationId": "op-1",
        "createdAt": 1234,
    }
    usage = events[-1]
    assert usage["inputTokens"] == 21 and usage["outputTokens"] == 13 and usage["costUsd"] > 0
    assert state == {"sessionId": session_id_of("text")}
    assert outcome == Done(text="Hello from the fake API. This reply streams in pieces.")


def test_claude_thinking_becomes_reasoning_deltas_and_a_reasoning_part():
    events, _, outcome = claude("thinking")
    reasoning = "".join(e["delta"] for e in events if e["type"] == "reasoning-delta")
    assert reasoning == "Two plus two makes four; say it plainly."
    final = [e for e in events if e["type"] == "message"][-1]["message"]
    assert final["parts"] == [
        {"type": "reasoning", "text": reasoning},
        {"type": "text", "text": "The answer is 4."},
    ]
    assert outcome == Done(text="The answer is 4.")


def test_claude_without_partial_messages_gives_messages_only():
    events, _, outcome = claude("no-partial")
    assert [e["type"] for e in events] == ["message", "usage"]
    assert outcome == Done(text="Hello without partial messages.")


def test_claude_tool_call_runs_then_finishes_with_its_output():
    events, _, outcome = claude("tool")
    messages = [e["message"] for e in events if e["type"] == "message"]
    tool_states = [
        (part["state"], part.get("output"))
        for message in messages
        for part in message["parts"]
        if part["type"] == "tool"
    ]
    assert tool_states == [("running", None), ("done", "hello-from-bash")]
    tool = [p for p in messages[-2]["parts"] if p["type"] == "tool"][0]
    assert tool["toolName"] == "Bash"
    assert tool["input"] == {"command": "echo hello-from-bash", "description": "Print a greeting"}
    # The text before the call and the call are one message; the answer after
    # the result is the next API message.
    assert [m["id"] for m in messages] == ["msg_fake_000001"] * 3 + ["msg_fake_000002"]
    assert outcome == Done(text="The command printed hello-from-bash.")


def test_claude_failed_tool_is_an_error_part():
    events, _, _ = claude("tool-error")
    last_tool = [
        part for e in events if e["type"] == "message" for part in e["message"]["parts"] if part["type"] == "tool"
    ][-1]
    assert last_tool["state"] == "error"
    assert "oops" in last_tool["output"] and "3" in last_tool["output"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("overloaded", "API Error: 529 Overloaded."),
        ("bad-request", "API Error: 400 messages: text content blocks must be non-empty"),
        ("cut", "API Error: 529 Overloaded."),
    ],
)
def test_claude_api_errors_settle_unanswered_with_the_clis_sentence(name, reason):
    _, _, outcome = claude(name)
    assert isinstance(outcome, Unanswered)
    assert outcome.reason.startswith(reason)


def test_claude_interrupted_turn_reports_its_subtype():
    events, _, outcome = claude("interrupted")
    assert isinstance(outcome, Unanswered) and outcome.reason.startswith("error_during_execution")
    assert events[0]["type"] == "text-delta"


def test_claude_resumed_turn_keeps_the_session_id():
    _, first, _ = claude("resume-1")
    _, second, outcome = claude("resume-2")
    assert first == second == {"sessionId": session_id_of("resume-1")}
    assert outcome == Done(text="The word was tangerine.")


def test_claude_subagent_lines_and_replays_add_nothing():
    parser = ClaudeCodeParser("op", now=lambda: 0)
    line = {"type": "assistant", "uuid": "u1", "message": {"id": "m1", "content": [{"type": "text", "text": "hi"}]}}
    assert len(parser.line(json.dumps(line)).events) == 1
    assert parser.line(json.dumps(line)).events == ()
    sub = {**line, "uuid": "u2", "parent_tool_use_id": "toolu_1"}
    assert parser.line(json.dumps(sub)).events == ()


def test_claude_end_describes_the_exit():
    parser = ClaudeCodeParser("op")
    assert parser.end(CliExit(code=1, signal=None, stderr="boom\n")) == Unanswered(reason="claude exited with status 1: boom")
    assert parser.end(CliExit(code=None, signal=9, stderr="")) == Unanswered(reason="claude was ended by SIGKILL: no output")


def test_codex_text_turn():
    events, state, outcome = replay(CodexParser("op-1", now=lambda: 5), CODEX / "text.jsonl")
    assert state == {"threadId": "0199a213-81c0-7800-8aa1-bbab2a035a53"}
    assert outcome == Done(text="Hello from Codex.")
    assert events[-1] == {"type": "usage", "inputTokens": 2410, "outputTokens": 12}
    final = events[-2]["message"]
    assert final["id"] == "op-1:assistant" and final["createdAt"] == 5
    assert final["parts"] == [
        {"type": "reasoning", "text": "**Answering the greeting**"},
        {"type": "text", "text": "Hello from Codex."},
    ]


def test_codex_commands_are_shell_tools_with_state_and_output():
    events, _, outcome = replay(CodexParser("op-1"), CODEX / "tool.jsonl")
    parts = events[-2]["message"]["parts"]
    shells = [p for p in parts if p["type"] == "tool" and p["toolName"] == "shell"]
    assert [(p["state"], p.get("output")) for p in shells] == [("done", "hello-from-shell\n"), ("error", None)]
    assert [p["toolName"] for p in parts if p["type"] == "tool"] == ["shell", "shell", "todo_list"]
    # Updates replace a part in place: the started item became the completed one.
    assert len(parts) == 5
    assert outcome == Done(text="The command printed hello-from-shell.")


def test_codex_failures():
    events, _, outcome = replay(CodexParser("op-1"), CODEX / "failed.jsonl")
    assert outcome == Unanswered(reason="unexpected status 529 Overloaded: Overloaded")
    assert [e["level"] for e in events if e["type"] == "log"] == ["warn", "warn"]
    parser = CodexParser("op-2")
    _, _, outcome = replay(parser, CODEX / "error-exit.jsonl")
    assert outcome is None
    reason = parser.end(CliExit(code=1, signal=None, stderr="ignored")).reason
    assert reason == "codex exited with status 1: unexpected status 401 Unauthorized: Missing bearer authentication in header"


def turn(**fields) -> CliTurn:
    base = dict(operation_id="op", prompt="hi", settings=ContainerSettings(), state={}, home="/h", environ={})
    return CliTurn(**{**base, **fields})


def test_codex_command_follows_the_reference():
    argv = codex_command(turn(state={"threadId": "t-1"}, settings=ContainerSettings(model="gpt-x", options={"config": ["a=1"], "effort": "high"}), environ={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})).argv
    assert argv == (
        "codex", "exec", "resume", "t-1", "--json", "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-c", "model_provider=gateway",
        "-c", 'model_providers.gateway={name="AI Gateway",base_url="http://127.0.0.1:9/v1",env_key="OPENAI_API_KEY",wire_api="responses"}',
        "-c", "a=1", "-c", 'model_reasoning_effort="high"', "-m", "gpt-x", "-",
    )
    assert codex_command(turn()).argv == (
        "codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-",
    )


def test_claude_command_defaults():
    built = claude_command(turn(home="/homes/abc"))
    assert built.argv[:7] == ("claude", "-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages", "--dangerously-skip-permissions")
    assert built.stdin == "hi"
    assert built.env["DISABLE_AUTOUPDATER"] == "1" and built.env["CLAUDE_CONFIG_DIR"] == "/homes/abc/.claude"
    # Wrong types are ignored, as the reference ignores them.
    odd = claude_command(turn(settings=ContainerSettings(options={"maxTurns": "3", "effort": "huge", "allowedTools": "Bash"})))
    assert odd.argv == built.argv


def test_fold_state_keeps_the_latest_strings():
    entries = [
        {"kind": "state", "values": {"sessionId": "a"}},
        {"kind": "file", "path": "x", "offset": 0, "data": ""},
        {"kind": "state", "values": {"sessionId": "b", "n": 3}},
        "junk",
        {"kind": "state", "values": None},
    ]
    assert fold_state(entries) == {"sessionId": "b"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["type", "message", "event", "delta", "content", "item", "id", "uuid", "session_id", "result", "subtype", "usage", "text", "tool_use_id", "thread_id", "error"]) | st.text(max_size=5), inner, max_size=5),
    max_leaves=20,
)
shaped = st.fixed_dictionaries(
    {"type": st.sampled_from(["assistant", "user", "stream_event", "result", "system", "item.completed", "item.started", "turn.completed", "turn.failed", "thread.started", "error"])},
    optional={"message": json_values, "event": json_values, "item": json_values, "usage": json_values, "session_id": json_values, "result": json_values, "subtype": json_values, "errors": json_values, "is_error": json_values, "error": json_values, "thread_id": json_values},
)


@settings(max_examples=400, deadline=None)
@given(st.lists(json_values | shaped, max_size=8))
def test_parsers_take_any_json_lines_and_emit_only_container_events(values):
    for parser in (ClaudeCodeParser("op"), CodexParser("op")):
        for value in values:
            update = parser.line(json.dumps(value))
            assert isinstance(update, CliUpdate)
            assert all(is_event(event) for event in update.events)
            assert update.outcome is None or isinstance(update.outcome, (Done, Unanswered))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_parsers_refuse_non_json_only_with_a_value_error(text):
    for parser in (ClaudeCodeParser("op"), CodexParser("op")):
        try:
            parser.line(text)
        except (ValueError, JsonError):
            pass


def test_recorded_codex_text_turn():
    events, state, outcome = replay(CodexParser("op-1"), CODEX / "recorded-text.jsonl")
    assert state == {"threadId": "01a229ce-10f6-79a0-921f-19237c207cc7"}
    assert outcome == Done(text="Hello from the fake Responses API.")
    # Codex reports its fallback-metadata notice as an error item: a warning.
    assert events[0]["type"] == "log" and events[0]["level"] == "warn"
    assert events[-1] == {"type": "usage", "inputTokens": 50, "outputTokens": 10}


def test_recorded_codex_tool_turn():
    events, _, outcome = replay(CodexParser("op-1"), CODEX / "recorded-tool.jsonl")
    messages = [e["message"] for e in events if e["type"] == "message"]
    shell_states = [
        (p["state"], p.get("output")) for m in messages for p in m["parts"] if p["type"] == "tool"
    ]
    assert shell_states == [("running", None), ("done", "hello-from-shell\n"), ("done", "hello-from-shell\n")]
    assert messages[-1]["parts"][-1] == {"type": "text", "text": "The command printed hello-from-shell."}
    assert outcome == Done(text="The command printed hello-from-shell.")


def test_recorded_codex_resume_keeps_the_thread():
    _, first, _ = replay(CodexParser("op-1"), CODEX / "recorded-resume-1.jsonl")
    _, second, outcome = replay(CodexParser("op-2"), CODEX / "recorded-resume-2.jsonl")
    assert first == second
    assert outcome == Done(text="The word was tangerine.")


def test_recorded_codex_failure():
    _, _, outcome = replay(CodexParser("op-1"), CODEX / "recorded-failed.jsonl")
    assert isinstance(outcome, Unanswered) and "the fake refuses this request" in outcome.reason


@pytest.mark.parametrize(("name", "resets_at"), [("usage-limit", 1_893_480_000_000), ("usage-limit-past", 1_796_107_200_000)])
def test_claude_usage_limit_is_one_raw_event_and_an_unanswered_usage_limit(name, resets_at):
    """Recorded with a subscriber's sign-in against a 429 with the
    anthropic-ratelimit-unified-* headers: a reset ahead gives a
    rate_limit_event first, a reset past only the synthetic assistant line;
    either way one usage-limit event with the reset in epoch ms."""
    parser = ClaudeCodeParser("op-1", now=lambda: 1234, prompt="Say hello.")
    events, state, outcome = replay(parser, STREAM_JSON / f"{name}.jsonl")
    limits = [e["value"] for e in events if e["type"] == "raw" and e["value"].get("type") == "usage-limit"]
    assert limits == [{"type": "usage-limit", "resetsAt": resets_at, "rateLimitType": "five_hour",
                       **({"text": limits[0]["text"]} if "text" in limits[0] else {})}]
    assert isinstance(outcome, Unanswered) and outcome.reason.startswith("usage-limit: You've hit your 5-hour limit")
    assert state["limitedPrompt"] == prompt_digest("Say hello.")


def test_claude_retry_of_a_limited_prompt_sends_the_resume_prompt_and_a_success_clears_it():
    limited = {"sessionId": "s1", "limitedPrompt": prompt_digest("hi")}
    assert claude_command(turn(state=limited)).stdin == RESUME_PROMPT
    assert claude_command(turn(state={**limited, "limitedPrompt": prompt_digest("other")})).stdin == "hi"
    assert claude_command(turn(state={"limitedPrompt": prompt_digest("hi")})).stdin == "hi"  # no session to resume
    _, state, outcome = replay(ClaudeCodeParser("op-1", prompt="Say hello.", limited=True), STREAM_JSON / "text.jsonl")
    assert isinstance(outcome, Done) and state["limitedPrompt"] == ""
    _, state, _ = replay(ClaudeCodeParser("op-1", prompt="Say hello."), STREAM_JSON / "text.jsonl")
    assert "limitedPrompt" not in state
