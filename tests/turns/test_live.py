"""The live view: mod events converted into the ``ContainerMessage`` shape
(step snapshots as messages and deltas, rows as messages, cards drawn,
pointers hidden), the host's events normalized, and the fan-out."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.host import AdapterEvent, ContainerLost, MessageStored, OperationEnded, OperationResult, OperationStarted
from router._fanout import FanOutStatistics, Lagged
from router.turns.live import LiveHub, LiveLagged, ModLiveConverter, apply_item, container_items
from wire.container import ContainerMessage, structure_or_none
from wire.json import ABSENT
from wire.mod import (
    MOD_PLUGIN_NAME,
    ModAppendEvent,
    ModAppendMessage,
    ModAppendOrigin,
    ModHelloEvent,
    ModStepEvent,
    ModStepReasoning,
    ModStepText,
    ModStepToolCall,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
)


def converter() -> ModLiveConverter:
    clock = itertools.count(1_700_000_000_000)
    return ModLiveConverter(now=lambda: next(clock))


def step(parts: tuple[Any, ...], *, done: bool = False, turn: str = "t1", index: int = 0) -> ModStepEvent:
    return ModStepEvent(
        turn_id=turn, index=index, model="m", parts=parts, done=done,
        stop_reason="end_turn" if done else ABSENT,
    )


def row(
    uuid: str, text: str, *, door: str = "prompt", role: str = "user", wrote: Any = ABSENT,
    origin: ModAppendOrigin | None = None, content: tuple[Any, ...] | None = None, is_meta: Any = ABSENT,
) -> ModAppendEvent:
    return ModAppendEvent(
        uuid=uuid,
        door=door,  # type: ignore[arg-type]
        origin=origin or ModAppendOrigin(kind="user"),
        message=ModAppendMessage(
            type=role, role=role, content=content or ({"type": "text", "text": text},), is_meta=is_meta,  # type: ignore[arg-type]
        ),
        wrote=wrote,
    )


class Reader:
    """A page: applies items to its own transcript."""

    def __init__(self) -> None:
        self.messages: dict[str, dict[str, Any]] = {}
        self.items: list[dict[str, Any]] = []

    def take(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self.items.append(item)
            apply_item(self.messages, item)


def shape_ok(message: dict[str, Any]) -> bool:
    return structure_or_none(message, ContainerMessage) is not None


def test_a_streaming_step_is_a_message_then_deltas_then_the_whole() -> None:
    view, reader = converter(), Reader()
    for text in ("He", "Hello", "Hello wor"):
        reader.take(view.feed(step((ModStepText(text=text),))))
    reader.take(view.feed(step((ModStepText(text="Hello world"),), done=True)))
    assert [item["type"] for item in reader.items] == ["message", "text-delta", "text-delta", "message"]
    assert [item.get("delta") for item in reader.items[1:3]] == ["llo", " wor"]
    (message,) = view.messages.values()
    assert message["id"] == "t1:0" and message["role"] == "assistant" and message["operationId"] == "t1"
    assert message["parts"] == [{"type": "text", "text": "Hello world"}]
    assert reader.messages == dict(view.messages) and shape_ok(message)


def test_reasoning_and_tool_calls() -> None:
    view, reader = converter(), Reader()
    reader.take(view.feed(step((ModStepReasoning(text="hmm"),))))
    reader.take(view.feed(step((ModStepReasoning(text="hmm."), ModStepText(text="I'll look")))))
    reader.take(view.feed(step((ModStepReasoning(text="hmm."), ModStepText(text="I'll look"),
                                ModStepToolCall(id="call1", name="Read", args='{"path": "/et')))))
    message = view.messages["t1:0"]
    assert message["parts"][2] == {
        "type": "tool", "toolCallId": "call1", "toolName": "Read", "input": '{"path": "/et', "state": "running",
    }
    reader.take(view.feed(step((ModStepReasoning(text="hmm."), ModStepText(text="I'll look"),
                                ModStepToolCall(id="call1", name="Read", args='{"path": "/etc"}')), done=True)))
    assert view.messages["t1:0"]["parts"][2]["input"] == {"path": "/etc"}
    # The tool's result row completes the part.
    result = row("r1", "", door="tool-result", content=(
        {"type": "tool_result", "tool_use_id": "call1", "content": "root:x:0:0"},
    ))
    reader.take(view.feed(result))
    part = view.messages["t1:0"]["parts"][2]
    assert part["state"] == "done" and part["output"] == "root:x:0:0"
    assert reader.messages == dict(view.messages)
    assert all(shape_ok(m) for m in view.messages.values())
    assert list(view.messages) == ["t1:0"]  # the result row itself is not a message


def test_rows_cards_and_pointers() -> None:
    view, reader = converter(), Reader()
    plugin = ModAppendOrigin(kind="plugin", name=MOD_PLUGIN_NAME)
    reader.take(view.feed(row("u1", "typed at the terminal")))
    reader.take(view.feed(row("u2", "a card", door="note", origin=plugin, wrote="message")))
    reader.take(view.feed(row("u3", "you have unread messages", origin=plugin, wrote="pointer")))
    reader.take(view.feed(row("u4", "meta", is_meta=True)))
    reader.take(view.feed(ModAppendEvent(
        uuid="u5", door="notice", origin=ModAppendOrigin(kind="system"),
        message=ModAppendMessage(type="system", content=({"type": "text", "text": "compacted"},)),
    )))
    assert list(view.messages) == ["u1", "u2"]
    assert "card" not in view.messages["u1"] and view.messages["u2"]["card"] is True
    assert view.messages["u2"]["parts"] == [{"type": "text", "text": "a card"}]
    assert all(shape_ok(m) for m in view.messages.values())
    assert reader.messages == dict(view.messages)


def test_the_response_row_of_a_drawn_step_is_not_drawn_again() -> None:
    view = converter()
    model = ModAppendOrigin(kind="model", model="m")
    view.feed(step((ModStepText(text="answer"),), done=True))
    assert view.feed(row("r1", "answer", door="response", role="assistant", origin=model)) == []
    # A response row no snapshot drew (the view attached late) is drawn.
    items = view.feed(row("r2", "another", door="response", role="assistant", origin=model))
    assert [item["message"]["id"] for item in items] == ["r2"]


def test_turns_and_other_events() -> None:
    view = converter()
    assert view.feed(ModHelloEvent(session_id="s", claude_version="2.1.310", interactive=True)) == []
    assert view.feed(ModTurnStartEvent(turn_id="t1")) == [{"type": "turn-start", "id": "t1"}]
    assert view.snapshot()["busy"] is True
    assert view.feed(ModTurnCompleteEvent(turn_id="t1", stop_reason="answer")) == [
        {"type": "turn-end", "id": "t1", "reason": "answer"}
    ]
    assert view.snapshot() == {"messages": [], "busy": False}


def test_the_view_keeps_a_bounded_transcript() -> None:
    view = ModLiveConverter(max_messages=3)
    for n in range(5):
        view.feed(row(f"u{n}", f"text {n}"))
    assert list(view.messages) == ["u2", "u3", "u4"]


SNAPSHOT_PARTS = st.lists(
    st.one_of(
        st.builds(ModStepText, text=st.text(max_size=6)),
        st.builds(ModStepReasoning, text=st.text(max_size=6)),
        st.builds(ModStepToolCall, id=st.sampled_from(["a", "b"]), name=st.just("T"), args=st.text(max_size=6)),
    ),
    max_size=4,
).map(tuple)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1]), SNAPSHOT_PARTS, st.booleans()), max_size=12),
       st.lists(st.integers(0, 5), max_size=12))
def test_a_reader_applying_the_items_sees_the_converters_transcript(
    snapshots: list[tuple[int, tuple[Any, ...], bool]], growth: list[int]
) -> None:
    view, reader = converter(), Reader()
    previous: dict[int, tuple[Any, ...]] = {}
    for n, (index, parts, done) in enumerate(snapshots):
        # Often the next snapshot grows the last text of the one before.
        extra = growth[n] if n < len(growth) else 0
        before = previous.get(index)
        if extra and before and isinstance(before[-1], (ModStepText, ModStepReasoning)):
            parts = before[:-1] + (type(before[-1])(text=before[-1].text + "x" * extra),)
        previous[index] = parts
        reader.take(view.feed(step(parts, done=done, index=index)))
        assert reader.messages == dict(view.messages)
    assert all(shape_ok(m) for m in view.messages.values())


def test_the_hosts_events_normalized() -> None:
    message = {"id": "o1:assistant", "role": "assistant", "parts": [], "operationId": "o1", "createdAt": 1}
    assert container_items(MessageStored(message=message, operation_id="o1")) == [{"type": "message", "message": message}]
    delta = {"type": "text-delta", "messageId": "m", "delta": "x"}
    assert container_items(AdapterEvent(event=delta, operation_id="o1")) == [delta]
    assert container_items(OperationStarted(operation_id="o1")) == [{"type": "turn-start", "id": "o1"}]
    result = OperationResult(operation_id="o1", session="root", status="done", text="t")
    assert container_items(OperationEnded(result=result)) == [
        {"type": "turn-end", "id": "o1", "result": result.to_json()}
    ]
    for other in (
        AdapterEvent(event={"type": "usage", "inputTokens": 1}, operation_id=None),
        AdapterEvent(event={"type": "log", "level": "info", "message": "m"}, operation_id=None),
        AdapterEvent(event={"type": "text-delta", "messageId": 3, "delta": "x"}, operation_id=None),
        ContainerLost(),
    ):
        assert container_items(other) == []


@attrs.frozen(kw_only=True)
class FrameSkippedLike:
    """An event class the host may add later (a frame it skipped, say)."""

    seq: int


def test_an_event_class_the_view_does_not_know_makes_no_items() -> None:
    assert container_items(FrameSkippedLike(seq=3)) == []  # type: ignore[arg-type]


async def test_a_hub_drops_a_subscriber_that_falls_behind() -> None:
    hub = LiveHub(converter(), buffer=2)
    with hub.subscribe() as slow, hub.subscribe() as fast:
        for n in range(3):
            hub.feed([row(f"u{n}", "x")])
            if n < 2:
                assert [item["message"]["id"] for item in await fast.__anext__()] == [f"u{n}"]
        assert [item["message"]["id"] for item in await fast.__anext__()] == ["u2"]
        # The slow one reads what it kept, then learns it was dropped.
        assert (await slow.__anext__())[0]["message"]["id"] == "u0"
        assert (await slow.__anext__())[0]["message"]["id"] == "u1"
        with pytest.raises(LiveLagged) as lagged:
            await slow.__anext__()
        # The one fan-out's Lagged, with the live view's code.
        assert isinstance(lagged.value, Lagged) and lagged.value.code == "live-lagged"
        assert slow.lagged and not fast.lagged
        assert hub.statistics() == FanOutStatistics(subscribers=1, published=3, dropped=1, closed=False)
        hub.close()
        with pytest.raises(StopAsyncIteration):
            await fast.__anext__()
    with hub.subscribe() as late:
        assert late.snapshot["messages"][-1]["id"] == "u2"
        with pytest.raises(StopAsyncIteration):
            await late.__anext__()

