"""``router modlink --session-id ID`` as a person runs it: a real process, its
stdout, curl over the socket, and the signals that stop it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from typing import Iterator

import httpx
import pytest

from wire.mod import MOD_CAPABILITY_ASKS, MOD_HEALTH_MARKER, MOD_INSTANCE_HEADER, MOD_URL_BASE, resolve_mod_socket_path

SESSION = "cli-session"


@pytest.fixture
def process_env(runtime_dir: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("CLAUDE_CONFIG_DIR",)}
    env["XDG_RUNTIME_DIR"] = runtime_dir
    return env


@pytest.fixture
def server(process_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "router", "modlink", "--session-id", SESSION],
        env=process_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()


def _first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().rstrip("\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_path_then_events_then_a_clean_stop(
    server: subprocess.Popen[str], process_env: dict[str, str], signum: int
) -> None:
    path = _first_line(server)
    assert path == resolve_mod_socket_path(SESSION, process_env).path
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url=MOD_URL_BASE, timeout=30) as client:
        assert client.get("/healthz").json() == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}
        events = [
            {"kind": "hello", "sessionId": SESSION, "claudeVersion": "2.1.310", "interactive": True},
            {"kind": "not-yet-invented", "detail": ["kept", 1]},
            {"kind": "turn-start"},  # malformed: skipped, not printed
            {"kind": "model", "model": "claude-opus-4-1"},
        ]
        response = client.post("/events", content=json.dumps({"events": events}), headers={MOD_INSTANCE_HEADER: "m"})
        assert response.json() == {"ok": True}
    assert server.stdout is not None
    printed = [json.loads(server.stdout.readline()) for _ in range(3)]
    assert printed == [events[0], events[1], events[3]]
    server.send_signal(signum)
    assert server.wait(timeout=30) == 0
    assert not os.path.exists(path)


def test_curl_reaches_it(server: subprocess.Popen[str]) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed on this machine")
    path = _first_line(server)
    done = subprocess.run(
        [curl, "-sS", "--max-time", "20", "--unix-socket", path, f"{MOD_URL_BASE}/healthz"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}
    bad = subprocess.run(
        [curl, "-sS", "--max-time", "20", "--unix-socket", path, "-d", "nope", f"{MOD_URL_BASE}/events"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(bad.stdout)["error"] == "not-json"
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0


def test_a_second_server_is_refused_and_the_first_goes_on(
    server: subprocess.Popen[str], process_env: dict[str, str]
) -> None:
    path = _first_line(server)
    second = subprocess.run(
        [sys.executable, "-m", "router", "modlink", "--session-id", SESSION],
        env=process_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert "link-in-use" in second.stderr and second.stdout == ""
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url=MOD_URL_BASE, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0


def test_no_socket_path_is_a_usage_error(process_env: dict[str, str]) -> None:
    env = {key: value for key, value in process_env.items() if key not in ("XDG_RUNTIME_DIR", "HOME")}
    done = subprocess.run(
        [sys.executable, "-m", "router", "modlink", "--session-id", SESSION],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no-socket-path" in done.stderr


def test_a_stdout_nobody_reads_does_not_stall_the_link(server: subprocess.Popen[str]) -> None:
    # The person piped the events somewhere that stopped reading (a paused
    # pager): once the pipe is full the relay waits, and the link must not.
    path = _first_line(server)
    snapshot = {"kind": "model", "model": "m" * 16_384}
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url=MOD_URL_BASE, timeout=30) as client:
        for _ in range(64):  # 16 MiB of events, far past any pipe's buffer
            response = client.post("/events", content=json.dumps({"events": [snapshot] * 16}))
            assert response.json() == {"ok": True}
        assert client.get("/healthz").json() == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
    assert not os.path.exists(path)


def test_hostile_http_does_not_end_the_process(process_env: dict[str, str], tmp_path: "os.PathLike[str]") -> None:
    """The inputs that once ended ``router modlink`` (pgjones/hypercorn issue
    203), many times, then a storm: the process still serves, its socket is
    still there, and it logged no traceback."""
    import functools
    import pathlib

    import trio

    from tests.modlink.hostile_http import KILLERS, run_case, storm

    log = pathlib.Path(tmp_path) / "stderr.log"
    with open(log, "w") as stderr:  # a file: a storm's warnings never fill a pipe
        process = subprocess.Popen(
            [sys.executable, "-m", "router", "modlink", "--session-id", SESSION],
            env=process_env, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
    try:
        path = _first_line(process)

        async def attack() -> None:
            dial = functools.partial(trio.open_unix_socket, path)
            async with trio.open_nursery() as nursery:
                for case in KILLERS:
                    for _ in range(40):
                        nursery.start_soon(run_case, dial, case)
            await storm(dial, seed=203, count=1000)

        trio.run(attack)
        assert process.poll() is None and os.path.exists(path)
        with httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url=MOD_URL_BASE, timeout=30) as client:
            assert client.get("/healthz").json() == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
    errors = log.read_text()
    assert "Traceback" not in errors and " ERROR " not in errors, errors[-3000:]
