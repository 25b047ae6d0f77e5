"""A real git repository, a real ``router serve`` and the ``router`` commands,
for the worktree sessions' tests.

:class:`Bench` holds one test's world: a private tmux server
(``TMUX_TMPDIR``), the settings and data directories, the environment every
command and ``router serve`` run with, and a git repository made here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import trio

from tests.api.processes import REPO, ROUTER, page_url, read_lines, stop


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    return done.stdout


def make_repo(folder: Path) -> Path:
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    (folder / "README.md").write_text("a project\n")
    git(folder, "add", "README.md")
    git(folder, "commit", "-q", "-m", "first")
    return folder


@attrs.define
class Bench:
    root: Path
    env: dict[str, str]
    repo: Path
    url: str = ""
    token: str = ""
    process: Any = None

    @classmethod
    def make(cls, root: Path, extra: dict[str, str] | None = None) -> "Bench":
        (root / "tmux").mkdir(mode=0o700)
        env = {**os.environ, "PYTHONPATH": str(REPO), "ROUTER_DATA_DIR": str(root / "data"),
               "ROUTER_SETTINGS_DIR": str(root / "settings"), "TMUX_TMPDIR": str(root / "tmux"),
               "SHELL": "/bin/sh", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid", **(extra or {})}
        env.pop("TMUX", None)
        return cls(root=root, env=env, repo=make_repo(root / "project"))

    async def router(self, *args: str) -> tuple[int, str, str]:
        done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False,
                                      env=self.env, cwd=REPO)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    async def router_json(self, *args: str) -> tuple[int, Any, str]:
        code, out, err = await self.router(*args)
        return code, json.loads(out) if out.strip() else None, err

    async def tmux_has(self, name: str) -> bool:
        done = await trio.run_process(["tmux", "-L", "router", "has-session", "-t", f"={name}"], env=self.env,
                                      check=False, capture_stdout=True, capture_stderr=True)
        return done.returncode == 0

    async def listed(self) -> dict[str, dict[str, Any]]:
        code, out, _ = await self.router_json("sessions", "--json")
        return {each["id"]: each for each in out or []}

    @asynccontextmanager
    async def serve(self, *args: str) -> AsyncIterator["Bench"]:
        stderr = self.root / "serve.stderr"
        with open(stderr, "ab") as err:
            process = await trio.lowlevel.open_process(
                [*ROUTER, "serve", "--port", "0", "--log-level", "info", *args], stdout=subprocess.PIPE,
                stderr=err, env=self.env, cwd=REPO)
        self.process = process
        try:
            assert process.stdout is not None
            with trio.fail_after(60):
                lines = await read_lines(process.stdout, 2)
            found = page_url(lines[0])
            assert found is not None, (lines, stderr.read_text())
            self.url, self.token = found
            yield self
        finally:
            await stop(process)

    def log(self) -> str:
        return (self.root / "serve.stderr").read_text(errors="replace")

    async def close(self) -> None:
        """The private tmux server goes, with every session in it."""
        await trio.run_process(["tmux", "-L", "router", "kill-server"], env=self.env, check=False,
                               capture_stdout=True, capture_stderr=True)


def kill(process: Any) -> None:
    process.send_signal(signal.SIGKILL)
