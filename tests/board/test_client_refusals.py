"""The survey reads a router's refusal as ``Refusal.from_json`` reads it,
and names the routers it left out as ``Refusal.to_json`` spells a refusal
(with ``router``): real Unix sockets in a private directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from router.board.client import holder_blocking, read_answer, survey_blocking
from router.board.paths import INFO_ROUTE, socket_path
from router.errors import Refusal
from tests.support.canned_http import canned

OFF = {"error": "channel-off", "message": "the cli channel is switched off; `router plugins` switches it on"}


def test_a_routers_refusal_is_read_back_as_a_refusal() -> None:
    with pytest.raises(Refusal) as raised:
        read_answer("r1", INFO_ROUTE, 403, b'{"error": "channel-off", "message": "off", "channel": "cli"}')
    assert (raised.value.code, raised.value.message) == ("channel-off", "router r1: off")
    # A body that is not our spelling of a refusal (the plug-in protocol's, say) is not a router's answer.
    with pytest.raises(Refusal) as raised:
        read_answer("r1", INFO_ROUTE, 500, b'{"code": "channel-off", "message": "off"}')
    assert (raised.value.code, raised.value.message) == ("not-a-router", f"router r1 answered GET {INFO_ROUTE} 500")


def test_a_skipped_router_is_named_in_the_refusals_spelling(tmp_path: Path) -> None:
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    os.mkdir(runtime / "router", mode=0o700)
    path = str(socket_path(env, "r1"))
    with canned({("GET", INFO_ROUTE): (403, OFF)}, unix=path):
        board = survey_blocking(env, timeout=10)
        assert [(each.name, each.refusal) for each in board.skipped] == [
            ("r1", Refusal("channel-off", f"router r1: {OFF['message']}"))]
        with pytest.raises(Refusal) as raised:
            holder_blocking(env, "s1", timeout=10)
    refused = raised.value
    assert refused.code == "unknown-session"
    assert refused.message == ("no router of yours holds a session 's1'; 1 router(s) did not answer, and may hold "
                               "it; `router sessions` lists them")
    assert refused.data["skipped"] == [{"router": "r1", **Refusal("channel-off", f"router r1: {OFF['message']}")
                                        .to_json()}]
    assert refused.data["skipped"][0]["error"] == "channel-off"
