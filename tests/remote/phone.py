"""Headless Chromium as a phone, inside a network namespace.

The DevTools port of a browser in another namespace is out of the test's
reach (its loopback is the namespace's), so this browser speaks the
DevTools protocol over ``--remote-debugging-pipe``: Chromium reads commands
on fd 3 and writes answers on fd 4, each a JSON text ending in a NUL byte.
The rest is :class:`tests.support.chromium.Browser` as it is. Its ``HOME``
is the test's, where the router's CA was imported into the NSS store
(``certutil``; /work/shared/notes/reach.md, "Chromium and a router's own
CA"). :func:`emulate_phone` makes a tab a 390×844 touch phone
(``Emulation.setDeviceMetricsOverride``, ``setTouchEmulationEnabled``)
with an Android Chrome user agent.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import trio
from trio_websocket import ConnectionClosed

from tests.support.chromium import FLAGS, Browser, Page, require_chromium

PHONE_AGENT = ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
               "Chrome/126.0.0.0 Mobile Safari/537.36")


class _Pipe:
    """What :class:`Browser` reads and writes, over the two pipes."""

    def __init__(self, commands: trio.lowlevel.FdStream, answers: trio.lowlevel.FdStream) -> None:
        self._commands, self._answers = commands, answers
        self._buffer = bytearray()

    async def get_message(self) -> str:
        while b"\0" not in self._buffer:
            chunk = await self._answers.receive_some(1 << 16)
            if not chunk:
                raise ConnectionClosed(None)  # type: ignore[arg-type]
            self._buffer += chunk
        end = self._buffer.index(b"\0")
        text = bytes(self._buffer[:end]).decode()
        del self._buffer[: end + 1]
        return text

    async def send_message(self, text: str) -> None:
        await self._commands.send_all(text.encode() + b"\0")


def trust_ca(home: Path, ca_pem: Path) -> None:
    """Import ``ca_pem`` as a trusted CA into ``home``'s NSS store."""
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True, exist_ok=True)
    subprocess.run(["certutil", "-d", f"sql:{nssdb}", "-N", "--empty-password"], check=True, capture_output=True)
    subprocess.run(["certutil", "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", "router-ca", "-i", str(ca_pem)],
                   check=True, capture_output=True)


def _high(fd: int) -> int:
    """``fd`` moved to 10 or above (so fds 3 and 4 can be set from it)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


@asynccontextmanager
async def phone_chromium(netns: list[str], home: Path) -> AsyncIterator[Browser]:
    """A headless Chromium run under ``netns`` (an argv prefix), ``HOME``
    at ``home``; killed and its profile removed on every exit."""
    binary = require_chromium()
    profile = Path(tempfile.mkdtemp(prefix="phone-chromium-"))
    to_browser_r, to_browser_w = (_high(fd) for fd in os.pipe())
    from_browser_r, from_browser_w = (_high(fd) for fd in os.pipe())
    flags = [flag for flag in FLAGS if not flag.startswith("--remote-debugging-port")]
    argv = [*netns, "bash", "-c", f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}', "bash", binary, *flags,
            "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
    env = {**os.environ, "HOME": str(home)}
    process = await trio.lowlevel.open_process(argv, pass_fds=(to_browser_r, from_browser_w), env=env,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               start_new_session=True)
    os.close(to_browser_r)
    os.close(from_browser_w)
    commands = trio.lowlevel.FdStream(to_browser_w)
    answers = trio.lowlevel.FdStream(from_browser_r)
    try:
        browser = Browser(_Pipe(commands, answers))  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(browser.read)
            try:
                yield browser
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await commands.aclose()
            await answers.aclose()
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            shutil.rmtree(profile, ignore_errors=True)


async def emulate_phone(page: Page) -> None:
    await page.send("Emulation.setDeviceMetricsOverride",
                    {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    await page.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
    await page.send("Network.setUserAgentOverride", {"userAgent": PHONE_AGENT, "platform": "Android"})
