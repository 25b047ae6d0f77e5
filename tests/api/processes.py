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
    for name in ("ROUTER_DATA_DIR", "ROUTER_SETTINGS_DIR", "ROUTER_DAEMON_TOKEN", "ROUTER_TOKEN"):
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


def page_url(line: str, settings: Path) -> tuple[str, str] | None:
    """``(base URL, token)`` of the ``router serve`` whose first line is
    ``line`` and whose settings directory is ``settings``
    (:func:`tests.support.served.served_page`), or None when the line is
    not a router's URL."""
    from tests.support.served import served_page

    found = served_page(line, settings)
    return None if found is None else (found.url, found.token)


@asynccontextmanager
async def serve(tmp: Path, *args: str, name: str = "serve", env: dict[str, str] | None = None) -> AsyncIterator[Served]:
    """``router serve --port 0`` on ``tmp``'s data and settings (``env``
    added to its environment: ``ROUTER_DAEMON_TOKEN`` with ``--daemon``),
    until the block ends (then SIGTERM, and SIGKILL if it lingers)."""
    from tests.support.served import served_page

    stderr, settings = tmp / f"{name}.stderr", tmp / "settings"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp / "data"), "--settings", str(settings),
             "--log-level", "info", *args],
            stdout=subprocess.PIPE, stderr=err, env=environment(env), cwd=REPO,
        )
    try:
        assert process.stdout is not None
        with trio.fail_after(60):
            lines = await read_lines(process.stdout, 2)
        found = served_page(lines[0], settings)
        if found is None:
            await process.wait()
            raise AssertionError(f"router serve did not start ({process.returncode}): {lines} {stderr.read_text()}")
        assert lines[0] == found.page, lines  # stdout is a pipe only this process reads: the token on it
        assert len(lines) == 2 and lines[1].startswith(f"router serve: listening on {found.url} "), lines
        yield Served(process=process, url=found.url, token=found.token, page=found.page, stderr=stderr,
                     listening=lines[1])
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
    """``router send --url URL --json ARGS`` with ``$ROUTER_TOKEN`` set to
    ``token`` when given: exit status, stdout as JSON (or None), stderr."""
    done = await trio.run_process(
        [*ROUTER, "send", "--url", url, "--json", *args], capture_stdout=True, capture_stderr=True,
        check=False, env=environment({"ROUTER_TOKEN": token} if token is not None else None), cwd=REPO,
    )
    out = done.stdout.decode()
    return done.returncode, json.loads(out) if out.strip() else None, done.stderr.decode()
