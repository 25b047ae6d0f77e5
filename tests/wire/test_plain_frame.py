"""The daemon-message parser's direct path for plain ``start`` and
``event`` frames (wire/container.py ``_plain_frame``) builds exactly what
the converter builds, and refuses exactly what it refuses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wire import container as c
from wire.json import MAX_SAFE_INTEGER, dumps

# Finite floats only: the wire is JSON text, and dumps refuses what JSON cannot say.
leaf = (st.none() | st.booleans() | st.integers(-3, MAX_SAFE_INTEGER + 2)
        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5))
events = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text-delta", "reasoning-delta"]), "messageId": leaf, "delta": leaf}),
    st.fixed_dictionaries({"type": st.just("message"), "message": st.fixed_dictionaries(
        {"id": leaf, "role": st.sampled_from(["user", "assistant", "x"]), "parts": st.lists(leaf, max_size=2) | leaf})}),
    st.fixed_dictionaries({"type": st.sampled_from(["usage", "log", "raw", "other"])}, optional={"message": leaf, "value": leaf}),
    leaf,
)
frames = st.fixed_dictionaries(
    {"kind": st.sampled_from(["event", "start", "settle", "persist", "x"])},
    optional={"operationId": leaf, "event": events, "unknown": leaf},
)
messages = st.fixed_dictionaries(
    {"type": st.sampled_from(["frame", "frame", "caught-up"])},
    optional={"seq": leaf, "frame": frames | leaf, "more": leaf},
)


@given(messages)
def test_the_direct_path_agrees_with_the_converter(value: dict) -> None:
    by_converter = c.structure_or_none(value, c.DaemonMessage)
    fast = c._plain_frame(value)
    if fast is not None:
        assert fast == by_converter
        assert type(fast.frame) is type(by_converter.frame)
    assert c.parse_daemon_message(dumps(value)) == by_converter


def test_a_plain_event_frame_takes_the_direct_path() -> None:
    value = {"type": "frame", "seq": 3, "frame": {"kind": "event", "operationId": None,
                                                   "event": {"type": "text-delta", "messageId": "m", "delta": "d"}}}
    assert c._plain_frame(value) == c.converter.structure(value, c.DaemonMessage)
    assert c._plain_frame({**value, "x": 1}) is None  # an unknown field: the converter keeps it in extra
