"""``router mcp`` as a real process, sent tool arguments nested 100, 1,000 and
10,000 levels deep as raw JSON-RPC lines: each call is answered (an error
result or a JSON-RPC error), the process stays up, and a good call after the
storm is answered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from mcp_types import LATEST_PROTOCOL_VERSION
from router.turns.requests import MAX_MESSAGE_DEPTH
from tests.api.processes import REPO, environment


def deep(depth: int) -> str:
    return "[" * depth + '"x"' + "]" * depth


def call(request_id: int, arguments: str) -> bytes:
    return ('{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "send_message", '
            '"arguments": %s}}\n' % (request_id, arguments)).encode()


async def test_deep_tool_arguments_over_stdio(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "router", "mcp", "--data-dir", str(tmp_path / "data"),
            "--settings", str(tmp_path / "settings")]
    process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, env=environment(), cwd=str(REPO))
    buffer = b""

    async def answer(request_id: int) -> dict:
        nonlocal buffer
        with trio.fail_after(60):
            while True:
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    if message.get("id") == request_id:
                        return message
                chunk = await process.stdout.receive_some(1 << 16)
                assert chunk, "router mcp closed its stdout"
                buffer += chunk

    try:
        await process.stdin.send_all(json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                       "clientInfo": {"name": "hostile", "version": "0"}}}).encode() + b"\n")
        assert "result" in await answer(1)
        await process.stdin.send_all(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        request_id = 1
        for depth in (100, 1_000, 10_000):
            for arguments in ('{"session": "root", "text": %s}' % deep(depth),
                              '{"session": %s, "text": "x"}' % deep(depth),
                              deep(depth)):
                request_id += 1
                await process.stdin.send_all(call(request_id, arguments))
                reply = await answer(request_id)
                if "error" in reply:
                    assert type(reply["error"]["code"]) is int and reply["error"]["message"]
                    if depth > MAX_MESSAGE_DEPTH:  # too deep for the SDK's reader: answered before it
                        assert reply["error"]["message"].startswith("too-deep: "), reply
                else:
                    assert reply["result"]["isError"] is True, reply
                    assert reply["result"]["content"][0]["text"].startswith("bad-arguments: ")
        request_id += 1
        await process.stdin.send_all(call(request_id, '{"session": "root", "text": "after", "wait": true}'))
        good = await answer(request_id)
        assert good["result"].get("isError") is not True, good
        assert json.loads(good["result"]["content"][0]["text"])["reply"]["text"].startswith("echo: after")
    finally:
        await process.stdin.aclose()
        with trio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0
