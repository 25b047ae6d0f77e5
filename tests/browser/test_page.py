"""The page in a real headless Chromium against a real ``router serve``.

Each test saves screenshots under ``$ROUTER_TEST_ARTIFACTS`` (default
``.artifacts/`` in the checkout, ignored by git), so a person can look at
what the page showed.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import httpx

from tests.api.processes import REPO, serve
from tests.support.chromium import Page, chromium

ARTIFACTS = Path(os.environ.get("ROUTER_TEST_ARTIFACTS", REPO / ".artifacts"))

ANSWERS = "[...document.querySelectorAll('#log .assistant')].map(d => d.innerText)"


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def type_and_send(page: Page, text: str) -> None:
    await page.evaluate(f"document.getElementById('text').value = {json.dumps(text)}")
    await page.evaluate("document.getElementById('send').requestSubmit()")


async def open_root(page_url: str, browser) -> Page:
    page = await browser.open(page_url)
    await page.wait_for("document.querySelector('#board li[data-session=\"root\"]') !== null")
    await page.wait_for("document.getElementById('connection').dataset.state === 'live'")
    return page


async def test_a_message_sent_from_the_page_is_answered_live(tmp_path: Path) -> None:
    async with serve(tmp_path) as served, chromium() as browser:
        page = await open_root(served.page, browser)
        await type_and_send(page, "hello from the page")
        answer = await page.wait_for(f"{ANSWERS}.find(t => t.includes('echo:'))")
        await page.wait_for("document.getElementById('outcome').innerText.includes('started as a prompt')")
        await page.screenshot(artifact("page-answered.png"))
        assert answer == "echo: hello from the page (turn 1)"
        users = await page.evaluate("[...document.querySelectorAll('#log .user .text')].map(d => d.innerText)")
        assert users == ["hello from the page"]
        assert await page.evaluate("localStorage.getItem('router.outbox')") == "[]"
        assert page.errors == []


async def test_a_message_typed_while_the_server_is_down_is_answered_once_when_it_is_back(tmp_path: Path) -> None:
    port = free_port()
    async with chromium() as browser:
        async with serve(tmp_path, "--port", str(port)) as served:
            page = await open_root(served.page, browser)
        # The server is gone: the page says so, and keeps what is typed.
        await page.wait_for("['offline', 'reconnecting', 'connecting'].includes(document.getElementById('connection').dataset.state)")
        await type_and_send(page, "typed while down")
        await page.wait_for("document.querySelector('#log .pending') !== null")
        kept = json.loads(await page.evaluate("localStorage.getItem('router.outbox')"))
        assert [entry["text"] for entry in kept] == ["typed while down"]
        await page.screenshot(artifact("page-pending.png"))
        async with serve(tmp_path, "--port", str(port), name="serve-again") as again:
            answer = await page.wait_for(f"{ANSWERS}.find(t => t.includes('typed while down'))", timeout=60)
            assert answer == "echo: typed while down (turn 1)"
            await page.wait_for("document.querySelector('#log .pending') === null")
            # Exactly once: the record holds one user message and one answer,
            # whatever the number of tries the page made.
            async with httpx.AsyncClient(headers=again.headers) as client:
                transcript = (await client.get(again.url + "/sessions/root/messages")).json()["messages"]
            assert [(m["role"], m["parts"][0]["text"]) for m in transcript] == [
                ("user", "typed while down"),
                ("assistant", "echo: typed while down (turn 1)"),
            ]
            await page.screenshot(artifact("page-after-restart.png"))
        assert page.errors == []


async def test_the_stop_button_aborts_a_slow_turn(tmp_path: Path) -> None:
    async with serve(tmp_path) as served, chromium() as browser:
        page = await open_root(served.page, browser)
        await type_and_send(page, "slow 60000 never finishes")
        await page.wait_for("!document.getElementById('working').hidden")
        await page.evaluate("document.getElementById('stop').click()")
        await page.wait_for("document.getElementById('outcome').innerText === 'stopped'")
        await page.wait_for("document.getElementById('working').hidden")
        await page.screenshot(artifact("page-stopped.png"))
        assert await page.evaluate(ANSWERS) == []
        async with httpx.AsyncClient(headers=served.headers) as client:
            transcript = (await client.get(served.url + "/sessions/root/messages")).json()["messages"]
        assert [m["role"] for m in transcript] == ["user"]
        assert page.errors == []


BOARD_ROWS = ("[...document.querySelectorAll('#board li')].map(r => "
              "[r.dataset.session, r.dataset.router, r.querySelector('.state').innerText])")


async def test_the_board_shows_every_session_and_a_new_one_without_a_reload(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with serve(tmp_path / "one") as served, chromium() as browser:
        async with httpx.AsyncClient(base_url=served.url, headers=served.headers, timeout=30) as client:
            for name in ("alpha", "busy"):
                assert (await client.post("/sessions", json={"id": name})).status_code == 201
            # A slow turn keeps "busy" working while the page looks.
            sent = await client.post("/sessions/busy/messages", json={"text": "slow 30000 still going", "eventId": "s1"})
            assert sent.status_code == 200
            page = await open_root(served.page, browser)
            rows = await page.wait_for(
                f"(() => {{ const rows = {BOARD_ROWS}; return rows.length === 3 "
                "&& rows.some(r => r[0] === 'busy' && r[2] === 'working') ? rows : null; })()"
            )
            assert sorted((session, state) for session, _, state in rows) == [
                ("alpha", "idle"), ("busy", "working"), ("root", "idle")
            ]
            await page.screenshot(artifact("board-three.png"))
            # A session created elsewhere (another router's root) appears live.
            async with serve(tmp_path / "two", name="serve-two"):
                rows = await page.wait_for(f"(() => {{ const rows = {BOARD_ROWS}; return rows.length === 4 ? rows : null; }})()",
                                           timeout=30)
                other = [row for row in rows if row[1]]
                assert [(session, state) for session, _, state in other] == [("root", "idle")]
                await page.screenshot(artifact("board-four.png"))
            await client.post("/sessions/busy/abort", json={})
        assert page.errors == []


async def test_a_parked_session_shows_its_reset_and_the_park_can_be_cancelled(tmp_path: Path) -> None:
    """The provider's usage limit (an adapter that meets it, docs/limits.md):
    the page shows the park with its reset, resume now and cancel."""
    import time

    from tests.local.test_parking_cli import route_to_the_daemon
    from tests.support.daemons import spawn_daemon

    resets_at = int(time.time() * 1000) + 600_000  # the park holds while the page looks
    env = {"LIMIT_RESETS_AT": str(resets_at), "LIMIT_LOG": str(tmp_path / "provider.log")}
    async with spawn_daemon("ours", adapter="tests.limits.limit_adapter:adapter", env=env) as daemon:
        route_to_the_daemon(tmp_path / "settings", daemon.http_url, daemon.token)
        async with serve(tmp_path, "--daemon", daemon.url, env={"ROUTER_DAEMON_TOKEN": daemon.token}) as served, chromium() as browser:
            async with httpx.AsyncClient(base_url=served.url, headers=served.headers, timeout=60) as client:
                assert (await client.post("/sessions", json={"id": "a"})).status_code == 201
                sent = await client.post("/sessions/a/messages", json={"text": "first", "eventId": "e1", "wait": True})
                assert sent.json()["reply"]["kept"] is True
            page = await browser.open(served.page)
            await page.wait_for("document.querySelector('#board li[data-session=\"a\"]') !== null")
            await page.evaluate("document.querySelector('#board li[data-session=\"a\"] button').click()")
            await page.wait_for("document.getElementById('state').innerText === 'parked'", timeout=30)
            notice = await page.wait_for(
                "(() => { const n = document.getElementById('notice'); return !n.hidden && "
                "n.innerText.includes('usage limit') ? n.innerText : null; })()")
            assert "resets" in notice and "UTC" in notice and "account default" in notice
            assert await page.evaluate("document.getElementById('resume').innerText") == "resume now"
            assert await page.evaluate("!document.getElementById('cancel-park').hidden")
            await type_and_send(page, "kept by the park")
            await page.wait_for("document.getElementById('outcome').innerText.includes('kept by the park: kept: parked')")
            await page.screenshot(artifact("page-parked.png"))
            await page.evaluate("document.getElementById('cancel-park').click()")
            await page.wait_for("document.getElementById('outcome').innerText.startsWith('the park is cancelled')")
            await page.wait_for("document.getElementById('state').innerText !== 'parked'", timeout=30)
            assert page.errors == []
