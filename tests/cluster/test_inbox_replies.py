"""The cluster inbox's replies as a row keeps them: a refusal spelled as
``Refusal.to_json`` spells it, read back the same; the rows earlier routers
wrote (``code`` and ``message`` beside ``type``) still read."""

from __future__ import annotations

import json

import pytest

from router.cluster.node import reply_json, reply_of
from router.errors import Refusal
from router.turns.core import Answered, DeliveryRefused, DeliveryUnanswered

LOST = Refusal("lease-lost", "this router no longer holds 's1'; resend with the same eventId")
CONFLICT = Refusal("event-id-conflict", "event id 'e1' was already used for another message; a resend carries the "
                   "same message, a new message takes a new event id")


@pytest.mark.parametrize(("reply", "kept", "final"), [
    (DeliveryUnanswered(event_id="e1", refusal=LOST),
     {"type": "unanswered", "eventId": "e1", "refusal": {"error": "lease-lost", "message": LOST.message}}, False),
    (DeliveryRefused(refusal=CONFLICT),
     {"type": "refused", "refusal": {"error": "event-id-conflict", "message": CONFLICT.message}}, True),
    (Answered(answer={"status": "delivered"}, from_record=True),
     {"type": "answered", "answer": {"status": "delivered"}, "fromRecord": True}, True),
])
def test_a_reply_is_kept_with_its_refusal_spelled_once_and_read_back(reply: object, kept: dict, final: bool) -> None:
    text, is_final = reply_json(reply)
    assert (json.loads(text), is_final) == (kept, final)
    assert reply_of(text) == reply


def test_a_refusals_data_is_kept_with_it() -> None:
    refused = DeliveryRefused(refusal=Refusal("session-stopped", "stopped; resume it", session="s1"))
    back = reply_of(reply_json(refused)[0])
    assert isinstance(back, DeliveryRefused)
    assert (back.code, back.message, back.refusal.data) == ("session-stopped", "stopped; resume it", {"session": "s1"})


def test_a_row_an_earlier_router_kept_still_reads() -> None:
    unanswered = reply_of(json.dumps({"type": "unanswered", "eventId": "e1", "code": "lease-lost",
                                      "message": LOST.message}))
    assert unanswered == DeliveryUnanswered(event_id="e1", refusal=LOST)
    assert (unanswered.code, unanswered.message) == ("lease-lost", LOST.message)
    refused = reply_of(json.dumps({"type": "refused", "code": "event-id-conflict", "message": CONFLICT.message}))
    assert refused == DeliveryRefused(refusal=CONFLICT)
