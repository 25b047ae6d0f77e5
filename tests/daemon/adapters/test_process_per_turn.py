"""The CLI adapter end to end against a fake CLI: real processes, real pipes,
real signals. The fake (``fake_cli.py``) behaves like ``claude -p`` as far as
the adapter can tell; the Claude Code preset drives it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import trio

from router.daemon.adapter import AdapterTurn
from router.daemon.adapters import claude_code
from router.daemon.adapters.process_per_turn import CliAdapter, CliSession, home_for
from tests.daemon.adapters.helpers import FAKE_CLI, FIXTURES, Recorder, alive, read_records
from tests.support.polling import until
from wire.container import ContainerSettings, Done, TextInputPart, Unanswered


@pytest.fixture
def records(tmp_path: Path) -> Path:
    return tmp_path / "records.jsonl"


def make(tmp_path: Path, records: Path, mode: str = "answer", *, homes: str = "homes", **options) -> CliAdapter:
    env = {"FAKE_CLI_MODE": mode, "FAKE_CLI_RECORD": str(records), **options.pop("env", {})}
    return claude_code.make_adapter(
        program=str(FAKE_CLI),
        homes=tmp_path / homes,
        cwd=tmp_path / "workspace",
        env=env,
        **options,
    )


async def run_turn(session: CliSession, text: str, operation_id: str = "op-1"):
    return await session.run(AdapterTurn(operation_id=operation_id, input=text))


async def test_a_turn_streams_events_and_settles_done_with_the_result(tmp_path, records):
    recorder = Recorder()
    adapter = make(tmp_path, records)
    assert adapter.info.id == "claude-code"
    session = await adapter.open(recorder.context())
    outcome = await run_turn(session, "hello")
    assert outcome == Done(text="You said: hello (turn 1)")
    kinds = [event["type"] for event in recorder.events]
    assert kinds == ["text-delta", "text-delta", "message", "usage"]
    deltas = "".join(event["delta"] for event in recorder.of_type("text-delta"))
    message = recorder.of_type("message")[0]["message"]
    assert message["parts"] == [{"type": "text", "text": deltas}]
    assert message["operationId"] == "op-1" and message["role"] == "assistant"
    assert recorder.of_type("usage") == [{"type": "usage", "inputTokens": 11, "outputTokens": 7, "costUsd": 0.001}]

    (run,) = read_records(records)
    assert run["argv"][:6] == ["-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages", "--dangerously-skip-permissions"]
    assert "--resume" not in run["argv"]
    assert run["stdin"] == "hello"
    assert run["home"] == str(home_for(tmp_path / "homes", "session-1"))
    assert run["cwd"] == str(tmp_path / "workspace")
    assert session.process is None


async def test_the_session_id_is_persisted_and_the_next_turn_resumes_it(tmp_path, records):
    recorder = Recorder()
    session = await make(tmp_path, records).open(recorder.context())
    await run_turn(session, "first")
    states = [entry for entry in recorder.persisted if entry.get("kind") == "state"]
    assert len(states) == 1
    session_id = states[0]["values"]["sessionId"]
    # The session file the CLI wrote under ~/.claude/projects was shipped too.
    files = [entry for entry in recorder.persisted if entry.get("kind") == "file"]
    assert files and files[0]["path"] == f".claude/projects/-workspace/{session_id}.jsonl" and files[0]["offset"] == 0

    outcome = await run_turn(session, "second", "op-2")
    assert outcome == Done(text="You said: second (turn 2)")
    second = read_records(records)[1]
    assert second["argv"][second["argv"].index("--resume") + 1] == session_id
    # The same id again is not persisted again; the file grew, so only the
    # new bytes ship, at the old length.
    assert [entry for entry in recorder.persisted if entry.get("kind") == "state"] == states
    grown = [entry for entry in recorder.persisted if entry.get("kind") == "file"][1:]
    assert [entry["offset"] for entry in grown] == [len(__import__("base64").b64decode(files[0]["data"]))]


async def test_a_new_container_restores_the_files_and_resumes(tmp_path, records):
    first = Recorder()
    session = await make(tmp_path, records, homes="container-a").open(first.context())
    await run_turn(session, "remember tangerine")
    await session.close()

    # Another container: another disk (homes), only the persisted entries.
    second = Recorder()
    moved = await make(tmp_path, records, homes="container-b").open(second.context(restore=first.persisted))
    outcome = await run_turn(moved, "which word?", "op-2")
    assert outcome == Done(text="You said: which word? (turn 2)")
    assert read_records(records)[-1]["argv"].count("--resume") == 1


async def test_without_the_files_the_resume_fails_with_the_clis_stderr(tmp_path, records):
    first = Recorder()
    session = await make(tmp_path, records, homes="container-a").open(first.context())
    await run_turn(session, "hello")
    states_only = [entry for entry in first.persisted if entry.get("kind") == "state"]
    moved = await make(tmp_path, records, homes="container-b").open(Recorder().context(restore=states_only))
    outcome = await run_turn(moved, "again", "op-2")
    assert isinstance(outcome, Unanswered)
    assert outcome.reason.startswith("claude exited with status 1: No conversation found with session ID")


async def test_settings_map_to_flags(tmp_path, records):
    settings = ContainerSettings(
        model="claude-sonnet-test",
        options={
            "effort": "high",
            "appendSystemPrompt": "Be brief.",
            "allowedTools": ["Bash", "Read"],
            "disallowedTools": ["WebFetch"],
            "maxTurns": 3,
            "tools": ["Bash"],
            "ignored": True,
        },
    )
    session = await make(tmp_path, records).open(Recorder().context(settings=settings))
    await run_turn(session, "hi")
    argv = read_records(records)[0]["argv"]

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--model") == "claude-sonnet-test"
    assert value("--effort") == "high"
    assert value("--append-system-prompt") == "Be brief."
    assert value("--allowedTools") == "Bash,Read"
    assert value("--disallowedTools") == "WebFetch"
    assert value("--max-turns") == "3"
    assert value("--tools") == "Bash"

    await session.configure(ContainerSettings(model="other", options={"permissionMode": "plan"}))
    await run_turn(session, "again", "op-2")
    argv = read_records(records)[1]["argv"]
    assert value("--model") == "other" and value("--permission-mode") == "plan"
    assert "--dangerously-skip-permissions" not in argv and "--effort" not in argv


async def test_image_parts_are_left_out_of_the_prompt(tmp_path, records):
    session = await make(tmp_path, records).open(Recorder().context())
    await session.run(AdapterTurn(operation_id="op", input=(TextInputPart(text="look"), TextInputPart(text="here"))))
    assert read_records(records)[0]["stdin"] == "look\nhere"


async def test_a_failing_cli_settles_unanswered_with_its_stderr_tail(tmp_path, records):
    session = await make(tmp_path, records, "fail").open(Recorder().context())
    outcome = await run_turn(session, "hello")
    assert outcome == Unanswered(reason="claude exited with status 3: fake-cli: something went wrong\nfake-cli: giving up")


async def test_the_stderr_of_a_cli_that_exits_at_once_is_never_lost(tmp_path):
    """A CLI that fails before it reads anything: it closes stdout, writes
    its reason to stderr and exits. Its stdout ends and it is reaped while
    the reason may still sit unread in the stderr pipe; the reason must be
    in every outcome, not just when the scheduler happens to read it first."""
    quick = tmp_path / "quick-claude"
    quick.write_text('#!/bin/sh\nexec 0<&- 1>&-\necho "claude: the real reason" >&2\nexit 3\n')
    quick.chmod(0o755)
    adapter = claude_code.make_adapter(program=str(quick), homes=tmp_path / "homes", cwd=tmp_path / "workspace")
    session = await adapter.open(Recorder().context())
    reasons = [(await run_turn(session, "hello", f"op-{i}")).reason for i in range(40)]
    assert reasons == ["claude exited with status 3: claude: the real reason"] * 40


async def test_a_process_left_holding_stderr_does_not_hold_the_turn(tmp_path):
    leaver = tmp_path / "leaving-claude"
    leaver.write_text('#!/bin/sh\nsleep 60 >/dev/null </dev/null &\necho "left $!" >&2\nexit 3\n')
    leaver.chmod(0o755)
    adapter = claude_code.make_adapter(program=str(leaver), homes=tmp_path / "homes", cwd=tmp_path / "workspace")
    session = await adapter.open(Recorder().context())
    with trio.fail_after(30):
        outcome = await run_turn(session, "hello")
    pid = int(outcome.reason.rsplit(" ", 1)[1])
    try:
        assert outcome.reason == f"claude exited with status 3: left {pid}" and alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


async def test_a_cli_that_cannot_start_settles_unanswered_saying_so(tmp_path, records):
    adapter = claude_code.make_adapter(program=str(tmp_path / "no-such-claude"), homes=tmp_path / "h", cwd=tmp_path)
    session = await adapter.open(Recorder().context())
    outcome = await run_turn(session, "hello")
    assert isinstance(outcome, Unanswered)
    assert outcome.reason.startswith("claude-code: could not start") and "No such file" in outcome.reason


async def test_unreadable_lines_are_logged_and_skipped(tmp_path, records):
    recorder = Recorder()
    session = await make(tmp_path, records, "garbage").open(recorder.context())
    outcome = await run_turn(session, "hello")
    assert isinstance(outcome, Done)
    assert len(recorder.of_type("text-delta")) == 2
    assert [level for level, _ in recorder.logs] == ["warn", "warn"]
    assert all("unreadable claude-code output" in message for _, message in recorder.logs)


async def test_a_recorded_fixture_replays_through_the_whole_adapter(tmp_path, records):
    recorder = Recorder()
    adapter = make(tmp_path, records, "replay", env={"FAKE_CLI_FIXTURE": str(FIXTURES / "stream-json" / "tool.jsonl")})
    session = await adapter.open(recorder.context())
    outcome = await run_turn(session, "run echo")
    assert outcome == Done(text="The command printed hello-from-bash.")
    tools = [
        part
        for event in recorder.of_type("message")
        for part in event["message"]["parts"]
        if part["type"] == "tool"
    ]
    assert [tool["state"] for tool in tools] == ["running", "done"]
    assert tools[-1]["output"] == "hello-from-bash"


async def test_abort_interrupts_the_cli_and_leaves_no_process(tmp_path, records):
    recorder = Recorder()
    session = await make(tmp_path, records, "hang").open(recorder.context())
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_turn, session, "hello")
            await recorder.wait_for(lambda event: event["type"] == "text-delta")
            scope.cancel()
    runs = read_records(records)
    pid = runs[0]["pid"]
    # The CLI got SIGINT and answered it (its lines were still read and
    # emitted), then exited on its own; nothing is left.
    assert runs[-1] == {"pid": pid, "signal": "SIGINT"}
    assert not alive(pid)
    assert session.process is None
    assert recorder.of_type("text-delta")[0]["delta"] == "thinking about it"
    # The session id seen before the abort is kept for the next turn.
    assert session.state.get("sessionId")


async def test_a_cli_that_ignores_sigint_is_killed_with_its_children(tmp_path, records):
    recorder = Recorder()
    session = await make(tmp_path, records, "stubborn", kill_after=0.5).open(recorder.context())
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_turn, session, "hello")
            await recorder.wait_for(lambda event: event["type"] == "text-delta")
            scope.cancel()
    (run,) = read_records(records)
    assert run["mode"] == "stubborn"
    assert not alive(run["pid"])  # reaped by the adapter's wait
    # The group's SIGKILL is sent; the kernel ends the child when it next
    # runs, which on a loaded machine can be after this line (seen once).
    with trio.fail_after(10):
        await until(lambda: not alive(run["child"]))


async def test_cancellation_propagates_out_of_run(tmp_path, records):
    recorder = Recorder()
    session = await make(tmp_path, records, "hang").open(recorder.context())
    seen: list[str] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                try:
                    await run_turn(session, "hello")
                except trio.Cancelled:
                    seen.append("cancelled")
                    raise
                seen.append("returned")  # pragma: no cover

            nursery.start_soon(turn)
            await recorder.wait_for(lambda event: event["type"] == "text-delta")
            scope.cancel()
    assert seen == ["cancelled"] and scope.cancelled_caught
