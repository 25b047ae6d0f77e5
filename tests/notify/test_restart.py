"""A real ``router serve``: the page's routes (subscribe, presence, the
session's setting, the listing and the settings view), ``router
notifications``, and the outbox across a SIGKILL: a router killed after the
event and before its send completed (the push service holds the POST and
never answers) sends it exactly once after its restart."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import trio

from tests.api.processes import REPO, ROUTER, environment, serve
from tests.notify.pushservice import Browser, PushService, verify_vapid
from tests.support.polling import until


def _switch_on(settings: Path, urls: list[str]) -> None:
    plugins = json.loads((settings / "plugins.json").read_text())
    plugins["plugins"]["notifier"] = ["web-push", "apprise"]
    (settings / "plugins.json").write_text(json.dumps(plugins))
    path = settings / "notifications.json"
    path.write_text(json.dumps({"notifiers": {"web-push": {"loopback_http": True}, "apprise": {"urls": urls}}}))
    os.chmod(path, 0o600)
    limits = json.loads((settings / "limits.json").read_text())
    limits["limits"] = {"tokens": {"instances": {"default": {"limit": 1}}}}  # the first turn stops root
    (settings / "limits.json").write_text(json.dumps(limits))


async def _notifications(client: Any) -> list[dict[str, Any]]:
    answer = await client.get("/notifications")
    assert answer.status_code == 200, answer.text
    return answer.json()["notifications"]


async def test_killed_before_the_send_sends_once_after_the_restart(tmp_path: Path) -> None:
    settings = tmp_path / "settings"
    with PushService() as push:
        endpoint = push.endpoint("phone", mode="hold")
        browser = Browser(endpoint)
        async with serve(tmp_path, name="first") as served:
            async with served.client() as client:
                assert (await client.get("/notifications/vapid")).json()["error"] == "notifier-off"
                _switch_on(settings, ["notaservice://tok3n@example.org"])
                key = (await client.get("/notifications/vapid")).json()["public_key"]
                made = await client.post("/notifications/subscriptions", json=browser.subscription)
                assert made.status_code == 201 and made.json()["device"] == "local", made.text
                again = await client.post("/notifications/subscriptions", json=browser.subscription)
                assert again.json()["id"] == made.json()["id"]  # the same endpoint: replaced, not doubled
                bad = await client.post("/notifications/subscriptions", json={"endpoint": "ftp://x", "keys": {}})
                assert bad.status_code == 400 and bad.json()["error"] == "bad-subscription"
                assert (await client.post("/presence", json={"visible": True, "session": "elsewhere"})).status_code \
                    == 204
                assert (await client.post("/presence", json={"visible": "yes"})).json()["error"] == "bad-presence"
                setting = await client.post("/sessions/other/notify", json={"muted": True})
                assert setting.json() == {"session": "other", "muted": True, "turn_ended": False}
                view = (await client.get("/notifications/settings")).json()
                assert [e["error"] for e in view["errors"]] == ["apprise-bad-url"]
                assert "tok3n" not in json.dumps(view) and view["sessions"]["other"]["muted"] is True
                sent = await client.post("/sessions/root/messages", json={"text": "hi"})
                assert sent.status_code == 200, sent.text
                with trio.fail_after(30):
                    await until(lambda: push.held == 1)  # the POST is in flight: it cannot have completed
                (event,) = await _notifications(client)
                assert event["kind"] == "limit-stopped" and event["session"] == "root"
                assert [r["outcome"] for r in event["receipts"]] == ["pending"]
            served.process.send_signal(signal.SIGKILL)
            await served.process.wait()
        push.mode["/push/phone"] = "accept"
        async with serve(tmp_path, name="second") as served:
            async with served.client() as client:
                with trio.fail_after(30):
                    while True:
                        (event,) = await _notifications(client)
                        if [r["outcome"] for r in event["receipts"]] == ["sent"]:
                            break
                        await trio.sleep(0.05)
                body = browser.decrypt(push.accepted("phone")[0])
                assert body["id"] == event["id"] and body["kind"] == "limit-stopped"
                verify_vapid(push.accepted("phone")[0], key)
                cli = await trio.run_process([*ROUTER, "notifications", "--json"], capture_stdout=True,
                                             capture_stderr=True, check=False, env=environment(), cwd=REPO)
                listed = json.loads(cli.stdout)
                assert cli.returncode == 1  # the bad apprise URL is a configuration error
                assert [e["error"] for e in listed["errors"]] == ["apprise-bad-url"]
                assert [n["id"] for n in listed["notifications"]] == [event["id"]]
                text = await trio.run_process([*ROUTER, "notifications"], capture_stdout=True, check=False,
                                              env=environment(), cwd=REPO)
                out = text.stdout.decode()
                assert "limit-stopped" in out and "web-push: local: sent 201" in out and "apprise-bad-url" in out
                assert "tok3n" not in out
        # Once: the restart found the pending receipt, sent, and wrote it final; nothing else went out.
        assert len(push.accepted("phone")) == 1
