"""One send-request model for the API's body and the MCP tool's arguments:
strict leaves, the failing key named, hostile input at any depth and size."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.mcp import ToolRefused, call_tool
from router.turns.requests import API_SHAPE, TOOL_SHAPE, SendRequest, send_request_from_body, send_request_from_tool
from tests.api.conftest import Api


def nested(depth: int) -> object:
    value: object = "x"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def deep_text(depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode()


@pytest.mark.parametrize(
    "body, problem",
    [
        ({"text": 3}, "text: expected a string, got a number"),
        ({"text": "x", "wait": 1}, "wait: expected a boolean, got a number"),
        ({"text": "x", "wait": "true"}, "wait: expected a boolean, got a string"),
        ({"text": "x", "eventId": None}, "eventId: expected a string, got null"),
        ({"text": "x", "messageId": ["m"]}, "messageId: expected a string, got an array"),
        ({"text": "x", "kind": "robot"}, 'kind: expected one of "person", "card", got "robot"'),
        ({"text": "x", "event_id": "e"}, "unknown field(s) 'event_id'"),
        ({}, "'text' is required"),
    ],
)
def test_an_api_body_refusal_names_the_key(body, problem: str) -> None:
    refusal = send_request_from_body(json.dumps(body).encode(), "s")
    assert isinstance(refusal, Refusal) and refusal.code == "bad-body"
    assert refusal.message == f"{API_SHAPE}: {problem}"


def test_the_two_edges_give_one_request() -> None:
    api = send_request_from_body(b'{"text": "hi", "eventId": "e1", "kind": "card", "wait": true}', "s")
    tool = send_request_from_tool({"session": "s", "text": "hi", "event_id": "e1", "card": True,
                                   "wait": True})
    assert api == tool == SendRequest(session="s", text="hi", event_id="e1", card=True, wait=True)
    assert SendRequest.from_args(api.to_args()) == api


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ({"session": "s", "text": "x", "card": 1}, "card: expected a boolean, got a number"),
        ({"session": 7, "text": "x"}, "session: expected a string, got a number"),
        ({"session": "s", "text": "x", "kind": "card"}, "unknown field(s) 'kind'"),
        ({"text": "x"}, "'session' is required"),
    ],
)
async def test_a_tool_refusal_names_the_key(arguments, problem: str) -> None:
    with pytest.raises(ToolRefused) as caught:
        await call_tool(None, "send_message", arguments)
    assert str(caught.value) == f"bad-arguments: {TOOL_SHAPE}: {problem}"


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
async def test_deep_tool_arguments_refuse(depth: int) -> None:
    for arguments in ({"session": "s", "text": nested(depth)},
                      {"session": nested(depth), "text": "x"},
                      {"session": "s", "text": "x", nested(0): nested(depth)}):
        with pytest.raises(ToolRefused) as caught:
            await call_tool(None, "send_message", arguments)
        assert str(caught.value).startswith("bad-arguments: ")


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
def test_deep_bodies_refuse(depth: int) -> None:
    for raw in (deep_text(depth), b'{"text": ' + deep_text(depth) + b"}",
                b'{"text": "x", "wait": ' + deep_text(depth) + b"}"):
        refusal = send_request_from_body(raw, "s")
        assert isinstance(refusal, Refusal) and refusal.code == "bad-body"


async def test_deep_and_huge_bodies_through_the_api(api: Api) -> None:
    headers = {"content-type": "application/json"}
    for content in (b'{"text": ' + deep_text(100) + b"}", b'{"text": ' + deep_text(1_000) + b"}",
                    deep_text(10_000),
                    # Huge within the body limit (1 MiB): 60,000 keys.
                    json.dumps({f"k{n}": n for n in range(60_000)}).encode()):
        response = await api.client.post("/sessions/root/messages", content=content, headers=headers)
        assert response.status_code in (400, 413), response.text
        assert response.json()["error"] == "bad-body"
    answered = await api.client.post("/sessions/root/messages", json={"text": "still here", "wait": True})
    assert answered.status_code == 200, answered.text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["session", "text", "event_id", "card", "wait", "eventId", "kind", "x"]),
        inner, max_size=5),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_either_edge_answers_a_request_or_a_refusal(value) -> None:
    tool = send_request_from_tool(value)
    assert isinstance(tool, SendRequest) or tool.code == "bad-arguments"
    body = send_request_from_body(json.dumps(value).encode(), "s")
    assert isinstance(body, SendRequest) or body.code == "bad-body"
    if isinstance(tool, SendRequest):
        assert type(tool.session) is str and type(tool.text) is str and type(tool.wait) is bool


def test_rpc_refusal_answers_what_the_sdk_would_drop() -> None:
    from router.turns.requests import MAX_MESSAGE_DEPTH, rpc_refusal

    def message(depth: int, request_id: str = "7") -> bytes:
        return ('{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": "send_message", '
                '"arguments": {"id": 9, "text": "a [{ b", "x": %s}}}' % (request_id, deep_text(depth).decode())).encode()

    assert rpc_refusal(message(MAX_MESSAGE_DEPTH - 4)) is None
    for depth, request_id in ((MAX_MESSAGE_DEPTH, "7"), (10_000, '"r-1"'), (1_000, "null")):
        reply = json.loads(rpc_refusal(message(depth, request_id)))
        assert reply["id"] == json.loads(request_id)
        assert reply["error"]["code"] == -32600 and reply["error"]["message"].startswith("too-deep: ")
    head = json.loads(rpc_refusal(b'{"jsonrpc": "2.0", "id": 3, "params": "xxxx', too_long=True))
    assert head["id"] == 3 and head["error"]["message"].startswith("too-large: ")
    # Brackets inside strings do not count.
    assert rpc_refusal(('{"id": 1, "text": "%s"}' % ("[" * 500)).encode()) is None
