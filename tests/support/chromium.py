"""Headless Chromium driven over the DevTools protocol, for the page tests.

Debian's ``chromium`` (``/usr/bin/chromium``; ``.ci/run`` installs it) is
started with a fresh profile and ``--remote-debugging-port=0``; the port it
chose is read from ``DevToolsActivePort`` in the profile, and one WebSocket
to the browser carries every command (flat sessions: a page's commands name
its ``sessionId``). The flags are the ones this machine's closed network
needs: without the background-networking ones Chromium keeps dialling
Google's hosts and is refused.

One reader task owns the socket: it answers each command's waiter by id and
keeps the events a test may ask about (console messages, exceptions thrown
by the page's script). A page's script error is a test failure the test can
read (:attr:`Page.errors`), not something lost on stderr.

Without Chromium the tests skip with the reason; under CI
(``ROUTER_REQUIRE_BROWSER=1``, set by ``.ci/run``) they fail instead.

Resource handling: :func:`chromium` kills the browser (SIGKILL after a
SIGTERM grace) and removes its profile whatever the exit, so no test leaves
a browser behind.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, open_websocket_url

CHROMIUM = os.environ.get("ROUTER_CHROMIUM", "/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
)
#: How long Chromium may take to start and write its port (a cold start on a
#: loaded 2-core machine takes a few seconds).
START_TIMEOUT = 60.0


class ProtocolError(Exception):
    """Chromium answered a command with an error."""


class Browser:
    """One browser: commands over one WebSocket, answered by id."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[trio.Event, list[Any]]] = {}
        self.events: list[dict[str, Any]] = []

    async def read(self) -> None:
        """The one reader: hand answers to their waiters, keep events."""
        try:
            while True:
                message = json.loads(await self._ws.get_message())
                if "id" in message and message["id"] in self._waiting:
                    done, slot = self._waiting.pop(message["id"])
                    slot.append(message)
                    done.set()
                else:
                    self.events.append(message)
        except ConnectionClosed:
            for done, _ in self._waiting.values():
                done.set()

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        number = next(self._ids)
        done, slot = trio.Event(), []
        self._waiting[number] = (done, slot)
        body: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session is not None:
            body["sessionId"] = session
        await self._ws.send_message(json.dumps(body))
        await done.wait()
        if not slot:
            raise ProtocolError(f"{method}: the browser closed the connection")
        if "error" in slot[0]:
            raise ProtocolError(f"{method}: {slot[0]['error']}")
        return slot[0].get("result", {})

    async def open(self, url: str) -> Page:
        """A new tab at ``url``, its page and runtime events switched on."""
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.goto(url)
        return page


class Page:
    """One tab: navigate, evaluate, wait for a condition, take a screenshot."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.browser.send(method, params, self.session)

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})
        await self.wait_for("document.readyState === 'complete'")

    async def emulate(self, width: int, height: int, *, mobile: bool) -> None:
        """The viewport of a device: a phone (``mobile``: a scale factor of
        3, touch) or a desktop window (CDP ``Emulation`` domain)."""
        await self.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 3 if mobile else 1, "mobile": mobile})
        await self.send("Emulation.setTouchEmulationEnabled", {"enabled": mobile, "maxTouchPoints": 5 if mobile else 1})

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (awaited if a promise)."""
        answer = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in answer:
            raise ProtocolError(f"evaluating {expression!r}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Poll ``expression`` until it is truthy; its value. The page's own
        timing is not ours to know, so this polls a condition, never sleeps
        a guess; a timeout fails with what the page showed last."""
        with trio.move_on_after(timeout):
            while True:
                value = await self.evaluate(expression)
                if value:
                    return value
                await trio.sleep(0.05)
        text = await self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"the page never showed {expression!r}; it showed:\n{text}\nerrors: {self.errors}")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    @property
    def errors(self) -> list[str]:
        """What the page's script threw, and what it logged as an error."""
        out = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            if event.get("method") == "Runtime.exceptionThrown":
                details = event["params"]["exceptionDetails"]
                out.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif event.get("method") == "Runtime.consoleAPICalled" and event["params"].get("type") == "error":
                out.append(" ".join(str(arg.get("value", arg.get("description", ""))) for arg in event["params"]["args"]))
        return out


def require_chromium() -> str:
    if shutil.which(CHROMIUM) or Path(CHROMIUM).exists():
        return CHROMIUM
    reason = f"no Chromium at {CHROMIUM} (Debian's chromium package; .ci/run installs it)"
    if os.environ.get("ROUTER_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


async def _port(profile: Path, process: trio.Process) -> str:
    marker = profile / "DevToolsActivePort"
    with trio.fail_after(START_TIMEOUT):
        while True:
            if marker.exists():
                lines = marker.read_text().split("\n")
                if len(lines) >= 2 and lines[1]:
                    return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            if process.returncode is not None:
                raise RuntimeError(f"chromium exited with status {process.returncode} before it listened")
            await trio.sleep(0.05)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium for one test; see the module docstring."""
    binary = require_chromium()
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    process = await trio.lowlevel.open_process(
        [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = await _port(profile, process)
        async with open_websocket_url(url, max_message_size=64 * 1024 * 1024) as ws:
            browser = Browser(ws)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(browser.read)
                try:
                    yield browser
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
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
