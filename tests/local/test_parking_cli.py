"""The provider's usage limit with real processes: ``router daemon`` running
an adapter that meets the limit until a reset a few seconds ahead, ``router
serve --daemon`` over it, and the commands a person types: ``router send``
(kept: answered ``parked``), ``router sessions`` (``parked``), ``router
resume`` (now), ``router cancel-park``; the scheduler resumes the rest."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import trio

from tests.api.processes import serve
from tests.local.test_processes import create, router, sessions
from tests.support.daemons import spawn_daemon
from tests.support.polling import until


def sent(log: Path) -> Counter[str]:
    return Counter(log.read_text().splitlines()) if log.exists() else Counter()


def route_to_the_daemon(settings: Path, url: str, token: str) -> None:
    """``default`` on the ``container`` harness (the daemon ``--daemon`` names)."""
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["container"], "usage-source": ["frames"], "limit-check": ["token-limit"],
                    "search-source": "harness-builtin", "channel": ["cli", "webui"]},
        "options": {"harness": {"container": {"url": url, "token": token}}}}))
    (settings / "routes.json").write_text(json.dumps({
        "models": {"m": {"provider": "anthropic"}},
        "instances": {"default": {"harness": "container", "model": "m", "thinking": "off"}}}))


#: How far ahead the provider's reset is, from the moment the sessions are
#: made: room for the steps that must meet the park (a bound for a loaded
#: machine, not a figure: at a load average of 15 on two cores the steps
#: once took more than 15 s); the test then waits it out.
RESET_AHEAD_MS = 30_000


async def test_park_resume_and_cancel_from_the_command_line(tmp_path: Path) -> None:
    log = tmp_path / "provider.log"
    reset_file = tmp_path / "resets-at"
    env = {"LIMIT_RESETS_AT_FILE": str(reset_file), "LIMIT_LOG": str(log)}
    async with spawn_daemon("ours", adapter="tests.limits.limit_adapter:adapter", env=env) as daemon:
        route_to_the_daemon(tmp_path / "settings", daemon.http_url, daemon.token)
        async with serve(tmp_path, "--daemon", daemon.url, env={"ROUTER_DAEMON_TOKEN": daemon.token}) as served:
            # The reset is fixed only now that the daemon and the router
            # are up (their start under load once took the whole window).
            resets_at = int(time.time() * 1000) + RESET_AHEAD_MS
            reset_file.write_text(str(resets_at))
            await _scenario(served, log, resets_at)


async def _scenario(served, log: Path, resets_at: int) -> None:
    for name in ("a", "b", "c"):
        await create(served, name)
    with trio.fail_after(120):
        status, answer, err = await router("send", "a", "first", "--json")
        assert status == 0 and answer["reply"]["kept"] is True, err
        listed: list = []

        async def parked() -> bool:
            nonlocal listed
            _, listed, _ = await sessions()
            return {s["id"] for s in listed if s["state"] == "parked"} >= {"a", "b", "c"}

        while not await parked():
            await trio.sleep(0.1)
        status, text, _ = await router("send", "a", "first again", "--event-id", "a2", raw=True)
        assert status == 0 and text.startswith("kept: session 'a' is parked")
        entry = next(s for s in listed if s["id"] == "b")
        assert entry["parked"]["resetsAt"] == resets_at and entry["parked"]["account"] == "default"
        status, kept, err = await router("send", "b", "kept for b", "--event-id", "eb", "--json")
        assert status == 0 and kept["status"] == "parked" and kept["resetsAt"] == resets_at, err
        status, text, _ = await router("send", "c", "to cancel", "--event-id", "ec", raw=True)
        assert status == 0 and text.startswith("kept: session 'c' is parked")
        status, cancelled, err = await router("cancel-park", "c", "--json")
        assert status == 0 and cancelled["cancelled"] is True and cancelled["dropped"] == ["ec"], err
        status, text, _ = await router("cancel-park", "c", raw=True)
        assert status == 0 and text.strip() == "c was not parked"
        while time.time() * 1000 < resets_at:  # the provider's reset; the parks' own times are later
            await trio.sleep(0.1)
        status, resumed, err = await router("resume", "b", "--json")
        assert status == 0 and resumed["resumed"] is True and "parked" in resumed["was"], err
        await until(lambda: sent(log)["200 kept for b"] == 1, step=0.05)
        await until(lambda: sent(log)["200 first"] == 1 and sent(log)["200 first again"] == 1, step=0.05)

        async def unparked() -> bool:
            _, listed, _ = await sessions()
            return not any(s["state"] == "parked" for s in listed)

        while not await unparked():
            await trio.sleep(0.1)
    # Once each: the limited turn, then its resume; kept messages once; the cancelled one never.
    assert sent(log) == Counter({"429 first": 1, "200 first": 1, "200 first again": 1, "200 kept for b": 1})
    status, again, _ = await router("send", "b", "kept for b", "--event-id", "eb", "--json")
    assert status == 0 and again["fromRecord"] is True
    assert sent(log)["200 kept for b"] == 1
