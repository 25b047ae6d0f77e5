"""The ``claude-code`` adapter in a container: the real ``claude`` binary
(bind-mounted read-only into the project's image) against the fake Messages
API on the host's loopback (``--network host``), driven by a real host; the
container killed, a new one started on the same workspace volume, the
session restored from the host's record, and the next turn resumes the
Claude Code session."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from router.host import Store
from tests.docker.conftest import endpoint, launch_context, renewed, start_host
from tests.docker.test_launcher import WAIT_BOUND, started_ok
from tests.e2e_claude.helpers import claude_environment, started_binary
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.support.docker import assert_nothing_left, docker

#: Where the binary is mounted: on the image's PATH.
CLAUDE_TARGET = "/usr/local/bin/claude"
#: A turn of the real CLI in a fresh container on a loaded machine (it
#: starts in a second or two when quiet).
TURN_BOUND = 180


@pytest.fixture
async def fake_api(nursery: trio.Nursery) -> FakeAnthropic:
    fake = FakeAnthropic()
    await nursery.start(fake.run)
    return fake


def claude_context(label: str, image: str, fake: FakeAnthropic) -> dict[str, Any]:
    binary = started_binary()
    env = claude_environment(fake.url or "", binary.parent)
    env.pop("PATH")  # the image's own PATH holds the mounted binary
    return launch_context(
        label, image, harness="claude-code", env=env,
        options={"network": "host",
                 "mounts": [{"source": str(binary), "target": CLAUDE_TARGET, "readonly": True}]},
    )


def session_ids(store: Store) -> list[str]:
    return [e["values"]["sessionId"] for e in store.entries.all("root")
            if isinstance(e, dict) and e.get("kind") == "state"]


async def test_claude_code_in_a_container_resumes_after_a_kill(
    launcher: Any, docker_image: str, docker_label: str, store: Store, nursery: trio.Nursery,
    fake_api: FakeAnthropic,
) -> None:
    fake_api.script(text_reply("Noted: the code is 7311."), text_reply("The code is 7311."))
    context = claude_context(docker_label, docker_image, fake_api)
    first = await started_ok(launcher, context)
    host = await start_host(nursery, store, endpoint(first, context))
    with trio.fail_after(TURN_BOUND):
        result, _ = await host.session().prompt("Remember the code 7311.")
    assert (result.status, result.text) == ("done", "Noted: the code is 7311.")
    [session_id] = session_ids(store)

    docker("kill", first["container"])
    with trio.fail_after(WAIT_BOUND):
        assert (await launcher.wait(context, first["container"]))["state"] == "killed"
    await launcher.stop(context, first["container"])
    await host.aclose()

    again = renewed(context)
    second = await started_ok(launcher, again)
    host = await start_host(nursery, store, endpoint(second, again))
    with trio.fail_after(TURN_BOUND):
        result, _ = await host.session().prompt("What was the code?")
    assert (result.status, result.text) == ("done", "The code is 7311.")
    # Resumed: the second turn's request carries the first turn, in order,
    # and the CLI kept its session id.
    texts = fake_api.messages_requests()[-1].texts()
    assert texts.index("Remember the code 7311.") < texts.index("Noted: the code is 7311.") < texts.index("What was the code?")
    assert set(session_ids(store)) == {session_id}
    await host.aclose()
    await launcher.stop(again, second["container"])
    assert await launcher.remove_workspace(again) is None
    assert_nothing_left(docker_label)
