"""Start a container daemon as a real process, for interop and fault tests.

Two kinds, one interface, so one scenario runs against both:

- ``"ours"``: ``python -m router daemon --adapter <adapter>`` from this repo;
- ``"reference"``: the reference daemon of npm ``agents@0.32.0`` with its echo
  adapter, through ``tests/support/refdaemon.mjs`` (fetched with ``npm pack``
  into the test cache; a skip when that is impossible, a failure under CI).

Both read ``CF_HARNESS_TOKEN``, ``CF_HARNESS_RUNTIME_ID`` and
``CF_HARNESS_PORT`` (0: pick a free port) and print one line once they listen;
the port is read from that line. The process is killed when the context ends
(SIGKILL if SIGTERM does not end it within a few seconds), so no test leaves a
daemon behind; :meth:`Daemon.kill` kills it early, for fault tests.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Literal

import attrs
import trio

from tests.support.npm import AGENTS_SPEC, node_binary, require_npm_package

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

Kind = Literal["ours", "reference"]
KINDS: tuple[Kind, ...] = ("ours", "reference")

_PORT = re.compile(rb"(?:listening |:)(\d+)\b")

#: Every daemon process started here and not yet reaped. A test that ends
#: normally stops its daemons in ``spawn_daemon``'s ``finally``; one that is
#: torn down abruptly (pytest-timeout's signal, an interpreter exit) may not,
#: so whatever is still alive when the interpreter exits is killed then.
_LIVE: set[trio.Process] = set()


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_LIVE):
        if process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass


@attrs.define
class Daemon:
    kind: Kind
    process: trio.Process
    port: int
    token: str
    runtime_id: str
    host: str = "127.0.0.1"
    #: Every stdout line after the first (the daemon's own prints).
    output: list[bytes] = attrs.field(factory=list)

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def session_url(self, session: str) -> str:
        from urllib.parse import quote

        return f"{self.url}/sessions/{quote(session, safe='')}"

    def kill(self) -> None:
        """SIGKILL: the container dies without a word."""
        if self.process.returncode is None:
            self.process.kill()

    def terminate(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)


def daemon_command(kind: Kind, adapter: str = "echo") -> list[str]:
    if kind == "ours":
        return [sys.executable, "-m", "router", "daemon", "--adapter", adapter, "--host", "127.0.0.1"]
    if adapter != "echo":
        raise ValueError("the reference daemon runs the echo adapter only")
    package = require_npm_package(AGENTS_SPEC)
    return [node_binary(), str(HERE / "refdaemon.mjs"), str(package)]


@asynccontextmanager
async def spawn_daemon(
    kind: Kind,
    *,
    token: str = "test-token",
    runtime_id: str = "runtime-1",
    port: int = 0,
    adapter: str = "echo",
    env: dict[str, str] | None = None,
    ready_timeout: float = 30.0,
    agent: tuple[str, ...] = (),
) -> AsyncIterator[Daemon]:
    """Run a daemon until the block ends; yields it once it listens.
    ``agent``: the ACP agent's command (``--adapter acp -- AGENT…``)."""
    command = daemon_command(kind, adapter) + (["--", *agent] if agent else [])
    environment = {
        **os.environ,
        "CF_HARNESS_TOKEN": token,
        "CF_HARNESS_RUNTIME_ID": runtime_id,
        "CF_HARNESS_PORT": str(port),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **(env or {}),
    }
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            lambda task_status: trio.run_process(
                command,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=None,
                check=False,
                task_status=task_status,
            )
        )
        _LIVE.add(process)
        try:
            lines = _lines(process.stdout)
            with trio.fail_after(ready_timeout):
                first = await lines.__anext__()
            found = _PORT.search(first)
            if found is None:
                raise RuntimeError(f"{kind} daemon printed {first!r}, which names no port")
            daemon = Daemon(kind, process, int(found.group(1)), token, runtime_id)

            async def drain() -> None:
                async for line in lines:
                    daemon.output.append(line)

            nursery.start_soon(drain)
            yield daemon
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process)
            _LIVE.discard(process)
            nursery.cancel_scope.cancel()


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    buffer = b""
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            if buffer:
                yield buffer
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line


async def _stop(process: trio.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(5):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
