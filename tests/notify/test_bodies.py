"""The subscription, presence and session-setting bodies with hostile input:
each parser answers a valid value or refuses with its code and a sentence,
never anything else (docs/notifications.md, "HTTP"); the payload always
fits the push service's record."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.notify.core import (MAX_PAYLOAD, Event, SessionSetting, PushSubscription, parse_presence,
                                parse_session_setting, parse_subscription, payload)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _near_subscriptions() -> st.SearchStrategy[Any]:
    """Bodies close to a real one: each field replaced by something hostile."""
    good_key = b64(b"\x04" + os.urandom(64))
    good_auth = b64(os.urandom(16))
    field = st.one_of(json_values, st.text(), st.sampled_from([good_key, good_auth, "https://push.example/x"]))
    return st.fixed_dictionaries(
        {"endpoint": st.one_of(st.just("https://push.example/abc"), st.text(), json_values)},
        optional={"expirationTime": st.one_of(st.none(), st.integers(), st.floats(), json_values),
                  "keys": st.one_of(st.fixed_dictionaries({"p256dh": field, "auth": field}), json_values),
                  "extra": json_values},
    )


def _refuses_or_parses(fn: Any, body: Any, code: str) -> Any:
    try:
        return fn(body)
    except Refusal as refusal:
        assert refusal.code == code and refusal.message
        return None


@settings(max_examples=400, deadline=None)
@given(st.one_of(json_values, _near_subscriptions()))
def test_a_subscription_body_parses_or_is_refused(body: Any) -> None:
    parsed = _refuses_or_parses(parse_subscription, body, "bad-subscription")
    if parsed is not None:
        assert isinstance(parsed, PushSubscription)
        assert parsed.endpoint.startswith("https://") and parsed.endpoint.isprintable()
        assert json.loads(json.dumps(parsed.info()))["keys"]["p256dh"] == body["keys"]["p256dh"]


def test_a_real_subscription_parses_and_its_id_is_stable() -> None:
    body = {"endpoint": "https://fcm.googleapis.com/fcm/send/abc", "expirationTime": None,
            "keys": {"p256dh": b64(b"\x04" + bytes(64)), "auth": b64(bytes(16))}}
    assert parse_subscription(body).id == parse_subscription(dict(body)).id
    for bad in ({**body, "endpoint": "http://push.example/x"}, {**body, "keys": {"p256dh": b64(bytes(65)),
                                                                                 "auth": b64(bytes(16))}},
                {**body, "keys": {"p256dh": b64(b"\x04" + bytes(64)), "auth": b64(bytes(15))}},
                {**body, "expirationTime": True}, {**body, "endpoint": "https://x/\r\nHost: evil"}):
        assert _refuses_or_parses(parse_subscription, bad, "bad-subscription") is None


@settings(max_examples=400, deadline=None)
@given(st.one_of(json_values, st.fixed_dictionaries({"visible": json_values, "session": json_values}),
                 st.fixed_dictionaries({"visible": st.booleans(), "session": st.one_of(st.none(), st.text())})))
def test_a_presence_body_parses_or_is_refused(body: Any) -> None:
    parsed = _refuses_or_parses(parse_presence, body, "bad-presence")
    if parsed is not None:
        visible, session = parsed
        assert type(visible) is bool and (session is None or (type(session) is str and session.isprintable()))


@settings(max_examples=200, deadline=None)
@given(st.one_of(json_values, st.dictionaries(st.sampled_from(["muted", "turn_ended", "other"]), json_values)))
def test_a_session_setting_body_parses_or_is_refused(body: Any) -> None:
    parsed = _refuses_or_parses(lambda b: parse_session_setting(b, SessionSetting()), body, "bad-notify-setting")
    if parsed is not None:
        assert type(parsed.muted) is bool and type(parsed.turn_ended) is bool


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text(), st.text(max_size=300))
def test_the_payload_always_fits(title: str, body: str, session: str) -> None:
    event = Event(id="ntf-1", kind="ask", session=session or "s", title=title, body=body * 10, at=1,
                  ask={"id": "a", "tool": "Bash", "session": session or "s"})
    out = payload(event)
    assert len(json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode()) <= MAX_PAYLOAD + 200
    assert out["id"] == "ntf-1" and out["url"].startswith("/?session=")
