"""One way in to every local session, with real processes: two ``router
serve`` (their own data directories, their own ports) and a ``router mcp``
(stdin kept open, serving a Claude Code session the mod simulator drives),
all listed by one ``router sessions``, each reached by ``router send`` with
no URL; then one router killed with SIGKILL and another stopped with
SIGSTOP, and the board still answers. Every test runs in its own run
directory (the autouse ``private_runtime_dir``), and none leaves a process
or a socket behind."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import trio

from tests.api.processes import REPO, ROUTER, Served, environment, serve, stop
from tests.support.polling import until

CLAUDE = "0c6d1f2e-8a7b-4c5d-9e0f-1a2b3c4d5e6f"


async def router(*args: str, raw: bool = False) -> tuple[int, Any, str]:
    """``router ARGS``: exit status, stdout as JSON (None when empty; the
    text when ``raw``), stderr."""
    done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False,
                                  env=environment(), cwd=REPO)
    out = done.stdout.decode()
    if raw:
        return done.returncode, out, done.stderr.decode()
    return done.returncode, json.loads(out) if out.strip() else None, done.stderr.decode()


async def sessions() -> tuple[int, list[dict[str, Any]], str]:
    status, listed, err = await router("sessions", "--json")
    return status, listed, err


def local_dir() -> Path:
    return Path(os.environ["XDG_RUNTIME_DIR"]) / "router"


@asynccontextmanager
async def mcp(tmp: Path) -> AsyncIterator[trio.Process]:
    """``router mcp --claude-session CLAUDE`` with its stdin kept open (no
    MCP client needed: the local socket is the way in), until the block
    ends; then stdin closes, and it must stop on its own."""
    stderr = tmp / "mcp.stderr"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "mcp", "--claude-session", CLAUDE, "--data-dir", str(tmp / "mcp"), "--settings",
             str(tmp / "settings"), "--log-level", "info"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=environment(), cwd=REPO,
        )
    try:
        with trio.fail_after(60):
            await until(lambda: "local socket " in stderr.read_text() or process.poll() is not None, step=0.05)
        assert process.returncode is None, stderr.read_text()
        yield process
        assert process.stdin is not None
        await process.stdin.aclose()
        with trio.fail_after(30):
            await process.wait()
        assert process.returncode == 0, stderr.read_text()
    finally:
        await stop(process, signal.SIGKILL)


async def create(served: Served, session: str) -> None:
    async with served.client() as client:
        created = await client.post("/sessions", json={"id": session})
        assert created.status_code == 201, created.text


def by_router(listed: list[dict[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    out: dict[str, list[tuple[str, str, str]]] = {}
    for item in listed:
        out.setdefault(item["router"]["name"], []).append((item["id"], item["kind"], item["state"]))
    return out


async def test_every_router_is_one_board(tmp_path: Path, nursery: trio.Nursery) -> None:
    from router.modlink.sim import ModSimulator

    env = {"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]}
    for each in ("one", "two"):
        (tmp_path / each).mkdir()
    async with serve(tmp_path / "one", name="one") as one, serve(tmp_path / "two", name="two") as two, \
            mcp(tmp_path) as embedded:
        assert one.url != two.url
        await create(one, "alpha")
        await create(two, "beta")
        sim = ModSimulator(CLAUDE, env=env, snapshot_interval=0)
        await nursery.start(sim.run)

        status, listed, err = await sessions()
        assert status == 0, err
        routers = {item["router"]["pid"]: item["router"] for item in listed}
        assert set(routers) == {one.process.pid, two.process.pid, embedded.pid}
        names = {pid: info["name"] for pid, info in routers.items()}
        assert {info["command"] for info in routers.values()} == {"serve", "mcp"}
        assert all(Path(info["socket"]).parent == local_dir() for info in routers.values())
        board = by_router(listed)
        assert sorted(board[names[one.process.pid]]) == [("alpha", "container", "idle"), ("root", "container", "idle")]
        assert sorted(board[names[two.process.pid]]) == [("beta", "container", "idle"), ("root", "container", "idle")]
        # `router mcp` keeps its echo root off the board (every router has one).
        assert sorted(board[names[embedded.pid]]) == [(CLAUDE, "claude-code", "idle")]
        status, table, _ = await router("sessions", raw=True)
        # Columns apart by two spaces or more ("5s ago" is one cell); the directory last.
        lines = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()]
        assert status == 0 and lines[0] == ["SESSION", "KIND", "STATE", "HARNESS", "MODEL", "ACTIVE", "ROUTER",
                                            "DIRECTORY"]
        model = next(item for item in listed if item["id"] == CLAUDE)["model"]  # as the mod (the simulator) said
        rows = {row[0]: row for row in lines[1:]}
        assert rows[CLAUDE][:5] == [CLAUDE, "claude-code", "idle", "claude-code", model]
        assert rows[CLAUDE][6] == names[embedded.pid]
        assert rows["alpha"][:5] == ["alpha", "container", "idle", "echo", "echo"]
        assert rows["alpha"][6] == names[one.process.pid]
        assert all(re.fullmatch(r"\d+[smhd] ago|-", row[5]) for row in lines[1:])
        assert len(lines) == 1 + len(listed)

        # `router send` with no URL finds the router that holds the session.
        status, answer, err = await router("send", "alpha", "to one", "--json")
        assert status == 0, err
        assert answer["reply"]["text"] == "echo: to one (turn 1)"
        status, answer, err = await router("send", "beta", "to two", "--event-id", "b1", "--json")
        assert status == 0 and answer["reply"]["text"] == "echo: to two (turn 1)", err
        status, again, _ = await router("send", "beta", "to two", "--event-id", "b1", "--json")  # a resend
        assert status == 0 and again["fromRecord"] is True
        status, answer, err = await router("send", CLAUDE, "to the session", "--card", "--json")
        assert status == 0 and answer["as"] == "prompt" and answer["message"] == "card", err
        assert [p.text for p in sim.prompts] == ["to the session"]
        # Every `router serve` has a `root`: name one.
        status, refused, _ = await router("send", "root", "which?", "--json")
        assert status == 1 and refused["error"] == "ambiguous-session"
        assert all(names[pid] in refused["message"] for pid in (one.process.pid, two.process.pid))
        assert names[embedded.pid] not in refused["message"]
        status, answer, err = await router("send", "root", "to two's root", "--router", names[two.process.pid],
                                           "--json")
        assert status == 0 and answer["reply"]["text"] == "echo: to two's root (turn 1)", err
        status, refused, _ = await router("send", "nowhere", "hi", "--json")
        assert status == 1 and refused["error"] == "unknown-session"
        status, resumed, _ = await router("resume", "alpha", "--json")
        assert status == 0 and resumed == {"session": "alpha", "resumed": False}

        # SIGKILL one: its socket stays behind, dead; the board goes on and
        # removes it.
        dead = routers[one.process.pid]["socket"]
        await stop(one.process, signal.SIGKILL)
        assert os.path.exists(dead)
        status, listed, err = await sessions()
        assert status == 0, err
        assert {item["router"]["pid"] for item in listed} == {two.process.pid, embedded.pid}
        assert not os.path.exists(dead)
        status, refused, _ = await router("send", "alpha", "to the dead", "--json")
        assert status == 1 and refused["error"] == "unknown-session"

        # SIGSTOP another: it cannot answer; it is named and left out (and
        # left alone), the rest is listed.
        two.process.send_signal(signal.SIGSTOP)
        try:
            status, listed, err = await sessions()
            assert status == 1 and "left out " + names[two.process.pid] in err and "no-answer" in err
            assert {item["router"]["pid"] for item in listed} == {embedded.pid}
            assert os.path.exists(routers[two.process.pid]["socket"])
        finally:
            two.process.send_signal(signal.SIGCONT)
        sim.stop()
    # Every router that exited removed its own socket; the dead one's was
    # removed by the board.
    assert os.listdir(local_dir()) == []


async def test_an_unsafe_directory_is_refused_by_every_command(tmp_path: Path) -> None:
    directory = local_dir()
    directory.mkdir(mode=0o700)
    directory.chmod(0o755)
    done = await trio.run_process(
        [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--settings", str(tmp_path / "s")],
        capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
    )
    assert done.returncode == 2 and done.stdout == b""
    assert b"unsafe-directory" in done.stderr and b"0755" in done.stderr and str(directory).encode() in done.stderr
    assert os.listdir(directory) == []
    status, out, err = await router("sessions")
    assert status == 2 and out is None and "unsafe-directory" in err
    status, out, err = await router("send", "root", "hi")
    assert status == 2 and out is None and "unsafe-directory" in err
    directory.chmod(0o700)


async def test_send_with_no_router_running() -> None:
    status, out, err = await router("send", "root", "hi")
    assert status == 2 and out is None and "no-router" in err
    status, out, err = await router("sessions", "--json")
    assert status == 0 and out == []
    status, out, err = await router("send", "root", "hi", "--router", "serve-1-none")
    assert status == 2 and "unknown-router" in err
    status, out, err = await router("send", "root", "hi", "--router", "x", "--url", "http://127.0.0.1:1")
    assert status == 2 and "not both" in err
