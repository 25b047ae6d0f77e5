"""A Claude Code session's turn that ended is a ``turn-ended`` event, with
the first line of its answer, for a session the person opted in: the real
turn router over a real delivery record with the notifications hooked on
it, the mod simulator on the other end of a real Unix socket. A turn typed
at the terminal and a turn a delivery started are both told; a session not
opted in makes no event."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from router.modlink.sim import ModSimulator
from router.turns.core import Answered, Card, Delivery
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.notify.conftest import Rig, write_settings

SESSION = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
OTHER = "0f9e8d7c-6b5a-4c3d-9e1f-2a3b4c5d6e7f"


async def _router(rig: Rig, nursery: trio.Nursery, env: dict[str, str]) -> TurnRouter:
    registry = SessionRegistry()
    await nursery.start(registry.run)
    router = TurnRouter(deliveries=rig.log, registry=registry, host=None, env=env, link_options={"hold": 0.5})
    return router


async def _sim(nursery: trio.Nursery, env: dict[str, str], session: str) -> ModSimulator:
    sim = ModSimulator(session, env=env, snapshot_interval=0)
    await nursery.start(sim.run)
    return sim


async def _turn_events(rig: Rig, n: int) -> list[dict[str, Any]]:
    with trio.fail_after(20):
        while True:
            events = [e for e in await rig.events() if e["kind"] == "turn-ended"]
            if len(events) >= n:
                return events
            await trio.sleep(0.01)


async def test_a_claude_code_turn_that_ended_is_told_with_its_answer(
    rig: Rig, nursery: trio.Nursery, env: dict[str, str]
) -> None:
    write_settings(rig.settings_dir, notifiers=[])
    await rig.service.set_session(SESSION, lambda current: attrs.evolve(current, turn_ended=True))
    router = await _router(rig, nursery, env)
    await router.open_claude_code(SESSION)
    sim = await _sim(nursery, env, SESSION)
    sim.type_prompt("typed at the terminal", steps=[["All tests pass.\n", "Details follow."]])
    await sim.wait_idle()
    (typed,) = await _turn_events(rig, 1)
    assert typed["session"] == SESSION and typed["title"] == "Turn ended"
    assert typed["body"] == f"{SESSION}: All tests pass."
    reply = await router.deliver(Delivery(event_id="c1", session=SESSION, message=Card(text="and now?")))
    assert isinstance(reply, Answered)
    await sim.wait_idle()
    events = await _turn_events(rig, 2)
    assert len({e["id"] for e in events}) == 2
    assert events[0]["body"].startswith(f"{SESSION}: ")


async def test_a_session_not_opted_in_makes_no_turn_event(
    rig: Rig, nursery: trio.Nursery, env: dict[str, str]
) -> None:
    write_settings(rig.settings_dir, notifiers=[])
    await rig.service.set_session(SESSION, lambda current: attrs.evolve(current, turn_ended=True))
    router = await _router(rig, nursery, env)
    await router.open_claude_code(OTHER)
    await router.open_claude_code(SESSION)
    other = await _sim(nursery, env, OTHER)
    other.type_prompt("not told", steps=[["quiet"]])
    await other.wait_idle()
    sim = await _sim(nursery, env, SESSION)
    sim.type_prompt("told", steps=[["loud"]])
    await sim.wait_idle()
    events = await _turn_events(rig, 1)
    # The other session's turn ended first; its end reached the record's
    # hook, which made no event of it.
    assert [(e["session"], e["body"]) for e in events] == [(SESSION, f"{SESSION}: loud")]
