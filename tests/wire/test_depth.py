"""Hostile nesting and size: every parser of both wires gives a value or its
own refusal at ANY depth and size, never ``RecursionError``.

The contract (``wire.json.MAX_DEPTH``): a JSON document nested at most that
deep is read; a deeper one is refused (``None`` from the container parsers,
:class:`~wire.json.JsonError` from :func:`~wire.json.loads`, a skipped
element or :class:`~wire.mod.ModWireError` on the mod wire). A value built
in Python (not parsed) is checked without recursion, so even 100,000 levels
get a "no", not a crash.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import container as c
from wire import mod as m
from wire.json import MAX_DEPTH, JsonError, dumps, exceeds_depth, is_json, loads

#: The depths the issue names, and the edges of the limit.
DEPTHS = [1, 2, 100, MAX_DEPTH - 8, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 340, 400, 1_000, 10_000, 100_000]
SHAPES = ["array", "object", "mixed"]


def deep_text(depth: int, shape: str) -> str:
    """A JSON text of ``depth`` nested containers (``[]`` is depth 1)."""
    if shape == "array":
        return "[" * depth + "]" * depth
    if shape == "object":
        return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    opens = "".join("[" if level % 2 else '{"k":' for level in range(depth - 1))
    closes = "".join("]" if level % 2 else "}" for level in reversed(range(depth - 1)))
    return opens + "[]" + closes


def deep_value(depth: int, shape: str = "array") -> object:
    """The same, built in Python without recursion."""
    value: object = [] if shape != "object" else {}
    for level in range(depth - 1):
        value = [value] if shape == "array" or (shape == "mixed" and level % 2) else {"k": value}
    return value


def slot_depth(template: str) -> int:
    """How many containers hold the ``%s`` of a template (no brackets in its
    strings)."""
    head = template.split("%s", 1)[0]
    return head.count("[") + head.count("{") - head.count("]") - head.count("}")


#: Every JSON-valued place of the container wire, with the value at ``%s``;
#: each template is a good message whatever JSON value fills the slot.
HOST_TEMPLATES = [
    '{"type":"restore","generation":1,"entries":[%s]}',
    '{"type":"open","generation":1,"settings":{},"restore":[%s]}',
    '{"type":"open","generation":1,"settings":{"options":%s},"restore":[]}',
    '{"type":"configure","settings":{"options":%s}}',
    '{"type":"configure","settings":{"model":"m","x":%s}}',
    '{"type":"prompt","operationId":"o","input":[{"type":"text","text":"t","x":%s}],"whenBusy":"followUp"}',
    '{"type":"ack","seq":1,"x":%s}',
]
DAEMON_TEMPLATES = [
    '{"type":"frame","seq":1,"frame":{"kind":"persist","entries":[%s]}}',
    '{"type":"frame","seq":1,"frame":{"kind":"event","operationId":null,"event":{"type":"raw","value":%s}}}',
    '{"type":"frame","seq":1,"frame":{"kind":"event","operationId":"o","event":{"type":"message","message":'
    '{"id":"m","role":"assistant","parts":[{"type":"tool","toolCallId":"t","toolName":"n","input":%s,'
    '"state":"done"}],"createdAt":1}}}}',
    '{"type":"frame","seq":1,"frame":{"kind":"settle","operationId":"o","outcome":{"status":"done","text":"t","x":%s}}}',
    '{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":{"id":"a","version":"1",'
    '"capabilities":[]},"open":null,"lastSeq":0,"operations":[],"x":%s}',
]


def _check(parse, template: str, depth: int, shape: str) -> None:
    text = template % deep_text(depth, shape)
    result = parse(text)  # never raises
    if slot_depth(template) + depth <= MAX_DEPTH:
        assert result is not None and attrs.has(type(result)), (template, depth, shape)
        # A message read is written back whole (the writer never writes
        # what the reader refuses).
        assert parse(c.dump_message(result)) == result
    else:
        assert result is None, (template, depth, shape)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("template", HOST_TEMPLATES)
def test_host_messages_at_any_depth(template: str, depth: int, shape: str) -> None:
    _check(c.parse_host_message, template, depth, shape)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("template", DAEMON_TEMPLATES)
def test_daemon_messages_at_any_depth(template: str, depth: int, shape: str) -> None:
    _check(c.parse_daemon_message, template, depth, shape)


@settings(max_examples=300, deadline=None)
@given(
    template=st.sampled_from(HOST_TEMPLATES + DAEMON_TEMPLATES),
    depth=st.one_of(st.integers(1, 2 * MAX_DEPTH), st.sampled_from([1_000, 10_000]), st.integers(1, 20_000)),
    shape=st.sampled_from(SHAPES),
)
def test_any_depth_is_a_message_or_none(template: str, depth: int, shape: str) -> None:
    parse = c.parse_host_message if template in HOST_TEMPLATES else c.parse_daemon_message
    _check(parse, template, depth, shape)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='[]{}":,0a\\ ', max_size=3000), st.integers(0, 3000))
def test_bracket_soup_is_a_message_or_none(soup: str, opens: int) -> None:
    """Unbalanced, unterminated, escaped: whatever the brackets and quotes."""
    for text in (soup, "[" * opens + soup, '{"type":"restore","generation":1,"entries":[' + "[" * opens + soup):
        for parse in (c.parse_host_message, c.parse_daemon_message):
            result = parse(text)
            assert result is None or attrs.has(type(result))


# --------------------------------------------------------------------------- wire.json


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_loads_reads_up_to_the_limit_and_refuses_deeper(depth: int, shape: str) -> None:
    text = deep_text(depth, shape)
    if depth <= MAX_DEPTH:
        assert dumps(loads(text)) == text
    else:
        with pytest.raises(JsonError, match="nested deeper than"):
            loads(text)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_is_json_and_dumps_at_any_depth(depth: int, shape: str) -> None:
    value = deep_value(depth, shape)
    assert is_json(value) is (depth <= MAX_DEPTH)
    if depth <= MAX_DEPTH:
        assert loads(dumps(value)) == value
    else:
        with pytest.raises(ValueError, match="nested deeper than"):
            dumps(value)


def test_a_cycle_is_not_json() -> None:
    cycle: list = []
    cycle.append(cycle)
    loop: dict = {}
    loop["self"] = loop
    assert not is_json(cycle) and not is_json(loop)


@pytest.mark.parametrize(
    "text, deeper",
    [
        ("[" * (MAX_DEPTH + 1), True),  # unbalanced: the opens count
        ('"' + "[" * (MAX_DEPTH + 1) + '"', False),  # inside a string: not nesting
        ('"\\"' + "[" * (MAX_DEPTH + 1) + '"', False),  # an escaped quote does not end it
        ('"\\\\"' + "[" * (MAX_DEPTH + 1), True),  # an escaped backslash does
        ('"' + "[" * (MAX_DEPTH + 1), False),  # unterminated: the rest is the string
        ("[]" * (MAX_DEPTH + 1), False),  # wide, not deep
    ],
)
def test_exceeds_depth_reads_strings_as_json_does(text: str, deeper: bool) -> None:
    assert exceeds_depth(text) is deeper


def test_exceeds_depth_is_linear_on_unterminated_escapes() -> None:
    """An unterminated string of escaped quotes must not make the scan
    quadratic (each quote would start a string that never ends)."""
    text = "[" * (MAX_DEPTH + 1) + '"' + '\\"' * 500_000
    assert exceeds_depth(text)
    with pytest.raises(JsonError):
        loads(text)


# --------------------------------------------------------------------------- huge sizes


def test_huge_but_shallow_messages_are_read() -> None:
    wide = [{"turn": i, "text": "x" * 10} for i in range(100_000)]
    text = dumps({"type": "restore", "generation": 1, "entries": wide})
    message = c.parse_host_message(text)
    assert type(message) is c.Restore and len(message.entries) == 100_000
    big = "é" * 5_000_000
    message = c.parse_daemon_message(
        dumps({"type": "frame", "seq": 1, "frame": {"kind": "persist", "entries": [big]}})
    )
    assert type(message) is c.FrameMessage and message.frame.entries == (big,)


# --------------------------------------------------------------------------- the mod wire

MOD_EVENT_TEMPLATES = [
    '{"kind":"novel-kind","x":%s}',
    '{"kind":"append","uuid":"u","door":"prompt","origin":{"kind":"user","y":%s},'
    '"message":{"type":"user","content":[]}}',
    '{"kind":"append","uuid":"u","door":"prompt","origin":{"kind":"user"},'
    '"message":{"type":"user","content":[{"type":"text","z":%s}]}}',
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("template", MOD_EVENT_TEMPLATES)
def test_mod_events_at_any_depth(template: str, depth: int, shape: str) -> None:
    body = '{"events":[%s]}' % (template % deep_text(depth, shape))
    try:
        value = loads(body)
    except JsonError:
        assert slot_depth('{"events":[' + template) + depth > MAX_DEPTH
        return
    events, skipped = m.read_events(value)
    assert len(events) == 1 and not skipped
    # The same value built in Python, too deep or not, is never a crash.
    built = {"events": [{"kind": "novel-kind", "x": deep_value(depth + MAX_DEPTH, shape)}]}
    events, skipped = m.read_events(built)
    assert events == [] and len(skipped) == 1 and "finite numbers" in skipped[0]


@pytest.mark.parametrize("depth", DEPTHS)
def test_mod_results_and_requests_at_any_depth(depth: int) -> None:
    value = deep_value(depth)
    results, broken, skipped = m.read_results({"results": [{"id": "r1", "ok": True, "value": value}]})
    assert (len(results), broken, skipped) == (1, {}, [])  # a value is read by its call, later
    # A content block inside a call's result: checked as JSON, refused past the limit.
    row = {"as": "row", "uuid": "u"}
    assert type(m.structure_result("session.message", row)) is m.ModRowWritten
    for tp in (m.ModEventsBody, m.ModResultsBody, m.ModRequestsBody):
        with pytest.raises(m.ModWireError):
            m.parse({"events": [value], "results": [value], "requests": [value]}, tp)


@settings(max_examples=100, deadline=None)
@given(depth=st.integers(1, 20_000), shape=st.sampled_from(SHAPES), template=st.sampled_from(MOD_EVENT_TEMPLATES))
def test_mod_bodies_at_any_depth_are_read_or_refused(depth: int, shape: str, template: str) -> None:
    body = '{"events":[%s]}' % (template % deep_text(depth, shape))
    try:
        value = loads(body)
    except JsonError:
        return
    events, skipped = m.read_events(value)
    assert len(events) + len(skipped) == 1


def test_huge_but_shallow_mod_bodies_are_read() -> None:
    many = {"events": [{"kind": "turn-start", "turnId": f"t{i}"} for i in range(100_000)]}
    events, skipped = m.read_events(loads(dumps(many)))
    assert len(events) == 100_000 and skipped == []
    big = "x" * 5_000_000
    block = {"events": [{"kind": "novel-kind", "blob": big, "list": list(range(200_000))}]}
    (event,), skipped = m.read_events(loads(dumps(block)))
    assert skipped == [] and event.raw["blob"] == big
    results = {"results": [{"id": f"r{i}", "ok": True, "value": {"v": [i]}} for i in range(50_000)]}
    good, broken, skipped = m.read_results(loads(dumps(results)))
    assert len(good) == 50_000 and broken == {} and skipped == []
