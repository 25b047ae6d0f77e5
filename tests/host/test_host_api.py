"""The host's API against real daemons (ours and the reference), over real
sockets: one scenario per call, each run against both."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import trio

from router.host.host import EventStream, Host, HostSession, Refused
from router.host.events import event_json
from router.host.link import LinkRefused
from router.host.store import Store
from tests.host.conftest import endpoint_of, start_host
from tests.host.statements import tracing
from tests.support.daemons import Daemon


@pytest.fixture
async def host(nursery: trio.Nursery, store: Store, daemon: Daemon) -> Host:
    return await start_host(nursery, store, endpoint_of(daemon))


async def next_event(stream: EventStream, predicate: Callable[[dict], bool]) -> dict:
    """The first live event that matches (earlier ones are skipped)."""
    async for batch in stream:
        batch = [event_json(event) for event in batch]
        for event in batch:
            if predicate(event):
                return event
    raise AssertionError("the stream ended first")


def is_start(operation_id: str) -> Callable[[dict], bool]:
    return lambda event: event["type"] == "operation-start" and event["operationId"] == operation_id


def texts(messages: list[dict]) -> list[tuple[str, str]]:
    return [(m["role"], " ".join(p.get("text", "") for p in m["parts"])) for m in messages]


async def test_prompt_answers_and_records_the_transcript(host: Host) -> None:
    session = host.session()
    result, messages = await session.prompt("hello", operation_id="op-1")
    assert result.to_json() == {
        "operationId": "op-1",
        "session": "root",
        "status": "done",
        "text": "echo: hello (turn 1)",
    }
    assert texts(messages) == [("user", "hello"), ("assistant", "echo: hello (turn 1)")]
    assert [m["id"] for m in messages] == ["op-1:user", "op-1:assistant"]
    result, _ = await session.prompt("again")
    assert result.text == "echo: again (turn 2)"
    assert host.store.entries.all("root") == [{"turn": 1, "text": "hello"}, {"turn": 2, "text": "again"}]
    assert not await session.busy() and await session.pending() == []


async def test_submit_is_durable_and_idempotent_on_the_key(host: Host) -> None:
    session = host.session()
    first = await session.submit("once", operation_id="k")
    second = await session.submit("twice?", operation_id="k")
    assert first.accepted and not second.accepted
    assert (await session.wait("k")).text == "echo: once (turn 1)"
    third = await session.submit("once more", operation_id="k")
    assert not third.accepted
    assert (await session.wait("k")).text == "echo: once (turn 1)"
    result, _ = await session.prompt("next")
    assert result.text == "echo: next (turn 2)"  # the key ran one turn


async def test_failures_settle_unanswered_with_the_adapter_reason(host: Host) -> None:
    result, messages = await host.session().prompt("fail out of cheese")
    assert (result.status, result.reason) == ("unanswered", "out of cheese")
    assert texts(messages) == [("user", "fail out of cheese")]


async def test_steer_joins_the_running_turn(host: Host) -> None:
    session = host.session()
    async with session.events() as stream:
        await session.submit("slow 800 base", operation_id="base")
        await next_event(stream, is_start("base"))
        receipt = await session.steer("more", operation_id="steered")
        await next_event(stream, is_start("steered"))
    base, steered = await session.wait("base"), await session.wait(receipt.operation_id)
    assert base.text == steered.text == "echo: base + more (turn 1)"


async def test_follow_up_queues_behind_the_running_turn(host: Host) -> None:
    session = host.session()
    await session.submit("slow 300 first", operation_id="a")
    await session.submit("second", operation_id="b")
    assert [p["operationId"] for p in await session.pending()] == ["a", "b"]
    assert (await session.wait("b")).text == "echo: second (turn 2)"
    assert (await session.wait("a")).text == "echo: first (turn 1)"


async def test_abort_one_running_operation(host: Host) -> None:
    session = host.session()
    async with session.events() as stream:
        await session.submit("slow 60000 never", operation_id="long")
        await next_event(stream, is_start("long"))
        assert await session.abort("long")
        end = await next_event(stream, lambda e: e["type"] == "operation-end")
    assert end["result"]["reason"] == "aborted"
    assert (await session.wait("long")).reason == "aborted"
    assert not await session.abort("long")  # settled already
    assert not await session.abort("nobody")
    # The daemon stopped the turn: the next one runs (and is turn 1).
    result, _ = await session.prompt("after")
    assert result.text == "echo: after (turn 1)"


async def test_abort_everything(host: Host) -> None:
    session = host.session()
    async with session.events() as stream:
        await session.submit("slow 60000 a", operation_id="a")
        await session.submit("b", operation_id="b")
        await next_event(stream, is_start("a"))
    assert await session.abort()
    assert [(await session.wait(op)).reason for op in "ab"] == ["aborted", "aborted"]
    assert not await session.busy()
    result, _ = await session.prompt("c")
    assert result.text == "echo: c (turn 1)"


async def test_cancelling_a_wait_stops_only_the_wait(host: Host) -> None:
    session = host.session()
    async with session.events() as stream:
        await session.submit("slow 400 patience", operation_id="p")
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def waiter() -> None:
                with scope:
                    await session.wait("p")
                    raise AssertionError("the wait was not cancelled")

            nursery.start_soon(waiter)
            await next_event(stream, is_start("p"))
            scope.cancel()
        assert await session.busy()
        assert host._waits == {}  # the cancelled wait left nothing behind
    assert (await session.wait("p")).text == "echo: patience (turn 1)"


async def test_wait_for_an_unknown_operation(host: Host) -> None:
    result = await host.session().wait("nobody")
    assert (result.status, result.reason) == ("unanswered", "not_found")


async def test_reset_is_refused_while_busy_and_opens_a_new_generation_when_idle(host: Host) -> None:
    session = host.session()
    await session.prompt("remember me")
    await session.submit("slow 300 busy", operation_id="busy")
    with pytest.raises(Refused) as refused:
        await session.reset("never")
    assert refused.value.code == "session-busy"
    await session.wait("busy")
    assert await session.reset("we spoke of cats") == 2
    assert await session.messages() == []
    result, messages = await session.prompt("and dogs?")
    # A new adapter session (turn 1), and the note in front of the prompt.
    assert result.text == "echo: we spoke of cats\nand dogs? (turn 1)"
    assert texts(messages) == [("user", "and dogs?"), ("assistant", result.text)]
    again, _ = await session.prompt("more")
    assert again.text == "echo: more (turn 2)"  # the note went once


async def test_set_model_is_stored_and_configures_the_live_session(host: Host) -> None:
    session = host.session()
    await session.prompt("warm up")
    await session.set_model("model-x")
    assert (await session.record()).settings["model"] == "model-x"
    result, _ = await session.prompt("still here")
    assert result.text == "echo: still here (turn 2)"


async def test_events_without_messages_read_no_transcript(host: Host) -> None:
    # The container view subscribes again whenever it lagged; a snapshot
    # with the whole transcript would cost what the session's history holds.
    session = host.session()
    await session.prompt("before", operation_id="old")
    with tracing(host.store) as ran:
        async with session.events(messages=False) as stream:
            assert stream.snapshot == {"session": "root", "pending": [], "busy": False}
    assert ran and not any("FROM messages" in sql for sql, _ in ran)
    async with session.events() as stream:
        assert [m["id"] for m in stream.snapshot["messages"]] == ["old:user", "old:assistant"]


async def test_events_give_a_snapshot_then_live_batches_until_the_session_closes(host: Host) -> None:
    session = host.session()
    await session.prompt("before", operation_id="old")
    seen: list[dict] = []
    async with session.events() as stream:
        assert stream.snapshot["busy"] is False and stream.snapshot["pending"] == []
        assert [m["id"] for m in stream.snapshot["messages"]] == ["old:user", "old:assistant"]
        await session.submit("live", operation_id="new")
        async for batch in stream:
            batch = [event_json(event) for event in batch]
            seen += batch
            if any(e["type"] == "operation-end" for e in batch):
                await host.close_session("root")
        # The loop ended: the session closed.
    assert [e["type"] for e in seen] == [
        "message",
        "operation-start",
        "text-delta",
        "message",
        "operation-end",
    ]
    assert seen[0]["message"]["id"] == "new:user"
    assert seen[2] == {
        "type": "text-delta",
        "messageId": "new:assistant",
        "delta": "echo: live (turn 2)",
        "operationId": "new",
    }
    assert seen[4]["result"]["text"] == "echo: live (turn 2)"
    # The next call reopens the link.
    assert (await session.prompt("reopened"))[0].text == "echo: reopened (turn 3)"


async def test_sessions_create_fork_and_list(host: Host) -> None:
    parent = await host.sessions.create("parent")
    await parent.prompt("one")
    await parent.prompt("two")
    fork = await host.sessions.fork("parent", "branch")
    assert texts(await fork.messages()) == texts(await parent.messages())
    # The fork's adapter session resumes from the parent's entries.
    assert (await fork.prompt("three"))[0].text == "echo: three (turn 3)"
    assert (await parent.prompt("three too"))[0].text == "echo: three too (turn 3)"
    other = await host.sessions.create()
    assert (await other.prompt("fresh"))[0].text == "echo: fresh (turn 1)"
    listed = await host.sessions.list()
    assert listed == [
        {"id": "root", "busy": False},
        {"id": "parent", "busy": False},
        {"id": "branch", "parent": "parent", "busy": False},
        {"id": other.id, "busy": False},
    ]


async def test_refusals_have_codes(host: Host) -> None:
    with pytest.raises(Refused) as caught:
        await host.session("missing").submit("x")
    assert caught.value.code == "unknown-session"
    with pytest.raises(Refused) as caught:
        await host.session().submit({"not": "an input"})
    assert caught.value.code == "bad-input"
    with pytest.raises(Refused) as caught:
        await host.sessions.fork("missing")
    assert caught.value.code == "unknown-session"


async def test_image_parts_pass_through(host: Host) -> None:
    parts: Any = [{"type": "text", "text": "look"}, {"type": "image", "mediaType": "image/png", "data": "AAAA"}]
    result, messages = await host.session().prompt(parts)
    assert result.text == "echo: look\n (turn 1)"
    assert messages[0]["parts"] == parts


async def test_a_wrong_token_is_a_clear_error_not_a_retry_loop(
    nursery: trio.Nursery, store: Store, daemon: Daemon
) -> None:
    endpoint = endpoint_of(daemon)
    host = await start_host(nursery, store, type(endpoint)(endpoint.url, "not-the-token"))
    receipt = await host.session().submit("x")
    with pytest.raises(LinkRefused) as caught:
        await host.session().wait(receipt.operation_id)
    assert caught.value.code == "unauthorized"
    link = host.session().link
    assert link is not None and link.state == "failed" and link.connections == 0
    assert await host.session().busy()  # still durable, for a host with the right token


async def test_a_host_not_running_refuses(store: Store, daemon: Daemon) -> None:
    host = Host(store, endpoint_of(daemon))
    with pytest.raises(Refused) as caught:
        await host.session().submit("x")
    assert caught.value.code == "host-not-running"


async def test_a_restarted_host_reattaches_open_sessions(
    nursery: trio.Nursery, store: Store, daemon: Daemon
) -> None:
    async with trio.open_nursery() as first_nursery:
        first = await start_host(first_nursery, store, endpoint_of(daemon))
        session: HostSession = first.session()
        async with session.events() as stream:
            await session.submit("slow 500 across hosts", operation_id="x")
            await next_event(stream, is_start("x"))
        first.close()
    second = await start_host(nursery, store, endpoint_of(daemon))
    assert (await second.session().wait("x")).text == "echo: across hosts (turn 1)"


async def test_closing_the_host_wakes_waits_and_ends_streams(
    store: Store, daemon: Daemon
) -> None:
    host = Host(store, endpoint_of(daemon))
    outcome: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        session = host.session()
        async with session.events() as stream:
            await session.submit("slow 600000 forever", operation_id="f")
            await next_event(stream, is_start("f"))

            async def waiter(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                task_status.started()
                with pytest.raises(Refused) as caught:
                    await session.wait("f")
                outcome.append(caught.value.code)

            await nursery.start(waiter)
            await trio.sleep(0)  # whether the wait has begun or not, closing ends it
            host.close()
            async for _ in stream:
                pass  # ends
    assert outcome == ["host-not-running"]
    assert host._links == {} and host._waits == {}


async def test_closing_a_session_before_its_link_task_starts(host: Host) -> None:
    session = await host.sessions.create("quick")
    link = host._ensure_link("quick")  # its task is scheduled, not started
    assert link.state == "idle"
    await host.close_session("quick")
    assert link.state == "closed" and link.connections == 0
    assert "quick" not in host._links
    # The next call opens a new link.
    assert (await session.prompt("x"))[0].text == "echo: x (turn 1)"
