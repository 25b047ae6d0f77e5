"""The tmux commands a local place needs.

The router keeps its sessions on a tmux server of its own, on the socket
named :data:`SOCKET_NAME` (``tmux -L router``: under ``$TMUX_TMPDIR``,
else ``/tmp/tmux-UID``), apart from the person's own tmux sessions; a
person attaches with ``router attach SESSION`` (``tmux -L router attach
-t NAME``). The server outlives the router that started it, so a router
restarted while local sessions run finds them again (:func:`has_session`).

The server's environment is the environment of the router that started
it; each new session also gets the few names a session must agree on
with the router (:data:`PASSED`), as ``-e NAME=VALUE`` (never a secret:
API keys reach the agent through the server's own environment).

``tmux`` missing from ``PATH`` is ``tmux-missing``; a tmux command that
fails is ``tmux-failed`` with tmux's words.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Final, Mapping, Sequence

import trio

from router.errors import Refusal

__all__ = ["PASSED", "SOCKET_NAME", "attach_argv", "has_session", "kill_session", "new_session", "send_keys",
           "tmux_binary"]

#: The router's tmux socket name (``tmux -L``).
SOCKET_NAME: Final = "router"
#: Environment names a new session gets from the router (not secrets):
#: where its ``router mcp`` keeps its record and finds its socket, and
#: what finds the programs.
PASSED: Final = ("PATH", "HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "ROUTER_DATA_DIR",
                 "ROUTER_SETTINGS_DIR", "CLAUDE_CONFIG_DIR", "LANG", "TERM")
#: The pane's size when nobody is attached (ours: wide enough for a turn).
COLUMNS, ROWS = 200, 50


def tmux_binary(env: Mapping[str, str] | None = None) -> str:
    found = shutil.which("tmux", path=(env or os.environ).get("PATH"))
    if found is None:
        raise Refusal("tmux-missing", "tmux is not on PATH; a local session runs in tmux: install it "
                      "(apt-get install tmux, brew install tmux) or use --where container")
    return found


async def _tmux(*args: str, check: bool = True) -> tuple[int, str]:
    done = await trio.run_process([tmux_binary(), "-L", SOCKET_NAME, *args], capture_stdout=True,
                                  capture_stderr=True, check=False, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise Refusal("tmux-failed", f"`tmux {args[0]}` failed: {done.stderr.decode(errors='replace').strip()}")
    return done.returncode, done.stdout.decode(errors="replace")


async def new_session(name: str, cwd: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
    """A detached tmux session ``name`` in ``cwd`` running ``argv``."""
    passed = [arg for key in PASSED if env.get(key) for arg in ("-e", f"{key}={env[key]}")]
    await _tmux("new-session", "-d", "-s", name, "-x", str(COLUMNS), "-y", str(ROWS), "-c", cwd, *passed, "--",
                *argv)


async def has_session(name: str) -> bool:
    if shutil.which("tmux") is None:
        return False
    code, _ = await _tmux("has-session", "-t", f"={name}", check=False)
    return code == 0


async def send_keys(name: str, *keys: str) -> None:
    await _tmux("send-keys", "-t", f"={name}:", *keys, check=False)


async def kill_session(name: str) -> None:
    await _tmux("kill-session", "-t", f"={name}", check=False)


def attach_argv(name: str) -> list[str]:
    """The command that attaches this terminal to session ``name``."""
    return [tmux_binary(), "-L", SOCKET_NAME, "attach-session", "-t", f"={name}"]
