"""Hostile input on a live connection of our daemon, as a real process over a
real socket: a message nested deeper than the wire reads (``MAX_DEPTH``)
gets the protocol's ``error`` answer, and the same connection and the same
session go on (the next prompt on that connection is answered).

Before the wire's checks were iterative, these messages raised
``RecursionError`` inside the connection's task: the daemon logged
"connection task failed" and dropped the socket without a word.
"""

from __future__ import annotations

import pytest

from tests.daemon.hosts import connect
from tests.support.daemons import spawn_daemon
from wire.json import MAX_DEPTH


def nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def nest_objects(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


#: The messages of the issue (a restore whose entries nest 400 deep, a
#: configure whose options do, an open, a prompt), at the depths the
#: campaign uses.
HOSTILE = [
    '{"type":"restore","generation":2,"entries":[%s]}' % nest(400),
    '{"type":"configure","settings":{"options":%s}}' % nest_objects(400),
    '{"type":"open","generation":2,"settings":{"options":%s},"restore":[]}' % nest(1_000),
    '{"type":"restore","generation":2,"entries":[%s]}' % nest(10_000),
    '{"type":"prompt","operationId":"deep","input":[{"type":"text","text":"x","x":%s}],"whenBusy":"followUp"}'
    % nest(100_000),
    nest(100_000),
]


async def test_a_deep_message_is_answered_error_and_the_connection_goes_on() -> None:
    async with spawn_daemon("ours") as daemon:
        async with connect(daemon, "deep") as host:
            hello = await host.hello()
            await host.open(1)
            await host.replay(hello["lastSeq"])
            await host.prompt("before", "before")
            assert (await host.settled("before"))["status"] == "done"
            for index, text in enumerate(HOSTILE):
                await host.send(text)
                answer = await host.until(lambda m: m["type"] == "error")
                assert answer[-1] == {"type": "error", "message": "unparseable message"}, index
                # Same socket, same session: a prompt is still answered, and
                # the open generation is still the first.
                await host.prompt(f"after-{index}", f"after {index}")
                outcome = await host.settled(f"after-{index}")
                assert outcome["status"] == "done" and f"after {index}" in outcome["text"]
            # Within the limit, a deep value is a message like any other.
            await host.send('{"type":"configure","settings":{"options":%s}}' % nest(MAX_DEPTH - 3))
            await host.prompt("last", "last")
            got = await host.frame("settle", "last")
            assert not [m for m in got if m["type"] == "error"]
        async with connect(daemon, "deep") as again:
            hello = await again.hello()
            assert hello["open"] == 1  # the session kept its generation
            assert {op["operationId"] for op in hello["operations"]} >= {"before", "last"}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 340, 1_000])
async def test_a_deep_event_raw_or_persist_from_a_host_is_refused_not_fatal(depth: int) -> None:
    """Daemon-side messages sent to the daemon are not host messages: still
    only an ``error``, whatever their depth."""
    async with spawn_daemon("ours") as daemon:
        async with connect(daemon, "raw") as host:
            await host.hello()
            await host.send(
                '{"type":"frame","seq":1,"frame":{"kind":"event","operationId":null,'
                '"event":{"type":"raw","value":%s}}}' % nest(depth)
            )
            assert (await host.until(lambda m: m["type"] == "error"))[-1]["type"] == "error"
            await host.open(1)
            await host.replay(0)
            await host.prompt("p", "p")
            assert (await host.settled("p"))["status"] == "done"


# --------------------------------------------------------------------------- the core, without sockets


def _deep_value(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_the_core_answers_a_deep_text_with_error_and_changes_nothing() -> None:
    from tests.daemon.core_driver import Conn, Driver

    d = Driver()
    conn = Conn("c")
    d.attach(conn)
    before = d.core.statistics()
    for depth in (400, 10_000, 100_000):
        d.send(conn, '{"type":"restore","generation":1,"entries":[%s]}' % nest(depth))
        assert conn.sent[-1] == {"type": "error", "message": "unparseable message"}
    assert d.core.statistics() == before


@pytest.mark.parametrize("depth", [MAX_DEPTH - 3, MAX_DEPTH - 2, MAX_DEPTH, 400, 100_000])
def test_an_adapter_event_or_entry_too_deep_for_the_wire_is_refused_to_the_adapter(depth: int) -> None:
    """The daemon never writes a frame the host would refuse to read: an
    event whose frame message would nest deeper than ``MAX_DEPTH`` is a
    ``ValueError`` to the adapter, and no seq is spent on it."""
    from tests.daemon.core_driver import Conn, Driver
    from wire.container import parse_daemon_message

    d = Driver()
    conn = Conn("c")
    d.attach(conn)
    d.send(conn, {"type": "open", "generation": 1, "settings": {}, "restore": []})
    d.send(conn, {"type": "replay", "after": 0})
    # A raw event's value sits four levels down: message, frame, event, value.
    for payload, offset in (
        (lambda v: d.core.emit({"type": "raw", "value": v}), 3),
        (lambda v: d.core.persist([v]), 3),
    ):
        seq = d.core.seq
        value = _deep_value(depth)
        if offset + depth <= MAX_DEPTH:
            d.perform(payload(value))
            assert d.core.seq == seq + 1
            assert parse_daemon_message(conn.texts[-1]) is not None
        else:
            with pytest.raises(ValueError):
                payload(value)
            assert d.core.seq == seq


# --------------------------------------------------------------------------- a host that stops reading


async def test_a_host_that_stops_reading_is_closed_at_the_outbox_bound_and_replay_heals_it(
    nursery, autojump_clock, monkeypatch
) -> None:
    """The outbox of a host that reads nothing (a half-open connection) stops
    at its bound: the connection is closed with 1011, or dropped when even
    that cannot be written, and the host's next connection replays every
    frame, so nothing is lost."""
    import json

    import trio.testing
    from trio_websocket import wrap_client_stream

    from router.daemon import runner as runner_module
    from router.daemon.adapters.echo import adapter as echo
    from router.daemon.runner import CLOSE_TIMEOUT, Daemon
    from router.daemon.transport import DaemonServer

    monkeypatch.setattr(runner_module, "OUTBOX_SLACK", 16)
    daemon = await nursery.start(Daemon(echo, "rt", max_kept_frames=100).run)
    server = DaemonServer(daemon, "t")
    headers = [(b"x-cf-harness-token", b"t")]
    client, served = trio.testing.lockstep_stream_pair()
    nursery.start_soon(server._handle_stream, served)
    # A receive queue of one message: once it is full the client reads no
    # more bytes, and the daemon's writer blocks on it.
    stuck = await wrap_client_stream(nursery, client, "daemon", "/sessions/s", extra_headers=headers, message_queue_size=1)
    await stuck.send_message(json.dumps({"type": "open", "generation": 1, "settings": {}, "restore": []}))
    await stuck.send_message(json.dumps({"type": "replay", "after": 0}))
    for i in range(10):  # 50 frames: fewer than the session keeps
        await stuck.send_message(json.dumps({"type": "prompt", "operationId": f"op{i}", "input": f"t{i}", "whenBusy": "followUp"}))
    await trio.testing.wait_all_tasks_blocked()
    (outbox,) = server._outboxes
    assert outbox.limit == 100 + 16
    # A host that sends and never reads: every bad message gets an error
    # queued (errors are not kept; nothing else bounds them).
    for _ in range(200):
        await stuck.send_message("not json")
        assert outbox.pending <= outbox.limit
    with trio.fail_after(CLOSE_TIMEOUT * 3):
        await outbox.finished.wait()
    assert outbox.overflowed
    await trio.testing.wait_all_tasks_blocked()
    assert outbox not in server._outboxes
    # The next connection replays everything: all ten settled, seqs 1..N.
    fresh_client, fresh_served = trio.testing.memory_stream_pair()
    nursery.start_soon(server._handle_stream, fresh_served)
    fresh = await wrap_client_stream(nursery, fresh_client, "daemon", "/sessions/s", extra_headers=headers)
    hello = json.loads(await fresh.get_message())
    assert hello["type"] == "hello" and hello["lastSeq"] == 50
    await fresh.send_message(json.dumps({"type": "replay", "after": 0}))
    seqs, settled = [], set()
    while True:
        message = json.loads(await fresh.get_message())
        if message["type"] == "caught-up":
            break
        seqs.append(message["seq"])
        if message["frame"]["kind"] == "settle":
            settled.add(message["frame"]["operationId"])
    assert seqs == list(range(1, 51))
    assert settled == {f"op{i}" for i in range(10)}


def test_the_outbox_bound_holds_a_whole_replay() -> None:
    """A replay of every kept frame is queued at once; the bound must hold
    it, or a host that reads would be cut and replay again forever."""
    from router.daemon.runner import OUTBOX_SLACK, Outbox
    from router.daemon.core import MAX_KEPT_FRAMES

    outbox = Outbox("o")
    for i in range(MAX_KEPT_FRAMES + 2):  # hello, every kept frame, caught-up
        outbox.send(f"frame {i}")
    assert not outbox.closing and outbox.pending == MAX_KEPT_FRAMES + 2
    for i in range(OUTBOX_SLACK):
        outbox.send("live")
    assert outbox.overflowed and outbox.closing and outbox.pending == 0
    outbox.send("after")
    assert outbox.pending == 0


# --------------------------------------------------------------------------- hostile HTTP at the daemon's port


async def test_hostile_http_at_the_daemon_port_ends_nothing() -> None:
    """The mod link's fuzzer (``tests/modlink/hostile_http.py``) at our
    daemon's own HTTP (h11, not Hypercorn), the inputs that ended Hypercorn
    servers included: the daemon still answers its health check and runs a
    session end to end."""
    import os
    from functools import partial

    import trio

    from tests.daemon.test_faults import still_serves
    from tests.modlink.hostile_http import KILLERS, run_case, storm

    async with spawn_daemon("ours") as daemon:
        dial = partial(trio.open_tcp_stream, "127.0.0.1", daemon.port)
        async with trio.open_nursery() as nursery:
            for case in KILLERS:
                for _ in range(20):
                    nursery.start_soon(run_case, dial, case)
        await storm(dial, seed=7, count=int(os.environ.get("ROUTER_FUZZ_CASES", "2000")) // 2)
        assert daemon.process.returncode is None
        await still_serves(daemon)
