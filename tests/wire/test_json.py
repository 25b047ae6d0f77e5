"""wire.json: JSON as JavaScript reads and writes it."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.json import (
    ABSENT,
    MAX_SAFE_INTEGER,
    JsonError,
    dumps,
    is_count,
    is_json,
    js_length,
    js_number,
    json_length,
    loads,
)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1", 1),
        ("1.0", 1),
        ("1e3", 1000),
        ("-0", 0),
        ("0.5", 0.5),
        ("9007199254740993", 9007199254740992),  # rounded to the nearest double, as V8
        ("1e400", math.inf),
        ("-1e400", -math.inf),
        ('"\\ud800"', "\ud800"),
        ('"\\ud83d\\ude00"', "😀"),
        (' {"a" : [ true , null ] }\n', {"a": [True, None]}),
        ('{"a":1,"a":2}', {"a": 2}),  # the last duplicate wins, as JSON.parse
    ],
)
def test_loads_reads_what_json_parse_reads(text, value):
    assert loads(text) == value


@pytest.mark.parametrize(
    "text",
    ["", " ", "NaN", "Infinity", "-Infinity", "[1,]", "{'a':1}", '"\x01"', "\ufeff{}", "01", "1.", ".5", "[", "{} x", "[" * 5000 + "]" * 5000],
)
def test_loads_refuses_what_json_parse_refuses(text):
    with pytest.raises(JsonError):
        loads(text)


def test_loads_refuses_a_non_string():
    with pytest.raises(JsonError):
        loads(b"{}")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value, ok",
    [
        (None, True), (True, True), ("", True), (0, True), (-1.5, True), ([], True), ({}, True),
        ({"a": [1, {"b": None}]}, True), (math.inf, False), ([math.nan], False),
        ({"a": {"b": -math.inf}}, False), ({1: "x"}, False), (object(), False), ({"a": set()}, False),
        (b"x", False),
    ],
)
def test_is_json(value, ok):
    assert is_json(value) is ok


@pytest.mark.parametrize(
    "value, ok",
    [
        (0, True), (1, True), (MAX_SAFE_INTEGER, True), (MAX_SAFE_INTEGER + 1, False), (-1, False),
        (True, False), (False, False), (1.0, False), (1.5, False), ("1", False), (None, False),
    ],
)
def test_is_count(value, ok):
    assert is_count(value) is ok


@pytest.mark.parametrize(
    "value, text",
    [
        (1.0, "1"), (1e-7, "1e-7"), (1.5e16, "15000000000000000"), (1e21, "1e+21"), (1e20, "100000000000000000000"),
        (123.456, "123.456"), (1e-6, "0.000001"), (1.2e-7, "1.2e-7"), (5e-324, "5e-324"), (-0.0, "0"),
        (0.1, "0.1"), (-2.5e-10, "-2.5e-10"), (1.7976931348623157e308, "1.7976931348623157e+308"),
        (12345678901234567890, "12345678901234567000"), (2**53, "9007199254740992"),
    ],
)
def test_js_number(value, text):
    assert js_number(value) == text


@pytest.mark.parametrize(
    "value, text",
    [
        ({"a": [1, 2.0, "é😀"]}, '{"a":[1,2,"é😀"]}'),
        ("\ud800x", '"\\ud800x"'),
        ("\x00\x1f\x7f\u2028", '"\\u0000\\u001f\x7f\u2028"'),
        ("\b\f\n\r\t\"\\", '"\\b\\f\\n\\r\\t\\"\\\\"'),
        ({"v": "1.5e3", "n": 1.5e3}, '{"v":"1.5e3","n":1500}'),  # numbers in strings untouched
        ([1e-7, "a\\"], '[1e-7,"a\\\\"]'),
    ],
)
def test_dumps_writes_what_json_stringify_writes(value, text):
    assert dumps(value) == text


def test_dumps_refuses_non_finite_and_non_json():
    with pytest.raises(ValueError):
        dumps([math.inf])
    with pytest.raises(TypeError):
        dumps({"a": object()})


@pytest.mark.parametrize("text, length", [("", 0), ("abc", 3), ("é", 1), ("😀", 2), ("a😀b\ud800", 5)])
def test_js_length_counts_utf16_units(text, length):
    assert js_length(text) == length


def test_json_length():
    assert json_length({"t": "😀"}) == len('{"t":""}') + 2


def test_absent_is_a_falsy_singleton():
    from wire.json import Absent

    assert Absent() is ABSENT and not ABSENT and repr(ABSENT) == "ABSENT"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_dumps_then_loads_gives_the_value_back(value):
    assert loads(dumps(value)) == value
    assert is_json(value)


@given(json_values)
def test_dumps_is_json_python_reads_the_same_with_no_spaces_between_tokens(value):
    text = dumps(value)
    json.loads(text)  # plain JSON to any reader
    # Strip string tokens; what is left is structure, numbers and literals.
    import re

    structure = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    assert " " not in structure and "\n" not in structure


numbers_in_text = st.recursive(
    st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(["3.", "a1e", "x" * 40, "é1.5"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=12,
)


@given(numbers_in_text)
def test_dumps_writes_every_number_as_javascript_does(value):
    # Every number token outside strings is as String(number) writes it,
    # whichever scan let the text through (floats, integers of any length,
    # and strings that look like numbers beside them).
    import re

    structure = re.sub(r'"(?:[^"\\]|\\.)*"', '""', dumps(value))
    for token in re.findall(r"-?[0-9][0-9.eE+-]*", structure):
        assert js_number(loads(token)) == token


@given(st.text())
def test_loads_never_raises_anything_but_json_error(text):
    try:
        loads(text)
    except JsonError:
        pass
