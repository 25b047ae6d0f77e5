"""The pairing and device routes' bodies with hostile input: any bytes are
the route's frozen body or a ``bad-body`` refusal naming the route's shape
and the failing key, never another exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.remote.routes import NoFields, PairBody, RenameBody, read_body

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
ROUTES = {PairBody: "POST /pair", RenameBody: "PATCH /devices/<name>", NoFields: "POST /pairings"}
bodies = st.one_of(
    st.binary(max_size=40),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(st.sampled_from(["code", "name", "other"]), json_values, max_size=3).map(
        lambda value: json.dumps(value).encode()),
)


@settings(max_examples=400, deadline=None)
@given(cls=st.sampled_from(list(ROUTES)), raw=bodies)
def test_any_bytes_are_the_body_or_bad_body(cls: type, raw: bytes) -> None:
    try:
        body = read_body(raw, cls, ROUTES[cls])
    except Refusal as refusal:
        assert refusal.code == "bad-body" and refusal.message.startswith(f"{ROUTES[cls]} takes ")
        return
    assert type(body) is cls
    if cls is PairBody:
        assert body.code is None or type(body.code) is str
    if cls is RenameBody:
        assert type(body.name) is str


@pytest.mark.parametrize(("raw", "cls", "message"), [
    (b'{"code": 123456}', PairBody, "POST /pair takes {code?}: code: expected a string, got a number"),
    (b'{"code": null}', PairBody, "POST /pair takes {code?}: code: expected a string, got null"),
    (b"{}", RenameBody, "PATCH /devices/<name> takes {name}: name: required"),
    (b'{"name": "a", "x": 1}', RenameBody, "PATCH /devices/<name> takes {name}: keys it does not take: x"),
    (b"[]", NoFields, "POST /pairings takes {}: expected a JSON object, got an array"),
    (b"{", NoFields, "POST /pairings takes {}: the body is not JSON text (Expecting property name enclosed in "
                     "double quotes: line 1 column 2 (char 1))"),
])
def test_a_bad_body_names_its_shape_and_key(raw: bytes, cls: type, message: str) -> None:
    with pytest.raises(Refusal) as caught:
        read_body(raw, cls, ROUTES[cls])
    assert (caught.value.code, caught.value.message) == ("bad-body", message)


def test_an_empty_body_is_empty() -> None:
    assert read_body(b"  ", NoFields, "POST /pairings") == NoFields()
    assert read_body(b"", PairBody, "POST /pair") == PairBody(code=None)
    assert read_body(b'{"code": "ABCD-1234"}', PairBody, "POST /pair") == PairBody(code="ABCD-1234")
