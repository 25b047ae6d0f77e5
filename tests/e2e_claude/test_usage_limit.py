"""The real ``claude`` binary at the provider's usage limit, in container
sessions: the ``claude-code`` adapter in an in-process daemon, the host and
the user-turn router, against the fake API answering a subscriber's usage
limit (429 with ``anthropic-ratelimit-unified-*``) that resets a few seconds
ahead, then answering. One session meets the limit; the other session of
the account parks at once; a delivery to it is answered ``parked``; at the
reset each resumes once: the fake sees exactly one answered request per
kept message, and the limited prompt is not sent twice."""

from __future__ import annotations

import random
import time
import uuid

import trio

from router.daemon import Daemon, DaemonServer
from router.daemon.adapters import claude_code
from router.daemon.adapters.claude_code import RESUME_PROMPT
from router.host import DaemonEndpoint, Host, HostSettings, Store
from router.limits import ParkBook
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.e2e_claude.helpers import ClaudeSetup
from tests.fakes.anthropic import limited_until, text_reply
from tests.support.polling import until

WAIT = 120
#: What the sessions are sent.
FIRST, SECOND = "Say hello from the first session.", "Say hello from the second session."


def subscriber_env(claude: ClaudeSetup) -> dict[str, str]:
    """Signed in as a subscriber: only then does Claude Code read a usage limit."""
    env = {key: value for key, value in claude.env.items() if key != "ANTHROPIC_API_KEY"}
    return {**env, "CLAUDE_CODE_OAUTH_TOKEN": "fake-oauth-token-for-tests"}


def user_texts(request) -> list[str]:
    last = [m for m in request.messages() if m.get("role") == "user"][-1]
    content = last["content"]
    return [content] if isinstance(content, str) else [b["text"] for b in content if b.get("type") == "text"]


async def settled(host, store, session: str, operation_id: str):
    """The operation's result, once the resume submitted it and it settled."""
    while await store.call(store.operations.get, session, operation_id) is None:
        await trio.sleep(0.05)  # the resume comes at the reset
    return await host.session(session).wait(operation_id)


async def test_a_usage_limit_parks_both_sessions_and_each_resumes_once(claude, fake_api, tmp_path):
    adapter = claude_code.make_adapter(program=str(claude.binary), homes=claude.homes, cwd=claude.workspace,
                                       env=subscriber_env(claude))
    store = Store(tmp_path / "host.db")
    log = DeliveryLog(tmp_path / "turns.db")
    try:
        async with trio.open_nursery() as nursery:
            await _scenario(nursery, adapter, store, log, fake_api)
            nursery.cancel_scope.cancel()
    finally:
        log.close()
        store.close()


async def _scenario(nursery, adapter, store, log, fake_api) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    server = DaemonServer(Daemon(adapter, f"rt-{uuid.uuid4().hex[:8]}"), "limits-token")
    await nursery.start(server.run, listeners)
    host = Host(store, DaemonEndpoint(f"ws://127.0.0.1:{server.ports[0]}", "limits-token"),
                HostSettings(reconnect_base=0.02, reconnect_cap=0.25))
    await nursery.start(host.run)
    registry = SessionRegistry()
    await nursery.start(registry.run)
    router = TurnRouter(deliveries=log, registry=registry, host=host,
                        park_book=ParkBook(rng=random.Random(2), delay=1_000, stagger=1_000, jitter=300))
    await nursery.start(router.parking.run)
    for name in ("s1", "s2"):
        await router.create(name)
    resets_at = time.time() + 6
    fake_api.fallback = limited_until(resets_at, lambda request: text_reply(f"answered: {user_texts(request)[-1]}"))
    with trio.fail_after(WAIT):
        _, body = await router.send("s1", FIRST, event_id="e1", wait=True)
        assert body["reply"]["status"] == "unanswered" and body["reply"]["kept"] is True
        assert body["reply"]["reason"].startswith("usage-limit: You've hit your 5-hour limit")
        await until(lambda: router.parking.holding("s2") is not None)
        park = router.parking.holding("s1")
        assert park is not None and park.resets_at == int(resets_at) * 1000 and park.limit_kind == "five_hour"
        states = {entry["id"]: entry["state"] for entry in await router.list()}
        assert states["s1"] == states["s2"] == "parked"
        _, parked = await router.send("s2", SECOND, event_id="e2")
        assert parked["status"] == "parked" and parked["resetsAt"] == park.resets_at
        assert len(fake_api.messages_requests()) == 1  # nothing reached the provider for s2
        # At the reset: s1's kept operation and s2's kept delivery, once each.
        resumed = await settled(host, store, "s1", "e1~resumed")
        assert resumed.status == "done", resumed
        second = await settled(host, store, "s2", "e2")
        assert second.status == "done" and second.text == f"answered: {SECOND}", second
        while await log.call(log.parks):
            await trio.sleep(0.05)
    answered = [r for r in fake_api.messages_requests() if r.status == 200]
    refused = [r for r in fake_api.messages_requests() if r.status == 429]
    assert len(refused) == 1 and len(answered) == 2
    # s1's prompt went out once more, inside Claude Code's own resume of its
    # session (it keeps the limited prompt), followed by our resume prompt.
    first = next(r for r in answered if any(FIRST in t for t in r.texts()))
    assert sum(t.count(FIRST) for t in user_texts(first)) == 1 and RESUME_PROMPT in user_texts(first)
    assert resumed.text == f"answered: {RESUME_PROMPT}"
    assert sum(t.count(SECOND) for r in answered for t in r.texts()) == 1
    assert await log.call(log.kept, "s1") == [] == await log.call(log.kept, "s2")
