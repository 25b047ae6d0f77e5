"""The ``docker`` launcher module on the real engine: a session's daemon in
its own container, reached by a real host; what ``wait`` reports when the
container ends (stopped, killed, out of memory); refusals that come quickly;
a start cancelled midway; the workspace volume across a replacement."""

from __future__ import annotations

import json
from typing import Any, Callable

import httpx
import pytest
import trio

from router.host import Host, OperationStarted, Store
from tests.docker.conftest import endpoint, launch_context, renewed, start_host
from tests.support.docker import assert_nothing_left, docker, labelled

#: Bounds for single docker operations on a loaded machine: generous, so a
#: slow engine never fails a test, but a hang does.
START_BOUND = 120
WAIT_BOUND = 60


async def started_ok(launcher: Any, context: dict[str, Any]) -> dict[str, Any]:
    with trio.fail_after(START_BOUND):
        started = await launcher.start(context)
    assert "code" not in started, started
    return started


async def operation_started(host: Host, session: str, operation_id: str, submit: Callable[[], Any]) -> None:
    """Submit, then return once the daemon has started the operation."""
    async with host.session(session).events() as stream:
        await submit()
        async for batch in stream:
            if any(isinstance(e, OperationStarted) and e.operation_id == operation_id for e in batch):
                return


def container_json(container: str) -> dict[str, Any]:
    [found] = json.loads(docker("container", "inspect", container).stdout)
    return found


async def test_a_host_session_gets_the_echo_from_a_container(
    launcher: Any, docker_image: str, docker_label: str, store: Store, nursery: trio.Nursery
) -> None:
    context = launch_context(docker_label, docker_image)
    started = await started_ok(launcher, context)
    assert started["state"] == "running" and started["url"].startswith("ws://127.0.0.1:")
    async with httpx.AsyncClient() as http:
        health = await http.get(started["url"].replace("ws://", "http://") + "/healthz")
    assert health.status_code == 200

    found = container_json(started["container"])
    # Published on loopback only, the token out of the command line.
    [binding] = found["HostConfig"]["PortBindings"]["8080/tcp"]
    assert binding["HostIp"] == "127.0.0.1"
    assert context["token"] not in json.dumps(found["Args"]) + json.dumps(found["Config"]["Cmd"])
    assert found["Config"]["Labels"]["router.test"] == docker_label
    assert [m["Destination"] for m in found["Mounts"] if m["Type"] == "volume"] == ["/workspace"]

    host = await start_host(nursery, store, endpoint(started, context))
    result, _ = await host.session().prompt("hello")
    assert result.text == "echo: hello (turn 1)"
    assert (await launcher.inspect(context, started["container"]))["state"] == "running"
    await host.aclose()


async def test_start_inspect_stop_remove_workspace(launcher: Any, docker_image: str, docker_label: str) -> None:
    context = launch_context(docker_label, docker_image, options={"network": "host"})
    started = await started_ok(launcher, context)
    seen = await launcher.inspect(context, started["container"])
    assert seen["state"] == "running" and seen["url"] == started["url"]
    assert seen["labels"]["router.test"] == docker_label
    assert container_json(started["container"])["HostConfig"]["NetworkMode"] == "host"

    async with trio.open_nursery() as nursery:
        ended: dict[str, Any] = {}

        async def waiter() -> None:
            ended.update(await launcher.wait(context, started["container"]))

        nursery.start_soon(waiter)
        with trio.fail_after(WAIT_BOUND):
            assert await launcher.stop(context, started["container"]) is None
    # SIGTERM: the daemon closes cleanly and exits 0.
    assert ended == {"state": "exited", "exit_code": 0, "reason": "the container exited with status 0"}
    assert (await launcher.inspect(context, started["container"]))["state"] == "missing"
    assert labelled("container", docker_label) == []
    assert labelled("volume", docker_label) != []  # the workspace stays
    assert await launcher.remove_workspace(context) is None
    assert await launcher.remove_workspace(context) is None  # gone already: fine
    assert_nothing_left(docker_label)


async def test_a_kill_mid_turn_is_seen_and_a_replacement_settles_the_cut_turn(
    launcher: Any, docker_image: str, docker_label: str, store: Store, nursery: trio.Nursery
) -> None:
    context = launch_context(docker_label, docker_image)
    first = await started_ok(launcher, context)
    host = await start_host(nursery, store, endpoint(first, context))
    session = host.session()
    assert (await session.prompt("before"))[0].text == "echo: before (turn 1)"
    docker("exec", first["container"], "sh", "-c", "echo kept > /workspace/home/marker")
    await operation_started(host, "root", "cut", lambda: session.submit("slow 600000 never", operation_id="cut"))

    docker("kill", first["container"])
    with trio.fail_after(WAIT_BOUND):
        ended = await launcher.wait(context, first["container"])
    assert ended["state"] == "killed" and ended["exit_code"] == 137
    assert (await launcher.inspect(context, first["container"]))["state"] == "killed"
    await launcher.stop(context, first["container"])

    # The replacement: same session, same workspace volume, a new runtime.
    again = renewed(context)
    second = await started_ok(launcher, again)
    assert docker("exec", second["container"], "cat", "/workspace/home/marker").stdout == "kept\n"
    await host.aclose()
    host = await start_host(nursery, store, endpoint(second, again))
    session = host.session()
    with trio.fail_after(WAIT_BOUND):
        cut = await session.wait("cut")
    assert (cut.status, cut.reason) == ("unanswered", "container_lost")
    # The echo counts the turns restored from the host's record.
    assert (await session.prompt("after"))[0].text == "echo: after (turn 2)"
    await host.aclose()
    await launcher.stop(again, second["container"])
    assert await launcher.remove_workspace(again) is None
    assert_nothing_left(docker_label)


async def test_a_missing_image_is_refused_quickly_and_leaves_nothing(launcher: Any, docker_label: str) -> None:
    context = launch_context(docker_label, f"router-no-such-image:{docker_label}")
    with trio.fail_after(WAIT_BOUND):
        refused = await launcher.start(context)
    assert refused["code"] == "image-missing" and context["options"]["image"] in refused["message"]
    assert_nothing_left(docker_label)


async def test_a_daemon_that_exits_at_start_is_refused_with_its_words(
    launcher: Any, docker_image: str, docker_label: str
) -> None:
    context = launch_context(docker_label, docker_image, harness="no_such_module:adapter")
    refused = await started_refusal(launcher, context)
    assert refused["code"] == "start-failed"
    assert "adapter-not-found" in refused["message"] and "no_such_module" in refused["message"]
    assert labelled("container", docker_label) == []


async def test_a_daemon_gone_before_its_port_is_asked_is_refused_with_its_words(
    launcher: Any, docker_image: str, docker_label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race at its worst, made certain: the container has exited before
    # the launcher asks docker for its published port, which docker then
    # answers with words of its own about a port.
    asked = launcher._published_port

    async def after_the_exit(client: Any, container: str) -> int:
        await trio.to_thread.run_sync(lambda: docker("wait", container, timeout=60))
        return await asked(client, container)

    monkeypatch.setattr(launcher, "_published_port", after_the_exit)
    context = launch_context(docker_label, docker_image, harness="no_such_module:adapter")
    refused = await started_refusal(launcher, context)
    assert refused["code"] == "start-failed", refused
    assert "adapter-not-found" in refused["message"] and "no_such_module" in refused["message"], refused
    assert labelled("container", docker_label) == []


async def started_refusal(launcher: Any, context: dict[str, Any]) -> dict[str, Any]:
    with trio.fail_after(START_BOUND):
        refused = await launcher.start(context)
    assert "code" in refused, refused
    return refused


async def test_a_daemon_that_never_listens_is_unhealthy(launcher: Any, docker_image: str, docker_label: str) -> None:
    context = launch_context(docker_label, docker_image, harness="docker_fixture_adapters:stall",
                             options={"health_timeout": 2}, fixtures=True)
    refused = await started_refusal(launcher, context)
    assert refused["code"] == "unhealthy" and "/healthz" in refused["message"]
    assert labelled("container", docker_label) == []


async def test_a_start_cancelled_midway_removes_its_container(
    launcher: Any, docker_image: str, docker_label: str
) -> None:
    context = launch_context(docker_label, docker_image, harness="docker_fixture_adapters:stall",
                             options={"health_timeout": 3600}, fixtures=True)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(launcher.start, context)
            # Cancel once the container exists: the start is waiting for health.
            while not labelled("container", docker_label):
                await trio.sleep(0.1)
            scope.cancel()
    assert labelled("container", docker_label) == []


@pytest.mark.parametrize("delay", [0.0, 0.03, 0.1, 0.3, 1.0])
async def test_a_start_cancelled_at_any_point_leaves_no_container(
    launcher: Any, docker_image: str, docker_label: str, delay: float
) -> None:
    """Wherever the cancellation lands (client probe, image check, volume,
    create, start, port, health), no container is left; which step it hit
    depends on the machine's speed, and every step must hold."""
    context = launch_context(docker_label, docker_image, harness="docker_fixture_adapters:stall",
                             options={"health_timeout": 3600}, fixtures=True)
    with trio.move_on_after(delay):
        await launcher.start(context)
        raise AssertionError("a start that can never be healthy returned")
    assert labelled("container", docker_label) == []


async def test_bad_options_are_refused_before_anything_runs(
    launcher: Any, docker_image: str, docker_label: str
) -> None:
    for options in ({"network": "overlay"}, {"memory": "lots"}, {"mounts": [{"source": "relative", "target": "/x"}]}):
        refused = await started_refusal(launcher, launch_context(docker_label, docker_image, options=options))
        assert refused["code"] == "bad-launch", (options, refused)
    refused = await started_refusal(launcher, launch_context(docker_label, docker_image, env={"not a name": "x"}))
    assert refused["code"] == "bad-launch"
    assert_nothing_left(docker_label)


def cgroup_v1() -> bool:
    return docker("info", "--format", "{{.CgroupVersion}}").stdout.strip() == "1"


async def test_out_of_memory_is_reported_as_oom_killed(
    launcher: Any, docker_image: str, docker_label: str, store: Store, nursery: trio.Nursery
) -> None:
    context = launch_context(docker_label, docker_image, harness="docker_fixture_adapters:hog",
                             options={"memory": "160m"}, fixtures=True)
    started = await started_ok(launcher, context)
    host = await start_host(nursery, store, endpoint(started, context))
    assert (await host.session().prompt("fine"))[0].text == "echo: fine (turn 1)"
    await host.session().submit("hog", operation_id="hog")
    with trio.fail_after(WAIT_BOUND):
        ended = await launcher.wait(context, started["container"])
    await host.aclose()
    assert ended["state"] == "oom-killed", (ended, "cgroup v1" if cgroup_v1() else "cgroup v2")
    assert ended["exit_code"] == 137
    await launcher.stop(context, started["container"])
    await launcher.remove_workspace(context)
    assert_nothing_left(docker_label)
