"""The page's side of pairing and devices (``POST /pairings``, ``GET
/devices``, ``POST /devices/<name>/revoke``: the ``reach`` branch's
``router/remote/``, not on this branch yet), at a phone's size, in a real
Chromium against a real ``router serve``.

Those routes are tested against their server where they are built; here
the browser's requests to them are answered by the test over CDP
(``Fetch.requestPaused`` → ``Fetch.fulfillRequest``) with the shapes that
module documents: the buttons shown, the QR code as an image that runs
nothing, revoke. Projects, changes and end run against the real routes:
``tests/browser/test_worktrees_page.py``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import trio

from tests.api.processes import serve
from tests.browser.test_page import artifact
from tests.browser.test_phone import PHONE, navigate, open_at
from tests.support.chromium import Page, chromium

QR = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 4 4" onload="window.__hit=1"><rect width="2" height="2"/></svg>'


class Routes:
    """Answers the paused requests: each (method, path) to a status and body;
    records what was posted."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.posted: list[tuple[str, Any]] = []

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        if (method, path) == ("POST", "/pairings"):
            return 201, {"url": "https://router.test:8443/pair#ABCD-1234", "code": "ABCD-1234",
                         "expiresAt": 1796107200000, "qrSvg": QR}
        if (method, path) == ("GET", "/devices"):
            return 200, {"devices": [{"name": "phone", "firstUse": 1796100000000, "lastUse": 1796107000000}]}
        if (method, path) == ("POST", "/devices/phone/revoke"):
            return 200, {"device": {"name": "phone", "revoked": True}}
        return None

    async def run(self) -> None:
        await self.page.send("Fetch.enable", {"patterns": [{"urlPattern": pattern} for pattern in (
            "*/pairings*", "*/devices*")]})
        seen = 0
        while True:
            events = self.page.browser.events
            while seen < len(events):
                event = events[seen]
                seen += 1
                if event.get("method") != "Fetch.requestPaused" or event.get("sessionId") != self.page.session:
                    continue
                await self.fulfil(event["params"])
            await trio.sleep(0.02)

    async def fulfil(self, params: dict[str, Any]) -> None:
        request = params["request"]
        path = "/" + request["url"].split("/", 3)[3].split("?")[0]
        body = json.loads(request["postData"]) if request.get("postData") else None
        if request["method"] == "POST":
            self.posted.append((path, body))
        answer = self.answer(request["method"], path, body)
        if answer is None:
            await self.page.send("Fetch.continueRequest", {"requestId": params["requestId"]})
            return
        status, value = answer
        await self.page.send("Fetch.fulfillRequest", {
            "requestId": params["requestId"], "responseCode": status,
            "responseHeaders": [{"name": "content-type", "value": "application/json"}],
            "body": base64.b64encode(json.dumps(value).encode()).decode()})


async def test_pairing_and_devices_at_a_phones_size(tmp_path: Path) -> None:
    async with serve(tmp_path) as served, chromium() as browser, trio.open_nursery() as nursery:
        page = await open_at(browser, "about:blank", PHONE)
        routes = Routes(page)
        nursery.start_soon(routes.run)
        await navigate(page, served.page)
        await page.wait_for("!document.getElementById('pair').hidden && !document.getElementById('devices').hidden")

        await page.evaluate("document.getElementById('pair').click()")
        await page.wait_for("document.getElementById('sheet').open && document.querySelector('#sheet img.qr') !== null")
        shown = await page.evaluate("({src: document.querySelector('#sheet img.qr').src, text: document.getElementById('sheet').innerText})")
        assert shown["src"].startswith("data:image/svg+xml") and "ABCD-1234" in shown["text"] and "router.test:8443/pair" in shown["text"]
        await page.screenshot(artifact("phone-pair.png"))
        assert await page.evaluate("window.__hit === undefined")
        await page.evaluate("document.getElementById('sheet-close').click()")

        await page.evaluate("document.getElementById('devices').click()")
        await page.wait_for("document.getElementById('sheet').open && document.getElementById('sheet').innerText.includes('phone')")
        await page.evaluate("document.querySelector('#sheet button.deny').click()")
        await page.wait_for("document.getElementById('outcome').innerText === 'phone revoked'")
        await page.evaluate("document.getElementById('sheet').close()")

        assert page.errors == []
        nursery.cancel_scope.cancel()
