"""A phone on another network answers a real Claude Code permission ask.

The real Claude Code binary in tmux waits on a Bash call in ``--permission-mode
manual`` (tests/e2e_mod: the ``world``/``router_api``/``fake_api`` fixtures
and :func:`asked`); a ``router serve --listen`` on a veth address in one
network namespace joins the same board (the world's ``XDG_RUNTIME_DIR``:
files and Unix sockets cross namespaces, packets do not); the phone, headless
Chromium in the other namespace (tests/remote/test_netns.py's helpers),
pairs from the QR code, sees the ask first on the board, taps Allow, and the
tool runs once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e_mod.conftest import claude_binary, fake_api, router_api, world  # noqa: F401  (fixtures)
from tests.e2e_mod.helpers import ModWorld, RouterApi
from tests.e2e_mod.test_asks import COMMAND, FILE, TURN, asked, tool_result
from tests.fakes.anthropic import FakeAnthropic
from tests.remote.test_netns import paired_phone, served
from tests.support.netns import netns_pair
from tests.support.polling import until


def tool_results(fake: FakeAnthropic) -> list[dict[str, Any]]:
    """The tool_result blocks of the last request that carries any (each
    request carries the conversation so far)."""
    found: list[dict[str, Any]] = []
    for request in fake.messages_requests():
        blocks = [block for message in request.messages() if isinstance(message, dict)
                  for block in (message.get("content") if isinstance(message.get("content"), list) else [])
                  if isinstance(block, dict) and block.get("type") == "tool_result"]
        if blocks:
            found = blocks
    return found


async def tap(page: Any, selector: str) -> None:
    """A finger's tap at the middle of ``selector`` (touch events, as a phone
    sends them; the page sees the click the tap makes)."""
    x, y = await page.evaluate(f"""(() => {{ const r = document.querySelector({json.dumps(selector)})
        .getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
    await page.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x, "y": y}]})
    await page.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


@pytest.mark.timeout(600)
async def test_a_phone_on_another_network_allows_a_real_ask(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, tmp_path: Path,  # noqa: F811
) -> None:
    session_id, ask = await asked(world, router_api, fake_api, deadline=300)
    assert ask["tool"] == "Bash" and ask["input"]["command"] == COMMAND
    with netns_pair() as pair:
        async with served(tmp_path, pair, world.env) as router:
            async with paired_phone(router, pair, tmp_path) as phone:
                # The board, first: the ask with Allow and Deny, and the session waiting at the top.
                await phone.wait_for(f"document.querySelector('#asks .ask[data-ask={json.dumps(ask['id'])}]')"
                                     " !== null", timeout=TURN)
                assert await phone.evaluate("document.getElementById('app').dataset.view") == "board"
                assert await phone.evaluate("getComputedStyle(document.getElementById('board-view')).display") \
                    != "none"
                shown = await phone.evaluate("document.querySelector('#asks .ask').innerText")
                assert "Bash" in shown and COMMAND in shown and session_id in shown
                await phone.wait_for(f"document.getElementById('board').firstElementChild?.dataset.session === "
                                     f"{json.dumps(session_id)}", timeout=TURN)
                assert await phone.evaluate(
                    "document.getElementById('board').firstElementChild.dataset.state") == "waiting"
                assert not (world.workspaces[0] / FILE).exists()
                assert tool_result(fake_api) is None

                await tap(phone, "#asks .ask button.allow")
                await phone.wait_for("document.getElementById('outcome').textContent === 'allow: Bash'",
                                     timeout=TURN)
                with trio.fail_after(TURN):
                    await until(lambda: tool_result(fake_api) is not None, step=0.1)
                    await world.wait_screen("one", "All done.")
                # The ask leaves the page: off the board's asks, the session no longer waiting.
                await phone.wait_for("document.querySelectorAll('#asks .ask').length === 0", timeout=TURN)
                await phone.wait_for(f"document.querySelector('#board li[data-session={json.dumps(session_id)}]')"
                                     "?.dataset.state !== 'waiting'", timeout=TURN)
                assert phone.errors == []
            # Once: one tool_result, not an error; the file the tool made.
            results = tool_results(fake_api)
            assert len(results) == 1 and not results[0].get("is_error"), results
            assert (world.workspaces[0] / FILE).read_text() == "written\n"
            kept = (await router_api.http.get("/asks", params={"all": "1"})).json()["asks"]
            assert [(each["id"], each["state"], each["decision"]) for each in kept] == [
                (ask["id"], "answered", "allow")], kept
            assert "refused" not in router.log(), router.log()
