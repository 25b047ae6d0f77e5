"""Limits stop a Claude Code session: the main job with the session's mod
link (``router mcp --claude-session`` assembles it so), the mod simulator on
the other end of the real Unix socket, and a transcript file under
``CLAUDE_CONFIG_DIR`` that the ``claude-transcript`` usage source reads. A
turn is ``turn-start`` ... ``turn-complete``; the turn that reaches the limit
lands (its result is in the live view), then the session stops: deliveries
are refused, the live view shows the notice, ``router limits`` the count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
import trio

from router.modlink.sim import ModSimulator
from router.serve import MainJob
from tests.turns.limit_support import Limits, Running, job_config, live_items

SESSION = "7d2f9a4e-5b1c-4e8a-9f3d-2c6b8a1e0f47"
MODEL = "claude-sonnet-4-5"
#: What each simulated turn writes to the transcript: one assistant message
#: written over two lines (one per content block, usage repeated), 200 tokens.
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 75}
LIMIT = 350
REASON = f"limit: token-limit tokens.instances.default limit {LIMIT} count 400"


def assistant_lines(message_id: str) -> str:
    line = {"type": "assistant", "message": {"id": message_id, "model": MODEL, "usage": USAGE}}
    return json.dumps(line) + "\n" + json.dumps(line) + "\n"


@pytest.fixture
def claude_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {**env, "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "claude" / "projects" / "-work-project" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"type": "user", "message": {"role": "user", "content": "earlier"}}) + "\n")
    return path


@pytest.fixture
async def claude_job(tmp_path: Path, claude_env: dict[str, str]) -> AsyncIterator[Running]:
    job = MainJob(job_config(tmp_path, claude_sessions=(SESSION,)), env=claude_env)
    async with trio.open_nursery() as nursery:
        await nursery.start(job.run)
        async with httpx.AsyncClient(base_url=job.url, headers=job.headers, timeout=httpx.Timeout(30.0)) as client:
            try:
                yield Running(job=job, client=client, data=tmp_path / "data", settings=tmp_path / "settings")
            finally:
                await job.aclose()


async def test_a_limit_stops_a_claude_code_session(
    claude_job: Running, claude_env: dict[str, str], transcript: Path, nursery: trio.Nursery,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    limits = Limits(tmp_path / "settings", capsys, tmp_path)
    limits.set({"tokens": {"instances": {"default": {"limit": LIMIT}}}})
    gates: dict[str, trio.Event] = {}
    sim = ModSimulator(
        SESSION, env=claude_env, snapshot_interval=0, model=MODEL,
        reply=lambda text: [[gates[text], "done: " + text]] if text in gates else [["ok"]],
    )
    await nursery.start(sim.run)
    meter = await claude_job.meter(SESSION)
    assert meter is not None

    async def turn(n: int) -> None:
        text = f"turn {n}"
        gates[text] = trio.Event()
        answer = await claude_job.send(SESSION, text, f"c{n}")
        assert answer.status_code == 200 and answer.json()["as"] == "prompt", answer.text
        await meter.wait_until(lambda core: core.begun_count == n and core.open)
        with transcript.open("a") as f:  # the model answered: its usage lands in the transcript
            f.write(assistant_lines(f"msg_{n}"))
        gates[text].set()
        await meter.wait_until(lambda core: core.ended_count == n)

    await turn(1)
    assert meter.core.stopped is None
    assert meter.last_turn_record is not None
    assert {k: meter.last_turn_record[k] for k in ("session", "harness", "model", "instance", "source")} == {
        "session": SESSION, "harness": "claude-code", "model": MODEL, "instance": "default",
        "source": "claude-transcript",
    }
    assert meter.last_turn_record["usage"] == {"input": 100, "output": 20, "cache_creation": 5, "cache_read": 75}

    async with claude_job.client.stream("GET", f"/sessions/{SESSION}/live") as live:
        items = live_items(live, lambda item: item["type"] == "session-stopped")
        assert (await items.__anext__())["type"] == "snapshot"
        await turn(2)
        seen = [item async for item in items]
    kinds = [item["type"] for item in seen]
    # The turn's result landed in the live view before the notice.
    assert kinds.index("turn-end") < kinds.index("session-stopped") == len(kinds) - 1
    assert any(item["type"] == "message" and "done: turn 2" in json.dumps(item) for item in seen)
    assert seen[-1]["reason"] == REASON

    refused = await claude_job.send(SESSION, "turn 3", "c3")
    assert refused.status_code == 409 and refused.json()["error"] == "session-stopped"
    assert REASON in refused.json()["message"]
    assert [p.text for p in sim.prompts if p.wrote == "message"] == ["turn 1", "turn 2"]  # nothing written
    sessions = (await claude_job.client.get("/sessions")).json()["sessions"]
    assert [(s.get("stopped"), s["state"]) for s in sessions if s["id"] == SESSION] == [(REASON, "stopped")]

    entry = limits.report(claude_job.data / "usage.jsonl")["tokens.instances.default"]
    assert entry["status"] == "counted" and entry["count"] == 400
    assert entry["kinds"] == {"input": 200, "output": 40, "cache_creation": 10, "cache_read": 150}

    # Raising the limit and resuming lets the person's message through.
    limits.set({"tokens": {"instances": {"default": {"limit": 10_000}}}})
    resumed = await claude_job.client.post(f"/sessions/{SESSION}/resume", json={})
    assert resumed.status_code == 200 and resumed.json()["resumed"] is True
    again = await claude_job.send(SESSION, "turn 3", "c3")
    assert again.status_code == 200 and again.json()["message"] == "person"


async def test_a_turn_typed_at_the_terminal_is_metered_too(
    claude_job: Running, claude_env: dict[str, str], transcript: Path, nursery: trio.Nursery,
) -> None:
    gate = trio.Event()
    sim = ModSimulator(SESSION, env=claude_env, snapshot_interval=0, model=MODEL)
    await nursery.start(sim.run)
    meter = await claude_job.meter(SESSION)
    sim.type_prompt("typed at the terminal", steps=[[gate, "answer"]])
    await meter.wait_until(lambda core: core.open)
    with transcript.open("a") as f:
        f.write(assistant_lines("msg_typed"))
    gate.set()
    await meter.wait_until(lambda core: core.ended_count == 1)
    assert meter.last_turn_record["usage"]["input"] == 100
    # A mod that says hello again (it restarted) mid-turn ends the turn it had.
    held = trio.Event()
    sim.type_prompt("another", steps=[[held, "never"]])
    await meter.wait_until(lambda core: core.begun_count == 2 and core.open)
    meter.all_ended()  # as the view does on ``hello``
    await meter.wait_until(lambda core: core.ended_count == 2)
    assert meter.last_turn_record["usage"] is None  # nothing new in the transcript: unknown, never zero
    held.set()
    await sim.wait_idle()
