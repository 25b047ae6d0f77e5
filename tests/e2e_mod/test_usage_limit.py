"""The provider's usage limit in local sessions: the real Claude Code 2.1.332,
interactive in tmux, signed in as a subscriber, the router plug-in loaded
(each session its own ``router mcp``), against the fake API answering a
usage limit that resets a few seconds ahead. Session one meets the limit;
its mod reports it (``usage-limit``, from Claude Code's session measure);
session two, in another router, parks too (the shared account limits);
messages to both are answered ``parked``; at the reset each router writes
each kept message once."""

from __future__ import annotations

import json
import time
import uuid

import trio

from tests.e2e_mod.helpers import ModWorld, RouterApi, last_user_text
from tests.fakes.anthropic import limited_until, text_reply
from tests.support.polling import until

START = 60
#: Bounds the wait for the resumes: the reset, the router's delay and stagger, two turns.
RESUME = 120


async def wait_states(api: RouterApi, wanted: dict[str, str]) -> dict[str, dict]:
    while True:
        listed = {each["id"]: each for each in await api.sessions()}
        if all(listed.get(s, {}).get("state") == state for s, state in wanted.items()):
            return listed
        await trio.sleep(0.2)


async def test_a_usage_limit_parks_every_local_session_and_each_kept_message_goes_once(
    claude_binary, fake_api, tmp_path
) -> None:
    world = ModWorld.make(claude_binary, fake_api.url, oauth=True)
    api = RouterApi(world.env)
    try:
        await _scenario(world, api, fake_api)
    finally:
        await api.aclose()
        left = await world.close()
        assert not left, f"processes were left behind and had to be killed: {left}"


async def _scenario(world: ModWorld, api: RouterApi, fake_api) -> None:
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    await world.start("one", one, workspace=0)
    await world.start("two", two, workspace=1)
    with trio.fail_after(START):
        await api.wait_connected(one)
        await api.wait_connected(two)
    resets_at = time.time() + 12
    fake_api.fallback = limited_until(resets_at, lambda request: text_reply(f"answered: {last_user_text(request)[-60:]}"))
    with trio.fail_after(RESUME):
        await world.type("one", "Say hello.")
        listed = await wait_states(api, {one: "parked", two: "parked"})
        assert listed[one]["parked"]["resetsAt"] == int(resets_at) * 1000, listed[one]
        assert listed[two]["parked"]["account"] == listed[one]["parked"]["account"] == "default"
        status, kept_two = await api.send(two, "words for two", event_id="e2")
        assert status == 200 and kept_two["status"] == "parked" and kept_two["resetsAt"] == int(resets_at) * 1000
        status, kept_one = await api.send(one, "words for one", event_id="e1")
        assert status == 200 and kept_one["status"] == "parked", kept_one
        refused_before = [r for r in fake_api.messages_requests() if r.status == 429]
        assert len(refused_before) == 1  # only session one's own turn reached the provider

        def answered_with(text: str) -> list:
            return [r for r in fake_api.messages_requests() if r.status == 200 and text in last_user_text(r)]

        await until(lambda: answered_with("words for two") and answered_with("words for one"), step=0.1)
        await wait_states(api, {one: "idle", two: "idle"})
    assert len(answered_with("words for two")) == 1 and len(answered_with("words for one")) == 1
    # Session one's limited prompt is not lost: Claude Code keeps it and sends
    # it once with the next user message (the kept one, or its own continuation).
    assert len(answered_with("Say hello.")) == 1
    assert all(r.status == 200 for r in fake_api.messages_requests()[len(refused_before):])
    # A resend after the resume is answered from the record: nothing is written again.
    status, again = await api.send(two, "words for two", event_id="e2")
    assert status == 200 and again["fromRecord"] is True, json.dumps(again)
    assert len(answered_with("words for two")) == 1
