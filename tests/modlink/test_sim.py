"""The mod simulator against the real server: hello, the race for the link,
session.message as a row or a prompt, idempotence, the pointer prompt, the
plain calls, /clear."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from router.modlink import ModCallError, ModLink
from router.modlink.sim import PLUGIN_NAME, ModSimulator, SimulatedToolCall, framed_prompt
from tests.support.polling import until
from wire.json import JsonValue, loads
from wire.mod import (
    ModAppendEvent,
    ModCommandRunArgs,
    ModConfigRow,
    ModConfigSetArgs,
    ModConfigSetDenied,
    ModConfigSetDone,
    ModEvent,
    ModForkAnswered,
    ModMessageDenied,
    ModModelForkArgs,
    ModPromptTaken,
    ModRowWritten,
    ModSessionMessageArgs,
    ModSetEffortArgs,
    ModSetEffortResult,
    ModStepEvent,
    ModTurnCompleteEvent,
    ModUnreadCard,
    ModUnreadPerson,
    converter,
)

from .conftest import SESSION

MakeLink = Callable[..., Awaitable[ModLink]]


def message(event_id: str | None, text: str, *, person: str | None = None) -> ModSessionMessageArgs:
    unread = ModUnreadPerson(text=text, message_id=person) if person else ModUnreadCard(text=text)
    extra: dict[str, Any] = {} if event_id is None else {"event_id": event_id}
    return ModSessionMessageArgs(content=({"type": "text", "text": text},), message=unread, **extra)


async def start_sim(nursery: trio.Nursery, env: dict[str, str], **options: Any) -> ModSimulator:
    sim = ModSimulator(SESSION, env=env, snapshot_interval=0, **options)
    await nursery.start(sim.run)
    return sim


async def next_matching(events: Any, predicate: Callable[[ModEvent], bool]) -> ModEvent:
    async for event in events:
        if predicate(event):
            return event
    raise AssertionError("the link stopped first")


async def test_hello_and_state(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env, claude_version="2.1.311", model="claude-opus-4-1")
    await sim.flushed()
    assert link.state.instance == sim.instance
    assert link.state.claude_version == "2.1.311" and link.state.version_ok
    assert link.state.session_id == SESSION and link.state.model == "claude-opus-4-1"


async def test_the_simulator_refuses_below_the_minimum(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env, claude_version="2.1.309")
    assert sim.stopped == "too-old"
    assert link.state.instance is None and link.statistics().core.events_accepted == 0


async def test_two_simulators_race_exactly_one_holds(
    link: ModLink, env: dict[str, str], nursery: trio.Nursery, wait_until: Any
) -> None:
    sims = [ModSimulator(SESSION, env=env, snapshot_interval=0, instance=f"mod-{n}") for n in range(2)]
    async with trio.open_nursery() as race:
        for sim in sims:
            race.start_soon(sim.run)
        await wait_until(lambda: any(sim.stopped for sim in sims))
        # The loser stops by itself; the winner keeps polling.
        holder = [sim for sim in sims if sim.stopped is None]
        stopped = [sim for sim in sims if sim.stopped == "taken"]
        assert len(holder) == 1 and len(stopped) == 1
        assert link.state.instance == holder[0].instance
        assert await link.call("session.model", deadline=10) == holder[0].model
        assert link.statistics().core.refused_posts >= 1
        race.cancel_scope.cancel()


async def test_a_message_to_an_idle_session_is_a_prompt(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env)
    with link.events() as events:
        result = await link.call("session.message", message("ev-1", "hello from the phone", person="dm-1"), deadline=10)
        assert result == ModPromptTaken()
        row = await next_matching(events, lambda e: isinstance(e, ModAppendEvent))
        await next_matching(events, lambda e: isinstance(e, ModTurnCompleteEvent))
    assert isinstance(row, ModAppendEvent)
    assert row.wrote == "message" and row.door == "prompt"
    assert row.origin.name == PLUGIN_NAME and row.origin.as_user is True
    assert sim.prompts[-1].as_user and sim.prompts[-1].text == "hello from the phone"


async def test_a_card_to_an_idle_session_is_not_the_persons(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env)
    with link.events() as events:
        assert await link.call("session.message", message("ev-2", "a card"), deadline=10) == ModPromptTaken()
        row = await next_matching(events, lambda e: isinstance(e, ModAppendEvent))
    assert isinstance(row, ModAppendEvent)
    assert row.origin.as_user is not True and row.wrote == "message"
    assert sim.prompts[-1].as_user is False


async def test_a_message_during_a_turn_is_a_row_and_a_replay_writes_nothing(
    link: ModLink, env: dict[str, str], nursery: trio.Nursery
) -> None:
    sim = await start_sim(nursery, env)
    gate = trio.Event()
    with link.events() as events:
        sim.type_prompt("work on it", steps=[["thinking", gate, "done"]])
        await next_matching(events, lambda e: isinstance(e, ModStepEvent))
        args = message("ev-3", "also this", person="dm-3")
        first = await link.call("session.message", args, deadline=10)
        assert isinstance(first, ModRowWritten)
        row = await next_matching(events, lambda e: isinstance(e, ModAppendEvent))
        assert isinstance(row, ModAppendEvent) and row.uuid == first.uuid
        assert row.wrote == "message" and row.door == "note" and row.origin.kind == "plugin"
        # The replay is answered from the record and writes nothing.
        assert await link.call("session.message", args, deadline=10) == first
        assert len(sim.rows) == 1
        gate.set()
        await sim.wait_idle()


async def test_rows_no_request_read_get_one_pointer_prompt(
    link: ModLink, env: dict[str, str], nursery: trio.Nursery
) -> None:
    sim = await start_sim(nursery, env)
    gate = trio.Event()
    with link.events() as events:
        # A two-step turn held in its last step: rows written now are read by
        # no request of this turn.
        sim.type_prompt("go", steps=[["one"], ["two", gate, "three"]])
        await next_matching(events, lambda e: isinstance(e, ModStepEvent) and e.index == 1)
        await link.call("session.message", message("ev-a", "the person's words", person="dm-a"), deadline=10)
        await link.call("session.message", message("ev-b", "a card's words"), deadline=10)
        gate.set()
        pointer = await next_matching(events, lambda e: isinstance(e, ModAppendEvent) and e.wrote == "pointer")
    await sim.wait_idle()
    assert isinstance(pointer, ModAppendEvent)
    pointers = [prompt for prompt in sim.prompts if prompt.wrote == "pointer"]
    assert len(pointers) == 1
    text = pointers[0].text
    assert pointer.message.content[0]["text"] == framed_prompt(text)
    assert "the person's words" in text and "a card's words" in text and "dm-a" in text
    assert pointers[0].as_user is False and pointer.origin.as_user is not True


async def test_rows_read_by_a_later_step_get_no_pointer(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env)
    gate = trio.Event()
    with link.events() as events:
        sim.type_prompt("go", steps=[["one", gate], ["two"]])
        await next_matching(events, lambda e: isinstance(e, ModStepEvent))
        await link.call("session.message", message("ev-c", "read in time", person="dm-c"), deadline=10)
        gate.set()
    await sim.wait_idle()
    assert [prompt.wrote for prompt in sim.prompts] == [None]


async def test_a_refused_write_is_not_recorded(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env, deny_writes="the session is compacting")
    args = message("ev-d", "x", person="dm-d")
    assert await link.call("session.message", args, deadline=10) == ModMessageDenied(deny="the session is compacting", as_="prompt")
    sim.deny_writes = None
    assert await link.call("session.message", args, deadline=10) == ModPromptTaken()
    await sim.wait_idle()


async def test_plain_calls(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env)
    rows = await link.call("config.list", deadline=10)
    assert rows and all(isinstance(row, ModConfigRow) for row in rows)
    commands = await link.call("command.list", deadline=10)
    assert {command.name for command in commands} >= {"clear", "compact"}
    assert await link.call("set-effort", ModSetEffortArgs(effort=None), deadline=10) == ModSetEffortResult(effort=None)
    assert await link.call("config.set", ModConfigSetArgs(key="theme", value="light"), deadline=10) == ModConfigSetDone(value="light")
    assert isinstance(await link.call("config.set", ModConfigSetArgs(key="cleanupPeriodDays", value=3), deadline=10), ModConfigSetDenied)
    assert isinstance(await link.call("model.fork", ModModelForkArgs(prompt="sum it up"), deadline=10), ModForkAnswered)
    try:
        await link.call("command.run", ModCommandRunArgs(command="nope"), deadline=10)
    except ModCallError as exc:
        assert "nope" in exc.error
    else:
        raise AssertionError("an unknown command is the mod's error")
    assert await link.call("session.model", deadline=10) == sim.model


async def test_effort_rides_on_later_steps(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    sim = await start_sim(nursery, env)
    await link.call("set-effort", ModSetEffortArgs(effort="max"), deadline=10)
    with link.events() as events:
        sim.type_prompt("think hard", steps=[["ok"]])
        step = await next_matching(events, lambda e: isinstance(e, ModStepEvent))
    assert isinstance(step, ModStepEvent) and step.effort == "max"
    await sim.wait_idle()


async def test_clear_moves_the_session_id_and_keeps_the_socket(
    link: ModLink, env: dict[str, str], nursery: trio.Nursery
) -> None:
    sim = await start_sim(nursery, env)
    await link.call("command.run", ModCommandRunArgs(command="clear"), deadline=10)
    await sim.flushed()
    assert link.state.session_id == sim.session_id != SESSION
    assert link.state.hello_session_id == SESSION and link.state.ended is None
    assert await link.call("session.model", deadline=10) == sim.model  # same socket, same mod


async def test_a_stopped_server_stops_the_simulator(env: dict[str, str], nursery: trio.Nursery) -> None:
    link = ModLink(SESSION, env=env, hold=0.05)
    scope = trio.CancelScope()

    async def serve(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await link.run(task_status=task_status)

    await nursery.start(serve)
    sim = ModSimulator(SESSION, env=env)
    async with trio.open_nursery() as inner:
        await inner.start(sim.run)
        scope.cancel()
    assert sim.stopped == "disconnected"


# --------------------------------------------------------------------------- the recordings
#
# tests/fixtures/mod-events/*.jsonl are what the real mod posted from Claude
# Code 2.1.332 (record.py there). Each test below drives the simulator through
# the same scenario and holds what it posts to the recording's shape: the
# sequence of events, each reduced to what a reader branches on (no ids, no
# texts, no intermediate snapshots).

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mod-events"


def _shape(event: JsonValue) -> tuple[Any, ...] | None:
    assert isinstance(event, dict)
    kind = event["kind"]
    if kind in ("model",):
        return None
    if kind == "hello":
        return ("hello", event["interactive"])
    if kind == "step":
        if not event["done"]:
            return None
        return ("step-done", event["index"], event.get("stopReason"), tuple(part["type"] for part in event["parts"]))
    if kind == "append":
        message, origin = event["message"], event["origin"]
        return (
            "append",
            event["door"],
            origin["kind"],
            origin.get("asUser"),
            message["type"],
            message.get("role"),
            message.get("isMeta"),
            message.get("name"),
            event.get("wrote"),
            tuple(block["type"] for block in message["content"]),
        )
    if kind == "turn-complete":
        return ("turn-complete", event["stopReason"])
    if kind == "session-end":
        return ("session-end", event["reason"])
    return (kind,)


def recorded(name: str) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """A recording's event shapes (the recorder's own closing ``session-end``
    left out) and its calls."""
    lines = [loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines()]
    events = [line["event"] for line in lines if "event" in line]
    if events and events[-1] == {"kind": "session-end", "reason": "other"}:
        events = events[:-1]
    return [shape for shape in map(_shape, events) if shape is not None], [line for line in lines if "call" in line]


class _Recorder:
    """Every event the link publishes, as it crossed the wire."""

    def __init__(self, link: ModLink) -> None:
        self.link = link
        self.events: list[JsonValue] = []

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self.link.events(capacity=100_000) as events:
            task_status.started()
            async for event in events:
                self.events.append(converter.unstructure(event))

    def shapes(self) -> list[tuple[Any, ...]]:
        return [shape for shape in map(_shape, self.events) if shape is not None]

    async def shapes_of(self, expected: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The shapes once as many arrived as ``expected`` holds (the link
        publishes before the simulator's post is answered; this reader may
        not have run yet)."""
        with trio.fail_after(10):
            await until(lambda: len(self.shapes()) >= len(expected))
        return self.shapes()

    async def turns_done(self, count: int) -> None:
        with trio.fail_after(10):
            await until(lambda: sum(1 for e in self.events if isinstance(e, dict) and e["kind"] == "turn-complete") >= count)


async def _replay(link: ModLink, env: dict[str, str], nursery: trio.Nursery, name: str, **options: Any) -> tuple[_Recorder, ModSimulator]:
    recorder = _Recorder(link)
    await nursery.start(recorder.run)
    sim = ModSimulator(SESSION, env=env, snapshot_interval=0, claude_version="2.1.332", **options)
    await nursery.start(sim.run)
    return recorder, sim


async def test_the_simulator_matches_a_recorded_typed_turn(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    recorder, sim = await _replay(link, env, nursery, "typed-text")
    sim.type_prompt("Say hello.", steps=[["Hello from ", "the fake API."]])
    await sim.wait_idle()
    assert await recorder.shapes_of(recorded("typed-text")[0]) == recorded("typed-text")[0]


async def test_the_simulator_matches_a_recorded_tool_turn(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    recorder, sim = await _replay(link, env, nursery, "typed-tool")
    tool = SimulatedToolCall(name="Bash", input={"command": "echo hi-from-bash"}, result="hi-from-bash")
    sim.type_prompt("Run echo hi-from-bash.", steps=[["I will run it.", tool], ["It printed hi-from-bash."]])
    await sim.wait_idle()
    assert await recorder.shapes_of(recorded("typed-tool")[0]) == recorded("typed-tool")[0]


async def test_the_simulator_matches_recorded_rows_mid_turn_and_the_pointer(
    link: ModLink, env: dict[str, str], nursery: trio.Nursery
) -> None:
    recorder, sim = await _replay(link, env, nursery, "rows-mid-turn")
    running, last_step = trio.Event(), trio.Event()
    tool = SimulatedToolCall(name="Bash", input={"command": "wait"}, result="released", gate=running)
    sim.type_prompt("Start the work.", steps=[["Working.", tool], ["A slow ", last_step, "last step."]])
    with trio.fail_after(10):
        await until(lambda: any(shape[0] == "step-done" for shape in recorder.shapes()))
    assert isinstance(await link.call("session.message", message("ev-row", "a note", person="dm-1"), deadline=10), ModRowWritten)
    running.set()
    with trio.fail_after(10):
        await until(lambda: any(e["kind"] == "step" and e["index"] == 1 for e in recorder.events if isinstance(e, dict)))
    assert isinstance(await link.call("session.message", message("ev-late", "a card"), deadline=10), ModRowWritten)
    last_step.set()
    await recorder.turns_done(2)
    await sim.wait_idle()
    shapes, calls = recorded("rows-mid-turn")
    assert await recorder.shapes_of(shapes) == shapes
    assert [call["result"]["as"] for call in calls if call["call"] == "session.message"] == ["row", "row"]


async def test_the_simulator_matches_recorded_idle_prompts(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    recorder, sim = await _replay(link, env, nursery, "idle-prompts")
    results = [await link.call("session.message", message("ev-person", "hello from the phone", person="dm-2"), deadline=10)]
    await recorder.turns_done(1)
    results.append(await link.call("session.message", message("ev-card", "a card for you"), deadline=10))
    await recorder.turns_done(2)
    results.append(await link.call("session.message", message("ev-person", "hello from the phone", person="dm-2"), deadline=10))
    await sim.wait_idle()
    shapes, calls = recorded("idle-prompts")
    assert await recorder.shapes_of(shapes) == shapes
    assert [converter.unstructure(result) for result in results] == [
        call["result"] for call in calls if call["call"] == "session.message"
    ]
    card_row = next(e for e in recorder.events if isinstance(e, dict) and e["kind"] == "append" and e.get("wrote") and "asUser" not in e["origin"])
    recorded_card = next(
        loads(line)["event"]
        for line in (FIXTURES / "idle-prompts.jsonl").read_text().splitlines()
        if "event" in loads(line) and loads(line)["event"].get("wrote") and "asUser" not in loads(line)["event"]["origin"]
    )
    assert card_row["message"]["content"] == recorded_card["message"]["content"]  # the frame, word for word


async def test_the_simulator_matches_a_recorded_clear(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    recorder, sim = await _replay(link, env, nursery, "clear")
    sim.type_prompt("Remember tangerine.", steps=[["First conversation."]])
    await sim.wait_idle()
    sim.clear()
    await link.call("session.message", message("ev-after", "after the clear", person="dm-3"), deadline=10)
    await recorder.turns_done(2)
    await sim.wait_idle()
    assert await recorder.shapes_of(recorded("clear")[0]) == recorded("clear")[0]
    assert recorder.shapes().count(("hello", True)) == 1


async def test_the_simulator_matches_recorded_print_mode(link: ModLink, env: dict[str, str], nursery: trio.Nursery) -> None:
    recorder, sim = await _replay(link, env, nursery, "print", interactive=False)
    streaming = trio.Event()
    sim.type_prompt("Say something slowly.", steps=[["A slow ", streaming, "answer."]])
    with trio.fail_after(10):
        await until(lambda: any(e["kind"] == "step" for e in recorder.events if isinstance(e, dict)))
    assert isinstance(await link.call("session.message", message("ev-print", "a note", person="dm-4"), deadline=10), ModRowWritten)
    streaming.set()
    await recorder.turns_done(2)  # the pointer prompt's turn: -p takes it at a turn's end
    await sim.wait_idle()
    assert await recorder.shapes_of(recorded("print")[0]) == recorded("print")[0]


async def test_the_simulator_matches_a_recorded_refusal_in_print_mode(
    link: ModLink, env: dict[str, str], nursery: trio.Nursery
) -> None:
    recorder, sim = await _replay(link, env, nursery, "print-idle", interactive=False)
    sim.type_prompt("Say something slowly.", steps=[["A quick answer."]])
    await sim.wait_idle()
    result = await link.call("session.message", message("ev-print", "a note", person="dm-4"), deadline=10)
    shapes, calls = recorded("print-idle")
    assert await recorder.shapes_of(shapes) == shapes
    assert converter.unstructure(result) == calls[-1]["result"]
    assert sim.prompts[-1].text == "Say something slowly."  # nothing was written
