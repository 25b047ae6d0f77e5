"""Web Push end to end with real cryptography: the router's POST reaches a
push service written for the test (RFC 8030, loopback), the test (the
browser) decrypts the aes128gcm body with the keys it made (RFC 8291) and
verifies the VAPID JWT under the router's public key (RFC 8292); a 410
removes the subscription."""

from __future__ import annotations

import os
import stat

import trio

from router.notify import record
from router.notify.core import parse_subscription
from tests.notify.conftest import Rig, waiting_ask, write_settings
from tests.notify.pushservice import Browser, PushService, verify_vapid
from tests.support.polling import until


async def _subscribe(rig: Rig, browser: Browser, device: str, name: str) -> str:
    sub = parse_subscription(browser.subscription, allow_http=True)
    await rig.db(record.put_subscription, sub, device, name)
    return sub.id


async def _receipts(rig: Rig, event_kind: str = "ask") -> list[dict]:
    events = [e for e in await rig.events() if e["kind"] == event_kind]
    return events[0]["receipts"] if events else []


async def test_an_ask_reaches_the_phone_encrypted_and_signed(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=["web-push"],
                   notify={"notifiers": {"web-push": {"subject": "mailto:me@example.org"}}})
    with PushService() as service:
        browser = Browser(service.endpoint("phone"))
        await _subscribe(rig, browser, "dev-1", "iPhone Safari")
        await rig.log.call(rig.log.put_ask, waiting_ask())
        with trio.fail_after(20):
            await until(lambda: len(service.accepted("phone")) == 1)
            while not any(r["outcome"] == "sent" for r in await _receipts(rig)):
                await trio.sleep(0.01)
        received = service.accepted("phone")[0]
        body = browser.decrypt(received)
        public_key = await rig.service.public_key()
        claims = verify_vapid(received, public_key)
    assert claims["aud"] == f"http://127.0.0.1:{service.port}"
    assert claims["sub"] == "mailto:me@example.org"
    assert body["kind"] == "ask" and body["session"] == "s-1"
    assert body["ask"] == {"id": "ask-1", "tool": "Bash", "session": "s-1"}
    assert body["url"] == "/?session=s-1" and body["id"].startswith("ntf-")
    assert body["title"] and "ls" in body["body"] and type(body["at"]) is int
    assert received.headers["ttl"] and received.headers["urgency"] == "high"
    assert len(received.headers["topic"]) <= 32
    (receipt,) = await _receipts(rig)
    assert receipt["outcome"] == "sent" and receipt["status"] == 201
    assert receipt["destination"] == "web-push: iPhone Safari"
    # The key pair was made once, 0600, and is the one the page gets.
    key = rig.tmp / "data" / "vapid.pem"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert await rig.service.public_key() == public_key


async def test_a_410_removes_the_subscription_and_fails_the_receipt(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=["web-push"])
    with PushService() as service:
        browser = Browser(service.endpoint("old", mode="gone"))
        await _subscribe(rig, browser, "dev-2", "Android Chrome")
        await rig.log.call(rig.log.put_ask, waiting_ask("ask-2"))
        with trio.fail_after(20):
            while not any(r["outcome"] == "failed" for r in await _receipts(rig)):
                await trio.sleep(0.01)
    (receipt,) = await _receipts(rig)
    assert "410" in receipt["detail"]
    assert await rig.db(record.subscriptions) == []
    assert len(service.refused) == 1


async def test_the_vapid_key_is_refused_while_web_push_is_off(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=[])
    assert await rig.service.public_key() is None


async def test_an_unreachable_push_service_is_a_failed_receipt_and_a_shown_error(rig: Rig) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    write_settings(rig.settings_dir, notifiers=["web-push"])
    browser = Browser(f"http://127.0.0.1:{port}/push/nobody")
    await _subscribe(rig, browser, "dev-3", "Linux Firefox")
    await rig.log.call(rig.log.put_ask, waiting_ask("ask-3"))
    with trio.fail_after(20):
        while not any(r["outcome"] == "failed" for r in await _receipts(rig)):
            await trio.sleep(0.01)
    (receipt,) = await _receipts(rig)
    assert "ConnectError" in receipt["detail"]
    view = await rig.service.view()
    (destination,) = view["destinations"]
    assert destination["label"] == "web-push: Linux Firefox" and "ConnectError" in destination["last_error"]["message"]
    # The subscription stays: a push service that is down now may answer later.
    assert len(await rig.db(record.subscriptions)) == 1
