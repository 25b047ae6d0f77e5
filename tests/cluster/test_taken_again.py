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
            record.sessions.create(SESSION)
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
        entries = probe.entries.all(SESSION)
        messages = probe.messages.all(SESSION)
        operations = probe.operations.all(session=SESSION)
        skipped = probe.skipped_frames.all(SESSION)
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


class LaunchedRouter(Router):
    """A router whose host starts a daemon per session with the ``process``
    launcher (as ``router serve --launcher process``): a daemon it started
    outlives the session's lease while the router lives."""

    def __init__(self, url: str, name: str, workspaces: str) -> None:
        from router.host import Host, HostSettings
        from router.host.supervisor import Launcher
        from router.plugins.loader import import_module
        from router.turns.router import TurnRouter

        super().__init__(url, DaemonEndpoint("ws://127.0.0.1:9", "unused"), name)
        loaded = import_module("launcher", "process")
        assert not hasattr(loaded, "code"), loaded
        launcher = Launcher(name="process", module=loaded.module, owner=name,  # type: ignore[union-attr]
                            options={"workspace_root": workspaces})
        self.host = Host(self.store, None, HostSettings(on_container_lost="if-declared"), launcher=launcher,
                         may_link=self.node.holds)
        self.router = TurnRouter(deliveries=self.deliveries, registry=self.registry, host=self.host,
                                 remote=self.node)
        self.node.host, self.node.router = self.host, self.router


@pytest.mark.timeout(300)
async def test_a_session_handed_back_to_a_live_router_with_the_process_launcher(pg_url: str, tmp_path: Any) -> None:
    """Router a holds four sessions, each on a daemon of its own (the process
    launcher); b joins and a hands one back (the spread), b runs turns on
    it, b leaves and a takes it back while a's daemon for it still runs,
    turns behind. The next turn continues from the record."""
    sessions = [f"s{i}" for i in range(4)]
    with Store(pg_url, exclusive=False) as record:
        for each in sessions:
            record.sessions.create(each)
    async with trio.open_nursery() as nursery:
        a = LaunchedRouter(pg_url, "a", str(tmp_path / "a"))
        await nursery.start(a.run)
        with trio.fail_after(60):
            while not all(a.node.holds(each) for each in sessions):
                await trio.sleep(0.05)
        for each in sessions:
            await a.router.create(each)
            for n in (1, 2):
                assert turn_number(await turn_in(a, each, f"{each}-{n}")) == n

        b = LaunchedRouter(pg_url, "b", str(tmp_path / "b"))
        await nursery.start(b.run)
        with trio.fail_after(60):
            while not any(b.node.holds(each) for each in sessions):
                await trio.sleep(0.05)
        moved = next(each for each in sessions if b.node.holds(each))
        await b.router.create(moved)
        for n in (3, 4):
            assert turn_number(await turn_in(b, moved, f"{moved}-{n}")) == n
        await leave(b)

        with trio.fail_after(60):
            while not a.node.holds(moved):
                await trio.sleep(0.05)
        await a.router.create(moved)
        for n in (5, 6):
            assert turn_number(await turn_in(a, moved, f"{moved}-{n}")) == n
        await leave(a)
        nursery.cancel_scope.cancel()

    with Store(pg_url, exclusive=False) as probe:
        entries = probe.entries.all(moved)
        messages = probe.messages.all(moved)
    assert [entry["turn"] for entry in entries] == [1, 2, 3, 4, 5, 6]
    assert [m["id"] for m in messages] == [f"{moved}-{n}:{role}" for n in range(1, 7) for role in ("user", "assistant")]


async def turn_in(router: Router, session: str, event_id: str) -> str:
    with trio.fail_after(60):
        reply = await router.router.deliver(
            Delivery(event_id=event_id, session=session, message=Person(text=f"hi {event_id}", message_id=event_id))
        )
    assert isinstance(reply, Answered), reply
    with trio.fail_after(60):
        result = await router.host.session(session).wait(event_id)
    assert result.status == "done" and result.text is not None, result
    return result.text
