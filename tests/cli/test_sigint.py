"""SIGINT ends a long-running command with exit 130 (128 + SIGINT) and
one line on stderr, never a traceback (router.cli, docs/cli.md
"Interrupting a command"); ``router modlink`` keeps its fixed behaviour
(docs/cli.md "Fixed names") (SIGINT removes its socket, exit 0: tests/modlink/test_cli.py).
Each command is interrupted while it waits: the turn it waits for is
seen running first."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import trio

from tests.api.processes import REPO, ROUTER, environment, serve, stop
from tests.support.daemons import spawn_daemon


def _sigint_default() -> None:
    """In the child before exec: SIGINT as a terminal's foreground command
    has it. A suite started in the background by a non-interactive shell
    runs with SIGINT ignored, which every child would inherit (and a
    Python whose SIGINT is ignored at start never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def interrupted(process: trio.Process, stderr: Path) -> list[str]:
    """SIGINT, then the process's exit status is 130 and stderr's lines."""
    process.send_signal(signal.SIGINT)
    with trio.fail_after(30):
        await process.wait()
    text = stderr.read_text()
    assert process.returncode == 130, text
    assert "Traceback" not in text, text
    return text.splitlines()


async def test_router_serve(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        lines = await interrupted(served.process, served.stderr)
    assert lines[-1] == "router serve: interrupted: stopped"
    assert "stopping api" in served.log()  # it stopped in order first


async def test_router_send_while_it_waits(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        stderr = tmp_path / "send.stderr"
        with open(stderr, "wb") as err:
            send = await trio.lowlevel.open_process(
                [*ROUTER, "send", "root", "slow 30000 wait for me", "--url", served.url],
                stdout=subprocess.DEVNULL, stderr=err, env=environment({"ROUTER_TOKEN": served.token}), cwd=REPO,
                preexec_fn=_sigint_default)
        try:
            async with served.client() as client:
                with trio.fail_after(60):
                    while not any(item["id"] == "root" and item["state"] == "working" for item in
                                  (await client.get("/sessions", params={"scope": "router"})).json()["sessions"]):
                        await trio.sleep(0.05)
            assert await interrupted(send, stderr) == ["router send: interrupted"]
        finally:
            await stop(send)


async def test_router_prompt_while_it_waits(tmp_path: Path) -> None:
    store = tmp_path / "host.db"
    async with spawn_daemon("ours", token="sigint-token") as daemon:
        stderr = tmp_path / "prompt.stderr"
        with open(stderr, "wb") as err:
            prompt = await trio.lowlevel.open_process(
                [*ROUTER, "prompt", "--daemon", daemon.url, "--store", str(store), "slow 30000 wait for me"],
                stdout=subprocess.DEVNULL, stderr=err, env=environment({"ROUTER_DAEMON_TOKEN": "sigint-token"}),
                cwd=REPO, preexec_fn=_sigint_default)
        try:
            with trio.fail_after(60):
                while True:  # the turn runs once its user message is in the transcript
                    done = await trio.run_process([*ROUTER, "transcript", "--store", str(store)], cwd=REPO,
                                                  env=environment(), capture_stdout=True, capture_stderr=True,
                                                  check=False)
                    if done.returncode == 0 and any(m.get("role") == "user" for m in json.loads(done.stdout)):
                        break
                    await trio.sleep(0.1)
            assert await interrupted(prompt, stderr) == ["router prompt: interrupted"]
        finally:
            await stop(prompt)
