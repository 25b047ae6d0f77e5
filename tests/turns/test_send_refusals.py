"""``TurnRouter.send`` answers a delivery that was refused or went
unanswered with the refusal as ``Refusal.to_json`` spells it (the HTTP
API's body), ``eventId`` beside an unanswered one's."""

from __future__ import annotations

from typing import Any

import trio

from router.errors import Refusal
from router.turns.core import DeliveryRefused, DeliveryUnanswered
from tests.support.polling import until
from tests.turns.test_delivery_reads import GatedLayer


async def test_a_refused_delivery_is_answered_with_its_refusal(make_rig: Any) -> None:
    rig = await make_rig()
    await rig.router.session("root")
    reply, body = await rig.router.send("root", "   ", event_id="e1")
    assert isinstance(reply, DeliveryRefused)
    assert body == {"error": "empty-message", "message": "the message is only whitespace; write some text and send "
                    "it again"}
    assert Refusal.from_json(body) == reply.refusal


async def test_an_unanswered_delivery_is_answered_with_its_refusal_and_event_id(make_rig: Any) -> None:
    layer = GatedLayer()
    rig = await make_rig(layer=layer, inbox_size=1)
    session = await rig.router.session("root")
    answers: list[Any] = []

    async def send(event_id: str) -> None:
        answers.append(await rig.router.send("root", event_id, event_id=event_id))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, "in-hand")
        with trio.fail_after(10):
            await until(lambda: session.id in rig.router._handling)  # the first waits at its bracket
        nursery.start_soon(send, "queued")
        with trio.fail_after(10):
            await until(lambda: session.inbox.statistics().current_buffer_used == 1)
        reply, body = await rig.router.send("root", "one too many", event_id="e3")
        layer.gate.set()
    assert isinstance(reply, DeliveryUnanswered)
    assert body == {"error": "inbox-full", "message": "session 'root' has 1 deliveries waiting; resend with the same "
                    "eventId later", "eventId": "e3"}
    assert (reply.code, reply.message) == (body["error"], body["message"])
