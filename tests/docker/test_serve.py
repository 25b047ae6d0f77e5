"""``router serve --launcher docker`` on the real engine, as real processes
(``router serve``, ``router launch``, ``router send``): each container
session in its own container, ``docker kill`` of one in the middle of a
slow turn survived without losing a message (a new container, the cut turn
re-run by the policy, the next turn's count continuing from the restored
entries) while the other two never notice; an image that is missing makes
the session unreachable with the reason, and nothing hangs. Everything
carries the test's label and goes with it (``docker_label``)."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.api.processes import send, serve
from tests.host.test_launched_processes import assert_nothing_lost, launch, listing, reply, three_sessions_and_a_kill
from tests.support.docker import TEST_LABEL, docker, labelled


def docker_settings(tmp_path: Path, label: str) -> None:
    """``plugins.json`` with the docker launcher, labelling all it makes."""
    settings = tmp_path / "settings"
    settings.mkdir(exist_ok=True)
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin",
                    "launcher": "docker"},
        "options": {"launcher": {"docker": {"labels": {TEST_LABEL: label}}}},
    }))


def running_containers(label: str) -> list[str]:
    return docker("ps", "-q", "--no-trunc", "--filter", f"label={TEST_LABEL}={label}").stdout.split()


async def test_three_sessions_three_containers_and_docker_kill_loses_no_message(
    tmp_path: Path, docker_image: str, docker_label: str, nursery: trio.Nursery
) -> None:
    docker_settings(tmp_path, docker_label)
    data = tmp_path / "data"
    async with serve(tmp_path, "--launcher", "docker", "--image", docker_image) as served:
        assert running_containers(docker_label) == []  # a container starts with the first message

        def kill(container: str) -> None:
            running = running_containers(docker_label)
            assert len(running) == 3 and container in running  # each session's own
            docker("kill", container)

        daemons, after = await three_sessions_and_a_kill(served, data, nursery, kill)
        assert all(d["launcher"] == "docker" for d in daemons.values())
        # The killed container was removed; the three sessions' run.
        assert daemons["b"]["container"] not in labelled("container", docker_label)
        assert sorted(running_containers(docker_label)) == sorted(after[n]["daemon"]["container"] for n in "abc")
    # router serve stopped: its containers with it (the workspaces stay for
    # the next start; the label fixture removes them).
    assert labelled("container", docker_label) == []
    assert_nothing_lost(data)


async def test_a_missing_image_is_unreachable_with_the_reason_and_nothing_hangs(
    tmp_path: Path, docker_image: str, docker_label: str
) -> None:
    docker_settings(tmp_path, docker_label)
    missing = f"router:missing-{docker_label}"
    async with serve(tmp_path, "--launcher", "docker", "--image", missing) as served:
        assert (await launch(served, "s"))["id"] == "s"
        with trio.fail_after(120):
            status, answer, err = await send(served.url, "s", "hello", "--event-id", "e1", token=served.token)
        assert status == 1, (answer, err, served.log())
        assert answer["reply"] == {"operationId": "e1", "session": "s", "status": "unanswered",
                                   "reason": "image-missing"}
        entry = (await listing(served))["s"]
        assert entry["state"] == "unreachable" and entry["daemon"]["state"] == "unreachable"
        assert "image-missing" in entry["daemon"]["reason"] and missing in entry["daemon"]["reason"]
        # The router goes on: another message is answered too (tried again, refused again).
        with trio.fail_after(120):
            status, again, _ = await send(served.url, "s", "hello", "--event-id", "e2", token=served.token)
        assert status == 1 and again["reply"]["reason"] == "image-missing"
    assert labelled("container", docker_label) == []


async def test_a_killed_router_adopts_its_running_containers_and_an_idle_one_stops(
    tmp_path: Path, docker_image: str, docker_label: str
) -> None:
    """``router serve`` SIGKILLed: its container lives on; the next
    ``router serve`` on the same data takes it over (the same container,
    the count going on), and stops it once idle; the next message starts a
    new one with the session's history."""
    import signal

    from tests.api.processes import stop

    docker_settings(tmp_path, docker_label)
    image = ("--launcher", "docker", "--image", docker_image)
    async with serve(tmp_path, *image, name="first") as served:
        assert (await reply(served, "root", "one", "e1"))["text"] == "echo: one (turn 1)"
        container = (await listing(served))["root"]["daemon"]["container"]
        await stop(served.process, signal.SIGKILL)
    assert running_containers(docker_label) == [container]  # left running

    async with serve(tmp_path, *image, "--idle-timeout", "2", name="second") as served:
        with trio.fail_after(60):
            while (await listing(served))["root"].get("daemon", {}).get("reason") is None:
                await trio.sleep(0.1)
        daemon = (await listing(served))["root"]["daemon"]
        assert (daemon["state"], daemon["container"]) == ("running", container), daemon
        assert daemon["reason"] == "adopted from an earlier run of the router"
        assert (await reply(served, "root", "two", "e2"))["text"] == "echo: two (turn 2)"
        with trio.fail_after(60):
            while (await listing(served))["root"]["daemon"]["state"] != "idle-stopped":
                await trio.sleep(0.1)
        assert running_containers(docker_label) == []
        assert (await reply(served, "root", "three", "e3"))["text"] == "echo: three (turn 3)"
        again = (await listing(served))["root"]["daemon"]
        assert again["state"] == "running" and again["container"] != container
    assert labelled("container", docker_label) == []
