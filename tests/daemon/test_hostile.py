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
