"""``router pair`` and ``router devices`` read a router's refusal as the
router spells it (``Refusal.to_json``), and name an answer that is not one."""

from __future__ import annotations

from router.errors import Refusal
from router.remote.cli import DevicesRefused, _refused


def test_a_routers_refusal_is_read_back_with_its_code_sentence_and_data() -> None:
    refused = _refused(404, Refusal("unknown-device", "no paired device is named pixel", name="pixel").to_json())
    assert isinstance(refused, DevicesRefused)
    assert (refused.code, refused.message, refused.data) == (
        "unknown-device", "no paired device is named pixel", {"name": "pixel"})
    assert str(refused) == "unknown-device: no paired device is named pixel"


def test_an_answer_that_is_not_a_refusal_is_not_a_router() -> None:
    refused = _refused(502, {"code": "bad", "message": "a plug-in's spelling, not a router's"})
    assert (refused.code, refused.message) == (
        "not-a-router", "the router answered 502: {'code': 'bad', 'message': \"a plug-in's spelling, not a router's\"}")
    assert _refused(500, "oops").message == "the router answered 500: oops"
