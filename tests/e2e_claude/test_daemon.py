"""The real ``claude`` binary behind ``router daemon --adapter claude-code``,
driven over the daemon's WebSocket (and through the host, ``router prompt``),
against the fake Messages API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest
import trio
import trio_websocket

from tests.e2e_claude.helpers import ClaudeSetup, processes_in
from tests.fakes.anthropic import overloaded, slow_reply, text_reply, tool_reply
from tests.support.daemons import REPO, Daemon, spawn_daemon
from wire.container import CONTAINER_TOKEN_HEADER, chunk_entries
from wire.json import dumps, loads


def daemon_env(claude: ClaudeSetup, homes: str) -> dict[str, str]:
    return {**claude.env, "ROUTER_CLI_HOMES": str(claude.homes / homes), "ROUTER_CLI_CWD": str(claude.workspace)}


class Client:
    """A bare host: one session's WebSocket, every message it received kept."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.received: list[dict[str, Any]] = []
        self._changed = trio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send_message(dumps(message))

    async def pump(self) -> None:
        while True:
            try:
                text = await self.ws.get_message()
            except trio_websocket.ConnectionClosed:
                return
            self.received.append(loads(text))
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            for message in self.received:
                if predicate(message):
                    return message
            await self._changed.wait()

    def frames(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m["frame"] for m in self.received if m["type"] == "frame" and (kind is None or m["frame"]["kind"] == kind)
        ]

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [f["event"] for f in self.frames("event") if f["event"]["type"] == kind]

    def persisted(self) -> list[Any]:
        return [entry for f in self.frames("persist") for entry in f["entries"]]

    async def settled(self, operation_id: str) -> dict[str, Any]:
        message = await self.wait_for(
            lambda m: m["type"] == "frame" and m["frame"]["kind"] == "settle" and m["frame"]["operationId"] == operation_id
        )
        return message["frame"]["outcome"]

    async def open(self, restore: list[Any] = (), settings: dict[str, Any] | None = None) -> dict[str, Any]:
        hello = await self.wait_for(lambda m: m["type"] == "hello")
        groups = chunk_entries(list(restore))
        for group in groups[:-1]:
            await self.send({"type": "restore", "generation": 1, "entries": group})
        await self.send({"type": "open", "generation": 1, "settings": settings or {}, "restore": groups[-1] if groups else []})
        await self.send({"type": "replay", "after": 0})
        return hello

    async def prompt(self, operation_id: str, text: str) -> None:
        await self.send({"type": "prompt", "operationId": operation_id, "input": text, "whenBusy": "followUp"})


@asynccontextmanager
async def connect(daemon: Daemon, session: str) -> AsyncIterator[Client]:
    headers = [(CONTAINER_TOKEN_HEADER.encode(), daemon.token.encode())]
    async with trio_websocket.open_websocket_url(daemon.session_url(session), extra_headers=headers, max_message_size=64 * 1024 * 1024) as ws:
        client = Client(ws)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.pump)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()


async def test_a_turn_over_the_websocket_streams_persists_and_settles_done(claude, fake_api):
    fake_api.script(text_reply("Hello over the wire, in pieces.", chunk_chars=5))
    async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
        async with connect(daemon, "chat-1") as client:
            hello = await client.open()
            assert hello["adapter"]["id"] == "claude-code"
            await client.prompt("op-1", "Say hello.")
            outcome = await client.settled("op-1")
    assert outcome == {"status": "done", "text": "Hello over the wire, in pieces."}
    kinds = [f["kind"] if f["kind"] != "event" else f["event"]["type"] for f in client.frames()]
    assert kinds[0] == "start" and kinds[-1] == "settle"
    assert kinds.index("text-delta") < kinds.index("message") < kinds.index("usage")
    assert "".join(e["delta"] for e in client.events("text-delta")) == "Hello over the wire, in pieces."
    assert all(f["operationId"] == "op-1" for f in client.frames("event"))
    usage = client.events("usage")[0]
    assert usage["inputTokens"] == 21 and usage["outputTokens"] >= 1
    states = [e for e in client.persisted() if e.get("kind") == "state"]
    assert len(states) == 1 and states[0]["values"]["sessionId"]
    seqs = [m["seq"] for m in client.received if m["type"] == "frame"]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_a_tool_call_shows_a_running_then_done_tool_part(claude, fake_api):
    fake_api.script(
        tool_reply("Bash", {"command": "echo tool-output-42", "description": "Echo"}),
        text_reply("Done: tool-output-42."),
    )
    async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
        async with connect(daemon, "chat-tool") as client:
            await client.open()
            await client.prompt("op-1", "Run echo.")
            outcome = await client.settled("op-1")
    assert outcome == {"status": "done", "text": "Done: tool-output-42."}
    tools = [part for m in client.events("message") for part in m["message"]["parts"] if part["type"] == "tool"]
    assert [(t["toolName"], t["state"], t.get("output")) for t in tools] == [
        ("Bash", "running", None),
        ("Bash", "done", "tool-output-42"),
    ]


async def test_the_session_survives_a_new_daemon_with_its_entries_restored(claude, fake_api):
    fake_api.script(text_reply("Noted: the code is 7311."), text_reply("The code is 7311."))
    async with spawn_daemon("ours", adapter="claude-code", runtime_id="runtime-1", env=daemon_env(claude, "container-1")) as first:
        async with connect(first, "chat-2") as client:
            await client.open()
            await client.prompt("op-1", "Remember the code 7311.")
            assert (await client.settled("op-1"))["status"] == "done"
    entries = client.persisted()
    session_id = next(e["values"]["sessionId"] for e in entries if e.get("kind") == "state")
    assert any(e.get("kind") == "file" and e["path"].endswith(f"{session_id}.jsonl") for e in entries)

    # A new container: new runtime id, a fresh disk for the homes.
    async with spawn_daemon("ours", adapter="claude-code", runtime_id="runtime-2", env=daemon_env(claude, "container-2")) as second:
        async with connect(second, "chat-2") as moved:
            hello = await moved.open(restore=entries)
            assert hello["runtimeId"] == "runtime-2" and hello["open"] is None and hello["lastSeq"] == 0
            await moved.prompt("op-2", "What was the code?")
            outcome = await moved.settled("op-2")
    assert outcome == {"status": "done", "text": "The code is 7311."}
    texts = fake_api.messages_requests()[-1].texts()
    assert "Remember the code 7311." in texts and "Noted: the code is 7311." in texts
    assert texts.index("Noted: the code is 7311.") < texts.index("What was the code?")
    # The resumed turn kept the CLI's session id.
    assert [e["values"]["sessionId"] for e in moved.persisted() if e.get("kind") == "state"] in ([], [session_id])


async def test_abort_during_a_slow_stream_settles_aborted_and_leaves_no_claude(claude, fake_api):
    fake_api.script(slow_reply())
    async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
        async with connect(daemon, "chat-3") as client:
            await client.open()
            await client.prompt("op-1", "Talk slowly.")
            await client.wait_for(lambda m: m["type"] == "frame" and m["frame"]["kind"] == "event" and m["frame"]["event"]["type"] == "text-delta")
            assert processes_in(claude.workspace) != []
            await client.send({"type": "abort", "operationId": "op-1"})
            outcome = await client.settled("op-1")
            # Settled means the turn's cleanup finished: nothing is left.
            assert processes_in(claude.workspace) == []
    assert outcome == {"status": "unanswered", "reason": "aborted"}


async def test_an_api_error_settles_unanswered_with_a_readable_reason(claude, fake_api):
    fake_api.fallback = overloaded(should_retry=False)
    async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
        async with connect(daemon, "chat-4") as client:
            await client.open()
            await client.prompt("op-1", "Hello?")
            outcome = await client.settled("op-1")
    assert outcome["status"] == "unanswered"
    assert outcome["reason"].startswith("API Error: 529 Overloaded")


def router_prompt(daemon: Daemon, store: Path, text: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "router", "prompt", "--daemon", daemon.url, "--token", daemon.token, "--store", str(store), "--session", "chat-host", text],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


async def test_through_the_host_a_prompt_settles_done_and_the_next_one_resumes(claude, fake_api, tmp_path):
    fake_api.script(text_reply("Stored: plum."), text_reply("You said plum."))
    store = tmp_path / "host.sqlite"
    async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
        first = await trio.to_thread.run_sync(router_prompt, daemon, store, "Remember plum.", {})
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout) == {"status": "done", "text": "Stored: plum."}
        second = await trio.to_thread.run_sync(router_prompt, daemon, store, "What did I say?", {})
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout) == {"status": "done", "text": "You said plum."}
    texts = fake_api.messages_requests()[-1].texts()
    assert "Remember plum." in texts and "Stored: plum." in texts


async def test_through_the_host_an_api_error_exits_1_with_the_reason(claude, fake_api, tmp_path):
    fake_api.fallback = overloaded(should_retry=False)
    async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
        done = await trio.to_thread.run_sync(router_prompt, daemon, tmp_path / "host.sqlite", "Hello?", {})
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "unanswered" and "529" in result["reason"]


async def test_through_the_host_api_the_live_events_show_the_turn_and_usage_reaches_the_store(claude, fake_api, tmp_path):
    """The host's Python API over the real binary: ``events()`` streams the
    turn live (deltas, the tool part running then done, the settle), the
    transcript holds both sides, and the usage the CLI reported is in the
    store for the plug-in layer."""
    from router.host.events import event_json
    from router.host.host import Host, HostSettings
    from router.host.link import DaemonEndpoint
    from router.host.store import Store

    fake_api.script(
        tool_reply("Bash", {"command": "echo host-api-7", "description": "Echo"}),
        text_reply("Saw host-api-7, in pieces.", chunk_chars=4),
    )
    live: list[dict[str, Any]] = []
    with Store(tmp_path / "host.sqlite") as store:
        async with spawn_daemon("ours", adapter="claude-code", env=daemon_env(claude, "a")) as daemon:
            host = Host(store, DaemonEndpoint(daemon.url, daemon.token), HostSettings())
            async with trio.open_nursery() as nursery:
                await nursery.start(host.run)
                try:
                    session = await host.sessions.create("chat-api")
                    async with session.events() as stream:
                        assert stream.snapshot["messages"] == []
                        await session.submit("Run echo.", operation_id="op-1")
                        with trio.fail_after(120):
                            async for batch in stream:
                                batch = [event_json(event) for event in batch]
                                live.extend(batch)
                                if any(e["type"] == "operation-end" for e in batch):
                                    break
                    result = await session.wait("op-1")
                    messages = await session.messages()
                finally:
                    await host.aclose()
        usage = store.usage.records("chat-api")
    assert (result.status, result.text) == ("done", "Saw host-api-7, in pieces.")
    kinds = [e["type"] for e in live]
    assert kinds.index("operation-start") < kinds.index("text-delta") < kinds.index("operation-end")
    assert "".join(e["delta"] for e in live if e["type"] == "text-delta").endswith("Saw host-api-7, in pieces.")
    tools = [p for e in live if e["type"] == "message" for p in e["message"]["parts"] if p["type"] == "tool"]
    assert [(t["state"], t.get("output")) for t in tools] == [("running", None), ("done", "host-api-7")]
    assert [m["role"] for m in messages][0] == "user" and messages[-1]["role"] == "assistant"
    assert [(u.operation_id, u.input_tokens is not None) for u in usage] == [("op-1", True)]
