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
    #: The API's base URL (``http://127.0.0.1:PORT``), its token, and the
    #: page's URL with it (the first line ``router serve`` prints).
    url: str
    token: str
    page: str
    stderr: Path
    #: The line after the first: ``router serve: listening on ...``.
    listening: str = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def client(self, **options: Any) -> Any:
        """An httpx client of the API, with the token."""
        import httpx

        return httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=options.pop("timeout", 30),
                                 **options)

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


async def read_lines(stream: trio.abc.ReceiveStream, count: int) -> list[str]:
    """The first ``count`` lines of ``stream`` (fewer when it ends first)."""
    data = b""
    while data.count(b"\n") < count:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return [line.decode() for line in data.split(b"\n")[:count]]


def page_url(line: str) -> tuple[str, str] | None:
    """``(base URL, token)`` from ``http://127.0.0.1:PORT/?token=TOKEN``
    (``router serve``'s first line), or None when it is not that."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(line.strip())
    token = parse_qs(parts.query).get("token")
    if parts.scheme != "http" or parts.hostname != "127.0.0.1" or parts.path != "/" or not token:
        return None
    return f"http://{parts.netloc}", token[0]


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
            lines = await read_lines(process.stdout, 2)
        found = page_url(lines[0])
        if found is None:
            await process.wait()
            raise AssertionError(f"router serve did not start ({process.returncode}): {lines} {stderr.read_text()}")
        url, token = found
        assert len(lines) == 2 and lines[1].startswith(f"router serve: listening on {url} "), lines
        yield Served(process=process, url=url, token=token, page=lines[0], stderr=stderr, listening=lines[1])
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


async def send(url: str, *args: str, token: str | None = None) -> tuple[int, Any, str]:
    """``router send --url URL --json [--token TOKEN] ARGS``: exit status,
    stdout as JSON (or None), stderr."""
    # One argument: a token may start with "-", which argparse would take for an option.
    auth = [f"--token={token}"] if token is not None else []
    done = await trio.run_process(
        [*ROUTER, "send", "--url", url, "--json", *auth, *args], capture_stdout=True, capture_stderr=True,
        check=False, env=environment(), cwd=REPO,
    )
    out = done.stdout.decode()
    return done.returncode, json.loads(out) if out.strip() else None, done.stderr.decode()
