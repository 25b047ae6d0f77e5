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
from typing import Any

import trio

from router.host.store import Store
from tests.api.processes import send, serve
from tests.host.test_launched_processes import launch, listing, operation_status, reply
from tests.support.docker import TEST_LABEL, docker, labelled
from tests.support.polling import until


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
        for name in ("a", "b", "c"):
            assert (await launch(served, name))["id"] == name
        assert running_containers(docker_label) == []  # a container starts with the first message
        for name in ("a", "b", "c"):
            assert (await reply(served, name, "one", f"{name}1"))["text"] == "echo: one (turn 1)"
        first = await listing(served)
        daemons = {name: first[name]["daemon"] for name in ("a", "b", "c")}
        assert all(d["state"] == "running" and d["launcher"] == "docker" for d in daemons.values()), daemons
        assert sorted(running_containers(docker_label)) == sorted(d["container"] for d in daemons.values())
        assert len(set(running_containers(docker_label))) == 3

        cut: dict[str, Any] = {}

        async def slow() -> None:
            cut["reply"] = await reply(served, "b", "slow 8000 cut", "b2")

        nursery.start_soon(slow)
        with trio.fail_after(60):
            await until(lambda: operation_status(data, "b", "b2") == "running" or "reply" in cut, step=0.05)
        assert "reply" not in cut
        docker("kill", daemons["b"]["container"])

        for name in ("a", "c"):
            assert (await reply(served, name, "two", f"{name}2"))["text"] == "echo: two (turn 2)"
        with trio.fail_after(180):
            await until(lambda: "reply" in cut, step=0.1)
        assert cut["reply"] == {"operationId": "b2", "session": "b", "status": "done", "text": "echo: cut (turn 2)"}
        assert (await reply(served, "b", "three", "b3"))["text"] == "echo: three (turn 3)"

        after = await listing(served)
        assert after["b"]["daemon"]["container"] != daemons["b"]["container"]
        assert after["b"]["daemon"]["runtime"] != daemons["b"]["runtime"]
        for name in ("a", "c"):
            assert after[name]["daemon"]["container"] == daemons[name]["container"]
            assert after[name]["daemon"]["runtime"] == daemons[name]["runtime"]
        # The killed container was removed; three run.
        assert daemons["b"]["container"] not in labelled("container", docker_label)
        assert len(running_containers(docker_label)) == 3
    # router serve stopped: its containers with it (the workspaces stay for
    # the next start; the label fixture removes them).
    assert labelled("container", docker_label) == []
    with Store(data / "host.sqlite", exclusive=False, create=False) as store:
        assert store.entries("b") == [{"turn": 1, "text": "one"}, {"turn": 2, "text": "cut"},
                                      {"turn": 3, "text": "three"}]
        assert [m["id"] for m in store.messages("c")] == ["c1:user", "c1:assistant", "c2:user", "c2:assistant"]


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
