"""A session that comes back to a router that held it before (docs/cluster.md,
"A session taken again"): each router with its own daemon, as the default
cluster mode runs them (each router its in-process daemon), on one PostgreSQL
record. The router that held the session first meets its own daemon as it
left it, turns behind the record: the session must go on from the record's
entries (a new adapter session), never from what that daemon kept, and
nothing the record holds is rewritten.

Three kinds of daemon: ``in-process`` (the router's own :class:`Daemon` in
this process, as ``router serve`` runs it), ``process`` (a real ``router
daemon`` subprocess per router, as the process launcher starts one) and
``docker`` (a container per router, started by the docker launcher; only
where a Docker engine answers)."""

from __future__ import annotations

import contextlib
import re
import secrets
from typing import Any, AsyncIterator

import pytest
import trio

from router.daemon import Daemon, DaemonServer
from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import DaemonEndpoint, Store
from router.turns.core import Answered, Delivery, Person
from tests.cluster.test_node import Router
from tests.support.daemons import spawn_daemon
from tests.support.docker import docker_image, docker_label  # noqa: F401 - fixtures

SESSION = "back-and-forth"


@contextlib.asynccontextmanager
async def own_daemon(kind: str, runtime: str, docker: tuple[str, str] | None = None) -> AsyncIterator[DaemonEndpoint]:
    token = secrets.token_hex(8)
    if kind == "docker":
        from tests.support.docker import launch_context, load_docker_launcher

        assert docker is not None
        label, image = docker
        launcher = load_docker_launcher()
        context = launch_context(label, image, session=runtime)
        started = await launcher.start(context)
        assert "code" not in started, started
        try:
            yield DaemonEndpoint(started["url"], context["token"])
        finally:
            with trio.CancelScope(shield=True):
                await launcher.stop(context, started["container"])
        return
    if kind == "process":
        async with spawn_daemon("ours", token=token, runtime_id=runtime) as daemon:
            yield DaemonEndpoint(daemon.url, token)
        return
    async with trio.open_nursery() as nursery:
        server = DaemonServer(Daemon(echo_adapter, runtime), token)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(server.run, listeners)
        yield DaemonEndpoint(f"ws://127.0.0.1:{server.ports[0]}", token)
        nursery.cancel_scope.cancel()


async def hold(nursery: trio.Nursery, pg_url: str, endpoint: DaemonEndpoint, name: str) -> Router:
    """Router ``name`` over ``endpoint``, once it holds the session."""
    router = Router(pg_url, endpoint, name)
    await nursery.start(router.run)
    with trio.fail_after(60):
        while not router.node.holds(SESSION):
            await trio.sleep(0.05)
    await router.router.create(SESSION)
    return router


async def leave(router: Router) -> None:
    """Stop ``router`` cleanly: it hands its leases back (its daemon runs on)."""
    await router.node.aclose()
    router.kill()


async def turn(router: Router, n: int) -> str:
    with trio.fail_after(60):
        reply = await router.router.deliver(
            Delivery(event_id=f"e{n}", session=SESSION, message=Person(text=f"hi {n}", message_id=f"m{n}"))
        )
    assert isinstance(reply, Answered), reply
    with trio.fail_after(60):
        result = await router.host.session(SESSION).wait(f"e{n}")
    assert result.status == "done", result
    assert result.text is not None
    return result.text


def turn_number(answer: Any) -> int:
    found = re.search(r"\(turn (\d+)\)", str(answer))
    assert found is not None, answer
    return int(found.group(1))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["in-process", "process", "docker"])
async def test_a_session_taken_back_continues_from_the_record(
    pg_url: str, kind: str, request: pytest.FixtureRequest
) -> None:
    docker = None
    if kind == "docker":
        docker = (request.getfixturevalue("docker_label"), request.getfixturevalue("docker_image"))
    answers: list[Any] = []
    async with own_daemon(kind, "runtime-a", docker) as daemon_a, own_daemon(kind, "runtime-b", docker) as daemon_b:
        with Store(pg_url, exclusive=False) as record:
            record.create_session(SESSION)
        async with trio.open_nursery() as nursery:
            a = await hold(nursery, pg_url, daemon_a, "a")
            for n in (1, 2, 3):
                answers.append(await turn(a, n))
            await leave(a)  # daemon a keeps the session open at turn 3

            b = await hold(nursery, pg_url, daemon_b, "b")
            for n in (4, 5, 6):
                answers.append(await turn(b, n))
            await leave(b)

            a = await hold(nursery, pg_url, daemon_a, "a")  # back on daemon a
            for n in (7, 8):
                answers.append(await turn(a, n))
            await leave(a)

            b = await hold(nursery, pg_url, daemon_b, "b")  # and back on daemon b
            answers.append(await turn(b, 9))
            await leave(b)
            nursery.cancel_scope.cancel()

    assert [turn_number(answer) for answer in answers] == list(range(1, 10))
    probe = Store(pg_url, exclusive=False)
    try:
        entries = probe.entries(SESSION)
        messages = probe.messages(SESSION)
        operations = probe.operations(session=SESSION)
        skipped = probe.skipped_frames(SESSION)
    finally:
        probe.close()
    assert [entry["turn"] for entry in entries] == list(range(1, 10))
    assert [op.status for op in operations] == ["done"] * 9  # each turn ran once, answered
    # Nothing rewritten: the person's words and each answer as they were sent.
    texts = [(m["id"], m["parts"][0]["text"]) for m in messages]
    expected = []
    for n, answer in enumerate(answers, 1):
        expected += [(f"e{n}:user", f"hi {n}"), (f"e{n}:assistant", answer)]
    assert texts == expected, texts
    assert [op.outcome["text"] for op in operations] == answers
    assert skipped == []
