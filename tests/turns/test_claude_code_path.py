"""Deliveries into a Claude Code session through its mod link, with the mod
simulator on the other end of a real Unix socket: a row while a turn runs, a
prompt when idle, a deny, a late answer becoming a card under the same event
id, a refused row left unanswered then resent, a dropped prompt told to the
person, and a session whose mod has not connected."""

from __future__ import annotations

from typing import Any

import trio

from router.modlink.sim import ModSimulator
from router.turns.core import Answered, Card, Delivery, DeliveryUnanswered, Person, State
from wire.mod import ModUnreadCard, ModUnreadPerson

SESSION = "4b7e7f5e-2a43-4c1e-9d8e-0f6d2c1a9b10"


def person(event_id: str, text: str) -> Delivery:
    return Delivery(event_id=event_id, session=SESSION, message=Person(text=text, message_id=f"m-{event_id}"))


def card(event_id: str, text: str) -> Delivery:
    return Delivery(event_id=event_id, session=SESSION, message=Card(text=text))


async def claude_rig(make_rig: Any, **options: Any) -> Any:
    rig = await make_rig(None, link_options={"hold": 0.5}, **options)
    await rig.router.open_claude_code(SESSION)
    return rig


async def start_sim(nursery: trio.Nursery, env: dict[str, str], sim_class: type = ModSimulator, **options: Any) -> Any:
    sim = sim_class(SESSION, env=env, snapshot_interval=0, **options)
    await nursery.start(sim.run)
    return sim


def messages_sent(sim: ModSimulator) -> list[Any]:
    return [request.args.message for request in sim.requests_seen if request.call == "session.message"]


async def test_a_prompt_when_idle(make_rig: Any, nursery: trio.Nursery, env: dict[str, str]) -> None:
    rig = await claude_rig(make_rig)
    sim = await start_sim(nursery, env)
    reply = await rig.router.deliver(person("e1", "hello there"))
    assert isinstance(reply, Answered) and not reply.from_record
    assert reply.answer == {
        "eventId": "e1",
        "session": SESSION,
        "message": "person",
        "status": "delivered",
        "as": "prompt",
    }
    assert [(p.text, p.as_user, p.wrote) for p in sim.prompts] == [("hello there", True, "message")]
    assert messages_sent(sim) == [ModUnreadPerson(text="hello there", message_id="m-e1")]


async def test_a_row_while_a_turn_runs(make_rig: Any, nursery: trio.Nursery, env: dict[str, str]) -> None:
    rig = await claude_rig(make_rig)
    sim = await start_sim(nursery, env)
    gate = trio.Event()
    sim.type_prompt("work on it", steps=[["thinking ", gate, "done"]])
    reply = await rig.router.deliver(card("c1", "a card for the running turn"))
    assert isinstance(reply, Answered)
    assert reply.answer["as"] == "row" and reply.answer["message"] == "card"
    assert [row.uuid for row in sim.rows] == [reply.answer["uuid"]]
    gate.set()
    await sim.wait_idle()
    # The row went unread by the turn: the mod pointed the model at it.
    assert [p.wrote for p in sim.prompts] == [None, "pointer"]


async def test_exactly_once_with_concurrent_resends(make_rig: Any, nursery: trio.Nursery, env: dict[str, str]) -> None:
    rig = await claude_rig(make_rig)
    sim = await start_sim(nursery, env)
    replies: list[Any] = []

    async def send() -> None:
        replies.append(await rig.router.deliver(person("e1", "only once")))

    async with trio.open_nursery() as senders:
        for _ in range(8):
            senders.start_soon(send)
    assert all(isinstance(reply, Answered) for reply in replies)
    assert sum(not reply.from_record for reply in replies) == 1
    assert len({tuple(sorted(reply.answer.items())) for reply in replies}) == 1
    assert [p.text for p in sim.prompts if p.wrote == "message"] == ["only once"]
    assert len(messages_sent(sim)) == 1  # the resends never reached the mod


async def test_a_dropped_prompt_is_told_to_the_person(make_rig: Any, nursery: trio.Nursery, env: dict[str, str]) -> None:
    rig = await claude_rig(make_rig)
    await start_sim(nursery, env, deny_writes="the session is ending")
    reply = await rig.router.deliver(person("e1", "are you there?"))
    assert isinstance(reply, Answered)
    assert reply.answer["status"] == "dropped"
    assert reply.answer["reason"] == "the session is ending"
    # Final: a resend is answered from the record, nothing is written.
    again = await rig.router.deliver(person("e1", "are you there?"))
    assert isinstance(again, Answered) and again.from_record and again.answer == reply.answer


async def test_a_refused_row_is_left_unanswered_then_resent(
    make_rig: Any, nursery: trio.Nursery, env: dict[str, str]
) -> None:
    rig = await claude_rig(make_rig)
    sim = await start_sim(nursery, env, deny_writes="no rows now")
    gate = trio.Event()
    sim.type_prompt("busy", steps=[[gate]])
    reply = await rig.router.deliver(person("e1", "hello"))
    assert isinstance(reply, DeliveryUnanswered) and reply.code == "row-refused"
    assert "no rows now" in reply.message and "resend" in reply.message
    entry = await rig.deliveries.call(rig.deliveries.get, "e1")
    assert entry.state is State.UNANSWERED and entry.person_spent
    sim.deny_writes = None
    again = await rig.router.deliver(person("e1", "hello"))
    assert isinstance(again, Answered) and not again.from_record
    assert again.answer["as"] == "row" and again.answer["message"] == "card"
    # The Dispatch attempt was spent by the first write: the resend is a card.
    assert messages_sent(sim) == [
        ModUnreadPerson(text="hello", message_id="m-e1"),
        ModUnreadCard(text="hello"),
    ]
    gate.set()


class SlowResults(ModSimulator):
    """A mod whose answers to ``session.message`` wait for :attr:`release`
    (the write itself happens at once, as a slow result post would)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = trio.Event()
        self.held = 0

    async def _post(self, route: str, body: Any, *, read_timeout: float | None = None) -> Any:
        if route == "/results" and not self.release.is_set():
            self.held += 1
            await self.release.wait()
        return await super()._post(route, body, read_timeout=read_timeout)


async def test_a_late_answer_turns_the_person_into_a_card_under_the_same_event_id(
    make_rig: Any, nursery: trio.Nursery, env: dict[str, str]
) -> None:
    rig = await claude_rig(make_rig, message_deadline=0.5)
    sim = await start_sim(nursery, env, sim_class=SlowResults)
    first = await rig.router.deliver(person("e1", "my own words"))
    assert isinstance(first, DeliveryUnanswered) and first.code == "no-answer"
    assert sim.held == 1
    sim.release.set()  # the late answer arrives, and is dropped: its call expired
    again = await rig.router.deliver(person("e1", "my own words"))
    assert isinstance(again, Answered)
    assert again.answer == {
        "eventId": "e1",
        "session": SESSION,
        "message": "card",
        "status": "delivered",
        "as": "prompt",
    }
    # The words landed once, as the person's: the card was answered from the
    # mod's record of the first write.
    assert [(p.text, p.as_user) for p in sim.prompts if p.wrote == "message"] == [("my own words", True)]
    assert messages_sent(sim) == [
        ModUnreadPerson(text="my own words", message_id="m-e1"),
        ModUnreadCard(text="my own words"),
    ]


async def test_no_write_while_the_mod_is_not_connected(
    make_rig: Any, nursery: trio.Nursery, env: dict[str, str]
) -> None:
    rig = await claude_rig(make_rig)
    reply = await rig.router.deliver(person("e1", "early"))
    assert isinstance(reply, DeliveryUnanswered) and reply.code == "mod-not-connected"
    entry = await rig.deliveries.call(rig.deliveries.get, "e1")
    assert entry.attempts == 0 and not entry.person_spent  # nothing went out
    sim = await start_sim(nursery, env)
    again = await rig.router.deliver(person("e1", "early"))
    assert isinstance(again, Answered) and again.answer["message"] == "person"
    assert [(p.text, p.as_user) for p in sim.prompts] == [("early", True)]


async def test_the_live_view_of_a_claude_code_session(
    make_rig: Any, nursery: trio.Nursery, env: dict[str, str]
) -> None:
    rig = await claude_rig(make_rig)
    sim = await start_sim(nursery, env)
    gate = trio.Event()
    async with rig.router.live(SESSION) as stream:
        assert stream.snapshot == {"session": SESSION, "kind": "claude-code", "messages": [], "busy": False}
        sim.type_prompt("typed at the terminal", steps=[["one ", gate, "two"]])
        await rig.router.deliver(card("c1", "a card"))
        gate.set()
        await sim.wait_idle()
        items: list[dict[str, Any]] = []
        with trio.move_on_after(5):
            async for batch in stream:
                items += batch
                if sum(item["type"] == "turn-end" for item in items) == 2:
                    break
    transcript = (await rig.router.messages(SESSION))["messages"]
    shown = [(m["role"], m.get("card", False), "".join(p.get("text", "") for p in m["parts"])) for m in transcript]
    assert shown[0] == ("user", False, "typed at the terminal")
    assert ("user", True, "a card") in shown
    assert shown[1:].count(("assistant", False, "one two")) == 1  # the step, not again its response row
    # The pointer prompt is hidden; the turn it started is drawn.
    pointers = [p.text for p in sim.prompts if p.wrote == "pointer"]
    assert len(pointers) == 1 and not any(text == pointers[0] for _, _, text in shown)
    assert shown[-1][0] == "assistant" and shown[-1][2].startswith("I read: ")
    types = [item["type"] for item in items]
    assert "text-delta" in types and types.count("turn-start") == 2


async def test_a_session_whose_link_cannot_start_is_refused(make_rig: Any, runtime_dir: str) -> None:
    import os

    from router.modlink.errors import ModLinkRefused
    from wire.mod import resolve_mod_socket_path

    rig = await make_rig(None)
    path = resolve_mod_socket_path(SESSION, {"XDG_RUNTIME_DIR": runtime_dir}).path
    assert path is not None
    os.makedirs(os.path.dirname(path), mode=0o755)
    os.chmod(os.path.dirname(path), 0o755)
    try:
        await rig.router.open_claude_code(SESSION)
    except ModLinkRefused as refused:
        assert refused.code == "unsafe-directory"
    else:
        raise AssertionError("an unsafe directory was accepted")
    assert rig.registry.get(SESSION) is None
