"""``router new --where container`` on the real Docker engine: the session's
container has the git worktree at ``/workspace`` (a bind mount) and its own
volume as HOME; ``router end`` removes the container, the volume and the
worktree. Everything carries the test's label (``docker_label``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from tests.support.docker import TEST_LABEL, docker, docker_image, docker_label, labelled  # noqa: F401 - fixtures
from tests.support.polling import until
from tests.worktrees.helpers import Bench


@pytest.fixture
async def bench(tmp_path: Path, docker_label: str) -> AsyncIterator[Bench]:
    made = Bench.make(tmp_path)
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin",
                    "launcher": "docker"},
        "options": {"launcher": {"docker": {"labels": {TEST_LABEL: docker_label}}}},
    }))
    try:
        yield made
    finally:
        await made.close()


async def test_the_worktree_is_at_workspace_and_end_removes_the_volume(
    bench: Bench, docker_image: str, docker_label: str
) -> None:
    await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    async with bench.serve("--launcher", "docker", "--image", docker_image):
        code, made, err = await bench.router_json("new", "proj", "--name", "box", "--where", "container",
                                                  "--harness", "echo", "--prompt", "hello box", "--json")
        assert code == 0, (err, bench.log())
        worktree = Path(made["worktree"])
        assert made["session"] == "box" and made.get("tmux") is None
        with trio.fail_after(120):
            await until(lambda: bool(labelled("container", docker_label)), step=0.2)
        [container] = labelled("container", docker_label)
        mounts = {each["Destination"]: each for each in json.loads(docker("inspect", container).stdout)[0]["Mounts"]}
        assert mounts["/workspace"]["Type"] == "bind" and mounts["/workspace"]["Source"] == str(worktree)
        assert mounts["/home/router"]["Type"] == "volume"
        volume = mounts["/home/router"]["Name"]
        assert docker("exec", container, "cat", "/workspace/README.md").stdout == "a project\n"
        listed = (await bench.listed())["box"]
        assert listed["kind"] == "container" and listed["worktree"] == str(worktree) and listed["where"] == "container"
        code, out, err = await bench.router("end", "box")
        assert code == 0, (err, bench.log())
        assert labelled("container", docker_label) == []
        assert docker("volume", "ls", "-q", "--filter", f"name={volume}").stdout.split() == []
        assert not worktree.exists() and "box" not in await bench.listed()
