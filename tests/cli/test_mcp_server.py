"""``router mcp``'s own MCP server (router.mcp_wire.McpServerWire, router.mcp.StdioServer):
it answers what the MCP SDK's server answered for the router (captured from
``mcp`` 2.3.0's server in tests/fixtures/mcp/sdk-answers.json), negotiates
the SDK's handshake versions, honours a cancellation, and a running
``router mcp`` loads neither the SDK nor Quart-Trio nor Hypercorn."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio
import trio.testing

from router.mcp import StdioServer, tool_list
from router.mcp_wire import (HANDSHAKE_PROTOCOL_VERSIONS, INVALID_PARAMS, INVALID_REQUEST, Cancelled, McpServerWire,
                             ToolCallRequest)
from tests.api.processes import REPO, environment

SDK_ANSWERS = json.loads((REPO / "tests" / "fixtures" / "mcp" / "sdk-answers.json").read_text())


def initialize(version: str = "2025-06-18", id: Any = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode() + b"\n"


def request(id: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


def new_wire() -> McpServerWire:
    return McpServerWire(tool_list(), server_info={"name": "router", "version": "0.1.0"},
                         instructions=SDK_ANSWERS["initialize"]["instructions"], max_line=1024)


def answers(wire: McpServerWire) -> list[dict[str, Any]]:
    return [json.loads(line) for line in wire.data_to_send().splitlines()]


# --------------------------------------------------------------------------- the wire, sans I/O


def test_the_handshake_versions_are_the_sdks() -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS as SDK_VERSIONS, LATEST_PROTOCOL_VERSION

    assert HANDSHAKE_PROTOCOL_VERSIONS == SDK_VERSIONS
    for asked, agreed in [*((v, v) for v in SDK_VERSIONS), (LATEST_PROTOCOL_VERSION, SDK_VERSIONS[-1]),
                          ("1999-01-01", SDK_VERSIONS[-1])]:
        wire = new_wire()
        wire.receive_data(initialize(asked))
        assert answers(wire)[0]["result"]["protocolVersion"] == agreed


def test_the_answers_are_the_sdks() -> None:
    wire = new_wire()
    wire.receive_data(initialize() + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n' + request(2, "tools/list"))
    first, listed = answers(wire)
    assert first["result"] == SDK_ANSWERS["initialize"]
    assert listed["result"] == SDK_ANSWERS["tools/list"]


def test_only_ping_comes_before_initialize() -> None:
    wire = new_wire()
    wire.receive_data(request(1, "ping") + request(2, "tools/list") + request(3, "tools/call", {"name": "abort"})
                      + request(4, "no/such") + request(5, "initialize", {"protocolVersion": "2025-06-18"}))
    ping, listed, called, unknown, bad = answers(wire)
    assert ping == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert listed["error"]["code"] == called["error"]["code"] == bad["error"]["code"] == INVALID_PARAMS
    assert unknown["error"] == {"code": -32601, "message": "Method not found", "data": "no/such"}
    assert wire.next_call() is None and not wire.initialized


def test_a_call_is_answered_once_and_a_cancelled_one_never() -> None:
    wire = new_wire()
    wire.receive_data(initialize() + request(2, "tools/call", {"name": "list_sessions"})
                      + request(3, "tools/call", {"name": "abort", "arguments": {"session": "s"}}))
    answers(wire)
    assert wire.next_call() == ToolCallRequest(2, "list_sessions", {})
    assert wire.next_call() == ToolCallRequest(3, "abort", {"session": "s"})
    # The same id again while the call runs is refused; a cancellation of it
    # stops it, and it is never answered.
    wire.receive_data(request(2, "ping") + b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":'
                      b'{"requestId":2,"reason":"x"}}\n')
    (reused,) = answers(wire)
    assert reused["id"] == 2 and reused["error"]["code"] == INVALID_REQUEST
    assert wire.next_call() == Cancelled(2)
    wire.tool_result(2, "late")
    wire.tool_result(3, "unknown-session: no", is_error=True)
    assert answers(wire) == [{"jsonrpc": "2.0", "id": 3, "result": {
        "content": [{"type": "text", "text": "unknown-session: no"}], "isError": True}}]
    wire.tool_result(3, "twice")
    assert answers(wire) == []
    # A cancellation of a call that has ended, or never ran, is dropped.
    wire.receive_data(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}\n')
    assert wire.next_call() is None and answers(wire) == []


def test_a_line_too_long_is_answered_with_its_id() -> None:
    wire = new_wire()
    wire.receive_data(b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"x": "' + b"y" * 600)
    wire.receive_data(b"y" * 600)
    wire.receive_data(b'"}}\n' + request(8, "ping"))
    too_long, ping = answers(wire)
    assert too_long["id"] == 7 and too_long["error"]["message"].startswith("too-large: ")
    assert ping["id"] == 8


def test_the_last_line_without_a_newline_is_read() -> None:
    wire = new_wire()
    wire.receive_data(request(1, "ping").rstrip(b"\n"))
    assert answers(wire) == []
    wire.close()
    assert answers(wire) == [{"jsonrpc": "2.0", "id": 1, "result": {}}]


# --------------------------------------------------------------------------- the Trio layer


class Waiting:
    """A router whose listing waits until it is cancelled."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = trio.Event()

    async def list(self) -> list[Any]:
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled.set()


async def test_a_cancelled_call_stops_and_the_server_answers_on() -> None:
    router = Waiting()
    to_server, server_in = trio.testing.memory_stream_one_way_pair()
    server_out, from_server = trio.testing.memory_stream_one_way_pair()
    received = b""

    async def answer(id: Any) -> dict[str, Any]:
        nonlocal received
        while True:
            for line in received.splitlines():
                message = json.loads(line)
                if message.get("id") == id:
                    return message
            received += await from_server.receive_some()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(StdioServer(router, server_in, server_out).run)
        with trio.fail_after(10):
            await to_server.send_all(initialize() + request(2, "tools/call", {"name": "list_sessions"}))
            await router.started.wait()
            await to_server.send_all(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}\n')
            await router.cancelled.wait()
            await to_server.send_all(request(3, "ping"))
            assert (await answer(3))["result"] == {}
            await to_server.aclose()
    assert not any(json.loads(line).get("id") == 2 for line in received.splitlines())


# --------------------------------------------------------------------------- the real process

#: What a running ``router mcp`` without ``--port`` never loads: the MCP SDK
#: (and its pydantic models), the HTTP API's stack, the page's Markdown.
NOT_LOADED = ("mcp", "mcp_types", "pydantic", "quart", "quart_trio", "hypercorn", "flask", "werkzeug", "markdown_it",
              "nh3")


class Probed:
    """A ``router mcp`` whose ``sys.modules`` is written to a file at its exit."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.tmp, self.modules = tmp, tmp / f"modules-{name}.json"
        self.stderr = tmp / f"mcp-{name}.stderr"
        probe = (
            "import atexit, json, sys\n"
            f"atexit.register(lambda: open({str(self.modules)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
            f"sys.argv = ['router', 'mcp', '--data-dir', {str(tmp / name)!r}, '--settings', {str(tmp / 'settings')!r}]\n"
            "from router.cli import main\n"
            "sys.exit(main())\n"
        )
        self.process = subprocess.Popen([sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=open(self.stderr, "wb"), cwd=REPO, bufsize=0,
                                         env=environment({"XDG_RUNTIME_DIR": str(tmp)}))

    def ask(self, line: bytes) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line)
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        assert ready, self.stderr.read_text()
        return json.loads(self.process.stdout.readline())

    def loaded(self) -> set[str]:
        """The top-level packages loaded, once it exited 0 (stdin closed)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(60)
        assert self.process.returncode == 0, self.stderr.read_text()
        return {name.split(".")[0] for name in json.loads(self.modules.read_text())}


def test_a_running_router_mcp_loads_no_sdk_and_no_http_api(tmp_path: Path) -> None:
    """After initialize, tools/list and a tool call, ``sys.modules`` of the
    process (written at its exit) holds none of :data:`NOT_LOADED`."""
    probed = Probed(tmp_path, "one")
    try:
        for line in (initialize(), request(2, "tools/list"), request(3, "tools/call", {"name": "list_sessions"})):
            assert "result" in probed.ask(line)
    finally:
        loaded = probed.loaded()
    assert "router" in loaded and "trio" in loaded
    assert loaded.isdisjoint(NOT_LOADED), sorted(loaded & set(NOT_LOADED))


def _socket_of(tmp: Path) -> str:
    (path,) = (tmp / "router").glob("*.sock")
    return str(path)


def _get(path: str, target: str, **headers: str) -> Any:
    import httpx

    # The first request the front hands the app waits for its modules to
    # load (0.3 s of CPU; seconds on a loaded machine): httpx's 5 s is no
    # deadline of ours.
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url="http://localhost", timeout=60) as client:
        return client.get(target, headers=headers)


def test_a_board_survey_is_answered_without_the_app(tmp_path: Path) -> None:
    """Another router's survey of this one's socket (``GET /router``, ``GET
    /sessions?scope=router``, ``GET /asks``) is answered by the front (router.api.front):
    the process still loads no Quart-Trio or Hypercorn; any other request
    builds the app and is answered by it."""
    probed = Probed(tmp_path, "surveyed")
    try:
        assert "result" in probed.ask(initialize())
        path = _socket_of(tmp_path)
        info = _get(path, "/router")
        assert info.status_code == 200 and info.json()["command"] == "mcp" and info.json()["socket"] == path
        own = _get(path, "/sessions?scope=router", **{"x-router-channel": "cli"})
        assert own.status_code == 200 and own.json() == {"sessions": []}  # its echo root is hidden
        assert _get(path, "/sessions?scope=unshared").json() == {"sessions": []}
        off = _get(path, "/sessions?scope=router", **{"x-router-channel": "no-such-channel"})
        assert off.status_code == 503 and off.json()["error"] == "channel-off"
        assert _get(path, "/asks").json() == _get(path, "/asks?all=1").json() == {"asks": []}
    finally:
        loaded = probed.loaded()
    assert loaded.isdisjoint(NOT_LOADED), sorted(loaded & set(NOT_LOADED))

    probed = Probed(tmp_path, "asked")
    try:
        assert "result" in probed.ask(initialize())
        path = _socket_of(tmp_path)
        listed = _get(path, "/sessions", **{"x-router-channel": "cli"})  # the whole board: the app's route
        assert listed.status_code == 200 and listed.json()["sessions"] == []
        assert _get(path, "/router").json()["socket"] == path  # the front still answers
        assert _get(path, "/sessions?scope=router", host="elsewhere").status_code == 421  # the app's door
    finally:
        loaded = probed.loaded()
    assert {"quart", "hypercorn"} <= loaded


def test_the_process_answers_as_the_sdk_did(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-m", "router", "mcp", "--data-dir", str(tmp_path / "data"),
                                "--settings", str(tmp_path / "settings")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, bufsize=0,
                               env=environment({"XDG_RUNTIME_DIR": str(tmp_path)}))
    assert process.stdin is not None and process.stdout is not None
    try:
        got = []
        for line in (initialize(), request(2, "tools/list"), request(3, "tools/call", {"name": "list_sessions"})):
            process.stdin.write(line)
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready
            got.append(json.loads(process.stdout.readline()))
    finally:
        process.stdin.close()
        process.wait(60)
    assert got[0]["result"] == SDK_ANSWERS["initialize"]
    assert got[1]["result"] == SDK_ANSWERS["tools/list"]
    assert got[2]["result"] == {"content": [{"type": "text", "text": '{"sessions":[]}'}], "isError": False}


def test_with_port_the_api_and_the_socket_are_the_apps(tmp_path: Path) -> None:
    """``router mcp --port 0``: the HTTP API on loopback, and the private
    socket served by the same app at once (no front: Quart is loaded)."""
    import re

    process = subprocess.Popen([sys.executable, "-m", "router", "mcp", "--port", "0", "--data-dir",
                                str(tmp_path / "data"), "--settings", str(tmp_path / "settings")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "wb"),
                               cwd=REPO, bufsize=0, env=environment({"XDG_RUNTIME_DIR": str(tmp_path)}))
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(initialize())
        ready, _, _ = select.select([process.stdout], [], [], 60)
        assert ready and "result" in json.loads(process.stdout.readline())
        found = re.search(r"API on (http://127\.0\.0\.1:\d+)/", (tmp_path / "err").read_text())
        assert found, (tmp_path / "err").read_text()
        import httpx

        assert httpx.get(f"{found.group(1)}/healthz").status_code == 200
        path = _socket_of(tmp_path)
        assert _get(path, "/router").json()["url"] == found.group(1)
        assert _get(path, "/sessions?scope=router").json() == {"sessions": []}
    finally:
        process.stdin.close()
        process.wait(60)
    assert process.returncode == 0
