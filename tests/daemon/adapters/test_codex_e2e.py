"""The Codex adapter driving the real ``codex`` binary (npm
``@openai/codex@0.171.0-linux-x64``) against the fake Responses API."""

from __future__ import annotations

import subprocess

import pytest

from router.daemon.adapter import AdapterTurn
from router.daemon.adapters import codex
from tests.daemon.adapters.helpers import Recorder
from tests.fakes.openai import FakeResponses, ResponsesReply
from tests.support.npm import CODEX_SPEC, require_npm_package
from wire.container import ContainerSettings, Done



@pytest.fixture(scope="module")
def codex_binary():
    package = require_npm_package(CODEX_SPEC)
    binary = next(package.glob("vendor/*/bin/codex"), None)
    if binary is None:
        pytest.fail(f"{CODEX_SPEC} has no vendor/*/bin/codex")
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.fail(f"codex failed to start (exit {done.returncode}): {done.stderr.strip()}")
    return binary


@pytest.fixture
async def fake_openai(nursery):
    fake = FakeResponses()
    await nursery.start(fake.run)
    return fake


async def test_codex_turns_resume_their_thread_in_a_new_container(codex_binary, fake_openai, tmp_path):
    fake_openai.script(
        ResponsesReply(call=("exec_command", {"cmd": "echo hello-from-codex"})),
        ResponsesReply(text="Noted: fig."),
        ResponsesReply(text="It was fig."),
    )
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": fake_openai.url + "/v1"}
    workspace = tmp_path / "workspace"
    settings = ContainerSettings(model="gpt-5.1-codex")

    def make(homes: str):
        return codex.make_adapter(program=str(codex_binary), homes=tmp_path / homes, cwd=workspace, env=env)

    # The base URL reaches Codex through the preset's -c model_provider
    # flags, which read it from the environment the CLI inherits.
    first = Recorder()
    session = await make("container-1").open(first.context(settings=settings))
    outcome = await session.run(AdapterTurn(operation_id="op-1", input="Remember fig."))
    assert outcome == Done(text="Noted: fig.")
    tools = [p for e in first.of_type("message") for p in e["message"]["parts"] if p["type"] == "tool"]
    assert tools[-1]["state"] == "done" and tools[-1]["output"] == "hello-from-codex\n"
    thread = session.state["threadId"]
    assert any(e.get("kind") == "file" and e["path"].startswith(".codex/sessions/") for e in first.persisted)

    second = Recorder()
    moved = await make("container-2").open(second.context(restore=first.persisted, settings=settings))
    outcome = await moved.run(AdapterTurn(operation_id="op-2", input="Which fruit?"))
    assert outcome == Done(text="It was fig.")
    assert moved.state["threadId"] == thread
    last = fake_openai.requests[-1].json
    texts = [
        part.get("text")
        for item in last["input"]
        if item.get("type") == "message"
        for part in item.get("content", [])
    ]
    assert "Remember fig." in texts and "Noted: fig." in texts
