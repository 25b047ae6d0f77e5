"""Where Docker cannot run: the tests' support skips with the reason (fails
under ``ROUTER_REQUIRE_DOCKER=1``), and the launcher module answers
``docker-unavailable`` at once, from every function. No engine is needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support import docker as support
from tests.support.docker import launch_context


@pytest.fixture
def no_docker_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))


def test_no_client_is_a_skip_with_the_reason(no_docker_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROUTER_REQUIRE_DOCKER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no docker client on PATH"):
        support.require_docker()


def test_no_client_fails_when_docker_is_required(no_docker_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUTER_REQUIRE_DOCKER", "1")
    with pytest.raises(pytest.fail.Exception, match="ROUTER_REQUIRE_DOCKER=1.*no docker client on PATH"):
        support.require_docker()


def test_an_engine_that_does_not_answer_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.delenv("ROUTER_REQUIRE_DOCKER", raising=False)
    if support.shutil.which("docker") is None:
        pytest.skip("no docker client on PATH to try against a dead socket")
    with pytest.raises(pytest.skip.Exception, match="no docker engine answers"):
        support.require_docker()


@pytest.mark.parametrize("client", ["/nonexistent/docker", "/bin/false"])
async def test_the_module_answers_docker_unavailable_from_every_function(launcher: Any, client: str) -> None:
    context = launch_context("t-unavailable", "router:latest", options={"docker": client})
    with trio.fail_after(30):
        answers = [
            await launcher.start(context),
            await launcher.wait(context, "c"),
            await launcher.inspect(context, "c"),
            await launcher.stop(context, "c"),
            await launcher.remove_workspace(context),
        ]
    assert [a["code"] for a in answers] == ["docker-unavailable"] * 5
    assert all(client in a["message"] for a in answers)


async def test_a_dead_engine_is_docker_unavailable_not_image_missing(
    launcher: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with trio.fail_after(30):
        refused = await launcher.start(launch_context("t-unavailable", "router:latest"))
    assert refused["code"] == "docker-unavailable"
