"""``router sessions``, ``router send`` (to an echo session) and ``router
asks`` load neither trio nor httpx: they ask the routers with blocking
requests (router._client_sync), and their start-up is most of what a
person waits for (docs/bench.md, "The command line and ``router mcp``").

Each runs in a fresh interpreter against a real ``router serve`` (its echo
``root`` session), does its work, and then says which modules it loaded,
as tests/test_layering.py's probes do. A behaviour, not a timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.processes import REPO, environment, serve

#: What these commands must not load (the server side's and the async client's).
HEAVY = ("trio", "httpx", "httpcore", "anyio", "hypercorn", "quart", "quart_trio", "router.plugins.settings")

PROBE = """
import json, sys
from router.cli import main
status = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump({"status": status, "loaded": sorted(sys.modules)}, out)
"""

COMMANDS = {
    "sessions": (["sessions"], "root"),
    "send": (["send", "root", "hello light"], "echo: hello light"),
    "asks": (["asks"], "no asks are waiting on you"),
}


@pytest.mark.parametrize("name", COMMANDS)
async def test_the_command_loads_no_trio_nor_httpx(tmp_path: Path, name: str) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(run)}
    argv, expected = COMMANDS[name]
    async with serve(tmp_path, env=env):
        seen = tmp_path / "seen.json"
        done = subprocess.run([sys.executable, "-c", PROBE, str(seen), *argv], capture_output=True, text=True,
                              env=environment({**env, "ROUTER_DATA_DIR": str(tmp_path / "data")}), cwd=REPO,
                              timeout=120, check=False)
    probe = json.loads(seen.read_text())
    assert probe["status"] == 0, done.stderr
    assert expected in done.stdout, (done.stdout, done.stderr)
    loaded = set(probe["loaded"])
    assert [module for module in HEAVY if module in loaded] == [], f"router {name} loaded them"
    assert "router._client_sync" in loaded  # it did ask, over the blocking client


async def test_two_routers_are_asked_at_once_and_listed_alike(tmp_path: Path) -> None:
    """With several routers the blocking survey asks each in a thread of
    its own: the board lists both, and a session both hold is ambiguous."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(run)}
    for each in ("one", "two"):
        (tmp_path / each).mkdir()
    async with serve(tmp_path / "one", name="one", env=env), serve(tmp_path / "two", name="two", env=env):
        cli = environment({**env, "ROUTER_DATA_DIR": str(tmp_path / "data")})
        listed = subprocess.run([sys.executable, "-m", "router", "sessions", "--json"], capture_output=True,
                                text=True, env=cli, cwd=REPO, timeout=120, check=False)
        sent = subprocess.run([sys.executable, "-m", "router", "send", "root", "which one?"], capture_output=True,
                              text=True, env=cli, cwd=REPO, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    board = json.loads(listed.stdout)
    assert [item["id"] for item in board] == ["root", "root"]
    assert len({item["router"]["socket"] for item in board}) == 2
    assert sent.returncode == 1 and "router send: ambiguous-session: 2 routers hold a session 'root'" in sent.stderr
