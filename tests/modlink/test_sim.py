"""The mod simulator against the real server: hello, the race for the link,
session.message as a row or a prompt, idempotence, the pointer prompt, the
plain calls, /clear."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import trio

from router.modlink import ModCallError, ModLink
from router.modlink.sim import ModSimulator
from wire.mod import (
    MOD_PLUGIN_NAME,
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
    assert link.state.instance is None and link.statistics()["events_accepted"] == 0


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
        assert link.statistics()["refused_posts"] >= 1
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
    assert row.origin.name == MOD_PLUGIN_NAME and row.origin.as_user is True
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
    assert pointer.message.content[0]["text"] == text
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
