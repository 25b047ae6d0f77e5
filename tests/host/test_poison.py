"""One poisoned frame must not stall a session (docs/reliability.md): a daemon that
keeps a frame the host cannot parse, or cannot apply, replays it on every
connection until it is acknowledged. The host passes it (recorded as
skipped, told to subscribers, acked) and the session goes on. Also: a
message that is not a frame and does not parse keeps the connection, and
a bug of ours while applying a batch is logged and backs off."""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.host.events import FrameSkipped, OperationEnded
from router.host.host import Host, HostSettings
from router.host.link import DaemonEndpoint
from router.host.reconcile import ConnectionRules, UnreadableFrame, frame_seq
from router.host.record import Entries, Messages
from router.host.store import Store
from tests.host.conftest import FAST
from tests.host.core_driver import SESSION, connect, event, frame, hello, message, persist, receive, sends, start
from tests.host.fake_daemon import HELLO, FakeConnection, FakeDaemon
from tests.support.polling import until
from wire.container import parse_daemon_message

#: Deeper than ``wire``'s parser could structure before its fix
#: (``RecursionError`` near 340 levels), shallow enough for ``json.loads``.
DEEP = 600


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def poison_frames(operation_id: str) -> dict[str, str]:
    """Frame 2 of a turn, as text, per kind of poison."""
    return {
        # An adapter event whose raw value is nested DEEP levels.
        "unparseable": (
            '{"type":"frame","seq":2,"frame":{"kind":"event","operationId":'
            + json.dumps(operation_id)
            + ',"event":{"type":"raw","value":' + nested(DEEP) + "}}}"
        ),
        # A frame that parses but names an operation with a lone surrogate
        # (JSON from JavaScript may): SQLite cannot bind it.
        "unappliable": '{"type":"frame","seq":2,"frame":{"kind":"start","operationId":"\\ud800"}}',
    }


class KeepingDaemon:
    """A daemon's session as far as the host can see: frames kept until
    acked and replayed after the host's cursor on every connection. The
    prompt's turn is ``start``, the poison, ``settle``."""

    def __init__(self, poison: str) -> None:
        self.poison = poison
        self.kept: dict[int, str] = {}
        self.last_seq = 0
        self.generation: int | None = None
        self.operation: str | None = None
        self.acks: list[int] = []

    def hello(self) -> dict[str, Any]:
        operations = []
        if self.operation is not None:
            outcome = {"status": "done", "text": "ok"}
            operations.append({"operationId": self.operation, "outcome": outcome})
        return {**HELLO, "open": self.generation, "lastSeq": self.last_seq, "operations": operations}

    def turn(self, operation_id: str) -> list[str]:
        self.operation = operation_id
        settle = {"kind": "settle", "operationId": operation_id, "outcome": {"status": "done", "text": "ok"}}
        texts = [
            json.dumps({"type": "frame", "seq": 1, "frame": {"kind": "start", "operationId": operation_id}}),
            poison_frames(operation_id)[self.poison],
            json.dumps({"type": "frame", "seq": 3, "frame": settle}),
        ]
        for seq, text in enumerate(texts, 1):
            self.kept[seq] = text
        self.last_seq = 3
        return texts

    async def __call__(self, connection: FakeConnection) -> None:
        await connection.send(self.hello())
        while True:
            message = await connection.receive()
            kind = message["type"]
            if kind == "open":
                self.generation = message["generation"]
            elif kind == "replay":
                for seq in sorted(self.kept):
                    if seq > message["after"]:
                        await connection.send_text(self.kept[seq])
                await connection.send({"type": "caught-up", "lastSeq": self.last_seq})
            elif kind == "prompt" and self.operation is None:
                for text in self.turn(message["operationId"]):
                    await connection.send_text(text)
            elif kind == "ack":
                self.acks.append(message["seq"])
                self.kept = {seq: text for seq, text in self.kept.items() if seq > message["seq"]}


async def start_host_on(nursery: trio.Nursery, store: Store, daemon: FakeDaemon, **settings: object) -> Host:
    host = Host(store, DaemonEndpoint(daemon.url, "t"), HostSettings(**{**FAST, **settings}))  # type: ignore[arg-type]
    await nursery.start(host.run)
    return host


def refused_by_the_parser(text: str) -> bool:
    try:
        return parse_daemon_message(text) is None
    except Exception:
        return True


@pytest.mark.parametrize("poison", ["unparseable", "unappliable"])
async def test_a_poisoned_frame_replayed_on_every_connection_is_passed_and_the_session_goes_on(
    poison: str, nursery: trio.Nursery, store: Store
) -> None:
    keeping = KeepingDaemon(poison)
    daemon: FakeDaemon = await nursery.start(FakeDaemon(keeping).run)
    host = await start_host_on(nursery, store, daemon)
    session = host.session()
    seen: list[Any] = []
    async with session.events() as stream:

        async def watch() -> None:
            async for batch in stream:
                seen.extend(batch)

        nursery.start_soon(watch)
        receipt = await session.submit("hi")
        # Generous: without the fix the host redials forever and this fails.
        with trio.fail_after(30):
            result = await session.wait(receipt.operation_id)
        await until(lambda: any(type(event) is OperationEnded for event in seen))
    assert (result.status, result.text) == ("done", "ok")
    skipped = await store.call(store.skipped_frames.all, "root")
    passed = poison == "unappliable" or refused_by_the_parser(poison_frames(receipt.operation_id)[poison])
    if passed:
        # Recorded with its seq and why, told to subscribers, acked: the
        # daemon dropped it, and one connection did it all.
        assert [(frame.runtime, frame.seq) for frame in skipped] == [("fake", 2)]
        reason = skipped[0].reason
        assert reason.startswith("it does not parse" if poison == "unparseable" else "it cannot be applied")
        assert FrameSkipped(runtime_id="fake", seq=2, reason=reason) in seen
    else:  # pragma: no cover - a parser that takes this depth applies it
        assert skipped == []
    await until(lambda: keeping.kept == {})
    assert daemon.connections == 1
    assert host.session().link.last_error is None
    # The transcript holds the person's message; the frame's absence is all
    # that is missing.
    assert [message["id"] for message in await session.messages()] == [f"{receipt.operation_id}:user"]


async def test_a_message_that_is_not_a_frame_and_does_not_parse_keeps_the_connection(
    nursery: trio.Nursery, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # A second hello whose extra field nests DEEP levels (hello keeps its
    # extra fields, so the parser structures them), and plain garbage.
    deep_hello = json.dumps(HELLO)[:-1] + ',"zone":' + nested(DEEP) + "}"

    async def script(connection: FakeConnection) -> None:
        await connection.greet()
        prompt = await connection.receive_type("prompt")
        op = prompt["operationId"]
        await connection.send_text(deep_hello)
        await connection.send_text('{"type": "nonsense", "seq": 1, "deep": ' + nested(DEEP) + "}")
        await connection.send_text("\x00\xff not json")
        await connection.send({"type": "frame", "seq": 1, "frame": {"kind": "start", "operationId": op}})
        settle = {"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": "still here"}}
        await connection.send({"type": "frame", "seq": 2, "frame": settle})
        await trio.sleep_forever()

    daemon: FakeDaemon = await nursery.start(FakeDaemon(script).run)
    host = await start_host_on(nursery, store, daemon)
    with trio.fail_after(30):
        result, _ = await host.session().prompt("x")
    assert result.text == "still here"
    assert daemon.connections == 1 and host.session().link.last_error is None
    assert await store.call(store.skipped_frames.all, "root") == []
    logged = [record.getMessage() for record in caplog.records if record.name == "router.host.session_link"]
    assert sum("dropped a message that does not parse" in line for line in logged) >= 2


async def test_a_bug_while_applying_a_batch_is_logged_and_backs_off(
    nursery: trio.Nursery, store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our own code failing on every connection (here: the core's receive)
    is logged with its traceback each time, and the backoff does not start
    over after each hello: the pauses grow to the cap instead of a redial
    loop at the first step."""

    def broken(self: ConnectionRules, store: Store, messages: object) -> None:
        raise ValueError("a bug of ours")

    monkeypatch.setattr(ConnectionRules, "receive", broken)

    async def script(connection: FakeConnection) -> None:
        await connection.greet()
        await connection.send({"type": "frame", "seq": 1, "frame": {"kind": "start", "operationId": "nobody"}})
        await trio.sleep_forever()

    daemon: FakeDaemon = await nursery.start(FakeDaemon(script).run)
    host = await start_host_on(nursery, store, daemon)
    await host.session().submit("x")
    link = host.session().link
    with trio.fail_after(30):
        await until(lambda: link.statistics().internal_failures >= 4)
    statistics = link.statistics()
    # Every failure reached hello (a connection each), none reset the backoff.
    assert statistics.attempt >= 4 and statistics.connections >= 4
    assert statistics.last_error == "internal-error"
    failures = [
        record for record in caplog.records
        if record.name == "router.host.session_link" and record.levelno == logging.ERROR
    ]  # fmt: skip
    assert len(failures) >= 4 and all(record.exc_info for record in failures)
    assert "a bug of ours" in caplog.text
    caplog.clear()  # logged on purpose: not a failure of this test


# ---------------------------------------------------------------- the core, without sockets


@pytest.fixture
def core_store(tmp_path):
    store = Store(tmp_path / "core.db")
    store.sessions.create(SESSION)
    yield store
    store.close()


def test_the_core_passes_an_unreadable_frame_in_its_place_and_acks_it(core_store: Store) -> None:
    store = core_store
    store.operations.enqueue(SESSION, "a", "hi", "followUp")
    core, _ = connect(store, hello())
    unreadable = UnreadableFrame(seq=2, reason="it does not parse: no", text='{"type":"frame","seq":2}')
    effects = receive(store, core, frame(1, start("a")), unreadable, frame(3, persist({"n": 1})))
    assert sends(effects) == [{"type": "ack", "seq": 3}]  # a pass acks at once
    assert FrameSkipped(runtime_id="r1", seq=2, reason="it does not parse: no") in effects.events
    assert (core.frames_applied, core.frames_passed) == (2, 1)
    (skipped,) = store.skipped_frames.all(SESSION)
    assert (skipped.runtime, skipped.seq, skipped.text) == ("r1", 2, '{"type":"frame","seq":2}')
    assert store.entries.all(SESSION) == [{"n": 1}]
    # Replayed (the ack was lost): below the cursor, so neither applied nor
    # recorded again.
    again = receive(store, core, frame(1, start("a")), unreadable, frame(3, persist({"n": 1})))
    assert core.frames_skipped == 3 and len(store.skipped_frames.all(SESSION)) == 1
    assert store.entries.all(SESSION) == [{"n": 1}] and not again.events


def test_a_frame_that_cannot_be_applied_is_undone_alone_and_passed(
    core_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = core_store
    store.operations.enqueue(SESSION, "a", "hi", "followUp")
    core, _ = connect(store, hello())
    real = Messages.put

    def put(self: Messages, session: str, generation: int, message: dict, operation_id: object) -> None:
        real(self, session, generation, message, operation_id)  # written, then undone by the savepoint
        if message["id"] == "poison":
            raise RecursionError("too deep to encode")

    monkeypatch.setattr(Messages, "put", put)
    frames = [frame(1, event("a", message("poison", "x", "a"))), frame(2, event("a", message("m", "fine", "a")))]
    # Quickly, the batch raises whole: nothing written, the core unchanged.
    with pytest.raises(RecursionError):
        receive(store, core, *frames)
    assert store.messages.all(SESSION) == [] and store.sessions.require(SESSION).cursor_seq == 0
    assert (core.frames_applied, core.since_ack) == (0, 0)
    # Carefully (what the link does next), the frame is undone alone and passed.
    with store.transaction():
        effects = core.receive(store, frames, careful=True)
    assert [message["id"] for message in store.messages.all(SESSION)] == ["m"]
    (skipped,) = store.skipped_frames.all(SESSION)
    assert skipped.seq == 1 and skipped.reason == "it cannot be applied: RecursionError('too deep to encode')"
    assert '"poison"' in skipped.text
    assert [type(event).__name__ for event in effects.events] == ["FrameSkipped", "MessageStored"]
    assert sends(effects) == [{"type": "ack", "seq": 2}]
    assert store.sessions.require(SESSION).cursor_seq == 2


def test_a_store_failure_is_not_the_frames_doing(core_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store = core_store
    core, _ = connect(store, hello())

    def full(self: Entries, *args: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Entries, "append", full)
    with pytest.raises(sqlite3.OperationalError), store.transaction():
        core.receive(store, [frame(1, persist({"n": 1}))], careful=True)
    assert store.skipped_frames.all(SESSION) == [] and store.sessions.require(SESSION).cursor_seq == 0
    assert core.frames_passed == 0


def frame_text(seq: int, body: object) -> str:
    return json.dumps({"type": "frame", "seq": seq, "frame": body})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=200).map(lambda raw: raw.decode("latin-1")))
def test_frame_seq_never_raises(text: str) -> None:
    seq = frame_seq(text)
    assert seq is None or (type(seq) is int and seq > 0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=2**53 - 1),
    st.recursive(st.none() | st.integers() | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=10),
    st.integers(min_value=0, max_value=20_000),
    st.booleans(),
)
def test_frame_seq_reads_the_seq_of_any_frame_at_any_depth(seq: int, body: object, depth: int, first: bool) -> None:
    """A frame nested at any depth (built by hand: deeper than ``json``
    goes), its header after the body or before it; and, header first, cut
    short anywhere after the header."""
    frame_body = '{"kind": "event", "raw": ' + (nested(depth) or "null") + ', "body": ' + json.dumps(body) + "}"
    header = f'"type": "frame", "seq": {seq}'
    text = f"{{{header}, \"frame\": {frame_body}}}" if first else f"{{\"frame\": {frame_body}, {header}}}"
    assert frame_seq(text) == seq
    if first:
        assert frame_seq(text[: len(header) + 2 + (len(text) - len(header)) // 2]) == seq
