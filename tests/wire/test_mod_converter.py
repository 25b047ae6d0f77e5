"""wire.mod's converter: round-trips for every event kind and every call, and
hostile bodies that must end in a ModWireError and nothing else."""

from __future__ import annotations

from typing import Any

import cattrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wire.mod as mod
from wire.json import ABSENT, dumps, loads
from wire.mod import converter

# --------------------------------------------------------------------------- strategies

text = st.text(max_size=20)
json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), text
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=8,
)
block = st.builds(lambda t, extra: {**extra, "type": t}, text, st.dictionaries(text, json_value, max_size=3))
blocks = st.lists(block, max_size=3).map(tuple)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(ABSENT), strategy)


effort = st.one_of(
    st.sampled_from(["low", "medium", "high", "xhigh", "max"]),
    st.integers(0, 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
)
stop_reason = st.sampled_from(
    [
        None,
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "compaction",
        "refusal",
        "model_context_window_exceeded",
    ]
)
config_value = st.one_of(
    st.booleans(), text, st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), st.lists(text, max_size=3)
)
part = st.one_of(
    st.builds(mod.ModStepText, text=text),
    st.builds(mod.ModStepReasoning, text=text),
    st.builds(mod.ModStepToolCall, id=text, name=text, args=text),
)
_origin_known = {"kind", "asUser", "name", "model", "tool", "event", "server"}
origin = st.builds(
    mod.ModAppendOrigin,
    kind=text,
    as_user=maybe(st.booleans()),
    name=maybe(text),
    model=maybe(text),
    tool=maybe(text),
    event=maybe(text),
    server=maybe(text),
    extra=st.dictionaries(text.filter(lambda k: k not in _origin_known), json_value, max_size=3),
)
append_message = st.builds(
    mod.ModAppendMessage,
    type=st.sampled_from(["user", "assistant", "attachment", "system"]),
    content=blocks,
    name=maybe(text),
    role=maybe(st.sampled_from(["user", "assistant"])),
    is_meta=maybe(st.just(True)),
)
unknown_kind = text.filter(lambda k: k not in mod.EVENT_KINDS)
events = {
    "hello": st.builds(
        mod.ModHelloEvent, session_id=text, claude_version=text, interactive=st.booleans(),
        capabilities=maybe(st.lists(text, max_size=3).map(tuple)),
    ),
    "session-id": st.builds(mod.ModSessionIdEvent, session_id=text),
    "session-end": st.builds(
        mod.ModSessionEndEvent, reason=st.sampled_from(["clear", "resume", "logout", "prompt_input_exit", "other"])
    ),
    "turn-start": st.builds(mod.ModTurnStartEvent, turn_id=text),
    "step": st.builds(
        mod.ModStepEvent,
        turn_id=text,
        index=st.integers(0, 2**53 - 1),
        model=text,
        parts=st.lists(part, max_size=4).map(tuple),
        done=st.booleans(),
        effort=maybe(effort),
        stop_reason=maybe(stop_reason),
    ),
    "turn-complete": st.builds(
        mod.ModTurnCompleteEvent, turn_id=text, stop_reason=st.sampled_from(["answer", "aborted", "refusal", "error"])
    ),
    "append": st.builds(
        mod.ModAppendEvent,
        uuid=text,
        door=st.sampled_from(mod.MOD_APPEND_DOORS),
        origin=origin,
        message=append_message,
        wrote=maybe(st.sampled_from(["message", "pointer"])),
    ),
    "model": st.builds(mod.ModModelEvent, model=text),
    "ask": st.builds(
        mod.ModAskEvent, ask_id=text, tool=text, input=json_value, summary=text, tool_use_id=maybe(text),
        reason=maybe(text),
    ),
    "unknown": st.builds(
        lambda kind, rest: mod.ModUnknownEvent(kind=kind, raw={**rest, "kind": kind}),
        unknown_kind,
        st.dictionaries(text, json_value, max_size=4),
    ),
}
unread = st.one_of(
    st.builds(mod.ModUnreadPerson, text=text, message_id=text), st.builds(mod.ModUnreadCard, text=text)
)
call_args: dict[str, st.SearchStrategy[Any]] = {
    "session.message": st.builds(mod.ModSessionMessageArgs, content=blocks, message=unread, event_id=maybe(text)),
    "command.run": st.builds(mod.ModCommandRunArgs, command=text, args=maybe(text)),
    "model.fork": st.builds(mod.ModModelForkArgs, prompt=text),
    "config.set": st.builds(mod.ModConfigSetArgs, key=text, value=config_value),
    "session.model": st.none(),
    "config.list": st.none(),
    "command.list": st.none(),
    "set-effort": st.builds(mod.ModSetEffortArgs, effort=st.one_of(st.none(), effort)),
    "ask.answer": st.builds(
        mod.ModAskAnswerArgs, ask_id=text, decision=st.sampled_from(["allow", "deny", "ask"]), reason=maybe(text)
    ),
}
config_row = st.builds(
    mod.ModConfigRow,
    key=text,
    label=text,
    kind=st.sampled_from(["boolean", "choice", "text", "number"]),
    value=config_value,
    provider=st.builds(mod.ModConfigProvider, plugin=text, tier=text),
    is_locked=st.booleans(),
    description=maybe(text),
    options=maybe(st.lists(text, max_size=3).map(tuple)),
)
call_results: dict[str, st.SearchStrategy[Any]] = {
    "session.message": st.one_of(
        st.builds(mod.ModRowWritten, uuid=text),
        st.just(mod.ModPromptTaken()),
        st.builds(mod.ModMessageDenied, deny=text, as_=st.sampled_from(["row", "prompt"])),
    ),
    "command.run": st.builds(mod.ModCommandRunResult, text=maybe(text), context=maybe(st.lists(text, max_size=3).map(tuple))),
    "model.fork": st.one_of(st.builds(mod.ModForkAnswered, text=text), st.builds(mod.ModForkUnanswered, reason=text)),
    "config.set": st.one_of(st.builds(mod.ModConfigSetDone, value=config_value), st.builds(mod.ModConfigSetDenied, deny=text)),
    "session.model": text,
    "config.list": st.lists(config_row, max_size=3).map(tuple),
    "command.list": st.lists(
        st.builds(
            mod.ModCommandInfo,
            name=text,
            description=text,
            source=st.sampled_from(["builtin", "plugin", "user", "mcp"]),
            plugin=maybe(text),
        ),
        max_size=3,
    ).map(tuple),
    "set-effort": st.builds(mod.ModSetEffortResult, effort=st.one_of(st.none(), effort)),
    "ask.answer": st.builds(mod.ModAskAnswerResult, taken=st.booleans()),
}


def wire_round_trip(value: Any) -> Any:
    """What the peer would get: unstructured, written as JSON text, read back."""
    return loads(dumps(converter.unstructure(value)))


# --------------------------------------------------------------------------- round-trips


def test_every_event_kind_has_a_strategy() -> None:
    assert set(events) == set(mod.EVENT_KINDS) | {"unknown"}
    assert set(call_args) == set(mod.CALL_ARGUMENTS) == set(call_results) == set(mod.CALL_RESULTS)


@pytest.mark.parametrize("kind", sorted(events))
@settings(max_examples=60)
@given(data=st.data())
def test_event_round_trip(kind: str, data: st.DataObject) -> None:
    event = data.draw(events[kind])
    obj = wire_round_trip(event)
    if kind != "unknown":
        assert obj["kind"] == kind
    assert converter.structure(obj, mod.ModEvent) == event
    body = mod.ModEventsBody(events=(event,))
    assert mod.parse(wire_round_trip(body), mod.ModEventsBody) == body


@pytest.mark.parametrize("call", sorted(call_args))
@settings(max_examples=60)
@given(data=st.data())
def test_request_round_trip(call: str, data: st.DataObject) -> None:
    request = mod.ModRequest(id=data.draw(text), call=call, args=data.draw(call_args[call]))
    obj = wire_round_trip(request)
    assert obj["call"] == call
    assert ("args" in obj) == (request.args is not None)
    assert converter.structure(obj, mod.ModRequest) == request
    body = mod.ModRequestsBody(requests=(request,))
    assert mod.parse(wire_round_trip(body), mod.ModRequestsBody) == body


@pytest.mark.parametrize("call", sorted(call_results))
@settings(max_examples=60)
@given(data=st.data())
def test_result_round_trip(call: str, data: st.DataObject) -> None:
    value = data.draw(call_results[call])
    result = mod.ModResultOk(id="r1", value=converter.unstructure(value))
    body = mod.ModResultsBody(results=(result, mod.ModResultError(id="r2", error="no")))
    back = mod.parse(wire_round_trip(body), mod.ModResultsBody)
    assert back == mod.ModResultsBody(results=(mod.ModResultOk(id="r1", value=wire_round_trip(value)), body.results[1]))
    assert mod.structure_result(call, back.results[0].value) == value


def test_wire_spelling() -> None:
    event = mod.ModAppendEvent(
        uuid="u",
        door="note",
        origin=mod.ModAppendOrigin(kind="plugin", name="claude-envoy", as_user=True, extra={"future": 1}),
        message=mod.ModAppendMessage(type="user", content=({"type": "text", "text": "hi"},), is_meta=True),
        wrote="message",
    )
    assert converter.unstructure(event) == {
        "kind": "append",
        "uuid": "u",
        "door": "note",
        "origin": {"kind": "plugin", "asUser": True, "name": "claude-envoy", "future": 1},
        "message": {"type": "user", "content": [{"type": "text", "text": "hi"}], "isMeta": True},
        "wrote": "message",
    }
    assert converter.unstructure(mod.ModRequest(id="1", call="session.model")) == {"id": "1", "call": "session.model"}
    assert converter.unstructure(mod.ModMessageDenied(deny="busy", as_="row")) == {"deny": "busy", "as": "row"}
    assert converter.unstructure(mod.ModPromptTaken()) == {"as": "prompt"}
    assert converter.unstructure(mod.ModAckBody()) == {"ok": True}
    step = mod.ModStepEvent(turn_id="t", index=0, model="m", parts=(), done=True, stop_reason=None)
    assert converter.unstructure(step)["stopReason"] is None  # null is kept, absent is dropped
    assert "effort" not in converter.unstructure(step)


# --------------------------------------------------------------------------- refusals


REFUSED = [
    ({"kind": "hello", "sessionId": "s", "claudeVersion": "2", "interactive": 1}, mod.ModEvent, "interactive"),
    ({"kind": "step", "turnId": "t", "index": True, "model": "m", "parts": [], "done": True}, mod.ModEvent, "index"),
    ({"kind": "step", "turnId": "t", "index": -1, "model": "m", "parts": [], "done": True}, mod.ModEvent, "index"),
    ({"kind": "step", "turnId": "t", "index": 1.5, "model": "m", "parts": [], "done": True}, mod.ModEvent, "index"),
    ({"kind": "step", "turnId": "t", "index": 0, "model": "m", "parts": "", "done": True}, mod.ModEvent, "parts"),
    ({"kind": "step", "turnId": "t", "index": 0, "model": "m", "parts": [{"type": "x"}], "done": True}, mod.ModEvent, "parts[0]"),
    ({"kind": "step", "turnId": "t", "index": 0, "model": "m", "parts": [], "done": True, "effort": "huge"}, mod.ModEvent, "effort"),
    ({"kind": "step", "turnId": "t", "index": 0, "model": "m", "parts": [], "done": True, "effort": None}, mod.ModEvent, "effort"),
    ({"kind": "turn-complete", "turnId": "t", "stopReason": "end_turn"}, mod.ModEvent, "stopReason"),
    ({"kind": "session-end", "reason": 1}, mod.ModEvent, "reason"),
    ({"kind": "model", "model": None}, mod.ModEvent, "model"),
    ({"kind": 7}, mod.ModEvent, "kind"),
    ({"kind": "mystery", "n": float("inf")}, mod.ModEvent, "finite"),
    ({"events": {}}, mod.ModEventsBody, "events"),
    ({"id": "1", "call": "nope"}, mod.ModRequest, "nope"),
    ({"id": "1", "call": "session.model", "args": {}}, mod.ModRequest, "no argument"),
    ({"id": "1", "call": "model.fork"}, mod.ModRequest, "needs an argument"),
    ({"id": 1, "ok": True, "value": 1}, mod.ModResult, "id"),
    ({"id": "1", "ok": 1, "value": 1}, mod.ModResult, "ok"),
    ({"id": "1", "ok": False}, mod.ModResult, "error"),
]


@pytest.mark.parametrize(("value", "tp", "names"), REFUSED)
def test_refused_with_a_path(value: Any, tp: Any, names: str) -> None:
    with pytest.raises(mod.ModWireError) as caught:
        mod.parse(value, tp)
    assert names in str(caught.value)


@pytest.mark.parametrize(
    ("call", "value"),
    [
        ("session.message", {"as": "row"}),
        ("session.message", {"as": "prompt", "uuid": "u"}),
        ("session.message", {"deny": "x", "as": "row", "uuid": "u"}),
        ("session.message", {"as": "file"}),
        ("model.fork", {"isAnswered": 1, "text": "t"}),
        ("config.set", {"value": {"a": 1}}),
        ("config.list", [{"key": "k"}]),
        ("session.model", 5),
        ("set-effort", {}),
        ("no.such.call", {}),
    ],
)
def test_bad_results_refused(call: str, value: Any) -> None:
    with pytest.raises(mod.ModWireError):
        mod.structure_result(call, value)


def test_read_events_keeps_the_good_ones() -> None:
    good = {"kind": "turn-start", "turnId": "t1"}
    future = {"kind": "tool-progress", "percent": 40}
    events, skipped = mod.read_events({"events": [good, {"kind": "turn-start"}, 3, future, {"no": "kind"}]})
    assert events == [mod.ModTurnStartEvent(turn_id="t1"), mod.ModUnknownEvent(kind="tool-progress", raw=future)]
    assert len(skipped) == 3
    assert skipped[0].startswith("$.events[1].turnId")
    with pytest.raises(mod.ModWireError):
        mod.read_events([good])
    with pytest.raises(mod.ModWireError):
        mod.read_events({"events": None})


def test_read_results_sorts_broken_from_skipped() -> None:
    results, broken, skipped = mod.read_results(
        {"results": [{"id": "a", "ok": True, "value": 1}, {"id": "b", "ok": "yes"}, {"ok": True}, "x"]}
    )
    assert results == [mod.ModResultOk(id="a", value=1)]
    assert set(broken) == {"b"}
    assert len(skipped) == 2


# --------------------------------------------------------------------------- hostile input

TYPES = [
    mod.ModEvent,
    mod.ModEventsBody,
    mod.ModResultsBody,
    mod.ModRequestsBody,
    mod.ModRequest,
    mod.ModResult,
    mod.ModHealthBody,
    mod.ModAckBody,
    mod.ModAppendOrigin,
    *[tp for tp in mod.CALL_ARGUMENTS.values() if tp is not None],
]
hostile = st.recursive(
    st.one_of(json_scalar, st.sampled_from(["hello", "step", "append", "person", "card", "row", "prompt"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["kind", "type", "events", "results", "requests", "id", "ok", "value", "call", "args", "turnId",
                 "parts", "index", "sessionId", "origin", "message", "content", "text", "deny", "as", "uuid"]
            )
            | text,
            inner,
            max_size=6,
        ),
    ),
    max_leaves=20,
)


@settings(max_examples=400)
@given(value=hostile, tp=st.sampled_from(TYPES))
def test_hostile_values_raise_only_wire_errors(value: Any, tp: Any) -> None:
    try:
        mod.parse(value, tp)
    except mod.ModWireError as exc:
        assert str(exc)
    try:
        converter.structure(value, tp)
    except (mod.ModWireError, cattrs.BaseValidationError):
        pass


@settings(max_examples=300)
@given(value=hostile, call=st.sampled_from(sorted(mod.CALL_RESULTS)))
def test_hostile_results_raise_only_wire_errors(value: Any, call: str) -> None:
    try:
        mod.structure_result(call, value)
    except mod.ModWireError:
        pass


@settings(max_examples=300)
@given(value=hostile)
def test_hostile_bodies_read_or_refuse(value: Any) -> None:
    for reader in (mod.read_events, mod.read_results):
        try:
            reader(value)
        except mod.ModWireError:
            pass
        try:
            reader({"events": [value], "results": [value]})
        except mod.ModWireError:
            pytest.fail("a body of the right shape is never refused whole")
