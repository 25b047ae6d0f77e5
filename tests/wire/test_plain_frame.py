"""The daemon-message parser's direct path for plain ``start``, ``event``,
``settle`` and ``persist`` frames (wire/container.py ``_plain_frame``) builds exactly what
the converter builds, and refuses exactly what it refuses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wire import container as c
from wire.json import MAX_SAFE_INTEGER, dumps, loads

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
outcomes = st.fixed_dictionaries(
    {"status": st.sampled_from(["done", "unanswered", "settled"]) | leaf},
    optional={"text": leaf, "reason": leaf, "unknown": leaf},
) | leaf
frames = st.fixed_dictionaries(
    {"kind": st.sampled_from(["event", "start", "settle", "persist", "x"])},
    optional={"operationId": leaf, "event": events, "outcome": outcomes,
              "entries": st.lists(leaf | events, max_size=3) | leaf, "unknown": leaf},
)
messages = st.fixed_dictionaries(
    {"type": st.sampled_from(["frame", "frame", "caught-up"])},
    optional={"seq": leaf, "frame": frames | leaf, "more": leaf},
)

#: Frame messages shaped as the daemon writes them (the direct path's own):
#: the keys right, the values anything, now and then one key more.
names = st.text(max_size=3) | leaf
shaped = st.one_of(
    st.fixed_dictionaries({"kind": st.just("start"), "operationId": names}),
    st.fixed_dictionaries({"kind": st.just("event"), "operationId": names, "event": events}),
    st.fixed_dictionaries({"kind": st.just("settle"), "operationId": names, "outcome": st.one_of(
        st.fixed_dictionaries({"status": st.just("done"), "text": names}),
        st.fixed_dictionaries({"status": st.just("unanswered"), "reason": names}),
        outcomes)}),
    st.fixed_dictionaries({"kind": st.just("persist"), "entries": st.lists(leaf | events, max_size=3) | leaf}),
)
framed = st.fixed_dictionaries({"type": st.just("frame"), "seq": st.integers(0, 9) | leaf,
                                 "frame": shaped | frames},
                               optional={"more": leaf})


@settings(max_examples=400)
@given(messages | framed)
def test_the_direct_path_agrees_with_the_converter(value: dict) -> None:
    by_converter = c.structure_or_none(value, c.DaemonMessage)
    fast = c._plain_frame(value)
    if fast is not None:
        assert fast == by_converter
        assert type(fast.frame) is type(by_converter.frame)
    # Through the text: loads reads a long integer as JavaScript would (rounded), for both paths.
    assert c.parse_daemon_message(dumps(value)) == c.structure_or_none(loads(dumps(value)), c.DaemonMessage)


def test_a_plain_event_frame_takes_the_direct_path() -> None:
    value = {"type": "frame", "seq": 3, "frame": {"kind": "event", "operationId": None,
                                                   "event": {"type": "text-delta", "messageId": "m", "delta": "d"}}}
    assert c._plain_frame(value) == c.converter.structure(value, c.DaemonMessage)
    assert c._plain_frame({**value, "x": 1}) is None  # an unknown field: the converter keeps it in extra


def test_plain_settle_and_persist_frames_take_the_direct_path() -> None:
    for frame in ({"kind": "settle", "operationId": "o", "outcome": {"status": "done", "text": "t"}},
                  {"kind": "settle", "operationId": "o", "outcome": {"status": "unanswered", "reason": "aborted"}},
                  {"kind": "persist", "entries": [{"a": [1, 2.5]}, "b"]}):
        value = {"type": "frame", "seq": 9, "frame": frame}
        fast = c._plain_frame(value)
        assert fast is not None and fast == c.converter.structure(value, c.DaemonMessage)
    # A float that is not finite is not JSON: the converter refuses it, so the direct path leaves it.
    assert c._plain_frame({"type": "frame", "seq": 9, "frame": {"kind": "persist", "entries": [float("inf")]}}) is None


def test_a_number_that_overflows_is_judged_by_the_converter() -> None:
    # JSON.parse reads 1e400 as Infinity: not JSON in an event or an entry
    # (the message is refused), kept as it came in a field the wire does not know.
    event = '{"type":"frame","seq":1,"frame":{"kind":"event","operationId":null,"event":{"type":"usage","n":1e400}}}'
    entry = '{"type":"frame","seq":1,"frame":{"kind":"persist","entries":[-1e400]}}'
    extra = '{"type":"frame","seq":1,"frame":{"kind":"start","operationId":"o","x":1e400}}'
    assert c.parse_daemon_message(event) is None and c.parse_daemon_message(entry) is None
    kept = c.parse_daemon_message(extra)
    assert kept == c.converter.structure(loads(extra), c.DaemonMessage) and kept.frame.extra == {"x": float("inf")}
