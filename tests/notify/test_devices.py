"""The routes with paired devices behind the gate (in-process, real loopback
sockets, ``--behind-proxy``): a subscription is tied to the device whose
credential came, a device removes only its own, and a device's presence
suppresses the notification for it (and says so in every receipt); a
revoked device's subscriptions are removed and it hears nothing more."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import trio

from router.api.context import ApiConfig
from router.api.server import ApiServer
from router.board.service import LocalBoard
from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import Host, HostSettings, Store
from router.notify.outbox import Notifications
from router.plugins.layer import PluginLayer
from router.plugins.settings import SettingsDir
from router.plugins.usage import MemoryRecords
from router.remote import DeviceStore, Reach, ReachConfig
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.notify.conftest import waiting_ask, write_settings
from tests.notify.pushservice import Browser, PushService
from tests.turns.conftest import FAST, start_daemon

TOKEN = "test-token-0123456789abcdef"
AUTH = {"authorization": f"Bearer {TOKEN}"}
PUBLIC = "https://box.tail1234.ts.net"
PROXIED = {"x-forwarded-host": "box.tail1234.ts.net", "x-forwarded-proto": "https", "x-forwarded-for": "100.64.0.7"}


@asynccontextmanager
async def _serving(tmp_path: Path, env: dict[str, str], *, board: bool = False,
                   ) -> AsyncIterator[tuple[httpx.AsyncClient, Notifications]]:
    opened: list[Any] = []
    try:
        async with trio.open_nursery() as nursery:
            endpoint, _ = await start_daemon(nursery, echo_adapter)
            store = Store(tmp_path / "host.db")
            opened.append(store)
            host = Host(store, endpoint, HostSettings(**FAST))  # type: ignore[arg-type]
            await nursery.start(host.run)
            log = DeliveryLog(tmp_path / "turns.db")
            opened.append(log)
            registry = SessionRegistry()
            await nursery.start(registry.run)
            router = TurnRouter(deliveries=log, registry=registry, host=host, env=env)
            settings = SettingsDir(tmp_path / "settings")
            write_settings(tmp_path / "settings", notifiers=["web-push"],
                           notify={"notifiers": {"web-push": {"loopback_http": True}}})
            notifications = Notifications(deliveries=log, host_store=store, settings=settings,
                                          settings_dir=tmp_path / "settings", data_dir=tmp_path / "data",
                                          claimant="r1")
            await notifications.attach()
            router.notifications = notifications
            await nursery.start(notifications.run)
            layer = PluginLayer(settings=settings, records=MemoryRecords())
            reach = Reach(ReachConfig(behind_proxy=True, public_url=PUBLIC), settings_dir=tmp_path / "settings",
                          devices=DeviceStore.open(None, tmp_path))
            await nursery.start(reach.run)
            notifications.revoked_devices = reach.revoked_among  # as router serve wires them
            server = ApiServer(router, layer, port=0, token=TOKEN, reach=reach,
                               board=LocalBoard(router, env=env) if board else None,
                               config=ApiConfig(live_keepalive=0.2))  # a closed stream is noticed soon
            url = await nursery.start(server.run)
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                yield client, notifications
            nursery.cancel_scope.cancel()
    finally:
        for each in opened:
            each.close()


async def _pair(client: httpx.AsyncClient, agent: str) -> dict[str, str]:
    code = (await client.post("/pairings", json={}, headers=AUTH)).json()["code"]
    paired = await client.post("/pair", json={"code": code}, headers={**PROXIED, "origin": PUBLIC,
                                                                      "user-agent": agent})
    assert paired.status_code == 201, paired.text
    return {**PROXIED, "authorization": f"Bearer {paired.json()['token']}"}


async def test_subscriptions_and_presence_are_the_device_s_own(tmp_path: Path, env: dict[str, str]) -> None:
    async with _serving(tmp_path, env) as (client, notifications):
        phone = await _pair(client, "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0) Safari/604.1")
        laptop = await _pair(client, "Mozilla/5.0 (Macintosh) Chrome/140.0 Safari/537.36")
        assert (await client.get("/notifications/vapid", headers=phone)).status_code == 200
        with PushService() as push:
            phone_browser, laptop_browser = Browser(push.endpoint("phone")), Browser(push.endpoint("laptop"))
            made = await client.post("/notifications/subscriptions", json=phone_browser.subscription, headers=phone)
            assert made.status_code == 201 and made.json()["device"] == "iPhone Safari"
            other = await client.post("/notifications/subscriptions", json=laptop_browser.subscription,
                                      headers=laptop)
            assert other.json()["device"] == "Mac Chrome"
            # The laptop cannot remove the phone's subscription.
            refused = await client.delete(f"/notifications/subscriptions/{made.json()['id']}", headers=laptop)
            assert (refused.status_code, refused.json()["error"]) == (404, "unknown-subscription")
            # The laptop shows the session: it gets nothing, and neither does the phone.
            shown = await client.post("/presence", json={"visible": True, "session": "s-1"}, headers=laptop)
            assert shown.status_code == 204
            await notifications.deliveries.call(notifications.deliveries.put_ask, waiting_ask("ask-1", "s-1"))
            with trio.fail_after(20):
                while True:
                    listed = (await client.get("/notifications", params={"session": "s-1"}, headers=phone)).json()
                    receipts = listed["notifications"][0]["receipts"] if listed["notifications"] else []
                    if len(receipts) == 2:
                        break
                    await trio.sleep(0.02)
            why = {r["destination"]: r["detail"] for r in receipts}
            assert why["web-push: Mac Chrome"].startswith("visible: the session is open on this device")
            assert why["web-push: iPhone Safari"] == "visible elsewhere: the session is open on Mac Chrome"
            # The laptop looks away: the next ask reaches both.
            await client.post("/presence", json={"visible": False, "session": None}, headers=laptop)
            await notifications.deliveries.call(notifications.deliveries.put_ask, waiting_ask("ask-2", "s-1"))
            with trio.fail_after(20):
                while len(push.received) < 2:
                    await trio.sleep(0.02)
            assert phone_browser.decrypt(push.accepted("phone")[0])["ask"]["id"] == "ask-2"
            gone = await client.delete(f"/notifications/subscriptions/{made.json()['id']}", headers=phone)
            assert gone.status_code == 204


async def test_a_revoked_device_is_sent_nothing_more(tmp_path: Path, env: dict[str, str]) -> None:
    async with _serving(tmp_path, env) as (client, notifications):
        phone = await _pair(client, "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0) Safari/604.1")
        laptop = await _pair(client, "Mozilla/5.0 (Macintosh) Chrome/140.0 Safari/537.36")
        with PushService() as push:
            for device, browser in ((phone, Browser(push.endpoint("phone"))),
                                    (laptop, Browser(push.endpoint("laptop")))):
                made = await client.post("/notifications/subscriptions", json=browser.subscription, headers=device)
                assert made.status_code == 201, made.text
            revoked = await client.post("/devices/iPhone Safari/revoke", json={}, headers=AUTH)
            assert revoked.status_code == 200, revoked.text
            await notifications.deliveries.call(notifications.deliveries.put_ask, waiting_ask("ask-1", "s-1"))
            with trio.fail_after(20):
                while not push.accepted("laptop"):
                    await trio.sleep(0.02)
            listed = (await client.get("/notifications", params={"session": "s-1"}, headers=AUTH)).json()
            assert [r["destination"] for r in listed["notifications"][0]["receipts"]] == ["web-push: Mac Chrome"]
            assert push.accepted("phone") == []
            settings = (await client.get("/notifications/settings", headers=AUTH)).json()
            assert [d["label"] for d in settings["destinations"]] == ["web-push: Mac Chrome"]  # the phone's removed


async def test_a_closed_board_stream_ends_the_device_s_presence(tmp_path: Path, env: dict[str, str]) -> None:
    async with _serving(tmp_path, env, board=True) as (client, notifications):
        laptop = await _pair(client, "Mozilla/5.0 (Macintosh) Chrome/140.0 Safari/537.36")
        with PushService() as push:
            browser = Browser(push.endpoint("laptop"))
            made = await client.post("/notifications/subscriptions", json=browser.subscription, headers=laptop)
            assert made.status_code == 201
            async with client.stream("GET", "/board/live", headers=laptop) as live:
                assert live.status_code == 200
                lines = live.aiter_lines()
                while not (await lines.__anext__()).startswith("event: snapshot"):
                    pass
                shown = await client.post("/presence", json={"visible": True, "session": "s-1"}, headers=laptop)
                assert shown.status_code == 204
                assert list(notifications.presence.watching("s-1", time.time()).values()) == ["Mac Chrome"]
            # The page's stream closed: the laptop no longer watches, long before presence's own lapse.
            with trio.fail_after(20):
                while notifications.presence.watching("s-1", time.time()):
                    await trio.sleep(0.02)
            await notifications.deliveries.call(notifications.deliveries.put_ask, waiting_ask("ask-1", "s-1"))
            with trio.fail_after(20):
                while not push.accepted("laptop"):
                    await trio.sleep(0.02)
            assert browser.decrypt(push.accepted("laptop")[0])["ask"]["id"] == "ask-1"
