"""The sans-IO JSON-RPC core: requests out with ids and their answers matched,
requests and notifications in, errors; hostile input (hypothesis) is always
a ``Malformed`` event or a message, never an exception, and the connection
goes on reading after it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.acp import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorResponse,
    JsonRpcConnection,
    LocalProtocolError,
    Malformed,
    Notification,
    Request,
    Response,
)


def events(connection: JsonRpcConnection) -> list[object]:
    out = []
    while (event := connection.next_event()) is not None:
        out.append(event)
    return out


def line(message: object) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_a_request_is_answered_by_id_and_forgotten():
    connection = JsonRpcConnection()
    id, data = connection.request("initialize", {"protocolVersion": 1})
    assert json.loads(data) == {"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": 1}}
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    connection.receive_data(line({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": 1}}))
    assert events(connection) == [Response(id, "initialize", {"protocolVersion": 1})]
    assert connection.pending == {}
    # The same answer again answers nothing.
    connection.receive_data(line({"jsonrpc": "2.0", "id": id, "result": {}}))
    [event] = events(connection)
    assert isinstance(event, Malformed) and "never made" in event.reason and event.reply is None


def test_an_error_answer_carries_code_message_and_data():
    connection = JsonRpcConnection()
    id, _ = connection.request("session/new", {})
    connection.receive_data(line({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "auth", "data": [1]}}))
    assert events(connection) == [ErrorResponse(id, "session/new", -32000, "auth", [1])]


def test_requests_and_notifications_come_in_and_requests_are_answered_once():
    connection = JsonRpcConnection()
    connection.receive_data(
        line({"jsonrpc": "2.0", "id": "a", "method": "session/request_permission", "params": {"x": 1}})
        + line({"jsonrpc": "2.0", "method": "session/update", "params": {"y": 2}})
    )
    assert events(connection) == [Request("a", "session/request_permission", {"x": 1}),
                                  Notification("session/update", {"y": 2})]
    assert json.loads(connection.respond("a", {"ok": True})) == {"jsonrpc": "2.0", "id": "a", "result": {"ok": True}}
    with pytest.raises(LocalProtocolError):
        connection.respond("a", {})
    with pytest.raises(LocalProtocolError):
        connection.respond_error("never", -32601, "no")


def test_a_message_split_anywhere_reads_the_same():
    whole = line({"jsonrpc": "2.0", "method": "m", "params": {"text": "héllo\u2028"}}) * 2
    for cut in range(len(whole) + 1):
        connection = JsonRpcConnection()
        connection.receive_data(whole[:cut])
        connection.receive_data(whole[cut:])
        assert events(connection) == [Notification("m", {"text": "héllo\u2028"})] * 2


@pytest.mark.parametrize(("data", "code", "why"), [
    (b"not json\n", PARSE_ERROR, "not JSON"),
    (b"[1, 2]\n", INVALID_REQUEST, "batch"),
    (b"42\n", INVALID_REQUEST, "not an object"),
    (b'{"jsonrpc": "2.0", "id": 7}\n', INVALID_REQUEST, "neither"),
    (b'{"jsonrpc": "1.0", "id": 7, "method": "x"}\n', INVALID_REQUEST, "jsonrpc"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": 3}\n', INVALID_REQUEST, "method"),
    (b'{"jsonrpc": "2.0", "id": [1], "method": "x"}\n', INVALID_REQUEST, "id"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "x", "params": NaN}\n', PARSE_ERROR, "not JSON"),
    (b'\xff\xfe{}\n', PARSE_ERROR, "not JSON"),
])
def test_bad_input_is_a_malformed_event_with_the_reply_json_rpc_says(data: bytes, code: int, why: str):
    connection = JsonRpcConnection()
    connection.receive_data(data)
    [event] = events(connection)
    assert isinstance(event, Malformed) and why in event.reason
    assert event.reply is not None and json.loads(event.reply)["error"]["code"] == code
    # The connection reads on.
    connection.receive_data(line({"jsonrpc": "2.0", "method": "ok"}))
    assert events(connection) == [Notification("ok")]


def test_an_overlong_line_is_dropped_whole_and_the_next_one_read():
    connection = JsonRpcConnection(max_line=100)
    connection.receive_data(b"x" * 60)
    connection.receive_data(b"y" * 60)
    connection.receive_data(b"z" * 500 + b"\n" + line({"jsonrpc": "2.0", "method": "after"}))
    [dropped, after] = events(connection)
    assert isinstance(dropped, Malformed) and "longer than 100" in dropped.reason
    assert after == Notification("after")
    assert connection.statistics().buffered == 0


def test_a_reused_id_of_an_unanswered_request_is_refused():
    connection = JsonRpcConnection()
    connection.receive_data(line({"jsonrpc": "2.0", "id": 1, "method": "a"}) * 2)
    [first, second] = events(connection)
    assert first == Request(1, "a")
    assert isinstance(second, Malformed) and json.loads(second.reply)["id"] == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.one_of(st.integers(0, 5), st.text(max_size=3), st.none(), st.booleans(), st.floats()),
        "method": st.one_of(st.text(max_size=10), st.integers()),
        "params": json_values,
        "result": json_values,
        "error": st.one_of(json_values, st.fixed_dictionaries({"code": st.integers(), "message": st.text()})),
    },
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(messages.map(lambda m: json.dumps(m).encode()), st.binary(max_size=40)), max_size=8),
       st.lists(st.integers(1, 60), max_size=6))
def test_any_input_is_events_never_an_exception(chunks: list[bytes], cuts: list[int]):
    connection = JsonRpcConnection(max_line=200)
    for _ in range(3):
        connection.request("m")
    data = b"\n".join(chunks) + b"\n"
    at = 0
    for cut in cuts:
        connection.receive_data(data[at:at + cut])
        at += cut
    connection.receive_data(data[at:])
    for event in events(connection):
        assert isinstance(event, (Request, Notification, Response, ErrorResponse, Malformed))
        if isinstance(event, Request):
            connection.respond(event.id, None)  # every request received can be answered once
        if isinstance(event, Malformed) and event.reply is not None:
            assert json.loads(event.reply)["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST)
    # Still reading.
    connection.receive_data(line({"jsonrpc": "2.0", "method": "still"}))
    assert events(connection)[-1] == Notification("still")
