"""A request body's bytes as a JSON object (router._body): any bytes give
an object or a ``bad-body`` refusal whose sentence names the route, never
another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router._body import json_object
from router.errors import Refusal

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=10)


@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()), st.booleans())
@settings(max_examples=300, deadline=None)
def test_any_bytes_are_an_object_or_a_bad_body_naming_the_route(raw: bytes, empty: bool) -> None:
    try:
        value = json_object(raw, what="POST /x takes {a}", empty=empty)
    except Refusal as refused:
        assert refused.code == "bad-body" and refused.message.startswith("POST /x takes {a}: ")
        return
    assert type(value) is dict


@pytest.mark.parametrize(("raw", "said"), [
    (b"[1]", "expected a JSON object, got an array"),
    (b"\xff", "the body is not JSON text ("),
    (b"[" * 100_000, "the body is not JSON text ("),
    (b"", "the body is not JSON text ("),
])
def test_each_refusal_says_what_is_wrong(raw: bytes, said: str) -> None:
    with pytest.raises(Refusal) as caught:
        json_object(raw, what="R", code="bad-presence")
    assert caught.value.code == "bad-presence" and caught.value.message.startswith(f"R: {said}")


def test_an_empty_body_is_an_empty_object_where_a_route_allows_it() -> None:
    assert json_object(b" \n", what="R", empty=True) == {}
