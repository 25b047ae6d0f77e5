"""The page's side of notifications in a real headless Chromium against a
real ``router serve`` (its web-push notifier on), at phone size (390×844,
mobile, touch) and on a desktop (1280×800).

What each test names: the "Notify me on this device" control says in a
sentence when this browser cannot be notified (headless Chromium has no
push service: a real subscribe never settles, and the page says so); with a
subscription the test made (tests/notify_page/worker.py) the page
subscribes, the router keeps it for the device, and the page reports its
presence (``POST /presence``, answered 204) so an event of the session it
shows is suppressed as visible; away from it, the router's real encrypted
push reaches the test's push service, and that payload, delivered to the
page's worker, is shown; the session's notifications with their receipts
and its mute toggle are on the page; stopped, the router forgets the
subscription.

Screenshots go to ``.artifacts/`` (``ROUTER_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.api.processes import Served, serve
from tests.browser.test_page import artifact
from tests.browser.test_phone import DESKTOP, PHONE, navigate
from tests.notify.pushservice import Browser as PushKeys
from tests.notify.pushservice import PushService, verify_vapid
from tests.notify_page.worker import (SHOWN, deliver, delivered_and_shown, grant_notifications, presence_posts,
                                      stub_push_manager)
from tests.support.chromium import Browser, Page, chromium
from tests.support.polling import until

STATE = "document.getElementById('notify').dataset.state"
SENTENCE = "document.getElementById('notify-state').innerText"


def switch_on(settings: Path, *, stop_after_one_turn: bool = False) -> None:
    """The web-push notifier on (http endpoints on loopback allowed for the
    test's push service), as a person writes the settings; and a token limit
    that stops root after its first turn (a ``limit-stopped`` event)."""
    plugins = json.loads((settings / "plugins.json").read_text())
    plugins["plugins"]["notifier"] = ["web-push"]
    (settings / "plugins.json").write_text(json.dumps(plugins))
    path = settings / "notifications.json"
    path.write_text(json.dumps({"notifiers": {"web-push": {"loopback_http": True}}}))
    os.chmod(path, 0o600)
    if stop_after_one_turn:
        limits = json.loads((settings / "limits.json").read_text())
        (settings / "limits.json.before").write_text(json.dumps(limits))
        limits["limits"] = {"tokens": {"instances": {"default": {"limit": 1}}}}
        (settings / "limits.json").write_text(json.dumps(limits))


def lift_the_limit(settings: Path) -> None:
    (settings / "limits.json.before").replace(settings / "limits.json")


async def tab(browser: Browser, served: Served, size: tuple[int, int, bool], script: str | None = None) -> Page:
    """A tab of ``size`` (notifications allowed; ``script`` run before the
    page's own) on the page, the network watched."""
    await grant_notifications(browser, served.url)
    page = await browser.open("about:blank")
    width, height, mobile = size
    await page.emulate(width, height, mobile=mobile)
    await page.send("Emulation.setFocusEmulationEnabled", {"enabled": True})  # focused, as the window in front
    await page.send("Network.enable")
    if script is not None:
        await page.send("Page.addScriptToEvaluateOnNewDocument", {"source": script})
    await navigate(page, served.page)
    return page


async def events(served: Served, session: str) -> list[dict[str, Any]]:
    async with served.client() as client:
        answer = await client.get("/notifications", params={"session": session})
    assert answer.status_code == 200, answer.text
    return answer.json()["notifications"]


async def receipts_of(served: Served, kind: str) -> list[dict[str, Any]]:
    found = [event for event in await events(served, "root") if event["kind"] == kind]
    return found[0]["receipts"] if found else []


async def final_receipt(served: Served, kind: str) -> dict[str, Any]:
    with trio.fail_after(30):
        while True:
            done = [r for r in await receipts_of(served, kind) if r["outcome"] != "pending"]
            if done:
                return done[0]
            await trio.sleep(0.1)


@pytest.mark.timeout(300)
async def test_the_phone_subscribes_reports_presence_and_shows_the_routers_push(tmp_path: Path) -> None:
    with PushService() as service:
        keys = PushKeys(service.endpoint("phone"))
        async with serve(tmp_path) as served, chromium() as browser:
            switch_on(tmp_path / "settings", stop_after_one_turn=True)
            page = await tab(browser, served, PHONE, stub_push_manager(keys.subscription))
            # The control, on the phone's board, says this device is not notified yet.
            assert await page.wait_for(f"{STATE} === 'off' && {SENTENCE}") == \
                "Off: this device gets no notifications."
            control = await page.evaluate(
                "document.getElementById('notify-toggle').getBoundingClientRect().toJSON()")
            assert control["height"] >= 44 and 0 <= control["top"] and control["bottom"] <= PHONE[1]
            assert control["right"] <= PHONE[0]
            await page.screenshot(artifact("phone-notify-off.png"))

            await page.evaluate("document.getElementById('notify-toggle').click()")
            sentence = await page.wait_for(f"{STATE} === 'on' && {SENTENCE}")
            assert sentence == "On: asks and session news come to this device as “local”."
            assert json.loads(await page.evaluate("localStorage.getItem('router.push')"))["endpoint"] == keys.endpoint
            async with served.client() as client:
                view = (await client.get("/notifications/settings")).json()
                key = (await client.get("/notifications/vapid")).json()["public_key"]
            assert [d["label"] for d in view["destinations"]] == ["web-push: local"]
            await page.screenshot(artifact("phone-notify-on.png"))

            # Watching root: presence says so (answered 204), and root's event is suppressed as visible.
            await page.evaluate("document.querySelector('#board li[data-session=\"root\"] button').click()")
            await page.wait_for("document.getElementById('app').dataset.view === 'session'")
            with trio.fail_after(20):
                await until(lambda: ({"visible": True, "session": "root"}, 204) in presence_posts(page))
            async with served.client() as client:
                sent = await client.post("/sessions/root/messages", json={"text": "one turn", "eventId": "t1"})
                assert sent.status_code == 200, sent.text
            stopped = await final_receipt(served, "limit-stopped")
            assert (stopped["outcome"], stopped["code"]) == ("suppressed", "visible"), stopped
            assert service.accepted("phone") == []

            # The session's notifications, with their receipts, and its mute toggle.
            await page.evaluate("document.getElementById('alerts').open = true")
            shown = await page.wait_for("document.getElementById('alerts-list').innerText.includes('suppressed') && "
                                        "document.getElementById('alerts-list').innerText")
            assert "web-push: local: suppressed (visible" in shown
            await page.screenshot(artifact("phone-session-notifications.png"))
            await page.evaluate("document.getElementById('mute').click()")
            await page.wait_for("document.getElementById('alerts-summary').innerText.includes('muted')")
            async with served.client() as client:
                assert (await client.get("/notifications/settings")).json()["sessions"]["root"]["muted"] is True
            await page.evaluate("document.getElementById('mute').click()")
            await page.wait_for("!document.getElementById('alerts-summary').innerText.includes('muted')")

            # Back on the board (the session out of sight): root's next event is pushed, encrypted for this device.
            await page.evaluate("document.getElementById('back').click()")
            await page.wait_for("document.getElementById('app').dataset.view === 'board'")
            with trio.fail_after(20):
                await until(lambda: presence_posts(page)[-1] == ({"visible": True, "session": None}, 204))
            lift_the_limit(tmp_path / "settings")
            async with served.client() as client:
                resumed = await client.post("/sessions/root/resume", json={})
                assert resumed.status_code == 200, resumed.text
            with trio.move_on_after(30):
                await until(lambda: len(service.accepted("phone")) == 1)
            assert len(service.accepted("phone")) == 1, [(e["kind"], [r["detail"] for r in e["receipts"]]) for e in await events(served, "root")]
            received = service.accepted("phone")[0]
            verify_vapid(received, key)
            payload = keys.decrypt(received)
            assert payload["kind"] == "resumed" and payload["session"] == "root" and payload["ask"] is None

            # That payload, delivered to the page's worker, is shown: one notification, tagged with its event.
            (notification,) = await delivered_and_shown(page, served.url, payload)
            assert notification["tag"] == payload["id"] and notification["title"] == payload["title"]
            assert notification["body"] == payload["body"] and notification["data"] == payload
            assert notification["actions"] == [] and notification["requireInteraction"] is False
            # Delivered again (a push service may repeat): still one.
            await deliver(page, served.url, payload)
            assert len(await page.evaluate(SHOWN)) == 1

            # Stopped: the router forgets this device's subscription, and the control says it is off.
            await page.evaluate("document.getElementById('notify-toggle').click()")
            await page.wait_for(f"{STATE} === 'off'")
            assert await page.evaluate("localStorage.getItem('router.push')") is None
            async with served.client() as client:
                assert (await client.get("/notifications/settings")).json()["destinations"] == []
            assert page.errors == []


@pytest.mark.timeout(300)
async def test_without_a_push_service_the_control_says_so(tmp_path: Path) -> None:
    async with serve(tmp_path) as served, chromium() as browser:
        page = await tab(browser, served, DESKTOP)
        # The notifier off: the control says where to switch it on.
        off = await page.wait_for(f"{STATE} === 'notifier-off' && {SENTENCE}")
        assert off.startswith("Unavailable where the router runs: the web-push notifier is off") and "plugins.json" in off
        assert off.count("notifier is off") == 1
        assert await page.evaluate("document.getElementById('notify-toggle').disabled") is True
        switch_on(tmp_path / "settings")
        await navigate(page, served.page)
        await page.wait_for(f"{STATE} === 'off'")
        # Headless Chromium's own subscribe never settles: the page stops waiting and says why.
        await page.evaluate("document.getElementById('notify-toggle').click()")
        sentence = await page.wait_for(f"{STATE} === 'no-push-service' && {SENTENCE}", timeout=30)
        assert sentence.startswith("Unavailable: this browser has no push service to subscribe with")
        await page.wait_for("document.querySelector('#board li[data-session=\"root\"]') !== null")
        await page.wait_for("document.getElementById('alerts').hidden === false")
        await page.evaluate("document.getElementById('alerts').open = true")
        await page.wait_for("document.getElementById('alerts-list').innerText.includes('No notifications')")
        await page.screenshot(artifact("desktop-notify-no-push-service.png"))
        async with served.client() as client:
            assert (await client.get("/notifications/settings")).json()["destinations"] == []
        assert page.errors == []
