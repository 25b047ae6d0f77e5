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
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import trio

from tests.api.processes import REPO, ROUTER, environment, stop
from tests.support.polling import until


async def router(*args: str) -> tuple[int, str, str]:
    done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False,
                                  env=environment(), cwd=REPO)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@asynccontextmanager
async def embedded(tmp_path: Path, session: str) -> AsyncIterator[trio.Process]:
    """``router mcp --claude-session SESSION``, its stdin kept open."""
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
        yield process
    finally:
        if process.stdin is not None:
            await process.stdin.aclose()
        await stop(process, signal.SIGTERM)


async def connected(session: str) -> dict:
    """``session`` as ``router sessions --json`` lists it once its mod is connected."""
    with trio.fail_after(60):
        while True:
            _, out, _ = await router("sessions", "--json")
            found = [item for item in json.loads(out or "[]") if item["id"] == session and item.get("connected")]
            if found:
                return found[0]
            await trio.sleep(0.1)


async def test_send_waits_for_a_claude_code_reply(tmp_path: Path, nursery: trio.Nursery) -> None:
    from router.modlink.sim import ModSimulator

    session = str(uuid.uuid4())
    async with embedded(tmp_path, session):
        sim = ModSimulator(session, env={"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]}, snapshot_interval=0)
        await nursery.start(sim.run)
        await connected(session)

        status, out, err = await router("send", session, "hello there")
        assert (status, out) == (0, "I read: hello there\n"), err
        status, out, err = await router("send", session, "and again", "--json")
        assert status == 0 and json.loads(out)["reply"] == {"status": "done", "text": "I read: and again"}, err
        await sim.wait_idle()
        status, out, err = await router("send", session, "not waited for", "--no-wait")
        assert (status, out) == (0, f"started as a prompt in {session}\n"), err
        await sim.wait_idle()
        sim.stop()


async def test_the_board_shows_a_claude_code_model_before_any_turn(tmp_path: Path, nursery: trio.Nursery) -> None:
    """A mod that names no model at hello (Claude Code names it in a turn's
    steps) is asked, ``session.model``: the board shows it, not ``-``."""
    from router.modlink.sim import ModSimulator
    from wire.mod import ModModelEvent

    session = str(uuid.uuid4())
    async with embedded(tmp_path, session):
        sim = ModSimulator(session, env={"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]}, snapshot_interval=0,
                           model="claude-opus-test")
        emit = sim.emit
        sim.emit = lambda event: None if isinstance(event, ModModelEvent) else emit(event)  # type: ignore[method-assign]
        await nursery.start(sim.run)
        await connected(session)
        with trio.fail_after(60):
            while (await connected(session)).get("model") != "claude-opus-test":
                await trio.sleep(0.1)
        assert any(request.call == "session.model" for request in sim.requests_seen)
        _, table, _ = await router("sessions")
        assert any(line.split()[:5] == [session, "claude-code", "idle", "claude-code", "claude-opus-test"]
                   for line in table.splitlines())
        sim.stop()
