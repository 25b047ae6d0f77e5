"""An ACP agent's permission request reaches the board as an ask, as Claude
Code's do: ``router serve --launcher process`` runs ``router daemon
--adapter acp:fake`` (the agent named in plugins.json), ``router asks``
lists the ask, ``router answer`` answers it, and the agent gets the option
(allow -> ``allow_once``, deny -> ``reject_once``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from tests.acp.test_adapter import AGENT
from tests.api.processes import REPO, ROUTER, environment, send, serve
from tests.host.test_launched_processes import launch


async def router(*args: str) -> str:
    done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False,
                                  env=environment(), cwd=REPO)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout.decode()


async def router_json(*args: str) -> Any:
    return json.loads(await router(*args))


async def test_an_acp_permission_request_is_an_ask_on_the_board_answered_allow_and_deny(tmp_path: Path) -> None:
    settings = tmp_path / "settings"
    settings.mkdir()
    state = tmp_path / "agent-state"
    state.mkdir()
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin",
                    "launcher": "process"},
        "options": {"harness": {"acp": {"agents": {"fake": {
            "command": [sys.executable, AGENT], "env": {"FAKE_ACP_STATE": str(state)}}}}}},
    }))
    async with serve(tmp_path) as served:
        created = await launch(served, "s1", "--harness", "acp:fake")
        assert created["id"] == "s1"
        for event_id, decision, said in (("e1", "allow", "selected yes"), ("e2", "deny", "selected no")):
            replies: list[Any] = []

            async def deliver(event_id: str = event_id) -> None:
                replies.append(await send(served.url, "s1", "ask", "--event-id", event_id, token=served.token))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(deliver)
                with trio.fail_after(120):
                    while not (asks := await router_json("asks", "--json")):
                        await trio.sleep(0.2)
                [ask] = asks
                assert ask["session"] == "s1" and ask["tool"] == "Run rm" and ask["input"] == {"command": "rm x"}
                assert ask["state"] == "waiting"
                said_by_cli = await router("answer", ask["id"], decision)
                assert decision in said_by_cli
            status, answer, err = replies[0]
            assert status == 0, (answer, err, served.log())
            assert answer["reply"]["status"] == "done" and answer["reply"]["text"] == said, answer
            kept = await router_json("asks", "--json")
            assert kept == [], kept  # answered: no longer waiting
        # A rule of asks.json answers the ask with no person asked.
        (settings / "asks.json").write_text(json.dumps({"asks": {"rules": [
            {"tool": "Run rm", "input": "rm *", "decision": "deny"}]}}))
        status, answer, err = await send(served.url, "s1", "ask", "--event-id", "e-rule", token=served.token)
        assert status == 0 and answer["reply"]["text"] == "selected no", (answer, err)
        (settings / "asks.json").unlink()
        # An abort while an ask waits: the agent is answered cancelled, the
        # ask leaves the board, the delivery is unanswered.
        replies = []

        async def deliver_one() -> None:
            replies.append(await send(served.url, "s1", "ask", "--event-id", "e3", token=served.token))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(deliver_one)
            with trio.fail_after(120):
                while not await router_json("asks", "--json"):
                    await trio.sleep(0.2)
            await router("abort", "s1")
        status, answer, err = replies[0]
        assert answer["reply"]["status"] == "unanswered" and answer["reply"]["reason"] == "aborted", answer
        with trio.fail_after(60):
            while await router_json("asks", "--json"):
                await trio.sleep(0.2)
    # Every ask is in the session's record, with how it ended.
    from router.turns.delivery_log import DeliveryLog

    with DeliveryLog(tmp_path / "data" / "turns.sqlite") as record:
        kept = record.asks_of("s1")
    assert sorted((ask.get("decision", ""), ask["state"], ask.get("by", "")[:5]) for ask in kept) == sorted([
        ("allow", "answered", "cli"), ("deny", "answered", "cli"), ("deny", "answered", "rule:"),
        ("", "gone", ""),
    ]), kept
