"""The mod link server over real Unix sockets: routes, the hold, the claim,
bad bodies, calls and their deadlines, subscribers."""

from __future__ import annotations

import logging
import os
from typing import Any, Awaitable, Callable

import pytest
import trio

from router.modlink import ModCallTimeout, ModLink, ModSubscriberOverflow
from wire.mod import (
    MOD_CAPABILITY_ASKS,
    MOD_HEALTH_MARKER,
    MOD_STATUS_TAKEN,
    ModStepEvent,
    ModUnknownEvent,
    ModTurnStartEvent,
    converter,
)

HELLO = {"kind": "hello", "sessionId": "s", "claudeVersion": "2.1.310", "interactive": True}

MakeLink = Callable[..., Awaitable[ModLink]]


# --------------------------------------------------------------------------- routes


async def test_health(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path) as client:
        response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}
    assert response.headers["content-type"].startswith("application/json")


async def test_socket_and_directory_are_private(link: ModLink) -> None:
    assert os.stat(link.path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(link.path)).st_mode & 0o777 == 0o700


async def test_events_are_applied_and_published(link: ModLink, open_client: Any) -> None:
    with link.events() as events:
        async with open_client(link.path) as client:
            response = await client.post("/events", {"events": [HELLO, {"kind": "turn-start", "turnId": "t1"}]})
        assert response.status_code == 200 and response.json() == {"ok": True}
        assert link.state.claude_version == "2.1.310" and link.state.version_ok
        assert link.state.turn_running and link.state.instance == "mod-a"
        kinds = [type(await events.__anext__()).__name__ for _ in range(2)]
    assert kinds == ["ModHelloEvent", "ModTurnStartEvent"]


@pytest.mark.parametrize(
    ("route", "raw", "code"),
    [
        ("/events", b"nope", "not-json"),
        ("/events", b"\xff\xfe{}", "not-json"),
        ("/events", b"", "not-json"),
        ("/events", b"[]", "bad-body"),
        ("/events", b'{"events": {}}', "bad-body"),
        ("/events", b'{"event": []}', "bad-body"),
        ("/events", b'{"events": "[]"}', "bad-body"),
        ("/results", b"{", "not-json"),
        ("/results", b'{"results": null}', "bad-body"),
        ("/results", b'"results"', "bad-body"),
        ("/requests", b"nope", "not-json"),
        ("/requests", b"[]", "bad-body"),
        ("/requests", b"null", "bad-body"),
    ],
)
async def test_bad_bodies_get_400_and_apply_nothing(
    link: ModLink, open_client: Any, route: str, raw: bytes, code: str
) -> None:
    before = link.statistics()
    async with open_client(link.path) as client:
        response = await client.post(route, raw=raw)
        assert response.status_code == 400
        body = response.json()
        assert body["error"] == code
        assert isinstance(body["message"], str) and route in body["message"] or code == "not-json"
        # The link goes on serving.
        assert (await client.get("/healthz")).status_code == 200
    after = link.statistics()
    assert after.core.events_accepted == before.core.events_accepted


async def test_1e400_inside_a_body_is_refused_not_crashed(link: ModLink, open_client: Any) -> None:
    # JSON.parse reads 1e400 as Infinity, which no JSON value holds: the event is skipped.
    async with open_client(link.path) as client:
        response = await client.post("/events", raw=b'{"events": [{"kind": "future", "n": 1e400}, {"kind": "model", "model": "m"}]}')
    assert response.status_code == 200
    assert link.state.model == "m"


async def test_poll_bodies_that_are_accepted(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path) as client:
        for raw in (b"", b"{}", b'{"anything": 1}', b"  \n"):
            response = await client.post("/requests", raw=raw)
            assert response.status_code == 200 and response.json() == {"requests": []}


async def test_unknown_routes_and_methods(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path) as client:
        missing = await client.get("/nope")
        assert missing.status_code == 404 and missing.json()["error"] == "not-found"
        wrong = await client.get("/events")
        assert wrong.status_code == 405 and wrong.json()["error"] == "method-not-allowed"
        wrong = await client.post("/healthz", {})
        assert wrong.status_code == 405


async def test_unknown_kind_passed_on_malformed_known_kind_skipped(
    link: ModLink, open_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    future = {"kind": "tool-progress", "percent": 40, "nested": {"a": [1, None]}}
    with caplog.at_level(logging.WARNING, logger="router.modlink"), link.events() as events:
        async with open_client(link.path) as client:
            body = {"events": [{"kind": "turn-start"}, future, 17, {"kind": "turn-start", "turnId": "t9"}]}
            response = await client.post("/events", body)
        assert response.status_code == 200
        first = await events.__anext__()
        second = await events.__anext__()
    assert first == ModUnknownEvent(kind="tool-progress", raw=future)
    assert converter.unstructure(first) == future
    assert second == ModTurnStartEvent(turn_id="t9")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "$.events[0].turnId" in warnings[0] and "$.events[2]" in warnings[1]


# --------------------------------------------------------------------------- the hold


async def test_an_empty_poll_is_answered_after_the_hold(make_link: MakeLink, open_client: Any) -> None:
    link = await make_link(hold=0.2)
    async with open_client(link.path) as client:
        response = await client.post("/requests")
    assert response.json() == {"requests": []}
    assert link.polls_expired == 1 and link.polls_with_work == 0


async def test_work_queued_mid_hold_is_answered_before_the_hold_ends(
    make_link: MakeLink, open_client: Any, wait_until: Any, nursery: trio.Nursery
) -> None:
    # A hold far longer than the test: if the poll were not woken by the
    # work, it would come back empty, after the hold, and the test fails.
    link = await make_link(hold=3600)
    order: list[str] = []
    async with open_client(link.path) as client:
        answered: list[Any] = []

        async def poll() -> None:
            response = await client.post("/requests")
            order.append("poll answered")
            answered.append(response.json())

        nursery.start_soon(poll)
        await wait_until(lambda: link.statistics().polls_waiting == 1)
        order.append("call queued")

        async def caller() -> None:
            with pytest.raises(ModCallTimeout):
                await link.call("session.model", deadline=0.5)

        nursery.start_soon(caller)
        await wait_until(lambda: bool(answered))
    assert order == ["call queued", "poll answered"]
    assert link.polls_expired == 0 and link.polls_with_work == 1
    (request,) = answered[0]["requests"]
    assert request["call"] == "session.model" and "args" not in request


async def test_a_request_goes_to_exactly_one_of_two_polls(
    make_link: MakeLink, open_client: Any, wait_until: Any, nursery: trio.Nursery
) -> None:
    link = await make_link(hold=1.0)
    got: list[list[Any]] = []
    async with open_client(link.path) as one, open_client(link.path) as two:

        async def poll(client: Any) -> None:
            got.append((await client.post("/requests")).json()["requests"])

        nursery.start_soon(poll, one)
        nursery.start_soon(poll, two)
        await wait_until(lambda: link.statistics().polls_waiting == 2)
        nursery.start_soon(lambda: _expect_timeout(link))
        await wait_until(lambda: len(got) == 2)
    assert sorted(len(requests) for requests in got) == [0, 1]
    assert link.polls_with_work == 1 and link.polls_expired == 1


async def _expect_timeout(link: ModLink) -> None:
    with pytest.raises(ModCallTimeout):
        await link.call("config.list", deadline=5)


# --------------------------------------------------------------------------- the claim


async def test_another_instance_is_refused_and_nothing_of_it_applied(
    link: ModLink, open_client: Any, nursery: trio.Nursery, wait_until: Any
) -> None:
    async with open_client(link.path, "mod-a") as a, open_client(link.path, "mod-b") as b, open_client(link.path, None) as anon:
        assert (await a.post("/events", {"events": [HELLO]})).status_code == 200
        taken = await b.post("/events", {"events": [{"kind": "model", "model": "b-model"}]})
        assert taken.status_code == MOD_STATUS_TAKEN
        assert taken.json()["error"] == "taken" and "mod-a" in taken.json()["message"]
        assert link.state.model is None

        # b's poll takes nothing and its results settle nothing.
        results: list[Any] = []

        async def caller() -> None:
            results.append(await link.call("session.model", deadline=60))

        nursery.start_soon(caller)
        await wait_until(lambda: link.statistics().core.queued == 1)
        assert (await b.post("/requests")).status_code == MOD_STATUS_TAKEN
        assert link.statistics().core.queued == 1
        # A post naming no instance is served, and claims nothing.
        (request,) = (await anon.post("/requests")).json()["requests"]
        forged = await b.post("/results", {"results": [{"id": request["id"], "ok": True, "value": "forged"}]})
        assert forged.status_code == MOD_STATUS_TAKEN
        assert (await a.post("/results", {"results": [{"id": request["id"], "ok": True, "value": "real"}]})).json() == {"ok": True}
        await wait_until(lambda: bool(results))
    assert results == ["real"]
    assert link.state.instance == "mod-a"
    assert link.statistics().core.refused_posts == 3


async def test_the_first_named_instance_wins_even_after_anonymous_posts(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path, None) as anon, open_client(link.path, "late") as late:
        assert (await anon.post("/events", {"events": []})).status_code == 200
        assert link.state.instance is None
        assert (await late.post("/events", {"events": []})).status_code == 200
        assert link.state.instance == "late"


async def test_a_malformed_post_claims_nothing(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path, "broken") as broken, open_client(link.path, "good") as good:
        assert (await broken.post("/events", raw=b"{not json")).status_code == 400
        assert (await broken.post("/results", {"results": 3})).status_code == 400
        assert (await broken.post("/requests", [1])).status_code == 400
        assert link.state.instance is None
        assert (await good.post("/events", {"events": [HELLO]})).status_code == 200
        assert link.state.instance == "good"
        assert (await broken.post("/events", {"events": []})).status_code == MOD_STATUS_TAKEN


# --------------------------------------------------------------------------- calls


async def test_a_call_whose_mod_never_answers_times_out_and_its_late_answer_is_dropped(
    make_link: MakeLink, open_client: Any, nursery: trio.Nursery, wait_until: Any
) -> None:
    link = await make_link(hold=60)  # the poll waits for the call, however slow the machine
    outcome: list[BaseException] = []

    async def caller() -> None:
        try:
            await link.call("session.model", deadline=1.0)
        except ModCallTimeout as exc:
            outcome.append(exc)

    async with open_client(link.path) as client:
        nursery.start_soon(caller)
        (request,) = (await client.post("/requests")).json()["requests"]
        await wait_until(lambda: bool(outcome))  # the caller gave up first
        late = await client.post("/results", {"results": [{"id": request["id"], "ok": True, "value": "late"}]})
    assert late.status_code == 200
    assert isinstance(outcome[0], ModCallTimeout)
    assert link.statistics().core.dropped_results == 1 and link.statistics().core.pending == 0


async def test_a_result_for_an_unknown_id_is_dropped(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path) as client:
        response = await client.post(
            "/results", {"results": [{"id": "nobody", "ok": False, "error": "x"}, {"ok": True}, {"id": "b", "ok": 3}]}
        )
    assert response.json() == {"ok": True}
    assert link.statistics().core.dropped_results == 2


async def test_a_malformed_result_fails_its_call(
    link: ModLink, open_client: Any, nursery: trio.Nursery, wait_until: Any
) -> None:
    from router.modlink import ModBadResult

    errors: list[BaseException] = []

    async def caller() -> None:
        try:
            await link.call("config.list", deadline=60)
        except ModBadResult as exc:
            errors.append(exc)

    async with open_client(link.path) as client:
        nursery.start_soon(caller)
        (request,) = (await client.post("/requests")).json()["requests"]
        await client.post("/results", {"results": [{"id": request["id"], "ok": True, "value": [{"key": 1}]}]})
        await wait_until(lambda: bool(errors))
    assert "config.list" in str(errors[0])


async def test_calls_fail_when_the_link_stops(env: dict[str, str], nursery: trio.Nursery) -> None:
    from router.modlink import ModLinkClosed

    link = ModLink("stopping", env=env, hold=0.2)
    errors: list[BaseException] = []
    scope = trio.CancelScope()
    await nursery.start(_run_in, link, scope)

    async def caller() -> None:
        try:
            await link.call("session.model", deadline=60)
        except ModLinkClosed as exc:
            errors.append(exc)

    async with trio.open_nursery() as inner:
        inner.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
    assert errors and not os.path.exists(link.path)
    with pytest.raises(ModLinkClosed):
        await link.call("session.model", deadline=1)


async def _run_in(link: ModLink, scope: trio.CancelScope, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    with scope:
        await link.run(task_status=task_status)


# --------------------------------------------------------------------------- subscribers


async def test_a_subscriber_that_never_reads_does_not_stall_the_link(link: ModLink, open_client: Any) -> None:
    idle = link.events(capacity=8)
    with link.events(capacity=100_000) as reader:
        async with open_client(link.path) as client:
            events: list[dict[str, Any]] = [{"kind": "turn-start", "turnId": "t"}]
            events += [
                {"kind": "step", "turnId": "t", "index": 0, "model": "m", "parts": [{"type": "text", "text": "x" * n}], "done": False}
                for n in range(500)
            ]
            events.append({"kind": "turn-complete", "turnId": "t", "stopReason": "answer"})
            for start in range(0, len(events), 50):
                assert (await client.post("/events", {"events": events[start : start + 50]})).status_code == 200
        received = [await reader.__anext__() for _ in range(len(events))]
    assert len(received) == 502
    # The idle one kept its bound, lost snapshots only, and still holds the
    # turn's start and end.
    kept = [idle._queue.pop() for _ in range(len(idle._queue))]
    assert len(kept) == 8 and idle.shed == 502 - 8
    assert type(kept[0]).__name__ == "ModTurnStartEvent" and type(kept[-1]).__name__ == "ModTurnCompleteEvent"
    assert all(isinstance(event, ModStepEvent) for event in kept[1:-1])
    idle.close()


async def test_an_overflowed_subscriber_is_told_after_what_it_kept(link: ModLink, open_client: Any) -> None:
    with link.events(capacity=2) as events:
        async with open_client(link.path) as client:
            body = {"events": [{"kind": "turn-start", "turnId": str(n)} for n in range(3)]}
            await client.post("/events", body)
        assert (await events.__anext__()).turn_id == "0"
        assert (await events.__anext__()).turn_id == "1"
        with pytest.raises(ModSubscriberOverflow):
            await events.__anext__()


async def test_subscriptions_end_when_the_link_stops(env: dict[str, str], nursery: trio.Nursery) -> None:
    link = ModLink("ending", env=env)
    scope = trio.CancelScope()
    await nursery.start(_run_in, link, scope)
    received = []
    async with trio.open_nursery() as inner:

        async def read() -> None:
            async for event in link.events():
                received.append(event)

        inner.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
    assert received == []


# --------------------------------------------------------------------------- /clear


async def test_a_session_id_event_keeps_the_socket(link: ModLink, open_client: Any) -> None:
    before = os.stat(link.path)
    async with open_client(link.path) as client:
        await client.post("/events", {"events": [HELLO]})
        await client.post("/events", {"events": [{"kind": "session-end", "reason": "clear"}, {"kind": "session-id", "sessionId": "s-2"}]})
        assert link.state.session_id == "s-2" and link.state.hello_session_id == "s"
        assert (await client.get("/healthz")).status_code == 200
    after = os.stat(link.path)
    assert (before.st_ino, before.st_dev) == (after.st_ino, after.st_dev)


async def test_an_empty_instance_header_names_no_instance(link: ModLink, open_client: Any) -> None:
    async with open_client(link.path, None) as client:
        response = await client.http.post("/events", content=b'{"events": []}', headers={"x-claude-envoy-mod": ""})
    assert response.status_code == 200
    assert link.state.instance is None
