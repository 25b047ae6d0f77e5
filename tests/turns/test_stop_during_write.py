"""A turn's end that stops a container session while the router is already
writing the next delivery into it (its measure took longer than the
delivery's wait): the core's ``before_write`` says the write no longer goes
out, so nothing reaches the daemon and the delivery is unanswered
``session-stopped``; the bracket opened for it is withdrawn."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from router.plugins.limit_checks import MustStop
from router.plugins.routing import LaunchRecord
from router.turns.core import Answered, Delivery, DeliveryUnanswered, Person
from tests.turns.conftest import daemon_knows

REASON = "limit: token-limit tokens.instances.default limit 1 count 2"


class HeldEndLayer:
    """A plug-in layer whose ``end_turn`` answers a stop, once let go."""

    def __init__(self) -> None:
        self.settings = SimpleNamespace(read=lambda name: SimpleNamespace(value=None))
        self.let_go = trio.Event()
        self.ending = trio.Event()

    async def begin_turn(self, launch: LaunchRecord) -> str:
        await trio.lowlevel.checkpoint()
        return "bracket"

    async def end_turn(self, bracket: str) -> tuple[dict[str, Any], MustStop | None]:
        self.ending.set()
        await self.let_go.wait()
        return {"usage": None}, MustStop(check="token-limit", reason=REASON)


def person(event_id: str, text: str) -> Delivery:
    return Delivery(event_id=event_id, session="root", message=Person(text=text, message_id=f"m-{event_id}"))


async def test_a_stop_that_lands_while_the_next_write_is_prepared_writes_nothing(make_rig: Any) -> None:
    layer = HeldEndLayer()
    # The second delivery waits a moment for the first turn's measure, then
    # goes on (logged): the measure is held until the write is under way.
    # Its bracket then opens only after the held measure ends (one bracket
    # at a time), which no timing decides: the bracket's wait is long.
    rig = await make_rig(layer=layer, measure_wait=0.05, bracket_wait=600.0)
    first = await rig.router.deliver(person("e1", "one"))
    assert isinstance(first, Answered)
    await layer.ending.wait()  # the first turn ended; its measure is held

    replies: list[Any] = []

    async def second() -> None:
        replies.append(await rig.router.deliver(person("e2", "two")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        # The second delivery is planned (its entry stored before the write)
        # while the first turn is still being measured.
        while True:
            entry = await rig.deliveries.call(rig.deliveries.get, "e2")
            if entry is not None and entry.attempts == 1:
                break
            await trio.sleep(0.01)
        layer.let_go.set()

    (reply,) = replies
    assert isinstance(reply, DeliveryUnanswered) and reply.code == "session-stopped" and REASON in reply.message
    assert not daemon_knows(rig.daemon, "root", "e2")
    session = await rig.router.session("root")
    assert session.brackets.statistics().stopped["reason"] == REASON
    assert "e2" not in session.brackets.statistics().running
    settled = await rig.deliveries.call(rig.deliveries.get, "e2")
    assert settled.state.value == "unanswered" and settled.last[0] == "session-stopped"
