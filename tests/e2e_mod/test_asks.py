"""Permission asks answered from anywhere, with the real Claude Code 2.1.332,
interactive in tmux: in ``--permission-mode manual`` the fake Messages API asks
for a Bash command that writes a file; the ask crosses the mod link, the board
shows the session ``waiting``, and ``router answer`` (or the HTTP API, or a
rule of ``asks.json``) settles it. No answer within the deadline brings Claude
Code's own prompt up; in ``auto`` no ask is raised."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from router.mcp import ToolRefused, call_tool
from tests.e2e_mod.helpers import ModWorld, RouterApi
from tests.fakes.anthropic import FakeAnthropic, text_reply, tool_reply
from tests.support.polling import until

#: Bounds on waits for the real binary; they bound a wait, they time nothing.
START = 60
TURN = 60
#: The words of Claude Code 2.1.332's own permission dialog.
DIALOG = "Do you want to proceed?"
FILE = "asked.txt"
COMMAND = f"echo written > {FILE}"


def write_asks(world: ModWorld, asks: dict[str, Any]) -> None:
    """The router's ``asks.json`` (its settings directory is ``$HOME/.config/router``)."""
    settings = world.home / ".config" / "router"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "asks.json").write_text(json.dumps({"asks": asks}))


async def start_asking(world: ModWorld, api: RouterApi, fake: FakeAnthropic, *, mode: str = "manual") -> str:
    session_id = str(uuid.uuid4())
    fake.script(tool_reply("Bash", {"command": COMMAND, "description": "write a file"}), text_reply("All done."))
    await world.start("one", session_id, permission_mode=mode)
    with trio.fail_after(START):
        await api.wait_connected(session_id)
    await world.type("one", "please write the file")
    return session_id


async def waiting_ask(api: RouterApi, session_id: str) -> dict[str, Any]:
    """Until the board shows the session waiting; its ask as ``GET /asks`` lists it."""
    while True:
        entry = next((each for each in await api.sessions() if each["id"] == session_id), None)
        if entry is not None and entry.get("state") == "waiting":
            asks = (await api.http.get("/asks")).json()["asks"]
            assert entry["ask"]["id"] == asks[0]["id"] and entry["ask"]["tool"] == "Bash"
            assert isinstance(entry["ask"]["since"], float)
            return dict(asks[0])
        await trio.sleep(0.1)


async def asked(world: ModWorld, api: RouterApi, fake: FakeAnthropic, *, deadline: float) -> tuple[str, dict[str, Any]]:
    """A session in manual mode whose Bash call waits on the person: its id and its ask."""
    write_asks(world, {"deadline": deadline})
    session_id = await start_asking(world, api, fake)
    with trio.fail_after(TURN):
        return session_id, await waiting_ask(api, session_id)


def tool_result(fake: FakeAnthropic) -> dict[str, Any] | None:
    """The Bash call's tool_result block, from the first request that carries one."""
    for request in fake.messages_requests():
        for message in request.messages():
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return block
    return None


def recorded(world: ModWorld, session_id: str) -> list[dict[str, Any]] | None:
    """The asks the session's record keeps, once its router has let the file go."""
    from router.errors import Refusal
    from router.turns.delivery_log import DeliveryLog

    for path in (world.root / "data").rglob("turns.sqlite"):
        try:
            with DeliveryLog(path) as log:
                return log.asks_of(session_id)
        except Refusal:
            return None  # still open in its router
    return None


async def router_cli(world: ModWorld, *args: str) -> tuple[int, str, str]:
    env = {**world.env, "PATH": os.environ.get("PATH", "")}
    done = await trio.run_process(
        [sys.executable, "-m", "router", *args], env=env, capture_stdout=True, capture_stderr=True, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def world_env(world: ModWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees the world's routers (the MCP tools read os.environ)."""
    for key in ("HOME", "XDG_RUNTIME_DIR", "ROUTER_DATA_DIR"):
        monkeypatch.setenv(key, world.env[key])


async def test_answer_allow_runs_the_tool_and_a_second_answer_is_refused(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, ask = await asked(world, router_api, fake_api, deadline=300)
    assert ask["tool"] == "Bash" and ask["input"]["command"] == COMMAND
    assert COMMAND in ask["summary"] and ask["session"] == session_id
    # While the mod waits, Claude Code shows no dialog of its own.
    assert DIALOG not in await world.screen("one")

    # Another session's MCP tools see it, through the routers' sockets.
    world_env(world, monkeypatch)
    listed = await call_tool(None, "list_asks", {})
    assert [each["id"] for each in listed["asks"]] == [ask["id"]]
    status, out, err = await router_cli(world, "asks", "--json")
    assert status == 0, err
    assert [each["id"] for each in json.loads(out)] == [ask["id"]]
    status, out, err = await router_cli(world, "answer", ask["id"], "allow")
    assert status == 0, err
    with trio.fail_after(TURN):
        await until(lambda: tool_result(fake_api) is not None)
        await world.wait_screen("one", "All done.")
    assert (world.workspaces[0] / FILE).read_text() == "written\n"
    assert not tool_result(fake_api).get("is_error")  # type: ignore[union-attr]

    status, out, err = await router_cli(world, "answer", ask["id"], "deny")
    assert status == 1 and "ask-answered" in err
    kept = (await router_api.http.get("/asks", params={"all": "1"})).json()["asks"]
    assert [(each["state"], each["decision"], each["by"]) for each in kept] == [("answered", "allow", "cli")]
    entry = next(each for each in await router_api.sessions() if each["id"] == session_id)
    assert entry["state"] != "waiting" and "ask" not in entry

    # ... and in the session's record (the embedded router's delivery log).
    await world.type("one", "/exit")
    with trio.fail_after(START):
        await until(lambda: recorded(world, session_id) is not None)
    assert [(each["state"], each["decision"], each["by"]) for each in recorded(world, session_id) or []] == [
        ("answered", "allow", "cli")
    ]


async def test_deny_gives_the_model_the_denial_and_two_answers_at_once_give_one(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic
) -> None:
    session_id, ask = await asked(world, router_api, fake_api, deadline=300)
    answers: list[tuple[int, dict[str, Any]]] = []

    async def answer(decision: str) -> None:
        response = await router_api.http.post(f"/asks/{ask['id']}", json={"decision": decision})
        answers.append((response.status_code, response.json()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer, "deny")
        nursery.start_soon(answer, "deny")
    assert sorted(status for status, _ in answers) == [200, 409]
    assert [body["error"] for status, body in answers if status == 409] == ["ask-answered"]
    with trio.fail_after(TURN):
        await until(lambda: tool_result(fake_api) is not None)
    result = tool_result(fake_api)
    assert result is not None and result.get("is_error") is True
    assert "denied" in json.dumps(result.get("content"))
    assert not (world.workspaces[0] / FILE).exists()


async def test_no_answer_in_time_brings_claude_codes_own_prompt_up(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, ask = await asked(world, router_api, fake_api, deadline=2)
    with trio.fail_after(TURN):
        await world.wait_screen("one", DIALOG)
    world_env(world, monkeypatch)
    with pytest.raises(ToolRefused) as late:
        await call_tool(None, "answer_ask", {"ask": ask["id"], "decision": "allow"})
    assert late.value.code == "ask-expired"
    response = await router_api.http.post(f"/asks/{ask['id']}", json={"decision": "allow"})
    assert response.status_code == 409 and response.json()["error"] == "ask-expired"
    assert not (world.workspaces[0] / FILE).exists()
    kept = (await router_api.http.get("/asks", params={"all": "1"})).json()["asks"]
    assert [each["state"] for each in kept] == ["expired"]


async def test_a_rule_answers_without_the_person(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic
) -> None:
    write_asks(world, {"deadline": 300, "rules": [{"tool": "Bash", "input": "echo written*", "decision": "allow"}]})
    await start_asking(world, router_api, fake_api)
    with trio.fail_after(TURN):
        await until(lambda: tool_result(fake_api) is not None)
        await world.wait_screen("one", "All done.")
    assert (world.workspaces[0] / FILE).read_text() == "written\n"
    kept = (await router_api.http.get("/asks", params={"all": "1"})).json()["asks"]
    assert [(each["decision"], each["by"]) for each in kept] == [("allow", "rule:Bash(echo written*)")]


async def test_auto_mode_raises_no_ask(world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic) -> None:
    write_asks(world, {"deadline": 300})
    await start_asking(world, router_api, fake_api, mode="auto")
    with trio.fail_after(TURN):
        await until(lambda: tool_result(fake_api) is not None)
        await world.wait_screen("one", "All done.")
    assert Path(world.workspaces[0] / FILE).exists()
    assert (await router_api.http.get("/asks", params={"all": "1"})).json()["asks"] == []


async def test_a_person_answers_the_ask_from_the_page(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The page of a `router serve` beside the Claude Code session shows its
    ask with Allow and Deny; Allow runs the tool (the answer is forwarded to
    the session's own router)."""
    from tests.api.processes import serve
    from tests.browser.test_page import artifact
    from tests.support.chromium import chromium

    session_id, ask = await asked(world, router_api, fake_api, deadline=300)
    world_env(world, monkeypatch)  # router serve joins the world's board
    async with serve(tmp_path) as served, chromium() as browser:
        router_name = next(each for each in await router_api.sessions() if each["id"] == session_id)["router"]["name"]
        page = await browser.open(f"{served.page}&session={session_id}&router={router_name}")
        await page.wait_for("!document.getElementById('ask').hidden", timeout=TURN)
        shown = await page.evaluate("document.getElementById('ask').innerText")
        assert "Bash" in shown and COMMAND in shown
        await page.screenshot(artifact("page-ask.png"))
        # On a phone (390x844): Allow and Deny are thumb-sized, in the
        # session's view and first on the board, where the answer is given.
        await page.emulate(390, 844, mobile=True)
        sizes = ("[...document.querySelectorAll(SELECTOR)].map((b) => { const r = b.getBoundingClientRect();"
                 " return [b.className, r.width, r.height]; })")
        for selector in ("#ask button", "#asks .ask button"):
            if selector == "#asks .ask button":
                await page.evaluate("document.getElementById('back').click()")
                await page.wait_for("getComputedStyle(document.getElementById('board-view')).display !== 'none'")
                assert await page.evaluate("document.getElementById('board').firstElementChild.dataset.state") == "waiting"
            shown = await page.evaluate(sizes.replace("SELECTOR", repr(selector)))
            assert sorted(kind for kind, _, _ in shown) == ["allow", "deny"]
            assert all(width >= 44 and height >= 44 for _, width, height in shown), shown
        await page.screenshot(artifact("phone-board-ask.png"))
        await page.evaluate("document.querySelector('#asks .ask button.allow').click()")
        await page.wait_for("document.getElementById('outcome').innerText === 'allow: Bash'", timeout=TURN)
        with trio.fail_after(TURN):
            await until(lambda: tool_result(fake_api) is not None)
            await world.wait_screen("one", "All done.")
        assert (world.workspaces[0] / FILE).exists()
        await page.wait_for("document.getElementById('ask').hidden", timeout=TURN)
        await page.screenshot(artifact("page-ask-answered.png"))
        assert page.errors == []
