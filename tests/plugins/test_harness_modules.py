"""The shipped harness modules: echo, container (a fake daemon's /healthz on
loopback) and claude-code (a fake `claude` binary)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from router.plugins.loader import Loader
from router.errors import Refusal

loader = Loader(log=lambda entry: pytest.fail(str(entry)))
loader.load({"harness": ["echo", "container", "claude-code"]}, only=["harness"])
ECHO = loader.module("harness", "echo").module
CONTAINER = loader.module("harness", "container").module
CLAUDE = loader.module("harness", "claude-code").module


def context(route, options=None, env=None, session=None):
    return {"instance": "i", "session": session, "route": route, "options": options or {},
            "env": env or {}}


async def test_echo() -> None:
    ctx = context({"harness": "echo", "model": "echo", "thinking": "off"})
    assert ECHO.levels({}) == ["off"] and ECHO.counts_account({}) is False
    assert await ECHO.preflight(ctx) is None
    assert await ECHO.version(ctx) == "echo 1"
    assert ECHO.reach(ctx)["via"] == "in-process"


class Health:
    def __init__(self) -> None:
        self.status = 200

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        status = self.status if scope["path"] == "/healthz" else 404
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def test_container_preflight_against_a_daemon(nursery) -> None:
    app = Health()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    [url] = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
    route = {"harness": "container", "model": "agent", "thinking": "off"}
    ok = context(route, {"url": url, "token": "t"})
    assert await CONTAINER.preflight(ok) is None
    assert CONTAINER.reach(ok) == {"via": "daemon", "url": url, "token": "t", "settings": {
        "model": "agent", "options": {"thinking": "off"}}}
    assert CONTAINER.levels({"levels": ["off", "high"]}) == ["off", "high"]
    assert CONTAINER.levels({}) == ["off"]
    app.status = 503
    assert (await CONTAINER.preflight(ok))["code"] == "daemon-unreachable"
    assert (await CONTAINER.preflight(context(route, {"token": "t"})))["code"] == "daemon-url-missing"
    assert (await CONTAINER.preflight(context(route, {"url": url})))["code"] == "daemon-token-missing"


def fake_claude(directory: Path, version: str = "2.1.332 (Claude Code)") -> Path:
    path = directory / "claude"
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / ".credentials.json").write_text("{}")
    return tmp_path


ROUTE = {"harness": "claude-code", "model": "claude-opus-4-5", "thinking": "high"}


async def test_claude_code_preflight_and_version(home: Path, tmp_path: Path) -> None:
    binary = fake_claude(tmp_path)
    env = {"HOME": str(home), "PATH": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path)}
    ctx = context(ROUTE, env=env, session="0b8f5c2e-1d2a-4c55-9a0e-3f1c2b4d5e6f")
    assert await CLAUDE.preflight(ctx) is None
    assert await CLAUDE.version(ctx) == "2.1.332"
    assert CLAUDE.levels({}) == ["low", "medium", "high", "xhigh", "max"]
    assert CLAUDE.counts_account({}) is True
    reach = CLAUDE.reach(ctx)
    assert reach["via"] == "mod-link"
    assert reach["args"] == ["--model", "claude-opus-4-5", "--effort", "high"]
    assert reach["socket"].startswith(str(tmp_path) + "/claude-envoy/")
    assert CLAUDE.env(ctx) == {"ROUTER_THINKING": "high"}
    # The binary named in options wins over PATH.
    other = tmp_path / "elsewhere"
    other.mkdir()
    fake_claude(other, "2.2.0 (Claude Code)")
    named = context(ROUTE, {"bin": str(other / "claude")}, env)
    assert await CLAUDE.version(named) == "2.2.0"
    assert binary.exists()


@pytest.mark.parametrize(
    "setup, code",
    [
        (lambda home, bin_dir: {"HOME": str(home), "PATH": str(home / "nowhere")},
         "claude-binary-missing"),
        (lambda home, bin_dir: {"HOME": str(bin_dir), "PATH": str(bin_dir)}, "no-session-credential"),
        (lambda home, bin_dir: (fake_claude(bin_dir, "2.1.100 (Claude Code)"),
                                {"HOME": str(home), "PATH": str(bin_dir)})[1], "claude-too-old"),
        (lambda home, bin_dir: (fake_claude(bin_dir, "no idea"),
                                {"HOME": str(home), "PATH": str(bin_dir)})[1],
         "claude-version-unknown"),
    ],
)
async def test_claude_code_preflight_refusals(home: Path, tmp_path: Path, setup, code) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = setup(home, bin_dir)
    if code == "no-session-credential":
        fake_claude(bin_dir)
    answer = await CLAUDE.preflight(context(ROUTE, env=env))
    assert answer["code"] == code and answer["message"]


async def test_claude_code_api_key_is_a_credential(tmp_path: Path) -> None:
    fake_claude(tmp_path)
    env = {"HOME": str(tmp_path / "empty-home"), "PATH": str(tmp_path), "ANTHROPIC_API_KEY": "k"}
    assert await CLAUDE.preflight(context(ROUTE, env=env)) is None


async def test_claude_code_version_without_a_binary(tmp_path: Path) -> None:
    with pytest.raises(Refusal) as caught:
        await CLAUDE.version(context(ROUTE, env={"PATH": str(tmp_path)}))
    assert caught.value.code == "claude-binary-missing"
    assert os.path.isdir(tmp_path)


async def test_a_container_launch_logs_no_daemon_token(nursery, tmp_path: Path) -> None:
    # The launch record carries the token (the host dials with it); the
    # launch's log entry must not: option secrets are never logged.
    from router.plugins.layer import PluginLayer
    from router.plugins.settings import SettingsDir
    from router.plugins.usage import MemoryRecords
    from wire.json import dumps

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    [url] = await nursery.start(partial(serve, Health(), config, shutdown_trigger=trio.sleep_forever))
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "plugins.json").write_text(dumps({
        "plugins": {"harness": ["container"]},
        "options": {"harness": {"container": {"url": url, "token": "s3cret-daemon-token"}}},
    }))
    (settings / "routes.json").write_text(dumps({
        "models": {"agent": {"provider": "p"}},
        "instances": {"coder": {"harness": "container", "model": "agent", "thinking": "off"}},
    }))
    log: list = []
    layer = PluginLayer(settings=SettingsDir(settings), records=MemoryRecords(), log=log.append)
    record = await layer.launch("coder", session="s-1")
    assert record.reach["token"] == "s3cret-daemon-token"
    assert [entry["event"] for entry in log] == ["launched"]
    assert "s3cret-daemon-token" not in dumps(log)
