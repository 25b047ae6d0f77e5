"""wire.container: types, converter, parsers and rules of the container wire."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import container as c
from wire.json import ABSENT, MAX_SAFE_INTEGER, dumps, js_length

# --------------------------------------------------------------------------- tables

HOST_ACCEPTED = [
    ('{"type":"restore","generation":0,"entries":[]}', c.Restore(generation=0, entries=())),
    ('{"type":"restore","generation":2,"entries":[1,{"a":[null]}]}', c.Restore(generation=2, entries=(1, {"a": [None]}))),
    (
        '{"type":"open","generation":1,"settings":{},"restore":[]}',
        c.Open(generation=1, settings=c.ContainerSettings(), restore=()),
    ),
    (
        '{"type":"open","generation":1,"settings":{"model":"m","options":null},"restore":[{"turn":1}]}',
        c.Open(generation=1, settings=c.ContainerSettings(model="m", options=None), restore=({"turn": 1},)),
    ),
    ('{"type":"replay","after":0}', c.Replay(after=0)),
    ('{"type":"replay","after":1e3}', c.Replay(after=1000)),
    ('{"type":"prompt","operationId":"a","input":"hi","whenBusy":"followUp"}', c.Prompt(operation_id="a", input="hi", when_busy="followUp")),
    (
        '{"type":"prompt","operationId":"a","input":[{"type":"text","text":"x"},{"type":"image","mediaType":"image/png","data":"AA=="}],"whenBusy":"steer"}',
        c.Prompt(
            operation_id="a",
            input=(c.TextInputPart(text="x"), c.ImageInputPart(media_type="image/png", data="AA==")),
            when_busy="steer",
        ),
    ),
    ('{"type":"prompt","operationId":"","input":[],"whenBusy":"steer"}', c.Prompt(operation_id="", input=(), when_busy="steer")),
    ('{"type":"abort"}', c.Abort()),
    ('{"type":"abort","operationId":"a"}', c.Abort(operation_id="a")),
    ('{"type":"configure","settings":{"model":"x"}}', c.Configure(settings=c.ContainerSettings(model="x"))),
    ('{"type":"ack","seq":9007199254740991}', c.Ack(seq=MAX_SAFE_INTEGER)),
    ('{"type":"ack","seq":-0,"unknown":1e400}', c.Ack(seq=0)),
]

HOST_REFUSED = [
    "", "null", "[]", '"ack"', "{}", "not json", '{"type":"ack","seq":NaN}',
    '{"type":"bogus"}', '{"type":1}', '{"type":"ack"}', '{"type":"ack","seq":-1}', '{"type":"ack","seq":1.5}',
    '{"type":"ack","seq":true}', '{"type":"ack","seq":"1"}', '{"type":"ack","seq":9007199254740992}',
    '{"type":"ack","seq":null}', '{"type":"restore","generation":1,"entries":[1e400]}',
    '{"type":"restore","generation":1,"entries":{}}', '{"type":"restore","entries":[]}',
    '{"type":"open","generation":1,"settings":{"model":null},"restore":[]}',
    '{"type":"open","generation":1,"settings":{"model":1},"restore":[]}',
    '{"type":"open","generation":1,"settings":{"options":[1e400]},"restore":[]}',
    '{"type":"open","generation":1,"settings":[],"restore":[]}', '{"type":"open","generation":1,"settings":{}}',
    '{"type":"open","generation":1,"settings":{},"restore":[-1e999]}', '{"type":"replay","after":-1}',
    '{"type":"prompt","operationId":1,"input":"x","whenBusy":"steer"}',
    '{"type":"prompt","operationId":"a","input":"x","whenBusy":"now"}', '{"type":"prompt","operationId":"a","input":"x"}',
    '{"type":"prompt","operationId":"a","input":[{"type":"text"}],"whenBusy":"steer"}',
    '{"type":"prompt","operationId":"a","input":[{"type":"image","data":"x"}],"whenBusy":"steer"}',
    '{"type":"prompt","operationId":"a","input":[{"type":"audio","text":"x"}],"whenBusy":"steer"}',
    '{"type":"prompt","operationId":"a","input":["x"],"whenBusy":"steer"}',
    '{"type":"prompt","operationId":"a","input":{"type":"text","text":"x"},"whenBusy":"steer"}',
    '{"type":"prompt","operationId":"a","input":null,"whenBusy":"steer"}',
    '{"type":"abort","operationId":null}', '{"type":"abort","operationId":1}', '{"type":"configure"}',
    '{"type":"configure","settings":null}',
]

FRAME = '{"type":"frame","seq":%s,"frame":%s}'
DAEMON_ACCEPTED = [
    '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"echo","version":"1","capabilities":["steer"]},"open":null,"lastSeq":0,"operations":[]}',
    '{"type":"hello","protocol":2,"runtimeId":"r","session":"s","adapter":{"id":"e","version":"1","capabilities":[]},"open":3,"lastSeq":9,"operations":[{"operationId":"a","status":"queued"},{"operationId":"b","status":"running"},{"operationId":"c","status":"settled","outcome":{"status":"unanswered","reason":"aborted"}}]}',
    FRAME % (1, '{"kind":"start","operationId":"a"}'),
    FRAME % (2, '{"kind":"event","operationId":null,"event":{"type":"log","level":"info","message":"m"}}'),
    FRAME % (3, '{"kind":"event","operationId":"a","event":{"type":"text-delta","messageId":"m","delta":"d"}}'),
    FRAME % (3, '{"kind":"event","operationId":"a","event":{"type":"reasoning-delta","messageId":"m","delta":"d"}}'),
    FRAME % (4, '{"kind":"event","operationId":"a","event":{"type":"message","message":{"id":"m","role":"user","parts":[]}}}'),
    FRAME % (5, '{"kind":"event","operationId":"a","event":{"type":"usage","inputTokens":"not checked"}}'),
    FRAME % (6, '{"kind":"event","operationId":"a","event":{"type":"raw","value":null}}'),
    FRAME % (7, '{"kind":"persist","entries":[{"turn":1,"text":"x"}]}'),
    FRAME % (8, '{"kind":"settle","operationId":"a","outcome":{"status":"done","text":"t"}}'),
    '{"type":"caught-up","lastSeq":0}',
    '{"type":"error","message":"unparseable message"}',
]
DAEMON_REFUSED = [
    '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"e","version":"1","capabilities":[1]},"open":null,"lastSeq":0,"operations":[]}',
    '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"e","version":"1","capabilities":[]},"lastSeq":0,"operations":[]}',
    '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"e","version":"1","capabilities":[]},"open":null,"lastSeq":0,"operations":[{"operationId":"a","status":"settled"}]}',
    '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"e","version":"1","capabilities":[]},"open":null,"lastSeq":0,"operations":[{"operationId":"a","status":"paused"}]}',
    FRAME % ("0.5", '{"kind":"start","operationId":"a"}'),
    FRAME % (1, '{"kind":"stop","operationId":"a"}'),
    FRAME % (1, '{"kind":"event","event":{"type":"log","level":"info","message":"m"}}'),
    FRAME % (1, '{"kind":"event","operationId":"a","event":{"type":"log","level":"info"}}'),
    FRAME % (1, '{"kind":"event","operationId":"a","event":{"type":"raw"}}'),
    FRAME % (1, '{"kind":"event","operationId":"a","event":{"type":"usage","inputTokens":1e400}}'),
    FRAME % (1, '{"kind":"event","operationId":"a","event":{"type":"message","message":{"id":"m","role":"system","parts":[]}}}'),
    FRAME % (1, '{"kind":"event","operationId":"a","event":{"type":"custom"}}'),
    FRAME % (1, '{"kind":"persist","entries":[1e999]}'),
    FRAME % (1, '{"kind":"settle","operationId":"a","outcome":{"status":"done"}}'),
    FRAME % (1, '{"kind":"settle","operationId":"a","outcome":{"status":"unanswered","text":"x"}}'),
    '{"type":"caught-up","lastSeq":true}',
    '{"type":"error","message":null}',
]


@pytest.mark.parametrize("text, message", HOST_ACCEPTED)
def test_host_messages_accepted(text, message):
    assert c.parse_host_message(text) == message


@pytest.mark.parametrize("text", HOST_REFUSED)
def test_host_messages_refused(text):
    assert c.parse_host_message(text) is None


@pytest.mark.parametrize("text", DAEMON_ACCEPTED)
def test_daemon_messages_accepted_and_written_back_whole(text):
    message = c.parse_daemon_message(text)
    assert message is not None
    assert c.converter.unstructure(message) == json.loads(text)


@pytest.mark.parametrize("text", DAEMON_REFUSED)
def test_daemon_messages_refused(text):
    assert c.parse_daemon_message(text) is None


def test_unknown_fields_are_kept_where_the_reference_keeps_them():
    hello = c.parse_daemon_message(
        '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"e","version":"1",'
        '"capabilities":[],"build":"x"},"open":null,"lastSeq":0,"operations":[],"zone":"eu"}'
    )
    assert hello.extra == {"zone": "eu"} and hello.adapter.extra == {"build": "x"}
    prompt = c.parse_host_message(
        '{"type":"prompt","operationId":"a","input":[{"type":"text","text":"x","cache":true}],"whenBusy":"steer","trace":1}'
    )
    # The top level of a host message is rebuilt (no "trace"); parts are kept whole.
    assert c.converter.unstructure(prompt) == {
        "type": "prompt",
        "operationId": "a",
        "input": [{"type": "text", "text": "x", "cache": True}],
        "whenBusy": "steer",
    }


def test_absent_is_not_null():
    assert c.ContainerSettings().options is ABSENT
    assert c.converter.unstructure(c.ContainerSettings()) == {}
    assert c.converter.unstructure(c.ContainerSettings(options=None)) == {"options": None}
    assert c.converter.unstructure(c.Abort()) == {"type": "abort"}


def test_dump_message_writes_the_wire_text():
    frame = c.FrameMessage(seq=1, frame=c.EventFrame(operation_id=None, event={"type": "raw", "value": 1.0}))
    assert c.dump_message(frame) == '{"type":"frame","seq":1,"frame":{"kind":"event","operationId":null,"event":{"type":"raw","value":1}}}'


def test_typed_events_read_and_write_the_wire_shape():
    event = {
        "type": "message",
        "message": {
            "id": "op:assistant",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "hi"},
                {"type": "tool", "toolCallId": "t1", "toolName": "Bash", "input": {"command": "ls"}, "state": "done", "output": "x"},
            ],
            "operationId": "op",
            "createdAt": 1,
        },
    }
    typed = c.converter.structure(event, c.ContainerEvent)
    assert isinstance(typed, c.MessageEvent) and typed.message.parts[1].tool_name == "Bash"
    assert c.converter.unstructure(typed) == event
    assert c.converter.unstructure(c.UsageEvent(input_tokens=3)) == {"type": "usage", "inputTokens": 3}


# --------------------------------------------------------------------------- rules

def test_input_text():
    assert c.input_text("plain") == "plain"
    parts = (c.TextInputPart(text="a"), c.ImageInputPart(media_type="image/png", data=""), c.TextInputPart(text="b"))
    assert c.input_text(parts) == "a\n\nb"
    assert c.input_text([{"type": "text", "text": "a"}, {"type": "image", "mediaType": "x", "data": ""}]) == "a\n"
    assert c.input_text(()) == ""


def _entry_of_length(length: int, unit: str = "a") -> dict:
    """An entry whose JSON is ``length`` UTF-16 units long: {"t":"…"}."""
    width = js_length(unit)
    body = length - len('{"t":""}')
    assert body % width == 0
    return {"t": unit * (body // width)}


@pytest.mark.parametrize("unit", ["a", "é", "😀"])
def test_chunks_fill_up_to_the_limit_exactly(unit):
    half = c.MAX_CHUNK_CHARS // 2
    a, b = _entry_of_length(half, unit), _entry_of_length(half, unit)
    assert c.chunk_entries([a, b]) == [[a, b]]
    bigger = _entry_of_length(half + 2, unit)
    assert c.chunk_entries([a, bigger]) == [[a], [bigger]]


def test_astral_characters_count_twice():
    # An entry of astral text is twice as long in UTF-16 units as its Python
    # len(); the units are what is bounded. Counted in code points, all three
    # would fit in one group.
    entry = {"t": "😀" * (c.MAX_CHUNK_CHARS // 4)}
    assert 3 * len(dumps(entry)) < c.MAX_CHUNK_CHARS < 2 * js_length(dumps(entry))
    assert c.chunk_entries([entry, entry, entry]) == [[entry], [entry], [entry]]


def test_an_entry_larger_than_the_limit_travels_alone():
    big = _entry_of_length(c.MAX_CHUNK_CHARS + 10)
    small = {"t": 1}
    assert c.chunk_entries([small, big, small]) == [[small], [big], [small]]
    assert c.chunk_entries([]) == []


# --------------------------------------------------------------------------- properties

texts = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
counts = st.integers(0, MAX_SAFE_INTEGER)


def _extras(known: set[str]):
    return st.dictionaries(texts.filter(lambda k: k not in known), json_values, max_size=2)


settings = st.builds(
    c.ContainerSettings,
    model=st.none() | texts,
    options=st.just(ABSENT) | json_values,
    extra=_extras({"model", "options"}),
)
input_parts = st.builds(c.TextInputPart, text=texts, extra=_extras({"type", "text"})) | st.builds(
    c.ImageInputPart, media_type=texts, data=texts, extra=_extras({"type", "mediaType", "data"})
)
inputs = texts | st.lists(input_parts, max_size=3).map(tuple)
outcomes = st.builds(c.Done, text=texts) | st.builds(c.Unanswered, reason=texts)
events = st.one_of(
    st.builds(lambda m, d: {"type": "text-delta", "messageId": m, "delta": d}, texts, texts),
    st.builds(lambda v: {"type": "raw", "value": v}, json_values),
    st.builds(lambda m: {"type": "log", "level": "warn", "message": m}, texts),
    st.just({"type": "usage"}),
)
frames = st.one_of(
    st.builds(c.StartFrame, operation_id=texts),
    st.builds(c.EventFrame, operation_id=st.none() | texts, event=events),
    st.builds(c.PersistFrame, entries=st.lists(json_values, max_size=3).map(tuple)),
    st.builds(c.SettleFrame, operation_id=texts, outcome=outcomes),
)
operations = st.builds(c.PendingOperation, operation_id=texts, status=st.sampled_from(["queued", "running"])) | st.builds(
    c.SettledOperation, operation_id=texts, outcome=outcomes
)
host_messages = st.one_of(
    st.builds(c.Restore, generation=counts, entries=st.lists(json_values, max_size=3).map(tuple)),
    st.builds(c.Open, generation=counts, settings=settings, restore=st.lists(json_values, max_size=3).map(tuple)),
    st.builds(c.Replay, after=counts),
    st.builds(c.Prompt, operation_id=texts, input=inputs, when_busy=st.sampled_from(["followUp", "steer"])),
    st.builds(c.Abort, operation_id=st.none() | texts),
    st.builds(c.Configure, settings=settings),
    st.builds(c.Ack, seq=counts),
)
daemon_messages = st.one_of(
    st.builds(
        c.Hello,
        protocol=counts,
        runtime_id=texts,
        session=texts,
        adapter=st.builds(c.AdapterInfo, id=texts, version=texts, capabilities=st.lists(texts, max_size=2).map(tuple)),
        open=st.none() | counts,
        last_seq=counts,
        operations=st.lists(operations, max_size=3).map(tuple),
        extra=_extras({"type", "protocol", "runtimeId", "session", "adapter", "open", "lastSeq", "operations"}),
    ),
    st.builds(c.FrameMessage, seq=counts, frame=frames),
    st.builds(c.CaughtUp, last_seq=counts),
    st.builds(c.ErrorMessage, message=texts),
)


@given(host_messages)
def test_host_messages_round_trip(message):
    assert c.converter.structure(c.converter.unstructure(message), c.HostMessage) == message
    assert c.parse_host_message(c.dump_message(message)) == message


@given(daemon_messages)
def test_daemon_messages_round_trip(message):
    assert c.converter.structure(c.converter.unstructure(message), c.DaemonMessage) == message
    assert c.parse_daemon_message(c.dump_message(message)) == message


@given(st.text())
def test_hostile_text_is_a_message_or_none(text):
    for parse in (c.parse_host_message, c.parse_daemon_message):
        result = parse(text)
        assert result is None or attrs.has(type(result))


hostile_objects = st.dictionaries(
    st.sampled_from(["type", "kind", "seq", "frame", "operationId", "input", "settings", "entries", "generation", "x"]),
    json_values | st.sampled_from(["ack", "frame", "prompt", "open", "hello", "start", "settle"]),
    max_size=6,
)


@given(hostile_objects)
def test_hostile_objects_are_a_message_or_none(value):
    text = dumps(value)
    for parse in (c.parse_host_message, c.parse_daemon_message):
        result = parse(text)
        assert result is None or attrs.has(type(result))
