"""Brackets that fail, fail closed and crash nothing: a usage source that
raises (its reading is unknown, the next source's counts), a limit check
whose ``must_stop`` raises (the session stops at the end of its turn with
``limit-check-failed``), a turn record that cannot be written (``end_turn``
raises: the session stops the same way). In each, the turn's result lands,
the session's tasks and the router go on. Fixture modules live in a copy of
the plug-in tree, which the main job's layer loads from (``plugins_root``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx
import pytest
import trio

from router.serve import MainJob
from tests.plugins.conftest import SHIPPED_ROOT, write_module
from tests.turns.adapters import UsageAdapter
from tests.turns.limit_support import Running, job_config, write_plugins

RAISING_SOURCE = """
INTERFACE_VERSION = 1

async def read_turn(request, deps):
    raise RuntimeError("the meter fell off the wall")
"""

RAISING_CHECK = """
INTERFACE_VERSION = 2

def may_launch(args):
    return {"allow": True}

def must_stop(args):
    raise RuntimeError("cannot tell")

def report(args):
    return []
"""

PLUGINS = {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "plugins"
    shutil.copytree(SHIPPED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    write_module(root, "usage-source", "raising", RAISING_SOURCE)
    write_module(root, "limit-check", "raising-check", RAISING_CHECK)
    return root


@pytest.fixture
async def start(tmp_path: Path, env: dict[str, str], tree: Path) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    async with trio.open_nursery() as nursery:
        jobs: list[tuple[MainJob, httpx.AsyncClient]] = []

        async def start(plugins: dict[str, Any]) -> Running:
            write_plugins(tmp_path / "settings", {**PLUGINS, **plugins})
            config = job_config(tmp_path, adapter=UsageAdapter(input_tokens=3, output_tokens=2),
                                plugins_root=str(tree))
            job = MainJob(config, env=env)
            await nursery.start(job.run)
            client = httpx.AsyncClient(base_url=job.url, headers=job.headers, timeout=httpx.Timeout(30.0))
            jobs.append((job, client))
            return Running(job=job, client=client, data=tmp_path / "data", settings=tmp_path / "settings")

        try:
            yield start
        finally:
            for job, client in jobs:
                await client.aclose()
                await job.aclose()


async def test_a_raising_usage_source_leaves_its_reading_unknown(
    start: Callable[..., Awaitable[Running]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="router.plugins")
    running = await start({"usage-source": ["raising", "frames"], "limit-check": ["token-limit"]})
    for n in (1, 2):
        answer = await running.send("root", f"turn {n}", f"e{n}", wait=True)
        assert answer.status_code == 200 and answer.json()["reply"]["status"] == "done"
    meter = await running.meter("root")
    await meter.wait_until(lambda core: core.ended_count == 2)
    assert meter.core.stopped is None and meter.failures == 0
    assert meter.last_turn_record["source"] == "frames" and meter.last_turn_record["usage"]["input"] == 3
    assert '"event":"usage-unknown","source":"raising"' in caplog.text and "source-threw" in caplog.text

    # The only source raising: every turn is unknown, never zero, and nothing stops.
    await running.job.aclose()
    running = await start({"usage-source": ["raising"], "limit-check": ["token-limit"]})
    answer = await running.send("root", "turn 3", "e3", wait=True)
    assert answer.json()["reply"]["status"] == "done"
    meter = await running.meter("root")
    await meter.wait_until(lambda core: core.ended_count == 1)
    assert meter.last_turn_record["usage"] is None and meter.core.stopped is None


async def test_a_raising_limit_check_stops_the_session_at_the_end_of_its_turn(
    start: Callable[..., Awaitable[Running]], tmp_path: Path
) -> None:
    running = await start({"usage-source": ["frames"], "limit-check": ["token-limit", "raising-check"]})
    answer = await running.send("root", "turn 1", "e1", wait=True)
    assert answer.status_code == 200 and answer.json()["reply"]["text"] == "echo: turn 1 (turn 1)"
    refused = await running.send("root", "turn 2", "e2")
    assert refused.status_code == 409 and refused.json()["error"] == "session-stopped"
    reason = "limit-check-failed: raising-check check failed: check-threw"
    assert reason in refused.json()["message"]
    session = running.router.registry.get("root")
    assert session is not None and session.failure is None
    assert session.tasks == ["meter", "live-view", "inbox"]
    # The router goes on: another session takes its first turn, then stops too (fail closed).
    assert (await running.client.post("/sessions", json={"id": "other"})).status_code == 201
    other = await running.send("other", "hello", "o1", wait=True)
    assert other.json()["reply"]["status"] == "done"
    assert (await running.send("other", "again", "o2")).json()["error"] == "session-stopped"
    # Its may_launch allows, so a resume does; the next turn stops it again.
    resume = await running.client.post("/sessions/root/resume", json={})
    assert resume.status_code == 200 and resume.json()["resumed"] is True
    assert (await running.send("root", "turn 2", "e2", wait=True)).json()["reply"]["status"] == "done"
    assert (await running.send("root", "turn 3", "e3")).json()["error"] == "session-stopped"
    # Switched off, the check stops nothing any more.
    write_plugins(tmp_path / "settings", {**PLUGINS, "usage-source": ["frames"], "limit-check": ["token-limit"]})
    await running.job.layer.reload()
    assert (await running.client.post("/sessions/root/resume", json={})).json()["resumed"] is True
    for n in (3, 4):
        answer = await running.send("root", f"turn {n}", f"e{n}", wait=True)
        assert answer.status_code == 200 and answer.json()["reply"]["status"] == "done"


async def test_a_turn_record_that_cannot_be_written_stops_the_session(
    start: Callable[..., Awaitable[Running]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "data" / "usage.jsonl").mkdir(parents=True)  # appending to it raises
    running = await start({"usage-source": ["frames"], "limit-check": ["token-limit"]})
    answer = await running.send("root", "turn 1", "e1", wait=True)
    assert answer.status_code == 200 and answer.json()["reply"]["status"] == "done"
    refused = await running.send("root", "turn 2", "e2")
    assert refused.status_code == 409 and refused.json()["error"] == "session-stopped"
    assert "limit-check-failed: turn-bracket check failed: end_turn raised IsADirectoryError" in refused.json()["message"]
    meter = await running.meter("root")
    assert meter.failures == 1 and "end_turn failed" in caplog.text
    session = running.router.registry.get("root")
    assert session is not None and session.failure is None and "meter" in session.tasks
    assert (await running.client.get("/healthz")).json() == {"ok": True}
