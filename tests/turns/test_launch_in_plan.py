"""A prompt's turn bracket takes the session's launch record from the
delivery's plan (read in the same worker-thread hop that stores the plan),
not from a read of its own; the record as stored is what the bracket gets,
and a launch stored later is what the next turn gets."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import attrs

from router.plugins.routing import LaunchRecord
from router.turns.core import Answered, Delivery, Person

LAUNCH = LaunchRecord(
    instance="coder", session="root", route="primary", route_reason="the instance's route", harness="echo",
    model="m1", thinking="off", provider="p", account=None, harness_version="echo 1",
    reach={"via": "in-process"}, env={},
)


class RecordingLayer:
    """A plug-in layer that keeps the launch each bracket began with."""

    def __init__(self) -> None:
        self.settings = SimpleNamespace(read=lambda name: SimpleNamespace(value=None))
        self.launches: list[LaunchRecord] = []

    async def begin_turn(self, launch: LaunchRecord) -> str:
        self.launches.append(launch)
        return "bracket"

    async def end_turn(self, bracket: str) -> tuple[dict[str, Any], None]:
        return {"usage": None}, None


def person(event_id: str) -> Delivery:
    return Delivery(event_id=event_id, session="root", message=Person(text=event_id, message_id=f"m-{event_id}"))


async def test_the_bracket_takes_the_launch_read_in_the_plan(make_rig: Any) -> None:
    layer = RecordingLayer()
    rig = await make_rig(layer=layer)
    await rig.deliveries.call(rig.deliveries.put_launch, "root", LAUNCH)
    session = await rig.router.session("root")  # opened: its account is read once, here
    calls: list[str] = []
    real = rig.deliveries.call

    async def counted(fn: Any, *args: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args)

    rig.deliveries.call = counted  # type: ignore[method-assign]
    for n in range(3):
        reply, _ = await rig.router.send("root", f"text {n}", event_id=f"e{n}", wait=True)
        assert isinstance(reply, Answered)
    await session.brackets.finish_ended_turns()
    assert "launch_of" not in calls  # no hop of its own: it came with the plan
    assert [launch.model for launch in layer.launches] == ["m1"] * 3
    await real(rig.deliveries.put_launch, "root", attrs.evolve(LAUNCH, model="m2"))
    reply, _ = await rig.router.send("root", "after", event_id="after", wait=True)
    assert isinstance(reply, Answered)
    assert layer.launches[-1].model == "m2"
