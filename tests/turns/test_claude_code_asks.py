"""The Claude Code target's asks over a real mod link, with a hand-played
mod on the socket: the answer reaches a mod that named the asks, the first
answer wins, and a link that stops leaves no ask waiting."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from router.asks import answer_ask, list_asks
from router.errors import Refusal
from tests.support.polling import until
from wire.mod import MOD_INSTANCE_HEADER, MOD_URL_BASE, resolve_mod_socket_path

SESSION = "7d1c6a52-3f0e-4b7e-9a51-2b8f0c4d6e11"
HEADERS = {MOD_INSTANCE_HEADER: "mod-test", "content-type": "application/json"}
ASK = {"kind": "ask", "askId": "ask-1", "tool": "Bash", "input": {"command": "echo hi > f"},
       "summary": "Bash wants to run: echo hi > f", "toolUseId": "toolu_1"}


def mod_client(env: dict[str, str]) -> httpx.AsyncClient:
    path = resolve_mod_socket_path(SESSION, env).path
    assert path is not None
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=path), base_url=MOD_URL_BASE, timeout=30)


async def say_hello(client: httpx.AsyncClient, capabilities: list[str] | None) -> None:
    hello: dict[str, Any] = {"kind": "hello", "sessionId": SESSION, "claudeVersion": "2.1.332", "interactive": True}
    if capabilities is not None:
        hello["capabilities"] = capabilities
    assert (await client.post("/events", headers=HEADERS, json={"events": [hello, ASK]})).status_code == 200


#: What the router asks of a mod that named no model at hello (the board's model column), beside the asks.
MODEL_CALL = "session.model"


def not_the_model(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [each for each in requests if each.get("call") != MODEL_CALL]


async def next_requests(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    while True:
        requests = (await client.post("/requests", headers=HEADERS, content=b"{}")).json()["requests"]
        if not_the_model(requests):
            return not_the_model(requests)


async def test_the_first_answer_reaches_the_mod(make_rig: Any, env: dict[str, str]) -> None:
    rig = await make_rig(None, link_options={"hold": 0.5})
    session = await rig.router.open_claude_code(SESSION)
    async with mod_client(env) as client:
        await say_hello(client, ["asks"])
        sessions = rig.router.registry.sessions()
        with trio.fail_after(30):
            await until(lambda: list_asks(sessions) != [])
        assert session.target.entry()["state"] == "waiting"
        answered = answer_ask(sessions, "ask-1", "allow", by="test")
        assert (answered["state"], answered["decision"], answered["by"]) == ("answered", "allow", "test")
        with pytest.raises(Refusal) as second:
            answer_ask(sessions, "ask-1", "deny", by="late")
        assert second.value.code == "ask-answered"
        with trio.fail_after(30):
            (request,) = await next_requests(client)
        assert request["call"] == "ask.answer" and request["args"] == {"askId": "ask-1", "decision": "allow"}
        await client.post("/results", headers=HEADERS, json={"results": [{"id": request["id"], "ok": True,
                                                                            "value": {"taken": True}}]})
        assert session.target.entry()["state"] != "waiting"


async def test_an_ask_of_a_session_that_ends_is_gone_and_unanswered(make_rig: Any, env: dict[str, str]) -> None:
    rig = await make_rig(None, link_options={"hold": 0.5})
    await rig.router.open_claude_code(SESSION)
    async with mod_client(env) as client:
        await say_hello(client, None)
        sessions = rig.router.registry.sessions()
        with trio.fail_after(30):
            await until(lambda: list_asks(sessions) != [])
        end = {"kind": "session-end", "reason": "other"}
        assert (await client.post("/events", headers=HEADERS, json={"events": [end]})).status_code == 200
        with trio.fail_after(30):
            await until(lambda: list_asks(sessions) == [])
        assert [each["state"] for each in list_asks(sessions, every=True)] == ["gone"]
        with pytest.raises(Refusal) as late:
            answer_ask(sessions, "ask-1", "allow", by="late")
        assert late.value.code == "ask-expired"
        # Nothing is sent to the mod for an ask that is gone.
        with trio.move_on_after(1.5):
            requests = (await client.post("/requests", headers=HEADERS, content=b"{}")).json()["requests"]
            assert not_the_model(requests) == []
