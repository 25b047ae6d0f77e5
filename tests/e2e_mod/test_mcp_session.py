"""``router mcp --claude-session-from-env``: the plug-in's MCP server learns
its session from Claude Code's environment (``CLAUDE_CODE_SESSION_ID``)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import trio

from router.modlink import probe_health
from tests.support.polling import until
from wire.mod import resolve_mod_socket_path

ROUTER = str(Path(sys.executable).parent / "router")


def _env(runtime_dir: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "CLAUDE_CODE_SESSION_ID"}
    return {**env, "XDG_RUNTIME_DIR": runtime_dir, "ROUTER_DATA_DIR": str(tmp_path / "data"), **extra}


async def test_without_the_variable_it_refuses_with_a_sentence(runtime_dir: str, tmp_path: Path) -> None:
    done = await trio.run_process(
        [ROUTER, "mcp", "--claude-session-from-env"],
        env=_env(runtime_dir, tmp_path),
        stdin=b"",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 2
    assert b"CLAUDE_CODE_SESSION_ID is not set" in done.stderr
    assert done.stdout == b""  # stdout is the MCP wire


async def test_with_the_variable_it_serves_that_sessions_link(runtime_dir: str, tmp_path: Path) -> None:
    session_id = str(uuid.uuid4())
    path = resolve_mod_socket_path(session_id, {"XDG_RUNTIME_DIR": runtime_dir}).path
    assert path is not None
    process = await trio.lowlevel.open_process(
        [ROUTER, "mcp", "--claude-session-from-env"],
        env=_env(runtime_dir, tmp_path, CLAUDE_CODE_SESSION_ID=session_id),
        stdin=-1,
        stdout=-1,
        stderr=-1,
    )
    assert process.stdin is not None
    try:
        with trio.fail_after(60):
            await until(lambda: os.path.exists(path), step=0.05)
            assert await probe_health(path, timeout=5)
    finally:
        await process.stdin.aclose()  # the client hung up: the server stops
        with trio.fail_after(30):
            assert await process.wait() == 0
    assert not os.path.exists(path)
