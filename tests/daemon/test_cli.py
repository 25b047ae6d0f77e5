"""``router daemon``: the environment it needs, the adapters it loads, the
line it prints, and what a user's own adapter may see."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import trio

from router.daemon import cli as daemon_cli
from router.daemon.adapters.echo import EchoAdapter
from router.daemon.cli import AdapterLoadError, DaemonConfigError, load_adapter, read_env
from tests.daemon.hosts import connect
from tests.support.daemons import REPO, spawn_daemon

ENV = {"CF_HARNESS_TOKEN": "t", "CF_HARNESS_RUNTIME_ID": "r", "CF_HARNESS_PORT": "8080"}


def test_read_env():
    config = read_env({**ENV, "CF_HARNESS_TOKEN": "s3cr3t"})
    assert (config.token, config.runtime_id, config.port) == ("s3cr3t", "r", 8080)
    assert "s3cr3t" not in repr(config)


@pytest.mark.parametrize("missing", list(ENV))
def test_each_missing_variable_is_named(missing):
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(DaemonConfigError, match=f"missing-env: {missing} is not set"):
        read_env(env)


def test_all_missing_are_named():
    with pytest.raises(DaemonConfigError, match="CF_HARNESS_TOKEN and CF_HARNESS_RUNTIME_ID and CF_HARNESS_PORT are not set"):
        read_env({})


@pytest.mark.parametrize("port", ["http", "-1", "65536", "8080.0", " "])
def test_a_bad_port_is_refused(port):
    with pytest.raises(DaemonConfigError, match="bad-env: CF_HARNESS_PORT"):
        read_env({**ENV, "CF_HARNESS_PORT": port})


def test_echo_is_built_in():
    assert isinstance(load_adapter("echo"), EchoAdapter)


@pytest.mark.parametrize(
    "spec, code, words",
    [
        ("no_such_package_xyz.agents:adapter", "adapter-not-found", "no module named 'no_such_package_xyz'"),
        ("tests.daemon.fixture_adapters.nope:adapter", "adapter-not-found", "no module named"),
        ("tests.daemon.fixture_adapters.shapes:missing", "adapter-not-found", "has no attribute 'missing'"),
        ("tests.daemon.fixture_adapters.crashing:adapter", "adapter-import-failed", "crashed on import: RuntimeError: this adapter module is broken"),
        ("tests.daemon.fixture_adapters.missing_dependency:adapter", "adapter-import-failed", "surely_not_installed_anywhere_xyz"),
        ("tests.daemon.fixture_adapters.shapes:not_an_adapter", "bad-adapter", "is a int, not an adapter"),
        ("tests.daemon.fixture_adapters.shapes:bad_info", "bad-adapter", "not a wire.container.AdapterInfo"),
        ("justamodule", "bad-adapter", "not one of echo, claude-code, codex, replay and not MODULE:ATTRIBUTE"),
        ("mod:", "bad-adapter", "MODULE:ATTRIBUTE"),
    ],
)
def test_load_adapter_tells_not_found_from_crashed(spec, code, words):
    with pytest.raises(AdapterLoadError) as error:
        load_adapter(spec)
    assert error.value.code == code
    assert words in str(error.value)


def test_a_factory_is_called():
    assert isinstance(load_adapter("tests.daemon.fixture_adapters.shapes:make_adapter"), EchoAdapter)


def test_a_class_is_instantiated_not_taken_for_an_adapter():
    # A class has ``info`` and ``open`` too, but its ``open`` is unbound:
    # taken as is, every open would fail with a missing-argument TypeError.
    assert isinstance(load_adapter("tests.daemon.fixture_adapters.shapes:EchoAdapter"), EchoAdapter)


def test_a_built_in_adapter_not_in_this_build_says_so(monkeypatch):
    monkeypatch.setitem(daemon_cli.ADAPTERS, "future", "router.daemon.adapters.not_written_yet:adapter")
    with pytest.raises(AdapterLoadError, match="adapter-not-found: the future adapter is not in this build"):
        load_adapter("future")


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CF_HARNESS_")}
    environment.update(env, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "router", "daemon", *args], env=environment, capture_output=True, text=True, timeout=60
    )


def test_the_command_refuses_to_start_without_its_environment():
    done = run_cli([], {k: v for k, v in ENV.items() if k != "CF_HARNESS_RUNTIME_ID"})
    assert done.returncode == 2
    assert "CF_HARNESS_RUNTIME_ID is not set" in done.stderr
    assert done.stdout == ""


def test_the_command_refuses_an_adapter_it_cannot_load():
    done = run_cli(["--adapter", "tests.daemon.fixture_adapters.crashing:adapter"], {**ENV, "CF_HARNESS_PORT": "0"})
    assert done.returncode == 2
    assert "adapter-import-failed" in done.stderr and "this adapter module is broken" in done.stderr


def test_the_command_refuses_a_log_level_it_does_not_know():
    done = run_cli(["--log-level", "LOUD"], {**ENV, "CF_HARNESS_PORT": "0"})
    assert done.returncode == 2
    assert "--log-level" in done.stderr and "LOUD" in done.stderr
    assert "Traceback" not in done.stderr


async def test_the_listening_line_and_a_users_adapter_never_sees_the_token():
    async with spawn_daemon("ours", adapter="tests.daemon.fixture_adapters.env_check:adapter", runtime_id="rt-9") as daemon:
        async with connect(daemon, "env") as h:
            hello = await h.hello()
            assert hello["adapter"] == {"id": "env-check", "version": "1", "capabilities": []}
            await h.open(1)
            await h.replay(0)
            await h.prompt("a", "?")
            outcome = await h.settled("a")
            with open(f"/proc/{daemon.process.pid}/environ", "rb") as file:
                environ = file.read()
    seen = json.loads(outcome["text"])
    assert seen["parent"] == daemon.process.pid  # executed again in place: the same pid
    assert {key: seen[key] for key in ("import", "run", "child")} == {"import": False, "run": False, "child": False}
    assert b"CF_HARNESS_TOKEN" not in environ and daemon.token.encode() not in environ


async def test_the_first_line_names_adapter_address_and_runtime():
    environment = {**os.environ, **ENV, "CF_HARNESS_PORT": "0", "CF_HARNESS_RUNTIME_ID": "rt-7", "PYTHONPATH": str(REPO)}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "router", "daemon", "--host", "127.0.0.1"], env=environment, stdout=subprocess.PIPE
    )
    try:
        data = b""
        with trio.fail_after(30):
            while b"\n" not in data:
                chunk = await process.stdout.receive_some()
                assert chunk, "the daemon ended before it printed its line"
                data += chunk
    finally:
        process.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            status = await process.wait()
        await process.stdout.aclose()
    assert re.fullmatch(r"router daemon: echo on 127\.0\.0\.1:\d+ \(runtime rt-7\)", data.split(b"\n")[0].decode())
    assert status == 0  # SIGINT is a clean stop too


def test_the_cli_errors_are_refusals_with_codes() -> None:
    from router.errors import Refusal

    with pytest.raises(DaemonConfigError) as missing:
        read_env({})
    assert isinstance(missing.value, Refusal) and missing.value.code == "missing-env"
    with pytest.raises(DaemonConfigError) as bad:
        read_env({"CF_HARNESS_TOKEN": "t", "CF_HARNESS_RUNTIME_ID": "r", "CF_HARNESS_PORT": "x"})
    assert bad.value.code == "bad-env" and "CF_HARNESS_PORT" in bad.value.message
    with pytest.raises(AdapterLoadError) as load:
        load_adapter("nope")
    assert isinstance(load.value, Refusal) and load.value.code == "bad-adapter"


def test_a_token_pipe_that_is_not_one_is_refused():
    env = {**os.environ, "CF_HARNESS_RUNTIME_ID": "rt", "CF_HARNESS_PORT": "0", "PYTHONPATH": str(REPO),
           "ROUTER_DAEMON_TOKEN_FD": "987"}
    env.pop("CF_HARNESS_TOKEN", None)
    done = subprocess.run([sys.executable, "-m", "router", "daemon"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "bad-env" in done.stderr and "ROUTER_DAEMON_TOKEN_FD" in done.stderr
    assert "Traceback" not in done.stderr
