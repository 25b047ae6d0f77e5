"""The page's notification parts that decide something, run in node
(``page.js`` exports them): this device's state in a sentence, a receipt in
words, the VAPID key as bytes, a session's setting from either answer."""

from __future__ import annotations

import base64
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.api.test_page import node


def test_each_state_of_this_device_is_a_sentence() -> None:
    got = node("""out([{state: 'on', device: 'Pixel Chrome'}, {state: 'off'}, {state: 'off', detail: 'The permission was not given'},
        {state: 'notifier-off', detail: 'the web-push notifier is off; switch it on in plugins.json'},
        {state: 'notifier-off', detail: 'notifier-off'}, {state: 'denied'},
        {state: 'no-push-service', detail: 'no answer from it in 10 s'}, {state: 'unsupported'}, {state: 'insecure'},
        {state: 'error', detail: '500: boom'}, {state: 'checking'}].map(page.pushText))""")
    assert got == [
        "On: asks and session news come to this device as “Pixel Chrome”.",
        "Off: this device gets no notifications.",
        "Off: this device gets no notifications. The permission was not given.",
        "Unavailable where the router runs: the web-push notifier is off; switch it on in plugins.json.",
        "Unavailable where the router runs: its web-push notifier is off.",
        "Blocked: this browser denies notifications to this page; allow them in its site settings, then try again.",
        "Unavailable: this browser has no push service to subscribe with (no answer from it in 10 s).",
        "Unavailable: this browser has no Web Push here (on an iPhone, add the page to the home screen first).",
        "Unavailable: notifications need the page over HTTPS (router serve --listen) or on localhost.",
        "Not done: 500: boom.",
        "Checking whether this device can be notified…",
    ]


def test_a_receipt_in_words() -> None:
    got = node("""out([{destination: 'web-push: Pixel', outcome: 'sent', status: 201, detail: ''},
        {destination: 'apprise: ntfy', outcome: 'suppressed', code: 'muted', detail: 'muted: the session is muted'},
        {destination: 'web-push: old', outcome: 'failed', status: 410, detail: 'gone (410)'},
        {destination: 'web-push: x', outcome: 'pending', code: null, detail: null}, {}].map(page.receiptText))""")
    assert got == ["web-push: Pixel: sent (201)", "apprise: ntfy: suppressed (muted: the session is muted)",
                   "web-push: old: failed (gone (410))", "web-push: x: pending", "?: ?"]


def test_a_sessions_setting_from_the_settings_or_the_answer() -> None:
    got = node("""const view = {turn_ended: false, sessions: {a: {muted: true, turn_ended: false}, b: {muted: false, turn_ended: true}}};
        out([page.sessionNotify(view, 'a'), page.sessionNotify(view, 'b'), page.sessionNotify(view, 'c'),
             page.sessionNotify({turn_ended: true, sessions: {}}, 'c'),
             page.sessionNotify({session: 'a', muted: false, turn_ended: true}, 'a'), page.sessionNotify(null, 'a')])""")
    assert got == [{"muted": True, "turnEnded": False}, {"muted": False, "turnEnded": True},
                   {"muted": False, "turnEnded": False}, {"muted": False, "turnEnded": True},
                   {"muted": False, "turnEnded": True}, {"muted": False, "turnEnded": False}]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=80), min_size=1, max_size=8))
def test_the_vapid_key_as_bytes_whatever_its_length(keys: list[bytes]) -> None:
    texts = [base64.urlsafe_b64encode(key).rstrip(b"=").decode() for key in keys]
    got = node(f"out({texts!r}.map((t) => Array.from(page.keyBytes(t))))")
    assert got == [list(key) for key in keys]


def test_a_real_vapid_key() -> None:
    point = b"\x04" + os.urandom(64)
    text = base64.urlsafe_b64encode(point).rstrip(b"=").decode()
    assert node(f"out(Array.from(page.keyBytes({text!r})))") == list(point)
