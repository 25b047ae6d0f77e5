"""A notification's Allow answers a real Claude Code permission ask, on a
paired phone on another network.

The real Claude Code binary in tmux waits on a Bash call in
``--permission-mode manual`` (tests/e2e_mod: :func:`asked`); ``router serve
--listen`` in one network namespace joins the same board; the phone
(headless Chromium in the other namespace, paired from the QR code:
tests/remote/test_netns.py's :func:`paired_phone`) has the page open on its
board and its service worker running. The push is the router's own payload
of that ask (:func:`router.notify.core.payload` of
:func:`router.notify.core.ask_event`: what its web-push notifier encrypts
for the phone; tests/notify_page/test_page_push.py follows one through a
real push service), handed to the worker with CDP
``ServiceWorker.deliverPushMessage``; the notification it shows has Allow
and Deny; a tap on Allow (tests/notify_page/worker.py: ``click_action``)
answers with the phone's device cookie, the tool runs exactly once, and the
page opens the session. The same notification answered again (Deny) finds
the ask settled: the first answer won, and the page says so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import trio

from router.notify.core import ask_event, payload
from tests.browser.test_page import artifact
from tests.e2e_mod.conftest import claude_binary, fake_api, router_api, world  # noqa: F401  (fixtures)
from tests.e2e_mod.helpers import ModWorld, RouterApi
from tests.e2e_mod.test_asks import COMMAND, FILE, TURN, asked, tool_result
from tests.fakes.anthropic import FakeAnthropic
from tests.notify_page.worker import (SHOWN, click_action, controlled, delivered_and_shown, grant_notifications,
                                      registration_id)
from tests.remote.test_netns import paired_phone, served
from tests.remote.test_netns_ask import tool_results
from tests.support.netns import netns_pair
from tests.support.polling import until


class HoldingRouter(RouterApi):
    """The world's routers as :class:`RouterApi` reaches them, with ``http``
    on the router that holds the Claude Code session (its ``router mcp``),
    beside the ``router serve`` this test adds to the same board."""

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            (socket,) = sorted((Path(self.env["XDG_RUNTIME_DIR"]) / "router").glob("mcp-*.sock"))
            self._http = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(socket)),
                                           base_url="http://localhost", timeout=60)
        return self._http


@pytest.mark.timeout(600)
async def test_allow_on_the_phones_notification_runs_the_tool_once(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, tmp_path: Path,  # noqa: F811
) -> None:
    with netns_pair() as pair:
        async with served(tmp_path, pair, world.env) as router:
            async with paired_phone(router, pair, tmp_path) as phone:
                # The phone is ready (notifications allowed, its worker running) before the ask:
                # the tap comes within seconds of it, as Claude Code's tool.check hook waits
                # only so long here (docs/notifications.md, "On the phone").
                await grant_notifications(phone.browser, router.origin)
                await controlled(phone, timeout=60)
                await registration_id(phone, router.origin)
                holder = HoldingRouter(world.env)
                session_id, ask = await asked(world, holder, fake_api, deadline=300)
                assert ask["tool"] == "Bash" and ask["input"]["command"] == COMMAND
                event = ask_event(ask, int(time.time() * 1000))
                assert event is not None
                pushed = payload(event)
                (shown,) = await delivered_and_shown(phone, router.origin, pushed, timeout=TURN)
                assert shown["tag"] == pushed["id"] and shown["data"] == pushed
                assert shown["actions"] == [{"action": "allow", "title": "Allow"}, {"action": "deny", "title": "Deny"}]
                assert shown["requireInteraction"] is True and COMMAND in shown["body"]
                assert tool_result(fake_api) is None and not (world.workspaces[0] / FILE).exists()

                assert await click_action(phone.browser, router.origin, pushed["id"], "allow") == 1
                with trio.fail_after(TURN):
                    await until(lambda: tool_result(fake_api) is not None, step=0.1)
                    await world.wait_screen("one", "All done.")
                # The page opens the session, and says what the notification did.
                await phone.wait_for(f"document.getElementById('app').dataset.view === 'session' && "
                                     f"new URLSearchParams(location.search).get('session') === {json.dumps(session_id)}",
                                     timeout=TURN)
                # Its title names the session (and the router that holds it: the Claude Code's own).
                assert (await phone.evaluate("document.getElementById('title').innerText")).startswith(session_id)
                await phone.wait_for("document.getElementById('outcome').textContent === "
                                     "'allow: Bash (from the notification)'", timeout=TURN)
                assert await phone.evaluate(SHOWN) == []  # the tapped notification is gone
                await phone.screenshot(artifact("phone-allowed-from-notification.png"))

                # The same notification again, answered Deny: the first answer won; not an error.
                await delivered_and_shown(phone, router.origin, pushed, timeout=TURN)
                assert await click_action(phone.browser, router.origin, pushed["id"], "deny") == 1
                said = await phone.wait_for("document.getElementById('outcome').textContent.startsWith("
                                            "'already settled elsewhere') && "
                                            "document.getElementById('outcome').textContent", timeout=TURN)
                assert "answered" in said
                assert await phone.evaluate(SHOWN) == []  # no "refused" notification put back
                assert phone.errors == []
            # Once: one tool_result, not an error; the file the tool made; answered by the push.
            results = tool_results(fake_api)
            assert len(results) == 1 and not results[0].get("is_error"), results
            assert (world.workspaces[0] / FILE).read_text() == "written\n"
            kept = (await holder.http.get("/asks", params={"all": "1"})).json()["asks"]
            await holder.aclose()
            assert [(each["id"], each["state"], each["decision"], each["by"]) for each in kept] == [
                (ask["id"], "answered", "allow", "push")], kept
