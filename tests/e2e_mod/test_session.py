"""The router plug-in in the real Claude Code 2.1.332, interactive, in tmux:
hello, deliveries into an idle and a running session, the pointer prompt,
/clear, a second process on the same session id, and -p mode."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import trio

from tests.e2e_mod.helpers import ModWorld, RouterApi, last_user_text
from tests.fakes.anthropic import FakeAnthropic, text_reply, tool_reply
from tests.support.polling import until
from wire.mod import resolve_mod_socket_path

#: The mod's probes of a socket with no server behind it (plugin/hooks/mod.ts, PROBE_TRIES).
PROBE_TRIES = 40

#: Bounds on waits for the real binary; they bound a wait, they time nothing.
START = 60
TURN = 60


async def start_linked(world: ModWorld, api: RouterApi, name: str = "one", **options: Any) -> str:
    session_id = str(uuid.uuid4())
    await world.start(name, session_id, **options)
    with trio.fail_after(START):
        await api.wait_connected(session_id)
    return session_id


async def collect_live(api: RouterApi, session_id: str, into: list[dict[str, Any]], *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    started = False
    async for event in api.live(session_id):
        into.append(event)
        if not started:
            started = True
            task_status.started()


def messages_after(fake: FakeAnthropic, count: int) -> list[Any]:
    return fake.messages_requests()[count:]


async def test_hello_idle_delivery_live_view_and_clear(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic, nursery: trio.Nursery
) -> None:
    session_id = await start_linked(world, router_api)
    listed = {each["id"]: each for each in await router_api.sessions()}
    assert listed[session_id]["kind"] == "claude-code" and listed[session_id]["connected"] is True

    live: list[dict[str, Any]] = []
    await nursery.start(collect_live, router_api, session_id, live)
    fake_api.script(text_reply("The phone's words arrived."))
    before = len(fake_api.messages_requests())
    status, body = await router_api.send(session_id, "hello from the phone", event_id="ev-idle")
    assert status == 200 and body["as"] == "prompt", body
    with trio.fail_after(TURN):
        await until(lambda: any("hello from the phone" in last_user_text(r) for r in messages_after(fake_api, before)))
        await world.wait_screen("one", "The phone's words arrived.")
        await until(lambda: "The phone's words arrived." in json.dumps(live) and "hello from the phone" in json.dumps(live))
    # The live view drew the person's words and the answer.
    drawn = [event["message"] for event in live if event.get("type") == "message"]
    assert any(m["role"] == "user" and m["parts"][0]["text"] == "hello from the phone" for m in drawn)
    assert any(m["role"] == "assistant" and "The phone's words arrived." in json.dumps(m["parts"]) for m in drawn)

    # /clear: a new conversation in the same process, on the same socket.
    await world.type("one", "/clear")
    before = len(fake_api.messages_requests())
    fake_api.script(text_reply("A fresh start."))
    # `router send` waits for a Claude Code session's reply, as for a container's.
    status, body = await router_api.send(session_id, "after the clear", event_id="ev-clear", wait=True)
    assert status == 200 and body["as"] == "prompt", body
    assert body["reply"]["status"] == "done" and "A fresh start." in body["reply"]["text"], body
    with trio.fail_after(TURN):
        await until(lambda: any("after the clear" in last_user_text(r) for r in messages_after(fake_api, before)))
        await world.wait_screen("one", "A fresh start.")
    request = next(r for r in messages_after(fake_api, before) if "after the clear" in last_user_text(r))
    assert "hello from the phone" not in json.dumps(request.messages())


async def test_with_no_server_the_mod_does_nothing_at_all(world: ModWorld, fake_api: FakeAnthropic) -> None:
    # No MCP server: nothing binds the socket. A listener there that closes
    # every connection at once counts the mod's probes over the start-up race.
    (world.plugin / ".mcp.json").unlink()
    session_id = str(uuid.uuid4())
    path = resolve_mod_socket_path(session_id, {"XDG_RUNTIME_DIR": str(world.run_dir)}).path
    assert path is not None
    os.mkdir(os.path.dirname(path), 0o700)
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen(64)
    probes = 0

    async def refuse_all() -> None:
        nonlocal probes
        while True:
            connection, _ = await listener.accept()
            probes += 1
            connection.close()

    with listener:
        async with trio.open_nursery() as counting:
            counting.start_soon(refuse_all)
            await world.start("one", session_id)
            with trio.fail_after(START):
                await until(lambda: probes >= PROBE_TRIES)  # every probe of the race, and then it stops
            fake_api.script(text_reply("No router here."))
            await world.type("one", "is anyone linked")
            with trio.fail_after(TURN):
                screen = await world.wait_screen("one", "No router here.")
            counting.cancel_scope.cancel()
    assert "router" not in screen.replace("No router here.", "")  # not a line of the plug-in's
    assert probes == PROBE_TRIES


async def test_the_marketplace_install_links_a_session(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic
) -> None:
    # Offline: the plug-in's own folder is a marketplace (.claude-plugin/marketplace.json).
    await world.install_from_marketplace()
    session_id = await start_linked(world, router_api, plugin_dir=False)
    fake_api.script(text_reply("Installed and linked."))
    status, body = await router_api.send(session_id, "through the installed plug-in", event_id="ev-mkt")
    assert status == 200 and body["as"] == "prompt", body
    with trio.fail_after(TURN):
        await world.wait_screen("one", "Installed and linked.")


async def test_rows_in_a_running_turn_and_the_pointer_prompt(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic
) -> None:
    session_id = await start_linked(world, router_api)
    started, gate = world.root / "tool-started", world.root / "tool-gate"
    # Step 1 runs a tool that holds the turn until the test opens the gate;
    # step 2 (the last) streams slowly, so a row written now is read by no
    # request of this turn.
    command = f"touch {started}; while [ ! -e {gate} ]; do sleep 0.1; done; echo released"
    fake_api.script(
        tool_reply("Bash", {"command": command, "description": "Wait for the gate"}, text="Working on it."),
        text_reply("Step two is a long answer. " * 12, delay=0.05, chunk_chars=3),
        text_reply("I read the pointer."),
    )
    before = len(fake_api.messages_requests())
    await world.type("one", "start the work")
    with trio.fail_after(TURN):
        await until(started.exists)
    status, body = await router_api.send(session_id, "a note while the tool runs", event_id="ev-row")
    assert status == 200 and body["as"] == "row", body
    gate.touch()
    with trio.fail_after(TURN):
        await until(lambda: len(messages_after(fake_api, before)) >= 2)
    second = messages_after(fake_api, before)[1]
    # The row reached the model in the request that carries the tool's result.
    assert "a note while the tool runs" in json.dumps(second.messages())

    status, body = await router_api.send(session_id, "a note in the last step", event_id="ev-late")
    assert status == 200 and body["as"] == "row", body
    with trio.fail_after(TURN):
        await until(lambda: len(messages_after(fake_api, before)) >= 3)
        await world.wait_screen("one", "I read the pointer.")
    third = messages_after(fake_api, before)[2]
    pointer = last_user_text(third)
    assert "a note in the last step" in pointer and "you have not read it yet" in pointer, pointer
    assert "a note in the last step" not in json.dumps(second.messages())
    # One pointer, and nothing more asked of the model.
    assert len(messages_after(fake_api, before)) == 3


async def test_a_second_claude_on_the_session_id_is_refused_and_the_first_keeps_working(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic
) -> None:
    session_id = await start_linked(world, router_api)
    # From another folder Claude Code runs on the same id (in the same one it
    # refuses the id as in use) and its mod reaches the same socket: the first
    # mod holds the link, so every post of the second is answered 409.
    await world.start("two", session_id, workspace=1)
    with trio.fail_after(START):
        await world.wait_screen("two", "another Claude Code process on this session id holds")
    fake_api.script(text_reply("Only the first one answers."))
    before = len(fake_api.messages_requests())
    status, body = await router_api.send(session_id, "which one hears this", event_id="ev-two")
    assert status == 200 and body["as"] == "prompt", body
    with trio.fail_after(TURN):
        await world.wait_screen("one", "Only the first one answers.")
    assert any("which one hears this" in last_user_text(r) for r in messages_after(fake_api, before))
    assert "which one hears this" not in await world.screen("two")


async def test_an_idle_print_mode_session_answers_a_delivery_with_a_clear_outcome(
    world: ModWorld, router_api: RouterApi, fake_api: FakeAnthropic
) -> None:
    # -p with stream-json input stays up, idle, while its stdin is open. A
    # delivery there is a prompt the session takes, and its turn's result is
    # printed like any other: the delivery is answered, nothing hangs.
    session_id = str(uuid.uuid4())
    argv = world.claude_argv(session_id, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose")
    process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, stderr=-1, env=world.env, cwd=str(world.workspaces[0]))
    assert process.stdin is not None and process.stdout is not None
    try:
        with trio.fail_after(START):
            listed = await router_api.wait_connected(session_id)
        assert listed["kind"] == "claude-code"
        fake_api.script(text_reply("Printed, not typed."))
        with trio.fail_after(TURN):
            status, body = await router_api.send(session_id, "anyone there", event_id="ev-print")
            assert status == 200 and body["as"] == "prompt", body
            result = await _result_line(process.stdout)
        assert result["subtype"] == "success" and result["result"] == "Printed, not typed."
        assert any("anyone there" in last_user_text(r) for r in fake_api.messages_requests())
    finally:
        await process.stdin.aclose()
        with trio.move_on_after(20):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _result_line(stdout: trio.abc.ReceiveStream) -> dict[str, Any]:
    buffer = b""
    while True:
        chunk = await stdout.receive_some(65536)
        assert chunk, "claude -p closed its output before a result line"
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            try:
                parsed = json.loads(line)
            except ValueError:
                continue
            if isinstance(parsed, dict) and parsed.get("type") == "result":
                return parsed

