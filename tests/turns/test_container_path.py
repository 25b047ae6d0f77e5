"""Deliveries into container sessions, against the in-process daemon over a
real loopback socket: a prompt whose operation id is the event id, steered
when the adapter steers and queued otherwise, exactly once per event id."""

from __future__ import annotations

from typing import Any

import trio

from router.turns.core import Answered, Card, Delivery, DeliveryRefused, Person
from tests.turns.adapters import GateAdapter
from tests.turns.conftest import daemon_knows, until


def person(event_id: str, text: str, session: str = "root") -> Delivery:
    return Delivery(event_id=event_id, session=session, message=Person(text=text, message_id=f"m-{event_id}"))


async def test_a_delivery_becomes_a_prompt_under_its_event_id(make_rig: Any) -> None:
    rig = await make_rig()
    reply = await rig.router.deliver(person("e1", "hello"))
    assert isinstance(reply, Answered) and not reply.from_record
    # Before a hello the adapter is not known to steer (followUp); the
    # session's view task follows the host's events from its opening, so the
    # hello may have come already (the echo steers).
    assert reply.answer["whenBusy"] in ("followUp", "steer")
    assert {**reply.answer, "whenBusy": "followUp"} == {
        "eventId": "e1",
        "session": "root",
        "status": "delivered",
        "as": "prompt",
        "operationId": "e1",
        "whenBusy": "followUp",
    }
    result = await rig.router.reply_of("root", "e1")
    assert result == {"operationId": "e1", "session": "root", "status": "done", "text": "echo: hello (turn 1)"}
    # The host now knows the adapter from its hello (router/host/session_link.py).
    link = rig.host.session("root").link
    assert link is not None and link.adapter is not None
    assert (link.adapter.id, link.adapter.capabilities) == ("echo", ("steer", "rerun"))


async def test_a_card_is_a_prompt_too(make_rig: Any) -> None:
    rig = await make_rig()
    reply = await rig.router.deliver(Delivery(event_id="c1", session="root", message=Card(text="from afar")))
    assert isinstance(reply, Answered) and reply.answer["operationId"] == "c1"
    assert (await rig.router.reply_of("root", "c1"))["text"] == "echo: from afar (turn 1)"


async def test_a_resend_is_answered_from_the_record(make_rig: Any) -> None:
    rig = await make_rig()
    first = await rig.router.deliver(person("e1", "once"))
    await rig.router.reply_of("root", "e1")
    again = await rig.router.deliver(person("e1", "once"))
    assert isinstance(first, Answered) and isinstance(again, Answered)
    assert again.from_record and again.answer == first.answer
    operations = await rig.store.call(rig.store.operations.all)
    assert [operation.id for operation in operations] == ["e1"]
    messages = (await rig.router.messages("root"))["messages"]
    assert [m["id"] for m in messages] == ["e1:user", "e1:assistant"]


async def test_concurrent_resends_write_once(make_rig: Any) -> None:
    rig = await make_rig()
    replies: list[Any] = []

    async def send() -> None:
        replies.append(await rig.router.deliver(person("e1", "many times")))

    async with trio.open_nursery() as nursery:
        for _ in range(12):
            nursery.start_soon(send)
    assert all(isinstance(reply, Answered) for reply in replies)
    assert len({tuple(sorted(reply.answer.items())) for reply in replies}) == 1
    assert sum(not reply.from_record for reply in replies) == 1
    operations = await rig.store.call(rig.store.operations.all)
    assert [operation.id for operation in operations] == ["e1"]
    assert (await rig.router.reply_of("root", "e1"))["text"] == "echo: many times (turn 1)"


async def test_steer_when_the_adapter_steers(make_rig: Any) -> None:
    adapter = GateAdapter(steers=True)
    rig = await make_rig(adapter)
    first = await rig.router.deliver(person("e1", "hold one"))
    await adapter.wait_started(1)
    second = await rig.router.deliver(person("e2", "two"))
    assert isinstance(first, Answered) and isinstance(second, Answered)
    assert second.answer["whenBusy"] == "steer"
    await until(lambda: daemon_knows(rig.daemon, "root", "e2"))
    adapter.gate.set()
    assert (await rig.router.reply_of("root", "e1"))["text"] == "got: hold one + two"
    assert (await rig.router.reply_of("root", "e2"))["status"] == "done"  # settled with the turn it joined
    assert adapter.started == ["e1"]  # one turn


async def test_follow_up_when_the_adapter_does_not_steer(make_rig: Any) -> None:
    adapter = GateAdapter(steers=False)
    rig = await make_rig(adapter)
    await rig.router.deliver(person("e1", "hold one"))
    await adapter.wait_started(1)
    second = await rig.router.deliver(person("e2", "two"))
    assert isinstance(second, Answered) and second.answer["whenBusy"] == "followUp"
    await until(lambda: daemon_knows(rig.daemon, "root", "e2"))  # it reached the daemon mid-turn
    adapter.gate.set()
    assert (await rig.router.reply_of("root", "e1"))["text"] == "got: hold one"
    assert (await rig.router.reply_of("root", "e2"))["text"] == "got: two"
    assert adapter.started == ["e1", "e2"]  # two turns, in order


async def test_sessions_run_concurrently(make_rig: Any) -> None:
    adapter = GateAdapter(steers=False)
    rig = await make_rig(adapter)
    await rig.router.create("other")
    await rig.router.deliver(person("e1", "hold root"))
    await adapter.wait_started(1)
    # root's turn is held; another session's delivery is answered and runs.
    reply = await rig.router.deliver(person("e2", "free", session="other"))
    assert isinstance(reply, Answered)
    assert (await rig.router.reply_of("other", "e2"))["text"] == "got: free"
    adapter.gate.set()
    assert (await rig.router.reply_of("root", "e1"))["text"] == "got: hold root"


async def test_refusals(make_rig: Any) -> None:
    rig = await make_rig()
    unknown = await rig.router.deliver(person("e1", "hi", session="nowhere"))
    assert isinstance(unknown, DeliveryRefused) and unknown.code == "unknown-session"
    await rig.router.create("other")
    await rig.router.deliver(person("e2", "hi"))
    elsewhere = await rig.router.deliver(person("e2", "hi", session="other"))
    assert isinstance(elsewhere, DeliveryRefused) and elsewhere.code == "event-id-conflict"
    changed = await rig.router.deliver(person("e2", "another text"))
    assert isinstance(changed, DeliveryRefused) and changed.code == "event-id-conflict"
    as_card = await rig.router.deliver(Delivery(event_id="e2", session="root", message=Card(text="hi")))
    assert isinstance(as_card, DeliveryRefused) and as_card.code == "event-id-conflict"


async def test_a_closed_session_answers_what_waits(make_rig: Any) -> None:
    adapter = GateAdapter(steers=False)
    rig = await make_rig(adapter)
    await rig.router.deliver(person("e1", "hold"))
    session = rig.registry.get("root")
    assert session is not None and session.tasks == ["live-view", "inbox"]  # every container session has its view
    assert await rig.registry.close("root")
    assert rig.registry.get("root") is None
    # Reopened on the next delivery; the record still answers the resend.
    again = await rig.router.deliver(person("e1", "hold"))
    assert isinstance(again, Answered) and again.from_record
    adapter.gate.set()
