"""The link: endpoint rules, backoff, and what the host does with daemons
that misbehave (a scripted daemon over real sockets)."""

from __future__ import annotations

import random

import pytest
import trio

from router.host.host import Host, HostSettings
from router.errors import Refusal
from router.host.link import (
    Backoff,
    DaemonEndpoint,
    EndpointError,
    LinkDropped,
    LinkError,
    LinkRefused,
    LinkUnreachable,
    ProtocolMismatch,
)
from router.host.store import Refused
from router.host.store import Store
from tests.host.conftest import FAST
from tests.host.fake_daemon import HELLO, FakeConnection, FakeDaemon
from tests.support.polling import until


def test_endpoints_name_their_paths() -> None:
    endpoint = DaemonEndpoint("ws://example.test:8080/base/", "t")
    assert (endpoint.host, endpoint.port, endpoint.tls) == ("example.test", 8080, False)
    assert endpoint.session_path("a b/c") == "/base/sessions/a%20b%2Fc"
    assert endpoint.health_path == "/base/healthz"
    assert endpoint.authority == "example.test:8080"
    secure = DaemonEndpoint("https://example.test", "t")
    assert (secure.port, secure.tls, secure.authority) == (443, True, "example.test")
    assert "s3cret" not in repr(DaemonEndpoint("ws://h:1", "s3cret"))  # the token stays out of logs
    for bad in ("ftp://x", "ws://", "ws://h:99999"):
        with pytest.raises(EndpointError) as caught:
            DaemonEndpoint(bad, "t")
        assert caught.value.code == "bad-daemon-url"


def test_the_hosts_refusals_are_refusals() -> None:
    for kind in (Refused, EndpointError, LinkError, LinkUnreachable, LinkDropped, LinkRefused, ProtocolMismatch):
        refusal = kind("some-code", "a sentence to act on")
        assert isinstance(refusal, Refusal)
        assert (refusal.code, refusal.message, str(refusal)) == ("some-code", "a sentence to act on", "some-code: a sentence to act on")
        assert not hasattr(refusal, "sentence")
    assert (LinkUnreachable.retry, LinkDropped.retry) == (True, True)
    assert (LinkRefused.retry, ProtocolMismatch.retry) == (False, False)
    with pytest.raises(ValueError):
        LinkDropped("Not_Kebab", "x")


def test_backoff_grows_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(base=1.0, cap=8.0, rng=random.Random(7))
    steps = [1, 2, 4, 8, 8, 8]
    for step in steps:
        delay = backoff.next()
        assert step / 2 <= delay <= step
    backoff.reset()
    assert 0.5 <= backoff.next() <= 1.0


def test_backoffs_share_one_rng_unless_given_their_own() -> None:
    from router.host.link import SHARED_RNG

    first, second = Backoff(), Backoff(base=2.0)
    assert first.rng is SHARED_RNG and second.rng is SHARED_RNG
    seeded = [Backoff(base=1.0, cap=8.0, rng=random.Random(7)) for _ in range(2)]
    assert seeded[0].rng is not SHARED_RNG
    # A seeded backoff draws the same pauses as another seeded alike.
    assert [seeded[0].next() for _ in range(5)] == [seeded[1].next() for _ in range(5)]


async def start(nursery: trio.Nursery, store: Store, daemon: FakeDaemon, **settings: object) -> Host:
    host = Host(store, DaemonEndpoint(daemon.url, "t"), HostSettings(**{**FAST, **settings}))  # type: ignore[arg-type]
    await nursery.start(host.run)
    return host


async def fake(nursery: trio.Nursery, script: object, **options: object) -> FakeDaemon:
    return await nursery.start(FakeDaemon(script, **options).run)  # type: ignore[arg-type]


async def test_another_protocol_is_an_error_not_a_retry_loop(nursery: trio.Nursery, store: Store) -> None:
    async def script(connection: FakeConnection) -> None:
        await connection.send({**HELLO, "protocol": 2})
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon)
    receipt = await host.session().submit("x")
    with pytest.raises(ProtocolMismatch) as caught:
        await host.session().wait(receipt.operation_id)
    assert caught.value.code == "protocol-mismatch" and "protocol 2" in caught.value.message
    assert daemon.connections == 1
    assert host.session().link.state == "failed"
    # A new submission tries again (once), and is refused the same way.
    await host.session().submit("y", operation_id="y")
    with pytest.raises(ProtocolMismatch):
        await host.session().wait("y")
    assert daemon.connections == 2


async def test_no_hello_in_time_is_retried_then_given_up(nursery: trio.Nursery, store: Store) -> None:
    async def script(connection: FakeConnection) -> None:
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon, hello_timeout=0.2, give_up_after=3.0)
    receipt = await host.session().submit("x")
    with pytest.raises(LinkUnreachable) as caught:
        await host.session().wait(receipt.operation_id)
    assert caught.value.code == "no-hello" and "gave up" in caught.value.message
    assert daemon.connections >= 2


async def test_an_unhealthy_daemon_is_not_dialled(nursery: trio.Nursery, store: Store) -> None:
    async def script(connection: FakeConnection) -> None:
        raise AssertionError("dialled an unhealthy daemon")

    daemon = await fake(nursery, script, health_status=503)
    host = await start(nursery, store, daemon, health_wait=0.3, give_up_after=0.5)
    receipt = await host.session().submit("x")
    with pytest.raises(LinkUnreachable) as caught:
        await host.session().wait(receipt.operation_id)
    assert caught.value.code == "daemon-unhealthy"
    assert daemon.connections == 0 and set(daemon.paths) == {"/healthz"}


async def test_nothing_listening_is_unreachable(nursery: trio.Nursery, store: Store) -> None:
    with trio.socket.socket() as probe:  # a port nobody listens on
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    host = Host(
        store,
        DaemonEndpoint(f"ws://127.0.0.1:{port}", "t"),
        HostSettings(**{**FAST, "health_wait": 0.3, "give_up_after": 0.5}),  # type: ignore[arg-type]
    )
    await nursery.start(host.run)
    receipt = await host.session().submit("x")
    with pytest.raises(LinkUnreachable) as caught:
        await host.session().wait(receipt.operation_id)
    assert caught.value.code == "daemon-unreachable"


async def test_what_does_not_parse_is_dropped_and_the_session_goes_on(
    nursery: trio.Nursery, store: Store
) -> None:
    async def script(connection: FakeConnection) -> None:
        await connection.send_text("not json")
        await connection.send({"type": "frame", "seq": 1, "frame": {"kind": "start"}})  # before hello
        await connection.send(HELLO)
        assert (await connection.receive())["type"] == "open"
        assert (await connection.receive()) == {"type": "replay", "after": 0}
        prompt = await connection.receive_type("prompt")
        op = prompt["operationId"]
        await connection.send({"type": "caught-up", "lastSeq": 0})
        await connection.send_text("{bad")
        await connection.send({"type": "error", "message": "unparseable message"})
        await connection.send({"type": "frame", "seq": 1, "frame": {"kind": "nonsense"}})
        # A frame that does not parse is passed, and acked at once.
        assert await connection.receive_type("ack") == {"type": "ack", "seq": 1}
        await connection.send({"type": "frame", "seq": 2, "frame": {"kind": "start", "operationId": op}})
        await connection.send(
            {"type": "frame", "seq": 3, "frame": {"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": "ok"}}}
        )
        assert await connection.receive_type("ack") == {"type": "ack", "seq": 3}
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon)
    result, messages = await host.session().prompt("hi")
    assert result.text == "ok"
    assert [m["id"] for m in messages] == [f"{result.operation_id}:user"]
    assert daemon.paths[-1] == "/sessions/root" and daemon.connections == 1
    (skipped,) = await store.call(store.skipped_frames.all, "root")
    assert (skipped.runtime, skipped.seq) == ("fake", 1) and skipped.reason.startswith("it does not parse")


async def test_a_replaced_socket_reconnects(nursery: trio.Nursery, store: Store) -> None:
    async def script(connection: FakeConnection) -> None:
        if daemon.connections == 1:
            await connection.send(HELLO)
            await connection.close(4001, "replaced by a newer connection")
            return
        await connection.greet()
        prompt = await connection.receive_type("prompt")
        op = prompt["operationId"]
        await connection.send(
            {"type": "frame", "seq": 1, "frame": {"kind": "settle", "operationId": op, "outcome": {"status": "unanswered", "reason": "r"}}}
        )
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon)
    result, _ = await host.session().prompt("x")
    assert (result.status, result.reason) == ("unanswered", "r")
    assert daemon.connections == 2
    assert host.session().link.last_error.code == "link-replaced"


async def test_a_daemon_that_stops_answering_pings_is_redialled(nursery: trio.Nursery, store: Store) -> None:
    async def script(connection: FakeConnection) -> None:
        if daemon.connections == 1:
            await connection.send(HELLO)
            await trio.sleep_forever()  # reads nothing: pings go unanswered
        await connection.greet()
        prompt = await connection.receive_type("prompt")
        op = prompt["operationId"]
        await connection.send(
            {"type": "frame", "seq": 1, "frame": {"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": "back"}}}
        )
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon, ping_interval=0.1, ping_timeout=0.2)
    result, _ = await host.session().prompt("x")
    assert result.text == "back"
    assert daemon.connections == 2
    assert host.session().link.last_error.code == "ping-timeout"


async def test_a_daemon_that_stops_reading_mid_send_is_redialled(nursery: trio.Nursery, store: Store) -> None:
    """A frozen daemon (a paused container) stops reading: the host's sends
    fill the socket buffers and block. The heartbeat must still drop the
    connection; a blocked send is no excuse to hold the session forever."""
    async def script(connection: FakeConnection) -> None:
        await connection.greet()
        if daemon.connections == 1:
            await trio.sleep_forever()  # reads nothing more, ever
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon, ping_interval=0.1, ping_timeout=0.3)
    session = host.session()
    # Far more than loopback's socket buffers hold, so the sends block.
    for n in range(48):
        await session.submit(f"{n:02d}" + "x" * 500_000)
    with trio.fail_after(60):  # a generous bound; without the fix this hangs
        await until(lambda: daemon.connections >= 2)
    assert session.link.last_error is not None
    assert session.link.last_error.code == "ping-timeout"


def _tasks_under(task: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
    found = [task]
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found += _tasks_under(child)
    return found


def _find_task(name: str) -> trio.lowlevel.Task | None:
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task is not None and task.name == name:
            return task
        pending += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return None


#: Tasks an idle live link may hold, its own included (the link's
#: task is its connect loop and driver; the connection's reader pings too,
#: and the WebSocket has no task of its own).
IDLE_LINK_TASKS = 2


async def test_an_idle_link_holds_few_tasks(nursery: trio.Nursery, store: Store) -> None:
    async def script(connection: FakeConnection) -> None:
        await connection.greet()
        prompt = await connection.receive_type("prompt")
        await connection.send(
            {"type": "frame", "seq": 1, "frame": {"kind": "settle", "operationId": prompt["operationId"], "outcome": {"status": "done", "text": "ok"}}}
        )
        await trio.sleep_forever()

    daemon = await fake(nursery, script)
    host = await start(nursery, store, daemon)
    session = host.session()
    result, _ = await session.prompt("x")
    assert result.text == "ok" and session.link.state == "live"
    task = _find_task(f"session {session.id!r}")
    assert task is not None
    tasks = _tasks_under(task)
    assert len(tasks) <= IDLE_LINK_TASKS, [t.name for t in tasks]
