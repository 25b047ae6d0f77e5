"""``router send`` to a Claude Code session waits for its reply as for a
container session's: the end of the turn the message starts, its last
assistant message printed; ``--no-wait`` answers at the outcome. The
session is a real ``router mcp --claude-session ID`` with the mod
simulator on its link."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import trio

from tests.api.processes import REPO, ROUTER, environment, stop
from tests.support.polling import until


async def router(*args: str) -> tuple[int, str, str]:
    done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False,
                                  env=environment(), cwd=REPO)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_send_waits_for_a_claude_code_reply(tmp_path: Path, nursery: trio.Nursery) -> None:
    from router.modlink.sim import ModSimulator

    session = str(uuid.uuid4())
    stderr = tmp_path / "mcp.stderr"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "mcp", "--claude-session", session, "--data-dir", str(tmp_path / "mcp"), "--settings",
             str(tmp_path / "settings"), "--log-level", "info"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=environment(), cwd=REPO)
    try:
        with trio.fail_after(60):
            await until(lambda: "local socket " in stderr.read_text() or process.poll() is not None, step=0.05)
        assert process.returncode is None, stderr.read_text()
        sim = ModSimulator(session, env={"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]}, snapshot_interval=0)
        await nursery.start(sim.run)
        with trio.fail_after(60):
            while True:
                _, out, _ = await router("sessions", "--json")
                if any(item["id"] == session and item.get("connected") for item in json.loads(out or "[]")):
                    break
                await trio.sleep(0.1)

        status, out, err = await router("send", session, "hello there")
        assert (status, out) == (0, "I read: hello there\n"), err
        status, out, err = await router("send", session, "and again", "--json")
        assert status == 0 and json.loads(out)["reply"] == {"status": "done", "text": "I read: and again"}, err
        await sim.wait_idle()
        status, out, err = await router("send", session, "not waited for", "--no-wait")
        assert (status, out) == (0, f"started as a prompt in {session}\n"), err
        await sim.wait_idle()
        sim.stop()
    finally:
        if process.stdin is not None:
            await process.stdin.aclose()
        await stop(process, signal.SIGTERM)
