"""The places' record read strictly: what the router has always written is
read back as it was, a value of the wrong type is never coerced, and any
JSON entry is a place or a ``bad-place`` refusal naming its path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.worktrees.records import FILE, Place, Places, read_place

#: A record exactly as the router wrote it before reading became strict
#: (every field, ``None`` as null, snake_case keys), one place live and one ended.
WRITTEN = (
    '{"places":{"s-1":{"id":"s-1","name":"fix-login","project":"web","project_path":"/src/web",'
    '"branch":"fix-login","base":"3f2a9c1","worktree":"/src/web.worktrees/fix-login","where":"local",'
    '"harness":"claude-code","tmux":"router-fix-login","claude_session":"0f8e2c7a-1d3b-4c5e-9a6f-2b7d8e9c0a1b",'
    '"prompt":"fix the login","prompt_event":"evt-1","prompted":true,"created_at":1764642000000,'
    '"ended_at":null},"s-2":{"id":"s-2","name":"docs","project":"web","project_path":"/src/web",'
    '"branch":"docs","base":"3f2a9c1","worktree":"/src/web.worktrees/docs","where":"docker",'
    '"harness":"codex","tmux":null,"claude_session":null,"prompt":null,"prompt_event":null,'
    '"prompted":false,"created_at":1764642000001,"ended_at":1764645600000}}}'
)
FIELDS = [field.name for field in Place.__attrs_attrs__]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
near_places = st.fixed_dictionaries({}, optional={
    **{name: st.one_of(st.text(max_size=6), json_values) for name in FIELDS},
    "prompted": st.one_of(st.booleans(), json_values),
    "created_at": st.one_of(st.integers(), st.text(max_size=4), json_values),
    "ended_at": st.one_of(st.none(), st.integers(), st.sampled_from(["1", 1.5, True])),
    "later": json_values,
})


def test_a_record_written_before_is_read_as_it_was(tmp_path: Path) -> None:
    (tmp_path / FILE).write_text(WRITTEN)
    places = Places(tmp_path)
    assert sorted(places.all()) == ["s-1", "s-2"]
    live = places.live()
    assert list(live) == ["s-1"]
    first = live["s-1"]
    assert (first.tmux, first.prompted, first.created_at, first.ended_at) == \
        ("router-fix-login", True, 1764642000000, None)
    ended = places.all()["s-2"]
    assert (ended.tmux, ended.claude_session, ended.ended_at) == (None, None, 1764645600000)
    # Written back unchanged: the same keys, null where there was null.
    places.update("s-1", lambda place: place)
    assert json.loads((tmp_path / FILE).read_text()) == json.loads(WRITTEN)


def test_a_hostile_entry_is_refused_and_the_rest_read(tmp_path: Path) -> None:
    document = json.loads(WRITTEN)
    document["places"]["s-2"]["created_at"] = "1764642000001"  # a plain converter made it 1764642000001
    document["places"]["s-3"] = {**document["places"]["s-1"], "id": "s-3", "prompted": 1}
    refused = read_place("s-2", document["places"]["s-2"])
    assert type(refused) is Refusal and refused.code == "bad-place"
    assert refused.message == ('places.json: places["s-2"].created_at: expected a whole number from 0 to '
                               '2**53 - 1, got a string')
    assert read_place("s-3", document["places"]["s-3"]).message.startswith(
        'places.json: places["s-3"].prompted: expected a boolean')
    (tmp_path / FILE).write_text(json.dumps(document))
    assert list(Places(tmp_path).all()) == ["s-1"]


@settings(max_examples=400, deadline=None)
@given(st.one_of(json_values, near_places))
def test_any_entry_is_a_place_or_a_refusal(value: Any) -> None:
    read = read_place("s", value)
    if type(read) is Refusal:
        assert read.code == "bad-place" and read.message.startswith('places.json: places["s"]')
        return
    assert type(read) is Place
    # Nothing coerced: each field is the stored value itself, or its default when absent.
    for field in Place.__attrs_attrs__:
        got = getattr(read, field.name)
        if field.name in value:
            assert got is value[field.name] or (type(got) is type(value[field.name]) and got == value[field.name])
        else:
            assert got == field.default
