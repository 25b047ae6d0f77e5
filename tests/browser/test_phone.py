"""The page as a phone app and on a desktop, in a real headless Chromium
against a real ``router serve``: at 390×844 (CDP device metrics, mobile,
touch) and 1280×800.

What each test names: the conversation scrolls in its own panel and the send
box stays in view after many messages, following the newest unless the
person scrolled up (then the new-messages pill); a send is answered live,
its outcome told in words, its Markdown rendered and an agent's
``<script>`` / ``onerror`` inert; a refused credential blocks the page with
a notice; offline, the page opens from its service worker and a message
typed there is kept and sent exactly once when the router is back; and
Chromium finds the page installable (its manifest, icons and worker).

Screenshots go to ``.artifacts/`` (``ROUTER_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from tests.api.processes import serve
from tests.browser.test_page import ANSWERS, artifact, free_port
from tests.support.chromium import Browser, Page, ProtocolError, chromium

PHONE = (390, 844, True)
DESKTOP = (1280, 800, False)
SIZES = pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])

LAYOUT = """(() => {
  const log = document.getElementById('log'), send = document.getElementById('send').getBoundingClientRect();
  return {pageScroll: document.scrollingElement.scrollHeight, inner: innerHeight, logHeight: log.scrollHeight,
          logClient: log.clientHeight, logWidth: log.clientWidth, below: log.scrollHeight - log.scrollTop - log.clientHeight,
          top: log.scrollTop, sendTop: send.top, sendBottom: send.bottom};
})()"""
FRAME = "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"


def name(size: tuple[int, int, bool]) -> str:
    return "phone" if size[2] else "desktop"


async def open_at(browser: Browser, url: str, size: tuple[int, int, bool]) -> Page:
    page = await browser.open("about:blank")
    width, height, mobile = size
    await page.emulate(width, height, mobile=mobile)
    await navigate(page, url)
    return page


async def navigate(page: Page, url: str) -> None:
    """``url`` loaded: the new document's, not the old one's, readiness (an
    evaluation while the navigation commits may find no context: asked again)."""
    await page.send("Page.navigate", {"url": url})
    origin = url.split("?")[0].split("#")[0]
    with trio.fail_after(30):
        while True:
            try:
                if await page.evaluate(f"location.href.startsWith({json.dumps(origin)}) && document.readyState === 'complete'"):
                    return
            except ProtocolError:
                pass
            await trio.sleep(0.05)


async def open_root(page: Page, size: tuple[int, int, bool]) -> None:
    """The root session's view: tapped on the phone's board; on a desktop
    the first session opens beside the board by itself."""
    await page.wait_for("document.querySelector('#board li[data-session=\"root\"]') !== null")
    if size[2]:
        assert await page.evaluate("getComputedStyle(document.getElementById('session-view')).display") == "none"
        await page.wait_for("document.getElementById('connection').dataset.state === 'live'")
        await page.screenshot(artifact("phone-board.png"))
        await page.evaluate("document.querySelector('#board li[data-session=\"root\"] button').click()")
        assert await page.evaluate("getComputedStyle(document.getElementById('board-view')).display") == "none"
    await page.wait_for("document.getElementById('title').innerText === 'root'")
    await page.wait_for("document.getElementById('connection').dataset.state === 'live'")


async def send_from_the_page(page: Page, text: str, size: tuple[int, int, bool]) -> None:
    """As a person would: the send button on a phone, Enter on a desktop."""
    await page.evaluate("document.getElementById('text').focus()")
    await page.send("Input.insertText", {"text": text})
    key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
    await page.send("Input.dispatchKeyEvent", {"type": "keyDown", "text": "\r", **key})
    await page.send("Input.dispatchKeyEvent", {"type": "keyUp", **key})
    if size[2]:
        # On a touch screen Enter is a new line; the button sends.
        assert await page.evaluate("document.getElementById('text').value") == text + "\n"
        await page.evaluate("document.getElementById('send-button').click()")


async def transcript(served, session: str = "root") -> list[tuple[str, str]]:
    async with httpx.AsyncClient(headers=served.headers, timeout=30) as client:
        messages = (await client.get(f"{served.url}/sessions/{session}/messages")).json()["messages"]
    return [(m["role"], m["parts"][0]["text"]) for m in messages]


@SIZES
async def test_the_conversation_scrolls_in_its_own_panel_and_the_send_box_stays_in_view(
    tmp_path: Path, size: tuple[int, int, bool]
) -> None:
    async with serve(tmp_path) as served, chromium() as browser:
        page = await open_at(browser, served.page, size)
        await open_root(page, size)
        if not size[2]:
            await page.screenshot(artifact("desktop-board.png"))
        # The other engineers' routes are not on this router: their buttons are hidden.
        await page.wait_for("document.getElementById('connection').dataset.state === 'live'")
        assert await page.evaluate("['pair', 'devices', 'changes', 'end'].map((id) => document.getElementById(id).hidden)") == [
            True, True, True, True]
        async with httpx.AsyncClient(base_url=served.url, headers=served.headers, timeout=60) as client:
            for n in range(15):
                text = f"message {n}: " + "a longer line of words to fill the panel " * 3
                answer = await client.post("/sessions/root/messages", json={"text": text, "eventId": f"m{n}"})
                assert answer.status_code == 200
            await page.wait_for(f"{ANSWERS}.length === 15", timeout=60)
            await page.evaluate(FRAME)
            layout = await page.evaluate(LAYOUT)
            width, height, _ = size
            assert layout["pageScroll"] <= layout["inner"] == height  # the page itself never scrolls
            assert layout["logHeight"] > layout["logClient"] * 2  # the conversation does, in its panel
            assert layout["logWidth"] >= (width * 0.9 if size[2] else 700)
            assert 0 < layout["sendTop"] < layout["sendBottom"] <= height  # the send box is in view
            assert layout["below"] < 48  # following the newest
            await page.screenshot(artifact(f"{name(size)}-conversation.png"))

            # Scrolled up, a new answer does not pull the person down: a pill says it came.
            await page.evaluate("document.getElementById('log').scrollTop = 300")
            await page.evaluate(FRAME)
            assert (await page.evaluate(LAYOUT))["top"] == 300
            sent = await client.post("/sessions/root/messages", json={"text": "one more", "eventId": "m15"})
            assert sent.status_code == 200
            await page.wait_for(f"{ANSWERS}.length === 16", timeout=60)
            await page.wait_for("!document.getElementById('pill').hidden")
            assert (await page.evaluate(LAYOUT))["top"] == 300  # where the person left it
            await page.screenshot(artifact(f"{name(size)}-pill.png"))
            await page.evaluate("document.getElementById('pill').click()")
            await page.wait_for(f"{LAYOUT}.below < 48 && document.getElementById('pill').hidden")
        assert page.errors == []


HOSTILE = "**bold** and `code` <img src=x onerror=\"window.__hit=1\"> <script>window.__hit=2</script> [x](javascript:window.__hit=3)"


@SIZES
async def test_a_send_is_answered_live_with_its_markdown_rendered_and_nothing_run(
    tmp_path: Path, size: tuple[int, int, bool]
) -> None:
    async with serve(tmp_path) as served, chromium() as browser:
        page = await open_at(browser, served.page, size)
        await open_root(page, size)
        if size[2]:
            button = await page.evaluate("document.getElementById('send-button').getBoundingClientRect().toJSON()")
            assert button["width"] >= 44 and button["height"] >= 44
        await send_from_the_page(page, HOSTILE, size)
        await page.wait_for("document.querySelector('#log .assistant strong') !== null", timeout=30)
        shown = await page.evaluate(
            "(() => { const a = document.querySelector('#log .assistant'); return {text: a.innerText,"
            " strong: a.querySelector('strong').innerText, code: a.querySelector('code').innerText,"
            " imgs: document.querySelectorAll('#log img').length, scripts: document.querySelectorAll('#log script').length,"
            " links: [...a.querySelectorAll('a')].map(l => l.getAttribute('href')), hit: window.__hit === undefined}; })()")
        assert shown["strong"] == "bold" and shown["code"] == "code"
        assert "<img src=x onerror=" in shown["text"] and "<script>" in shown["text"]  # shown as text
        assert shown["imgs"] == 0 and shown["scripts"] == 0 and shown["links"] == [] and shown["hit"] is True
        note = await page.wait_for("(document.querySelector('#log .user .note') || {}).innerText")
        assert note.startswith("started as a prompt")
        assert await page.evaluate("document.getElementById('text').value") == ""
        await page.screenshot(artifact(f"{name(size)}-answered.png"))
        # Dark by the system's setting.
        await page.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(21, 23, 28)"
        await page.screenshot(artifact(f"{name(size)}-answered-dark.png"))
        assert await transcript(served) == [("user", HOSTILE), ("assistant", f"echo: {HOSTILE} (turn 1)")]
        assert page.errors == []


async def test_a_refused_or_missing_credential_blocks_the_page_with_a_notice(tmp_path: Path) -> None:
    async with serve(tmp_path) as served, chromium() as browser:
        page = await open_at(browser, f"{served.url}/?token=revoked-or-wrong", PHONE)
        text = await page.wait_for("!document.getElementById('blocked').hidden && document.getElementById('blocked').innerText")
        assert "refused this page's access key" in text and "bad-token" in text
        await page.screenshot(artifact("phone-refused.png"))
        await page.evaluate("localStorage.clear()")
        await navigate(page, f"{served.url}/")
        text = await page.wait_for("!document.getElementById('blocked').hidden && document.getElementById('blocked').innerText")
        assert "no access key" in text and "router serve" in text
        assert page.errors == []


async def test_offline_the_page_opens_from_its_worker_and_a_message_is_sent_once_when_back(tmp_path: Path) -> None:
    port = free_port()
    async with chromium() as browser:
        async with serve(tmp_path, "--port", str(port)) as served:
            page = await open_at(browser, served.page, PHONE)
            await open_root(page, PHONE)
            # The worker runs this page and keeps the shell.
            await page.wait_for("navigator.serviceWorker.controller !== null", timeout=30)
            # One shell cache (the token the page hands the worker is kept apart, in `router-credential`).
            await page.wait_for("caches.keys().then((keys) => keys.filter((k) => k.startsWith('router-shell-')).length === 1 && "
                                "caches.match('/').then(Boolean))")
            # The worker holds the page's token, for a notification's Allow (docs/notifications.md, "On the phone").
            kept = await page.wait_for("caches.open('router-credential').then((c) => c.match('/.router-token'))"
                                       ".then((r) => r && r.text())")
            assert kept == served.token
            # Installable: Chromium finds the manifest whole and has nothing against it.
            manifest = await page.send("Page.getAppManifest")
            assert manifest["errors"] == [] and manifest["url"].endswith("/manifest.webmanifest")
            assert (await page.send("Page.getInstallabilityErrors"))["installabilityErrors"] == []
        # The router is gone and the network too: the page still opens.
        await page.send("Network.enable")
        await page.send("Network.emulateNetworkConditions",
                        {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        await navigate(page, f"http://127.0.0.1:{port}/?session=root")
        await page.wait_for("document.getElementById('send') !== null && document.getElementById('title').innerText === 'root'")
        await page.wait_for("['offline', 'reconnecting', 'connecting'].includes(document.getElementById('connection').dataset.state)")
        await send_from_the_page(page, "typed offline", PHONE)
        await page.wait_for("document.querySelector('#log .pending') !== null")
        kept = json.loads(await page.evaluate("localStorage.getItem('router.outbox')"))
        assert [entry["text"] for entry in kept] == ["typed offline"]
        await page.screenshot(artifact("phone-offline.png"))
        async with serve(tmp_path, "--port", str(port), name="serve-again") as again:
            await page.send("Network.emulateNetworkConditions",
                            {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
            answer = await page.wait_for(f"{ANSWERS}.find(t => t.includes('typed offline'))", timeout=60)
            assert answer == "echo: typed offline (turn 1)"
            await page.wait_for("document.querySelector('#log .pending') === null")
            assert json.loads(await page.evaluate("localStorage.getItem('router.outbox')")) == []
            # Exactly once, whatever the number of tries.
            assert await transcript(again) == [("user", "typed offline"), ("assistant", "echo: typed offline (turn 1)")]
            await page.screenshot(artifact("phone-back-online.png"))
        assert [error for error in page.errors if "Failed to fetch" not in error] == []
