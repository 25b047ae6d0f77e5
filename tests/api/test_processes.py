"""``router serve`` and ``router send`` as real processes (port 0, a
temporary data dir): routed and answered, exactly once across a restart,
exit statuses, channels, signals; and ``router mcp`` driven by the MCP
client over stdio."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.api.processes import REPO, ROUTER, environment, send, serve, stop
from tests.support.polling import until


async def test_serve_and_send(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        status, answer, _ = await send(served.url, "root", "hello", "--event-id", "e1", token=served.token)
        assert status == 0
        assert answer["status"] == "delivered" and answer["operationId"] == "e1" and answer["fromRecord"] is False
        assert answer["reply"] == {"operationId": "e1", "session": "root", "status": "done", "text": "echo: hello (turn 1)"}
        status, again, _ = await send(served.url, "root", "hello", "--event-id", "e1", token=served.token)
        assert status == 0 and again["fromRecord"] is True and again["reply"] == answer["reply"]
        status, no_wait, _ = await send(served.url, "root", "quick", "--no-wait", token=served.token)
        assert status == 0 and "reply" not in no_wait
        status, failed, _ = await send(served.url, "root", "fail on purpose", token=served.token)
        assert status == 1 and failed["reply"] == {
            "operationId": failed["eventId"], "session": "root", "status": "unanswered", "reason": "on purpose",
        }
        status, refused, _ = await send(served.url, "nowhere", "hi", token=served.token)
        assert status == 1 and refused["error"] == "unknown-session"
        status, conflict, _ = await send(served.url, "root", "other words", "--event-id", "e1", token=served.token)
        assert status == 1 and conflict["error"] == "event-id-conflict"
        process = served.process
    assert process.returncode == 0, served.log()
    assert "stopping api" in served.log() and "stopping daemon" in served.log()
    log = served.log()
    assert log.index("stopping api") < log.index("stopping registry") < log.index("stopping host") < log.index(
        "stopping daemon"
    )
    # Exactly once across a restart: the record answers, the session goes on.
    async with serve(tmp_path, name="again") as served:
        status, again, _ = await send(served.url, "root", "hello", "--event-id", "e1", token=served.token)
        assert status == 0 and again["fromRecord"] is True
        status, later, _ = await send(served.url, "root", "later", token=served.token)
        assert status == 0 and later["reply"]["text"].endswith("(turn 3)")  # restored: hello, quick, later
        assert await stop(served.process, signal.SIGINT) == 130  # SIGINT: 128 + 2, after a clean stop
    settings = {path.name for path in (tmp_path / "settings").iterdir()}
    assert {"plugins.json", "routes.json", "limits.json"} <= settings


async def test_send_exit_statuses(tmp_path: Path) -> None:
    status, out, err = await send("http://127.0.0.1:1", "root", "hi", token="t" * 20)
    assert status == 2 and out is None and "cannot-connect" in err
    async with serve(tmp_path) as served:
        (tmp_path / "settings" / "plugins.json").write_text(
            json.dumps({"plugins": {"harness": ["echo"], "channel": ["webui"]}, "options": {}})
        )
        status, refused, _ = await send(served.url, "root", "hi", token=served.token)
        assert status == 3 and refused["error"] == "channel-off" and "router plugins" in refused["message"]


async def test_serve_refuses_a_second_router_on_one_data_dir(tmp_path: Path) -> None:
    async with serve(tmp_path):
        done = await trio.run_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--settings",
             str(tmp_path / "settings")],
            capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
        )
        assert done.returncode == 2 and b"store-busy" in done.stderr and done.stdout == b""


# --------------------------------------------------------------------------- router mcp


def mcp_params(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "router", "mcp", "--data-dir", str(tmp_path / "data"), "--settings", str(tmp_path / "settings"),
              *args],
        env=environment(env),
        cwd=str(REPO),
    )


async def test_mcp_tools_over_stdio(tmp_path: Path) -> None:
    from mcp import Client

    async with Client(mcp_params(tmp_path)) as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == [
            "list_sessions", "send_message", "read_messages", "abort", "web_search", "limits_report", "list_asks",
            "answer_ask",
        ]
        listed = await client.call_tool("list_sessions", {})
        assert not listed.is_error
        # Its echo root is not on the board (every router has one); no
        # other router runs, so the board is empty ...
        assert json.loads(listed.content[0].text) == {"sessions": []}
        # ... and its own client still reaches it by name.
        sent = await client.call_tool("send_message", {"session": "root", "text": "over mcp", "event_id": "m1",
                                                       "wait": True})
        answer = json.loads(sent.content[0].text)
        assert not sent.is_error and answer["reply"]["text"] == "echo: over mcp (turn 1)"
        again = await client.call_tool("send_message", {"session": "root", "text": "over mcp", "event_id": "m1"})
        assert json.loads(again.content[0].text)["fromRecord"] is True
        read = await client.call_tool("read_messages", {"session": "root"})
        messages = json.loads(read.content[0].text)["messages"]
        assert [m["id"] for m in messages] == ["m1:user", "m1:assistant"]
        refused = await client.call_tool("send_message", {"session": "nowhere", "text": "hi"})
        assert refused.is_error and refused.content[0].text.startswith("unknown-session: ")
        bad = await client.call_tool("send_message", {"session": "root", "text": 3})
        assert bad.is_error and bad.content[0].text.startswith("bad-arguments: ")
        asks = await client.call_tool("list_asks", {})
        assert not asks.is_error and json.loads(asks.content[0].text)["asks"] == []
        unknown = await client.call_tool("answer_ask", {"ask": "ask-none", "decision": "allow"})
        assert unknown.is_error and unknown.content[0].text.startswith("unknown-ask: ")


async def test_embedded_routers_keep_their_own_stores_and_share_the_turn_records(tmp_path: Path) -> None:
    """Claude Code starts one ``router mcp`` per session: each has its own
    stores, and all append to the one records file the limits count."""
    from mcp import Client, StdioServerParameters

    def params(*args: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "router", "mcp", "--settings", str(tmp_path / "settings"), *args],
            env=environment({"ROUTER_DATA_DIR": str(tmp_path / "data")}),
            cwd=str(REPO),
        )

    data = tmp_path / "data"

    def records() -> list[dict[str, Any]]:
        path = data / "usage.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    async with Client(params()) as first, Client(params("--claude-session", "cc-2")) as second:
        for n, client in enumerate((first, second)):
            sent = await client.call_tool("send_message", {"session": "root", "text": f"hi {n}", "wait": True})
            assert not sent.is_error, sent.content[0].text
        # A turn's record is stored once its bracket closes, just after the
        # reply: wait for both while the routers run.
        with trio.fail_after(30):
            await until(lambda: len(records()) == 2, step=0.05)
    assert (data / "mcp" / "standalone" / "host.sqlite").exists()
    assert (data / "mcp" / "cc-2" / "host.sqlite").exists()
    assert len(records()) == 2
    assert not (data / "mcp" / "standalone" / "usage.jsonl").exists()


async def test_mcp_stdout_is_the_wire(tmp_path: Path) -> None:
    """Raw: every stdout line is JSON-RPC, logs go to stderr, and closing
    stdin stops the job in order and exits 0."""
    stderr = tmp_path / "mcp.stderr"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "mcp", "--data-dir", str(tmp_path / "data"), "--settings", str(tmp_path / "settings"),
             "--log-level", "info"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=environment(), cwd=REPO,
        )
    try:
        assert process.stdin is not None and process.stdout is not None
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "send_message", "arguments": {"session": "root", "text": "raw", "wait": True}}},
        ]
        await process.stdin.send_all(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        lines: list[dict[str, Any]] = []
        buffer = b""
        with trio.fail_after(60):
            while not any(line.get("id") == 2 for line in lines):
                chunk = await process.stdout.receive_some(65536)
                assert chunk, stderr.read_text()
                buffer += chunk
                while b"\n" in buffer:
                    raw, buffer = buffer.split(b"\n", 1)
                    lines.append(json.loads(raw))  # every line is JSON
        result = next(line for line in lines if line.get("id") == 2)["result"]
        assert json.loads(result["content"][0]["text"])["reply"]["text"] == "echo: raw (turn 1)"
        await process.stdin.aclose()
        with trio.fail_after(30):
            await process.wait()
        assert process.returncode == 0
        assert await process.stdout.receive_some(65536) == b""
        log = stderr.read_text()
        assert "stopping api" not in log and log.index("stopping registry") < log.index("stopping daemon")
    finally:
        await stop(process, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_mcp_stops_on_a_signal_while_the_client_is_quiet(tmp_path: Path, sig: int) -> None:
    stderr = tmp_path / "mcp.stderr"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "mcp", "--data-dir", str(tmp_path / "data"), "--settings", str(tmp_path / "settings"),
             "--log-level", "info", "--port", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=environment(), cwd=REPO,
        )
    try:
        with trio.fail_after(60):
            await until(lambda: "API on http://127.0.0.1:" in stderr.read_text(), step=0.05)
        process.send_signal(sig)
        with trio.fail_after(30):
            await process.wait()
        assert process.returncode == (130 if sig == signal.SIGINT else 0), stderr.read_text()
        assert "stopping api" in stderr.read_text() and "Traceback" not in stderr.read_text()
    finally:
        await stop(process, signal.SIGKILL)


CLAUDE = "5f0e2d1c-3b4a-4e6f-9a8b-7c6d5e4f3a21"


async def test_mcp_embeds_a_claude_code_session(tmp_path: Path, env: dict[str, str], nursery: trio.Nursery) -> None:
    """``router mcp --claude-session ID``: the mod (the simulator) reaches
    the embedded router's link, and the send_message tool writes into it."""
    from mcp import Client

    from router.modlink.sim import ModSimulator

    async with Client(mcp_params(tmp_path, "--claude-session", CLAUDE, env=env)) as client:
        # The handshake is served once the job (and the session's link) is up.
        sim = ModSimulator(CLAUDE, env=env, snapshot_interval=0)
        await nursery.start(sim.run)
        assert sim.stopped is None
        listed = json.loads((await client.call_tool("list_sessions", {})).content[0].text)["sessions"]
        [item] = listed  # its echo root is not on the board
        assert {key: item[key] for key in ("id", "kind", "busy", "connected", "state", "harness", "cwd")} == {
            "id": CLAUDE, "kind": "claude-code", "busy": False, "connected": True, "state": "idle",
            "harness": "claude-code", "cwd": str(REPO)}
        assert item["router"]["command"] == "mcp" and type(item["lastActivity"]) is int
        sent = await client.call_tool("send_message", {"session": CLAUDE, "text": "from the bus", "card": True})
        answer = json.loads(sent.content[0].text)
        assert not sent.is_error and answer["as"] == "prompt" and answer["message"] == "card"
        assert [(p.text, p.as_user) for p in sim.prompts] == [("from the bus", False)]
        await sim.wait_idle()

        async def drawn() -> list[dict[str, Any]]:
            read = await client.call_tool("read_messages", {"session": CLAUDE})
            return json.loads(read.content[0].text)["messages"]

        with trio.fail_after(30):
            while len(await drawn()) < 2:
                await trio.sleep(0.05)  # the view task's progress, in another process
        messages = await drawn()
        assert messages[0]["card"] is True and messages[1]["role"] == "assistant"
        sim.stop()


async def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await trio.run_process(
            [*ROUTER, "serve", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--settings",
             str(tmp_path / "settings")],
            capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
        )
    assert done.returncode == 2 and b"cannot-listen" in done.stderr and done.stdout == b""
