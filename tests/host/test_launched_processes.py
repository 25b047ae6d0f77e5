"""``router serve --launcher process``: a ``router daemon`` per session, as
real processes (the docker launcher's lifecycle without Docker).

Three sessions get three daemons; SIGKILL of one in the middle of a slow
turn gives a new daemon (a new runtime), the cut operation re-run by the
policy (the echo declares ``rerun``), and the next turn's count continuing
from the restored entries, while the other two never notice; an idle
daemon is stopped and started again by the next message, with its
history; a launcher that cannot start makes the session unreachable with
the reason, answers the delivery at once, and a later delivery tries again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import httpx
import trio

from router.host.store import Store
from tests.api.processes import ROUTER, REPO, Served, environment, send, serve
from tests.support.polling import until


async def launch(served: Served, session: str, *args: str, found: bool = False) -> dict[str, Any]:
    """``router launch SESSION --json ARGS``: at ``served``'s URL, or
    (``found``) at the one ``router serve`` it finds over the private sockets."""
    reach = [] if found else ["--url", served.url, f"--token={served.token}"]
    done = await trio.run_process(
        [*ROUTER, "launch", session, *reach, "--json", *args],
        capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
    )
    assert done.returncode == 0, (done.stdout, done.stderr, served.log())
    return json.loads(done.stdout)


async def listing(served: Served) -> dict[str, dict[str, Any]]:
    async with served.client() as client:
        response = await client.get("/sessions", params={"scope": "router"})
    assert response.status_code == 200, response.text
    return {item["id"]: item for item in response.json()["sessions"]}


async def reply(served: Served, session: str, text: str, event_id: str) -> dict[str, Any]:
    with trio.fail_after(120):
        status, answer, err = await send(served.url, session, text, "--event-id", event_id, token=served.token)
    assert status == 0, (answer, err, served.log())
    return answer["reply"]


def operation_status(data: Path, session: str, operation_id: str) -> str | None:
    with Store(data / "host.sqlite", exclusive=False, create=False) as store:
        record = store.operations.get(session, operation_id)
    return None if record is None else record.status


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def three_sessions_and_a_kill(
    served: Served, data: Path, nursery: trio.Nursery, kill: Callable[[str], None]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Launch a, b, c, one turn each; ``kill`` b's daemon (by its
    container id) in the middle of a slow turn; a and c take a turn
    meanwhile; the cut turn is re-run and b takes one more. Returns each
    session's daemon before the kill, and the listing after."""
    for name in ("a", "b", "c"):
        assert (await launch(served, name))["id"] == name
    for name in ("a", "b", "c"):
        assert (await reply(served, name, "one", f"{name}1"))["text"] == "echo: one (turn 1)"
    first = await listing(served)
    daemons = {name: first[name]["daemon"] for name in ("a", "b", "c")}
    assert all(d["state"] == "running" for d in daemons.values()), daemons
    assert len({d["container"] for d in daemons.values()}) == 3  # three daemons
    assert len({d["runtime"] for d in daemons.values()}) == 3

    cut: dict[str, Any] = {}

    async def slow() -> None:
        cut["reply"] = await reply(served, "b", "slow 8000 cut", "b2")

    nursery.start_soon(slow)
    with trio.fail_after(60):
        await until(lambda: operation_status(data, "b", "b2") == "running" or "reply" in cut, step=0.05)
    assert "reply" not in cut
    kill(daemons["b"]["container"])  # mid-turn

    # The other two go on, on the same daemons, while b is replaced.
    for name in ("a", "c"):
        assert (await reply(served, name, "two", f"{name}2"))["text"] == "echo: two (turn 2)"
    with trio.fail_after(180):
        await until(lambda: "reply" in cut, step=0.05)
    # The cut turn ran again in the new daemon, counting on from the
    # restored entry (one turn before it).
    assert cut["reply"] == {"operationId": "b2", "session": "b", "status": "done", "text": "echo: cut (turn 2)"}
    assert (await reply(served, "b", "three", "b3"))["text"] == "echo: three (turn 3)"

    after = await listing(served)
    assert after["b"]["daemon"]["state"] == "running"
    assert after["b"]["daemon"]["container"] != daemons["b"]["container"]
    assert after["b"]["daemon"]["runtime"] != daemons["b"]["runtime"]
    for name in ("a", "c"):
        assert after[name]["daemon"]["container"] == daemons[name]["container"]
        assert after[name]["daemon"]["runtime"] == daemons[name]["runtime"]
    return daemons, after


def assert_nothing_lost(data: Path) -> None:
    """What :func:`three_sessions_and_a_kill` left in the record: every
    turn once, the cut one included."""
    with Store(data / "host.sqlite", exclusive=False, create=False) as store:
        assert [m["id"] for m in store.messages.all("a")] == ["a1:user", "a1:assistant", "a2:user", "a2:assistant"]
        assert store.entries.all("b") == [{"turn": 1, "text": "one"}, {"turn": 2, "text": "cut"},
                                          {"turn": 3, "text": "three"}]
        assert [m["id"] for m in store.messages.all("b")] == ["b1:user", "b1:assistant", "b2:user", "b2:assistant",
                                                              "b3:user", "b3:assistant"]


async def test_three_sessions_three_daemons_and_a_killed_one_is_replaced_unnoticed_by_the_others(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    data = tmp_path / "data"
    async with serve(tmp_path, "--launcher", "process") as served:
        _, after = await three_sessions_and_a_kill(
            served, data, nursery, lambda container: os.kill(int(container), signal.SIGKILL)
        )
        assert all(after[name]["daemon"]["launcher"] == "process" for name in ("a", "b", "c"))
        pids = [int(after[name]["daemon"]["container"]) for name in ("a", "b", "c")]
    # router serve stopped: so did every daemon it started.
    with trio.fail_after(30):
        await until(lambda: not any(alive(pid) for pid in pids), step=0.05)
    assert_nothing_lost(data)


async def test_an_idle_daemon_is_stopped_and_the_next_message_starts_it_with_its_history(tmp_path: Path) -> None:
    async with serve(tmp_path, "--launcher", "process", "--idle-timeout", "1") as served:
        assert (await reply(served, "root", "one", "e1"))["text"] == "echo: one (turn 1)"
        before = (await listing(served))["root"]["daemon"]
        pid = int(before["container"])
        with trio.fail_after(60):
            while (await listing(served))["root"]["daemon"]["state"] != "idle-stopped":
                await trio.sleep(0.1)
        with trio.fail_after(30):
            await until(lambda: not alive(pid), step=0.05)
        assert (await listing(served))["root"]["state"] == "idle"  # not unreachable: it starts on demand
        assert (await reply(served, "root", "two", "e2"))["text"] == "echo: two (turn 2)"
        again = (await listing(served))["root"]["daemon"]
        assert again["state"] == "running" and again["container"] != before["container"]
        assert again["runtime"] != before["runtime"]


async def test_a_launcher_that_cannot_start_is_unreachable_with_the_reason_and_a_later_delivery_tries_again(
    tmp_path: Path,
) -> None:
    # A daemon command that fails until a marker file exists.
    marker = tmp_path / "may-start"
    script = tmp_path / "daemon.sh"
    script.write_text(f'#!/bin/sh\n[ -e "{marker}" ] || {{ echo "not yet" >&2; exit 3; }}\n'
                      f'exec "{sys.executable}" -m router daemon "$@"\n')
    script.chmod(0o755)
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin",
                    "launcher": "process"},
        "options": {"launcher": {"process": {"command": [str(script)]}}},
    }))
    async with serve(tmp_path) as served:
        with trio.fail_after(120):
            status, answer, err = await send(served.url, "root", "hello", "--event-id", "e1", token=served.token)
        assert status == 1 and answer["reply"] == {"operationId": "e1", "session": "root", "status": "unanswered",
                                                   "reason": "start-failed"}, (answer, err)
        entry = (await listing(served))["root"]
        assert entry["state"] == "unreachable"
        assert entry["daemon"]["state"] == "unreachable"
        assert "exited with status 3 before it listened" in entry["daemon"]["reason"], entry
        assert "3 starts failed in a row" in entry["daemon"]["reason"]

        marker.touch()
        assert (await reply(served, "root", "hello again", "e2"))["text"] == "echo: hello again (turn 1)"
        assert (await listing(served))["root"]["state"] == "idle"


async def test_the_in_process_launcher_refuses_another_harness(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        # No URL: the one `router serve` of this user, over its private socket.
        # Refused at the launch (docs/sessions.md), not at the first message.
        done = await trio.run_process([*ROUTER, "launch", "x", "--harness", "codex"], capture_stdout=True,
                                      capture_stderr=True, check=False, env=environment(), cwd=REPO)
        assert done.returncode == 1 and b"harness-unsupported" in done.stderr, done.stderr
        assert (await reply(served, "root", "hi", "r1"))["text"] == "echo: hi (turn 1)"  # the default goes on
        assert "x" not in await listing(served)


async def test_router_launch_says_which_harness_the_route_chose(tmp_path: Path) -> None:
    # Without --harness the line names what the route chose (echo under the
    # process launcher's defaults), not the word "default".
    async with serve(tmp_path, "--launcher", "process") as served:
        done = await trio.run_process(
            [*ROUTER, "launch", "plain", "--url", served.url, f"--token={served.token}"],
            capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        line = done.stdout.decode().strip()
        assert line.startswith("plain: a container session on ") and "(harness echo)" in line, line


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")


async def test_a_daemon_dies_with_its_router_even_a_killed_one(tmp_path: Path) -> None:
    """SIGKILL of ``router serve``: its daemons stop too (the lifeline's end
    of file). Before, they ran on (44 in one run of the fault campaign)."""
    async with serve(tmp_path, "--launcher", "process") as served:
        assert (await reply(served, "root", "one", "e1"))["text"] == "echo: one (turn 1)"
        pid = int((await listing(served))["root"]["daemon"]["container"])
        assert running(pid)
        served.process.kill()
        await served.process.wait()
    with trio.fail_after(30):
        await until(lambda: not running(pid), step=0.05)


async def test_a_restarted_router_stops_the_daemon_its_record_names_and_says_so(tmp_path: Path) -> None:
    """A daemon an earlier run left running (started before daemons died with
    their router): the restarted router stops it, and its log says it
    stopped it. Before, it logged "stopping daemon" and the daemon ran on."""
    data = tmp_path / "data"
    data.mkdir()
    token, runtime = "left-token", "rt-left-behind"
    env = {**environment(), "CF_HARNESS_TOKEN": token, "CF_HARNESS_RUNTIME_ID": runtime, "CF_HARNESS_PORT": "0"}
    left = await trio.lowlevel.open_process([*ROUTER, "daemon", "--host", "127.0.0.1"], env=env, cwd=REPO,
                                            stdout=subprocess.PIPE)
    try:
        with trio.fail_after(30):
            line = b""
            while b"\n" not in line:
                line += await left.stdout.receive_some()
        port = int(line.split(b":")[-1].split(b" ")[0])
        with Store(data / "host.sqlite") as store:
            store.sessions.create("root")
            store.sessions.set_daemon("root", url=f"ws://127.0.0.1:{port}", token=token, runtime=runtime,
                                      container=str(left.pid), launcher="process", harness="echo", state="running")
        async with serve(tmp_path, "--launcher", "process") as served:
            with trio.fail_after(60):
                await left.wait()
            with trio.fail_after(30):
                await until(lambda: f"stopped daemon {left.pid} (left by an earlier run" in served.log(), step=0.05)
            assert "was not running" not in served.log()
            # And the session goes on, on a daemon of this run.
            assert (await reply(served, "root", "again", "e2"))["text"].startswith("echo: again")
    finally:
        if left.returncode is None:
            left.kill()
            await left.wait()
