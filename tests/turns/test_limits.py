"""Limits stop running sessions: the main job assembled as ``router serve``
assembles it (the in-process daemon with an adapter that reports usage, the
host, the router, the plug-in layer with the host's store as the ``frames``
ledger, the API on a loopback port), a token limit set low with ``router
limits set``. Turns under the limit pass; the turn that reaches it lands its
result, then the session stops with the exact reason; the next delivery is
refused (the API, ``router send``, the MCP tool) and the live view says so;
``router limits`` shows the count; resuming needs the count reset; a restart
keeps the session stopped."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx
import pytest
import trio

from router.mcp import ToolRefused, call_tool
from router.serve import MainJob
from router.turns.cli import configure_resume, run_resume
from tests.api.processes import send as router_send
from tests.turns.adapters import UsageAdapter
from tests.turns.limit_support import Limits, Running, job_config, live_items

LIMIT = 12  # three turns of 3 + 2 tokens: 5, 10, then 15 reaches it
REASON = f"limit: token-limit tokens.instances.default limit {LIMIT} count 15"


@pytest.fixture
async def start(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """``await start(**config)``: a main job on ``tmp_path`` (stopped in
    order at the end of the test, or by ``running.job.aclose()``)."""
    jobs: list[MainJob] = []
    clients: list[httpx.AsyncClient] = []
    async with trio.open_nursery() as nursery:

        async def start(**options: Any) -> Running:
            options.setdefault("adapter", UsageAdapter(input_tokens=3, output_tokens=2))
            job = MainJob(job_config(tmp_path, **options), env=env)
            await nursery.start(job.run)
            jobs.append(job)
            client = httpx.AsyncClient(base_url=job.url, headers=job.headers, timeout=httpx.Timeout(30.0))
            clients.append(client)
            return Running(job=job, client=client, data=tmp_path / "data", settings=tmp_path / "settings")

        try:
            yield start
        finally:
            for client in clients:
                await client.aclose()
            for job in jobs:
                await job.aclose()


@pytest.fixture
def limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Limits:
    return Limits(tmp_path / "settings", capsys, tmp_path)


async def resume_command(running: Running, session: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    """``router resume SESSION`` (its module's entry point; in a worker
    thread, since it blocks while this loop serves the API)."""
    parser = argparse.ArgumentParser()
    configure_resume(parser)
    args = parser.parse_args([session, "--url", running.job.url, "--token", running.job.token, "--json"])
    capsys.readouterr()
    status = await trio.to_thread.run_sync(run_resume, args)
    return status, json.loads(capsys.readouterr().out)


async def test_a_limit_stops_the_session_after_the_turn_that_reaches_it(
    start: Callable[..., Awaitable[Running]], limits: Limits, capsys: pytest.CaptureFixture[str]
) -> None:
    running = await start()
    limits.set({"tokens": {"instances": {"default": {"limit": LIMIT}}}})

    for n, text in enumerate(["one", "two"], start=1):
        answer = await running.send("root", text, f"e{n}", wait=True)
        assert answer.status_code == 200, answer.text
        assert answer.json()["reply"]["status"] == "done"
    meter = await running.meter("root")
    await meter.wait_until(lambda core: core.ended_count == 2)
    assert meter.core.stopped is None
    assert meter.last_turn_record["usage"] == {"input": 3, "output": 2, "cache_creation": 0, "cache_read": 0}
    assert meter.last_turn_record["source"] == "frames" and meter.last_turn_record["instance"] == "default"

    async with running.client.stream("GET", "/sessions/root/live") as live:
        items = live_items(live, lambda item: item["type"] == "session-stopped")
        snapshot = await items.__anext__()
        assert snapshot["type"] == "snapshot" and "stopped" not in snapshot
        # The turn that reaches the limit lands its result, then the session stops.
        third = await running.send("root", "three", "e3", wait=True)
        assert third.status_code == 200 and third.json()["reply"] == {
            "operationId": "e3", "session": "root", "status": "done", "text": "echo: three (turn 3)",
        }
        seen = [item async for item in items]
    kinds = [item["type"] for item in seen]
    assert kinds.index("turn-end") < kinds.index("session-stopped") == len(kinds) - 1
    assert seen[-1]["reason"] == REASON and seen[-1]["check"] == "token-limit"

    # The next delivery is refused, with the code and the reason.
    refused = await running.send("root", "four", "e4", wait=True)
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["error"] == "session-stopped" and body["eventId"] == "e4"
    assert REASON in body["message"] and "router limits reset" in body["message"] and "resend" in body["message"]
    sessions = (await running.client.get("/sessions")).json()["sessions"]
    assert [(s.get("stopped"), s["state"]) for s in sessions if s["id"] == "root"] == [(REASON, "stopped")]
    async with running.client.stream("GET", "/sessions/root/live") as live:
        snapshot = await live_items(live, lambda item: True).__anext__()
    assert snapshot["stopped"]["reason"] == REASON
    # ``router send`` (a real process) and the MCP tool report it too.
    status, printed, _ = await router_send(running.job.url, "root", "five", "--event-id", "e5", token=running.job.token)
    assert status == 1 and printed["error"] == "session-stopped" and REASON in printed["message"]
    with pytest.raises(ToolRefused) as refusal:
        await call_tool(running.router, "send_message", {"session": "root", "text": "six", "event_id": "e6"})
    assert str(refusal.value).startswith("session-stopped: ") and REASON in str(refusal.value)
    # A resend of an answered delivery is still answered from the record.
    again = await running.send("root", "three", "e3")
    assert again.status_code == 200 and again.json()["fromRecord"] is True

    # ``router limits`` counts what the running router recorded.
    report = limits.report(running.data / "usage.jsonl")
    entry = report["tokens.instances.default"]
    assert entry["status"] == "counted" and entry["count"] == 15
    assert entry["kinds"] == {"input": 9, "output": 6, "cache_creation": 0, "cache_read": 0}
    records = [json.loads(line) for line in (running.data / "usage.jsonl").read_text().splitlines()]
    assert [r["session"] for r in records] == ["root"] * 3 and all(r["harness"] == "echo" for r in records)

    # Resuming needs the limit to allow it; then the refused delivery goes through on resend.
    still = await running.client.post("/sessions/root/resume", json={})
    assert still.status_code == 429 and still.json()["error"] == "limit-reached"
    assert "stays stopped" in still.json()["message"]
    status, printed = await resume_command(running, "root", capsys)
    assert status == 1 and printed["error"] == "limit-reached"
    status, printed = await resume_command(running, "nowhere", capsys)
    assert status == 1 and printed["error"] == "unknown-session"
    assert (await running.send("root", "four", "e4")).status_code == 409
    status, _, err = limits.run("reset", "tokens.instances.default")
    assert status == 0, err
    status, printed = await resume_command(running, "root", capsys)
    assert status == 0 and printed["resumed"] is True and printed["was"]["reason"] == REASON
    assert (await running.client.post("/sessions/root/resume", json={})).json()["resumed"] is False
    four = await running.send("root", "four", "e4", wait=True)
    assert four.status_code == 200 and four.json()["reply"]["text"] == "echo: four (turn 4)"


async def test_a_stop_outlives_a_restart_and_a_new_launch_resumes(
    start: Callable[..., Awaitable[Running]], limits: Limits
) -> None:
    running = await start()
    limits.set({"tokens": {"instances": {"default": {"limit": 5}}}})
    created = await running.client.post("/sessions", json={"id": "work"})
    assert created.status_code == 201, created.text
    first = await running.send("work", "one", "w1", wait=True)
    assert first.json()["reply"]["status"] == "done"
    refused = await running.send("work", "two", "w2")
    assert refused.status_code == 409 and refused.json()["error"] == "session-stopped"
    assert "limit 5 count 5" in refused.json()["message"]
    # A launch is refused while the limit is reached.
    again = await running.client.post("/sessions", json={"id": "work"})
    assert again.status_code == 429 and again.json()["error"] == "limit-reached"
    await running.job.aclose()

    running = await start()
    assert (await running.send("work", "two", "w2")).json()["error"] == "session-stopped"
    limits.set({"tokens": {"instances": {"default": {"limit": 1000}}}})
    # Launching the session again (the launch passed the checks) resumes it.
    relaunched = await running.client.post("/sessions", json={"id": "work"})
    assert relaunched.status_code == 201, relaunched.text
    two = await running.send("work", "two", "w2", wait=True)
    assert two.status_code == 200 and two.json()["reply"]["text"] == "echo: two (turn 2)"


async def test_what_is_queued_behind_the_turn_that_stops_is_aborted(
    start: Callable[..., Awaitable[Running]], limits: Limits
) -> None:
    gates = {"first": trio.Event(), "second": trio.Event()}
    running = await start(adapter=UsageAdapter(steers=False, gates=gates))
    limits.set({"tokens": {"instances": {"default": {"limit": 5}}}})
    meter = await running.meter("root")
    assert (await running.send("root", "first", "q1")).status_code == 200
    await meter.wait_until(lambda core: "q1" in core.running)
    queued = await running.send("root", "second", "q2")
    assert queued.status_code == 200 and queued.json()["whenBusy"] == "followUp"
    gates["first"].set()
    host = running.job.host.session("root")
    assert (await host.wait("q1")).status == "done"
    second = await host.wait("q2")
    assert (second.status, second.reason) == ("unanswered", "aborted")
    # The queued turn starts the moment the first settles, and its first usage
    # may land before the first turn's bracket closes: counted with it, once.
    assert meter.core.stopped is not None
    assert meter.core.stopped.reason.startswith("limit: token-limit tokens.instances.default limit 5 count ")


def test_resume_with_no_router_to_reach_is_a_connection_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    configure_resume(parser)
    status = run_resume(parser.parse_args(["root", "--url", "http://127.0.0.1:1", "--token", "t" * 20, "--timeout", "5"]))
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.startswith("router resume: cannot-connect: http://127.0.0.1:1: ")
