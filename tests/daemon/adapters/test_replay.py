"""The replay adapter plays the committed recording (the real Claude Code
2.1.332 against the fake Messages API: ``tests/fixtures/replay``) in order
and complete, at full speed and paced, in process and in a real ``router
daemon --adapter replay`` read by a bare container-protocol client."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url

from router.daemon.adapter import AdapterTurn
from router.daemon.adapters.claude_code import ClaudeProjection
from router.daemon.adapters.replay import (
    ReplaySessionStatistics,
    DEFAULT_RECORDING, PACE_ENV, RECORDING_ENV, STAMP, Recording, RecordingError, ReplayAdapter, adapter, plan_of,
)
from router.daemon.cli import load_adapter
from tests.daemon.adapters.helpers import Recorder
from tests.support.daemons import spawn_daemon
from wire.container import CONTAINER_TOKEN_HEADER, Done

RECORDING = Recording.load(DEFAULT_RECORDING)


def expected(turn: int) -> list[dict[str, Any]]:
    """The events the Claude Code projection makes of recorded turn ``turn``
    (``createdAt`` left out: it is the moment of playing)."""
    projection = ClaudeProjection(now=lambda: 0)
    events = []
    for recorded in RECORDING.turns[turn]:
        events += projection.project(dict(recorded.line), "op")
    return [_plain(event) for event in events]


def _plain(event: dict[str, Any]) -> dict[str, Any]:
    """An event without what playing changes: the message id's prefix,
    ``createdAt``, the operation id and a stamp."""
    event = dict(event)
    if "messageId" in event:
        event["messageId"] = event["messageId"].rsplit(":", 1)[-1]
        if "delta" in event:
            event["delta"] = STAMP.sub("", event["delta"])
    if event.get("type") == "message":
        message = {key: value for key, value in event["message"].items() if key not in ("createdAt", "operationId")}
        message["id"] = message["id"].rsplit(":", 1)[-1]
        message["parts"] = [part for part in message["parts"] if not STAMP.fullmatch(part.get("text") or "")]
        event["message"] = message
    return event


def stamps(events: list[dict[str, Any]]) -> list[int]:
    """The stamped sequence numbers, in the order the events came."""
    found = []
    for event in events:
        text = json.dumps(event)
        found += [int(match[1]) for match in STAMP.finditer(text)]
    return found


def test_the_recording_holds_turns_with_tool_calls_and_their_results():
    assert len(RECORDING.turns) == 3
    kinds = [event["type"] for turn in range(3) for event in expected(turn)]
    assert {"text-delta", "reasoning-delta", "message", "usage"} <= set(kinds)
    parts = [part for turn in range(3) for event in expected(turn) if event["type"] == "message"
             for part in event["message"]["parts"]]
    assert any(part["type"] == "tool" and part["state"] == "done" for part in parts)


@pytest.mark.parametrize("pace", [0.0, 1.0, 25.0])
async def test_every_turn_plays_in_order_and_complete(pace, autojump_clock):
    recorder = Recorder()
    session = await ReplayAdapter(RECORDING, pace=pace).open(recorder.context())
    for number in range(4):  # the fourth plays the first recorded turn again
        recorder.events.clear()
        outcome = await session.run(AdapterTurn(operation_id=f"op-{number}", input="go on"))
        assert isinstance(outcome, Done)
        assert [_plain(event) for event in recorder.events] == expected(number % 3)
        assert all(event["message"]["operationId"] == f"op-{number}" for event in recorder.of_type("message"))
    assert session.statistics() == ReplaySessionStatistics(next_turn=1, played=4, stamped=0)


async def test_one_prompt_plays_many_turns_stamped_with_consecutive_numbers(autojump_clock):
    recorder = Recorder()
    session = await ReplayAdapter(RECORDING, pace=1.0).open(recorder.context())
    await session.run(AdapterTurn(operation_id="op-1", input="replay 5 pace 0 stamped"))
    assert [_plain(event) for event in recorder.events] == expected(0) + expected(1) + expected(2) + expected(0) + expected(1)
    viewed = [event for event in recorder.events if event["type"] in ("text-delta", "reasoning-delta", "message")]
    assert stamps(recorder.events) == list(range(1, len(viewed) + 1))
    # A recorded turn played twice makes new messages, not an update of the old.
    ids = [event["message"]["id"] for event in recorder.of_type("message")]
    assert len({i for i in ids if i.endswith(expected(0)[-2]["message"]["id"])}) == 2
    await session.run(AdapterTurn(operation_id="op-2", input="replay stamped"))
    assert stamps(recorder.events) == list(range(1, session.stamped + 1))


def test_plans_of_prompts():
    assert plan_of("hello", 1.0) == plan_of("replay", 1.0)
    assert plan_of("replay 3 pace 0 stamped", 1.0).turns == 3
    assert plan_of("replay 3 pace 0 stamped", 1.0).pace == 0.0
    assert plan_of("replay pace 2.5", 1.0).pace == 2.5 and not plan_of("replay pace 2.5", 1.0).stamped


def test_a_bad_recording_or_pace_is_refused_with_a_sentence(tmp_path):
    with pytest.raises(RecordingError) as missing:
        adapter({RECORDING_ENV: str(tmp_path / "none.jsonl")})
    assert missing.value.code == "replay-recording-missing"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"turn": 1, "ms": 0, "line": {}}\n{"turn": 1, "ms": "soon", "line": {}}\n')
    with pytest.raises(RecordingError) as refused:
        adapter({RECORDING_ENV: str(bad)})
    assert refused.value.code == "replay-recording-bad" and ":2" in refused.value.message
    with pytest.raises(RecordingError) as pace:
        adapter({PACE_ENV: "fast"})
    assert pace.value.code == "replay-bad-pace"
    assert load_adapter("replay").info.id == "replay"


async def _frames_of(ws, prompt: str, operation_id: str) -> list[dict[str, Any]]:
    """Send one prompt and read its frames until it settles; ack them."""
    await ws.send_message(json.dumps({"type": "prompt", "operationId": operation_id, "input": prompt,
                                      "whenBusy": "followUp"}))
    frames = []
    while True:
        message = json.loads(await ws.get_message())
        if message["type"] != "frame":
            continue
        frames.append(message)
        await ws.send_message(json.dumps({"type": "ack", "seq": message["seq"]}))
        if message["frame"]["kind"] == "settle":
            return frames


async def test_a_real_daemon_plays_the_recording_to_a_bare_client_in_order():
    async with spawn_daemon("ours", adapter="replay", env={PACE_ENV: "0"}) as daemon:
        headers = [(CONTAINER_TOKEN_HEADER.encode(), daemon.token.encode())]
        async with open_websocket_url(daemon.session_url("s1"), extra_headers=headers) as ws:
            hello = json.loads(await ws.get_message())
            assert hello["adapter"]["id"] == "replay"
            await ws.send_message('{"type":"open","generation":1,"settings":{},"restore":[]}')
            await ws.send_message('{"type":"replay","after":0}')
            while json.loads(await ws.get_message())["type"] != "caught-up":
                pass
            with trio.fail_after(60):
                fast = await _frames_of(ws, "replay 3 stamped", "op-1")
                paced = await _frames_of(ws, "replay 2 pace 20 stamped", "op-2")
    for frames, turns in ((fast, [0, 1, 2]), (paced, [0, 1])):
        events = [frame["frame"]["event"] for frame in frames if frame["frame"]["kind"] == "event"]
        assert [_plain(event) for event in events] == [e for turn in turns for e in expected(turn)]
        assert frames[-1]["frame"]["outcome"]["status"] == "done"
    seqs = [frame["seq"] for frame in fast + paced]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    all_events = [frame["frame"].get("event") or {} for frame in fast + paced]
    assert stamps(all_events) == list(range(1, len(stamps(all_events)) + 1))
