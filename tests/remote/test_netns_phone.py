"""A phone on another network stops a slow turn, and sends what was typed
offline exactly once when back.

``router serve --listen`` on a veth address in one network namespace, the
phone (headless Chromium, 390×844, touch, the router's CA trusted) in the
other, paired from the QR code (tests/remote/test_netns.py's helpers). On
the echo session ``root``: a ``slow 30000 …`` turn is stopped by a tap on
the stop button; then the phone's end of the veth link goes down (the
phone's network is gone, as when it leaves the wifi), a message is typed
and sent, the link comes back up, and the message is in the transcript
exactly once.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.remote.test_netns import Served, paired_phone, served
from tests.remote.test_netns_ask import tap
from tests.support.netns import NetnsPair, netns_pair

SESSION = "root"
ROW = f"#board li[data-session={json.dumps(SESSION)}]"
ANSWERS = "[...document.querySelectorAll('#log .assistant')].map(d => d.innerText)"


async def messages(router: Served) -> list[dict[str, Any]]:
    """The echo session's transcript, read over the router's private socket."""
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=router.socket),
                                 base_url="http://localhost", timeout=30) as client:
        answer = await client.get(f"/sessions/{SESSION}/messages")
        assert answer.status_code == 200, answer.text
        return answer.json()["messages"]


async def board_entry(router: Served) -> dict[str, Any]:
    """The echo session's entry on the router's board (``GET /sessions``)."""
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=router.socket),
                                 base_url="http://localhost", timeout=30) as client:
        answer = await client.get("/sessions")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        sessions = body["sessions"] if isinstance(body, dict) else body
        (entry,) = [each for each in sessions if each.get("id") == SESSION]
        return entry


def texts(kept: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["parts"][0]["text"]) for m in kept]


def phone_link(pair: NetnsPair, state: str) -> None:
    """The phone's end of the veth pair set ``up`` or ``down``."""
    shown = subprocess.run(["ip", "-n", pair.phone_ns, "-j", "link", "show", "type", "veth"], check=True,
                           capture_output=True, timeout=30)
    (veth,) = [link["ifname"] for link in json.loads(shown.stdout)]
    subprocess.run(["ip", "netns", "exec", pair.phone_ns, "ip", "link", "set", veth, state], check=True,
                   capture_output=True, timeout=30)


async def type_and_tap_send(phone: Any, text: str) -> None:
    """Typed into the box, then the send button tapped (on a touch screen
    Enter is a new line)."""
    await phone.evaluate("document.getElementById('text').focus()")
    await phone.send("Input.insertText", {"text": text})
    assert await phone.evaluate("document.getElementById('text').value") == text
    await tap(phone, "#send-button")


@pytest.mark.timeout(300)
async def test_a_phone_on_another_network_stops_a_slow_turn_and_sends_once_after_offline(tmp_path: Path) -> None:
    with netns_pair() as pair:
        async with served(tmp_path, pair) as router:
            async with paired_phone(router, pair, tmp_path) as phone:
                await phone.wait_for(f"document.querySelector({json.dumps(ROW)}) !== null", timeout=60)
                await phone.wait_for("document.getElementById('connection').dataset.state === 'live'", timeout=60)
                await tap(phone, f"{ROW} button")
                await phone.wait_for(f"document.getElementById('title').innerText.split(' · ')[0] === "
                                     f"{json.dumps(SESSION)}", timeout=30)
                assert await phone.evaluate("getComputedStyle(document.getElementById('board-view')).display") \
                    == "none"

                # (1) A slow turn, stopped by a tap.
                await type_and_tap_send(phone, "slow 30000 long one")
                await phone.wait_for("!document.getElementById('working').hidden", timeout=60)
                await phone.wait_for("document.getElementById('state').innerText === 'working'", timeout=60)
                with trio.fail_after(25):  # the router's board says so too, well before the 30 s end
                    while (await board_entry(router)).get("busy") is not True:
                        await trio.sleep(0.1)
                await tap(phone, "#stop")
                await phone.wait_for("document.getElementById('outcome').innerText === 'stopped'", timeout=60)
                await phone.wait_for("document.getElementById('working').hidden", timeout=60)
                await phone.wait_for("document.getElementById('state').innerText !== 'working'", timeout=60)
                assert await phone.evaluate(ANSWERS) == []
                # Unanswered: the user message alone; the router's board has the session no longer busy.
                with trio.fail_after(60):
                    while (entry := await board_entry(router)).get("busy") or entry.get("state") == "working":
                        await trio.sleep(0.1)
                kept = await messages(router)
                assert texts(kept) == [("user", "slow 30000 long one")]

                # (2) The phone's network gone: typed and sent, kept, sent once when back.
                phone_link(pair, "down")
                try:
                    await phone.wait_for("navigator.onLine === false || ['offline', 'reconnecting', 'connecting']"
                                         ".includes(document.getElementById('connection').dataset.state)",
                                         timeout=60)
                    await type_and_tap_send(phone, "typed offline")
                    await phone.wait_for("document.querySelector('#log .pending') !== null", timeout=30)
                    outbox = json.loads(await phone.evaluate("localStorage.getItem('router.outbox')"))
                    assert [each["text"] for each in outbox] == ["typed offline"]
                    await phone.wait_for("document.getElementById('connection').dataset.state === 'offline'",
                                         timeout=60)
                    assert "typed offline" not in json.dumps(await messages(router))
                finally:
                    phone_link(pair, "up")
                answer = await phone.wait_for(f"{ANSWERS}.find(t => t.includes('typed offline'))", timeout=90)
                assert answer.startswith("echo: typed offline")
                await phone.wait_for("document.querySelector('#log .pending') === null", timeout=30)
                assert json.loads(await phone.evaluate("localStorage.getItem('router.outbox')")) == []
                # The router answered the resend: the page no longer says offline.
                await phone.wait_for("document.getElementById('connection').dataset.state !== 'offline'",
                                     timeout=30)
                kept = texts(await messages(router))
                # Exactly once, whatever the number of tries.
                assert [text for role, text in kept if role == "user"].count("typed offline") == 1
                assert kept[-2:] == [("user", "typed offline"), ("assistant", answer)]
                assert [error for error in phone.errors if "Failed to fetch" not in error] == []
            assert "refused" not in router.log(), router.log()
