"""The live view as ACP updates (``router acp``): every word once, whether it
came as deltas, as a message, or both; tools announced then updated; the
client's own prompt not echoed; anything else nothing, never an exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.acp.updates import UpdateConverter


def said(updates: list[dict], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)


def message(id: str, role: str, *parts: dict, op: str | None = None) -> dict:
    return {"id": id, "role": role, "parts": list(parts), "operationId": op, "createdAt": 1}


def test_deltas_then_the_message_say_each_word_once():
    converter = UpdateConverter()
    out = converter.item({"type": "text-delta", "messageId": "m", "delta": "Hel"})
    out += converter.item({"type": "text-delta", "messageId": "m", "delta": "lo"})
    out += converter.item({"type": "message", "message": message("m", "assistant", {"type": "text", "text": "Hello!"})})
    assert said(out) == "Hello!"


def test_tools_are_announced_then_updated_and_the_own_prompt_is_not_echoed():
    converter = UpdateConverter()
    converter.own.add("op1")
    tool = {"type": "tool", "toolCallId": "t", "toolName": "Bash", "input": {"command": "ls"}, "state": "running"}
    out = converter.item({"type": "message", "message": message("u", "user", {"type": "text", "text": "hi"}, op="op1")})
    assert out == []
    out = converter.item({"type": "message", "message": message("m", "assistant", tool)})
    assert out == [{"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Bash", "status": "in_progress",
                    "rawInput": {"command": "ls"}}]
    assert converter.item({"type": "message", "message": message("m", "assistant", tool)}) == []
    done = {**tool, "state": "done", "output": "a.txt"}
    out = converter.item({"type": "message", "message": message("m", "assistant", done)})
    assert out == [{"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed", "rawOutput": "a.txt"}]


def test_a_snapshot_replays_both_sides():
    converter = UpdateConverter()
    out = converter.snapshot([
        message("u", "user", {"type": "text", "text": "question"}),
        message("a", "assistant", {"type": "reasoning", "text": "hm"}, {"type": "text", "text": "answer"}),
    ])
    assert said(out, "user_message_chunk") == "question"
    assert said(out, "agent_thought_chunk") == "hm" and said(out) == "answer"


json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=10)
items = st.one_of(json, st.fixed_dictionaries({"type": st.sampled_from(["message", "text-delta", "reasoning-delta"]),
                                               "message": json, "messageId": st.text(max_size=2), "delta": json}))


@settings(max_examples=200, deadline=None)
@given(st.lists(items, max_size=10))
def test_any_item_is_updates_or_nothing(batch):
    converter = UpdateConverter()
    for item in batch:
        for update in converter.item(item):
            assert type(update["sessionUpdate"]) is str
