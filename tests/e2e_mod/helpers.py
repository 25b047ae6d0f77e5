"""The real Claude Code binary, interactive in tmux, with the router plug-in loaded.

One :class:`ModWorld` per test: a pre-seeded home (no dialogs), a private run
directory (the mod link's socket base), a writable copy of ``plugin/`` (an
interactive session writes its declarations and a ``tsconfig.json`` into the
folder it loads a mod from), the router's data directory, and a tmux server of
its own. ``router`` is the venv's: the copy's ``.mcp.json`` starts it as the
plug-in's does, and the test reaches the session as a person does, with
``router sessions`` and ``router send`` (:class:`RouterApi`).

Resource handling: :meth:`ModWorld.close` kills the tmux server (each pane's
``claude`` gets SIGHUP and its ``router mcp`` sees stdin close), then waits
for every process whose working directory is one of the world's folders to
be gone, and kills and reports any that stay.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import httpx
import trio

from tests.e2e_claude.helpers import processes_in
from tests.support.polling import until

REPOSITORY = Path(__file__).resolve().parents[2]
PLUGIN = REPOSITORY / "plugin"
#: The key the fake API is called with; the home approves its last 20 characters.
API_KEY = "sk-ant-test-not-a-real-key"
#: A subscriber's sign-in for the fake API (any value does).
OAUTH_TOKEN = "fake-oauth-token-for-tests"
#: The pane's size: wide enough that a line of the tests' words is never wrapped.
COLUMNS, ROWS = 200, 60


def _seed_home(home: Path, workspaces: list[Path]) -> None:
    """The state a person who finished onboarding, approved the key and
    trusted the folders has: no dialog stands between start and prompt."""
    (home / ".claude").mkdir(parents=True)
    state = {
        "hasCompletedOnboarding": True,
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {str(each): {"hasTrustDialogAccepted": True} for each in workspaces},
    }
    (home / ".claude.json").write_text(json.dumps(state))
    (home / ".claude" / "settings.json").write_text(json.dumps({"skipDangerousModePermissionPrompt": True}))


def copy_plugin(target: Path) -> Path:
    """A writable copy of ``plugin/`` (an interactive session writes into
    the folder it loads a mod from)."""
    shutil.copytree(PLUGIN, target, ignore=shutil.ignore_patterns("types", "tsconfig.json"))
    return target


@attrs.define
class ModWorld:
    root: Path
    home: Path
    run_dir: Path
    workspaces: list[Path]
    plugin: Path
    env: dict[str, str]
    claude: Path
    tmux_socket: Path
    panes: list[str] = attrs.field(factory=list)

    @classmethod
    def make(cls, claude: Path, api_url: str, *, workspaces: int = 2, oauth: bool = False) -> "ModWorld":
        """``oauth``: signed in as a subscriber (``CLAUDE_CODE_OAUTH_TOKEN``,
        no API key), the only sign-in that sees a usage limit."""
        # Under /tmp and short: the socket path must stay within 100 bytes.
        root = Path(tempfile.mkdtemp(prefix="mw-", dir="/tmp"))
        os.chmod(root, 0o700)
        home, run_dir = root / "home", root / "run"
        run_dir.mkdir(mode=0o700)
        spaces = [root / f"ws{index}" for index in range(workspaces)]
        for each in spaces:
            each.mkdir()
        _seed_home(home, spaces)
        plugin = copy_plugin(root / "plugin")
        bin_dir = root / "bin"
        bin_dir.mkdir()
        (bin_dir / "claude").symlink_to(claude)
        env = {
            # router (the venv's) first, then claude, then the system.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home),
            "XDG_RUNTIME_DIR": str(run_dir),
            "ROUTER_DATA_DIR": str(root / "data"),
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": api_url,
            **({"CLAUDE_CODE_OAUTH_TOKEN": OAUTH_TOKEN} if oauth else {"ANTHROPIC_API_KEY": API_KEY}),
            # Only the fake API is reached; one answer per request.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # --dangerously-skip-permissions as root
        return cls(
            root=root,
            home=home,
            run_dir=run_dir,
            workspaces=spaces,
            plugin=plugin,
            env=env,
            claude=bin_dir / "claude",
            tmux_socket=root / "tmux.sock",
        )

    # ------------------------------------------------------------------ tmux

    async def _tmux(self, *args: str) -> str:
        done = await trio.run_process(
            ["tmux", "-S", str(self.tmux_socket), "-f", "/dev/null", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode(errors="replace")

    def claude_argv(
        self, session_id: str, *extra: str, plugin_dir: bool = True, permission_mode: str | None = None
    ) -> list[str]:
        """``claude`` with the plug-in; with ``permission_mode`` in that mode
        (``manual`` asks the person), else with permissions skipped."""
        loads = ["--plugin-dir", str(self.plugin)] if plugin_dir else []
        mode = ["--permission-mode", permission_mode] if permission_mode else ["--dangerously-skip-permissions"]
        return [str(self.claude), *loads, *mode, "--session-id", session_id, *extra]

    async def install_from_marketplace(self) -> None:
        """The marketplace route: the plug-in's folder added as a marketplace,
        the plug-in installed from it for this home's user."""
        for args in (["marketplace", "add", str(self.plugin)], ["install", "router@router-local"]):
            done = await trio.run_process(
                [str(self.claude), "plugin", *args], env=self.env, capture_stdout=True, capture_stderr=True, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(f"claude plugin {' '.join(args)}: {(done.stdout + done.stderr).decode(errors='replace')}")

    async def start(
        self, name: str, session_id: str, *, workspace: int = 0, extra: tuple[str, ...] = (), plugin_dir: bool = True,
        permission_mode: str | None = None,
    ) -> str:
        """Start an interactive ``claude`` in a pane of its own."""
        script = self.root / f"{name}.sh"
        assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in self.env.items())
        argv = self.claude_argv(session_id, *extra, plugin_dir=plugin_dir, permission_mode=permission_mode)
        script.write_text(f"#!/bin/sh\nexec env -i {assignments} {shlex.join(argv)}\n")
        script.chmod(0o755)
        cwd = str(self.workspaces[workspace])
        await self._tmux("new-session", "-d", "-s", name, "-x", str(COLUMNS), "-y", str(ROWS), "-c", cwd, str(script))
        self.panes.append(name)
        return name

    async def screen(self, name: str) -> str:
        return await self._tmux("capture-pane", "-p", "-J", "-t", name)

    async def type(self, name: str, text: str) -> None:
        """Type ``text`` at the prompt and press Enter."""
        await self._tmux("send-keys", "-t", name, "-l", text)
        await self.wait_screen(name, text[-40:])
        await self._tmux("send-keys", "-t", name, "Enter")

    async def wait_screen(self, name: str, needle: str) -> str:
        """Until the pane shows ``needle``; bound the wait with a cancel scope."""
        seen = ""

        async def shows() -> bool:
            nonlocal seen
            seen = await self.screen(name)
            return needle in seen

        while not await shows():
            await trio.sleep(0.1)
        return seen

    # ------------------------------------------------------------------ teardown

    async def close(self) -> list[int]:
        """Stop every pane and wait for its processes to be gone; returns the
        pids that had to be killed (a test asserts there were none)."""
        if self.tmux_socket.exists():
            try:
                await self._tmux("kill-server")
            except RuntimeError:
                pass  # no server left: every pane had exited already
        left: list[int] = []
        with trio.move_on_after(20):
            await until(lambda: not self.processes(), step=0.1)
        for pid in self.processes():
            left.append(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)
        return left

    def processes(self) -> list[int]:
        """This world's live processes: every one working in its folders (each
        ``claude``, its ``router mcp`` and their tools) and its tmux server."""
        found = {pid for each in self.workspaces for pid in processes_in(each)}
        needle = os.fsencode(str(self.tmux_socket))
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if needle in handle.read():
                        found.add(int(entry))
            except OSError:
                continue
        return sorted(found)


class RouterApi:
    """Every local router, as the person reaches it: ``router sessions
    --json`` and ``router send`` (the commands, run with the world's
    environment, so they find the embedded router's private socket), and the
    live view over that socket (``GET /sessions/<id>/live``, as the page
    reads it)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        """A client of the world's one router (its Claude Code session's
        ``router mcp``), over its private socket, for the routes no command
        wraps (``GET /asks`` with ``?all=1``)."""
        if self._http is None:
            sockets = sorted((Path(self.env["XDG_RUNTIME_DIR"]) / "router").glob("*.sock"))
            if len(sockets) != 1:
                raise AssertionError(f"expected one router's socket, found {sockets}")
            transport = httpx.AsyncHTTPTransport(uds=str(sockets[0]))
            self._http = httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def _router(self, *args: str) -> tuple[int, str]:
        done = await trio.run_process(
            [sys.executable, "-m", "router", *args], env=self.env, capture_stdout=True, capture_stderr=True,
            check=False,
        )
        return done.returncode, done.stdout.decode()

    async def sessions(self) -> list[dict[str, Any]]:
        """Every session ``router sessions --json`` lists, ``[]`` while no
        router is up yet."""
        code, out = await self._router("sessions", "--json")
        if code == 2 or not out.strip():
            return []
        return list(json.loads(out))

    async def wait_connected(self, session_id: str) -> dict[str, Any]:
        """Until the session is listed and its mod said hello."""
        while True:
            for each in await self.sessions():
                if each["id"] == session_id and each.get("connected"):
                    return each
            await trio.sleep(0.1)

    async def send(self, session_id: str, text: str, *, event_id: str, card: bool = False,
                   wait: bool = False) -> tuple[int, dict[str, Any]]:
        """``router send SESSION TEXT --json --event-id ID``: an HTTP-like
        status (200 answered; else the refusal's) and the answer's JSON.
        Without ``wait`` (``--no-wait``) it answers at the outcome (``as``:
        row or prompt), not at the end of the turn."""
        code, out = await self._router("send", session_id, text, "--json", "--event-id", event_id,
                                       *(["--card"] if card else []), *([] if wait else ["--no-wait"]))
        body = json.loads(out) if out.strip() else {}
        return (200 if code == 0 else 400 + code), body

    async def live(self, session_id: str) -> AsyncIterator[dict[str, Any]]:
        """The session's live view, one event at a time, until the router
        closes it (the router goes when its Claude Code does)."""
        listed = next((each for each in await self.sessions() if each["id"] == session_id), None)
        if listed is None:
            return
        transport = httpx.AsyncHTTPTransport(uds=listed["router"]["socket"])
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            try:
                async with http.stream("GET", f"/sessions/{session_id}/live",
                                       timeout=httpx.Timeout(60.0, read=None)) as stream:
                    async for line in stream.aiter_lines():
                        if line.startswith("data:"):
                            yield json.loads(line[5:])
            except (httpx.RemoteProtocolError, httpx.ReadError):
                return


def last_user_text(request: Any) -> str:
    """The text of the last user message a Messages API request carries (a
    request mixes system-role entries in: found by role)."""
    for message in reversed(request.messages()):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(
                str(block.get("text", "")) if block.get("type") == "text" else json.dumps(block.get("content", ""))
                for block in content
                if isinstance(block, dict)
            )
    return ""


def require_tmux() -> None:
    """Interactive Claude Code runs in tmux: without it these tests cannot run
    (a skip, a failure under CI)."""
    import pytest

    if shutil.which("tmux") is None:
        if os.environ.get("ROUTER_REQUIRE_NPM") == "1":
            pytest.fail("tmux is not on PATH; the interactive Claude Code tests need it (apt-get install -y tmux)")
        pytest.skip("tmux is not on PATH; the interactive Claude Code tests need it")
