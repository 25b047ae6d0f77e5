"""``router serve``, ``router send`` and ``router mcp`` as real processes,
for the process tests: spawned from this checkout, their first stdout line
read, and never left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import trio

REPO = Path(__file__).resolve().parent.parent.parent
ROUTER = [sys.executable, "-m", "router"]


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name in ("ROUTER_DATA_DIR", "ROUTER_SETTINGS_DIR", "ROUTER_DAEMON_TOKEN"):
        env.pop(name, None)
    return {**env, **(extra or {})}


@attrs.define
class Served:
    process: trio.Process
    url: str
    stderr: Path

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


async def _first_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


@asynccontextmanager
async def serve(tmp: Path, *args: str, name: str = "serve") -> AsyncIterator[Served]:
    """``router serve --port 0`` on ``tmp``'s data and settings, until the
    block ends (then SIGTERM, and SIGKILL if it lingers)."""
    stderr = tmp / f"{name}.stderr"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp / "data"), "--settings", str(tmp / "settings"),
             "--log-level", "info", *args],
            stdout=subprocess.PIPE, stderr=err, env=environment(), cwd=REPO,
        )
    try:
        assert process.stdout is not None
        with trio.fail_after(60):
            line = (await _first_line(process.stdout)).decode()
        if "listening on " not in line:
            await process.wait()
            raise AssertionError(f"router serve did not start ({process.returncode}): {stderr.read_text()}")
        url = line.split("listening on ", 1)[1].split()[0]
        yield Served(process=process, url=url, stderr=stderr)
    finally:
        await stop(process)


async def stop(process: trio.Process, sig: int = signal.SIGTERM) -> int:
    if process.returncode is None:
        process.send_signal(sig)
        with trio.move_on_after(20):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode


async def send(url: str, *args: str) -> tuple[int, Any, str]:
    """``router send --url URL ARGS``: exit status, stdout as JSON (or
    None), stderr."""
    done = await trio.run_process(
        [*ROUTER, "send", "--url", url, *args], capture_stdout=True, capture_stderr=True, check=False,
        env=environment(), cwd=REPO,
    )
    out = done.stdout.decode()
    return done.returncode, json.loads(out) if out.strip() else None, done.stderr.decode()
