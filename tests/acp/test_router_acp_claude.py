"""``router acp`` attached to a REAL Claude Code session: the real binary in
tmux with the router plug-in (tests/e2e_mod: the ``world``/``router_api``/
``fake_api`` fixtures and :func:`asked`) waits on a Bash call in
``--permission-mode manual``. An ACP client on the official SDK
(tests/support/acp_client.mjs, ``withdrawn`` mode) loads the session and gets
the ask as ``session/request_permission``; ``router answer ASK allow`` answers
it first; the client's request is withdrawn (``$/cancel_request``) and it sees
the tool's call complete in its ``session/update``s. A second ``router acp``
(``resume`` mode) loads the same session and replays the transcript with the
tool's result: no gap."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import trio

from tests.acp.test_router_acp import CLIENT, SDK_SPEC, texts
from tests.api.processes import REPO, ROUTER, environment
from tests.e2e_mod.conftest import claude_binary, fake_api, router_api, world  # noqa: F401  (fixtures)
from tests.e2e_mod.helpers import ModWorld, RouterApi
from tests.e2e_mod.test_asks import COMMAND, FILE, TURN, asked, router_cli, tool_result
from tests.fakes.anthropic import FakeAnthropic
from tests.support.npm import node_binary, require_npm_install
from tests.support.polling import until


def tool_updates(updates: list[dict[str, Any]], tool_call_id: str) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")
            and u["toolCallId"] == tool_call_id]


async def test_an_sdk_client_sees_a_claude_code_ask_answered_elsewhere_and_resumes_without_a_gap(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, tmp_path: Path  # noqa: F811
) -> None:
    sdk = require_npm_install(SDK_SPEC)
    session_id, ask = await asked(world, router_api, fake_api, deadline=300)
    env = environment({**world.env, "PATH": os.environ.get("PATH", "")})
    command = [node_binary(), str(CLIENT), str(sdk), session_id]
    err = tmp_path / "client.err"
    with err.open("wb") as stderr:
        client = await trio.lowlevel.open_process([*command, "withdrawn", "--", *ROUTER, "acp"], env=env, cwd=REPO,
                                                  stdout=subprocess.PIPE, stderr=stderr)
    lines: list[dict[str, Any]] = []

    async def read() -> None:
        assert client.stdout is not None
        buffer = b""
        async for chunk in client.stdout:
            buffer += chunk
            *whole, buffer = buffer.split(b"\n")
            lines.extend(json.loads(line) for line in whole if line.strip())

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            with trio.fail_after(TURN):
                await until(lambda: any("permission" in line for line in lines), step=0.05)
            [permission] = [line["permission"] for line in lines if "permission" in line]
            assert permission["sessionId"] == session_id
            assert permission["toolCall"]["rawInput"]["command"] == COMMAND
            # Another surface answers first.
            status, _, answer_err = await router_cli(world, "answer", ask["id"], "allow")
            assert status == 0, answer_err
            with trio.fail_after(TURN):
                assert await client.wait() == 0, err.read_text()
    finally:
        if client.returncode is None:
            client.kill()
    result = lines[-1]
    assert "permission" not in result, (lines, err.read_text())
    with trio.fail_after(TURN):
        await until(lambda: tool_result(fake_api) is not None)
        await world.wait_screen("one", "All done.")
    assert (world.workspaces[0] / FILE).read_text() == "written\n"
    tool_call_id = permission["toolCall"]["toolCallId"]
    # The client was told: its request withdrawn, the tool's call completed, with its result.
    assert result["withdrawn"] == [tool_call_id]
    seen = tool_updates(result["loadUpdates"] + result["updates"], tool_call_id)
    assert seen and seen[-1]["status"] == "completed", seen
    kept = (await router_api.http.get("/asks", params={"all": "1"})).json()["asks"]
    assert [(each["state"], each["decision"], each["by"]) for each in kept] == [("answered", "allow", "cli")]

    # A second `router acp` loads the same session: the transcript has it all.
    with trio.fail_after(TURN):
        done = await trio.run_process([*command, "resume", "--", *ROUTER, "acp"], env=env, cwd=REPO,
                                      capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    resumed = json.loads(done.stdout.decode().strip().splitlines()[-1])["loadUpdates"]
    assert texts(resumed, "user_message_chunk") == "please write the file"
    replayed = tool_updates(resumed, tool_call_id)
    assert [u["status"] for u in replayed][-1:] == ["completed"], replayed
    assert "All done." in texts(resumed, "agent_message_chunk")
