"""``router acp`` given bad input by its client: each line is answered as
JSON-RPC says (a parse error, an invalid request, method not found, a
refusal with the router's code) and the connection goes on; with no router
running, ``session/list`` is empty and ``session/load`` and ``session/new``
refused ``no-router``."""

from __future__ import annotations

import json
import subprocess

import trio

from tests.api.processes import REPO, ROUTER, environment


async def test_bad_lines_are_answered_and_the_connection_goes_on() -> None:
    process = await trio.lowlevel.open_process([*ROUTER, "acp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.DEVNULL, env=environment(), cwd=REPO)
    assert process.stdin is not None and process.stdout is not None
    lines = [
        b"this is not json\n",
        b"[1, 2]\n",
        b'{"jsonrpc": "2.0", "id": 1, "method": "no/such"}\n',
        b'{"jsonrpc": "2.0", "id": 99, "result": {}}\n',  # a response to nothing: no answer
        b'{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}\n',
        b'{"jsonrpc": "2.0", "id": 3, "method": "session/load", "params": {"sessionId": 5}}\n',
        b'{"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": {}}\n',
        b'{"jsonrpc": "2.0", "id": 5, "method": "session/load", "params": {"sessionId": "s", "cwd": "/"}}\n',
        b'{"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": {"protocolVersion": 1}}\n',
    ]
    try:
        await process.stdin.send_all(b"".join(lines))
        answers: list[dict] = []
        buffer = b""
        with trio.fail_after(60):
            while len(answers) < 8:
                buffer += await process.stdout.receive_some(65536)
                *done, buffer = buffer.split(b"\n")
                answers += [json.loads(line) for line in done if line.strip()]
    finally:
        await process.stdin.aclose()
        with trio.fail_after(30):
            await process.wait()
    by_id = {answer["id"]: answer for answer in answers if answer.get("id") is not None}
    nulls = [answer["error"]["code"] for answer in answers if answer.get("id") is None]
    assert sorted(nulls) == [-32700, -32600]
    assert by_id[1]["error"]["code"] == -32601
    assert 99 not in by_id
    assert by_id[2]["error"]["code"] == -32000 and "no-router" in by_id[2]["error"]["message"]  # no router serve
    assert by_id[3]["error"]["code"] == -32602
    assert by_id[4]["result"] == {"sessions": []}
    assert by_id[5]["error"]["code"] == -32000 and "no-router" in by_id[5]["error"]["message"]
    assert by_id[6]["result"]["protocolVersion"] == 1
    assert process.returncode == 0
