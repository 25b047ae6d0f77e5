"""The Trio layer in one process, with a scripted adapter and no sockets:
what happens when an adapter misbehaves, and how sessions shut down.

Connections are :class:`Outbox` objects nobody writes out; the tests read
their queues. Progress is awaited with ``wait_all_tasks_blocked``, never a
sleep, and deadlines run on the autojump clock.
"""

from __future__ import annotations

import json
import logging

import pytest
import trio
import trio.testing
from router._websocket import WebSocketClosed

from router.daemon.adapters.echo import EchoAdapter
from router.daemon.runner import OUTBOX_HIGH, SHUTDOWN_GRACE, Daemon, Outbox, SessionRunner
from wire.container import AdapterInfo, Done, Unanswered, input_text


class ScriptedSession:
    """Does what the turn's text says."""

    def __init__(self, adapter: "Scripted", context) -> None:
        self.adapter = adapter
        self.context = context
        self.closed = False
        self.configured = []
        self.release = trio.Event()

    async def run(self, turn):
        text = input_text(turn.input)
        if text == "hang":
            await trio.sleep_forever()
        if text == "ignore-cancel":
            with trio.CancelScope(shield=True):
                await self.release.wait()
            return Done(text="late")
        if text == "raise":
            raise ValueError("bad thing")
        if text == "group":
            raise ExceptionGroup("many", [ValueError("a"), KeyError("b")])
        if text == "bad-event":
            self.context.emit({"type": "nope"})
        if text == "none":
            return None
        if text == "unanswered":
            return Unanswered(reason="no answer")
        self.context.emit({"type": "text-delta", "messageId": "m", "delta": text})
        return Done(text=text)

    async def steer(self, input):
        if self.adapter.steer_raises:
            raise RuntimeError("cannot steer now")
        return True

    async def configure(self, settings):
        self.configured.append(settings)

    async def close(self):
        self.closed = True
        if self.adapter.close_hangs:
            await trio.sleep_forever()
        if self.adapter.close_raises:
            raise RuntimeError("close failed")


class Scripted:
    info = AdapterInfo(id="scripted", version="0", capabilities=("steer",))

    def __init__(self) -> None:
        self.sessions: list[ScriptedSession] = []
        self.open_fails = False
        self.open_gate: trio.Event | None = None
        self.steer_raises = False
        self.close_raises = False
        self.close_hangs = False

    async def open(self, context):
        if self.open_gate is not None:
            await self.open_gate.wait()
        if self.open_fails:
            raise RuntimeError("no credentials")
        context.log("info", "opened")
        session = ScriptedSession(self, context)
        self.sessions.append(session)
        return session


def take(outbox: Outbox) -> list[dict]:
    """Everything queued to ``outbox`` so far, parsed (and taken off)."""
    messages = [json.loads(text) for text in outbox._queue]
    outbox._queue.clear()
    return messages


def settles(messages: list[dict]) -> dict[str, dict]:
    return {
        m["frame"]["operationId"]: m["frame"]["outcome"]
        for m in messages
        if m["type"] == "frame" and m["frame"]["kind"] == "settle"
    }


class Session:
    def __init__(self, runner: SessionRunner, outbox: Outbox) -> None:
        self.runner = runner
        self.outbox = outbox

    async def send(self, message: dict) -> None:
        await self.runner.receive(self.outbox, json.dumps(message))
        await trio.testing.wait_all_tasks_blocked()

    async def prompt(self, op: str, text: str, when_busy: str = "followUp") -> None:
        await self.send({"type": "prompt", "operationId": op, "input": text, "whenBusy": when_busy})


@pytest.fixture
def adapter():
    return Scripted()


@pytest.fixture
async def daemon(nursery, adapter):
    return await nursery.start(Daemon(adapter, "rt").run)


@pytest.fixture
async def session(daemon):
    runner = daemon.session("s")
    outbox = Outbox("test")
    runner.attach(outbox)
    s = Session(runner, outbox)
    await trio.testing.wait_all_tasks_blocked()
    assert take(outbox)[0]["type"] == "hello"
    await s.send({"type": "replay", "after": 0})
    assert take(outbox) == [{"type": "caught-up", "lastSeq": 0}]
    return s


async def test_open_failure_is_reported_and_a_later_open_works(session, adapter):
    adapter.open_fails = True
    await session.prompt("a", "hi")
    await session.send({"type": "open", "generation": 1, "settings": {}, "restore": []})
    assert take(session.outbox) == [{"type": "error", "message": "no credentials"}]
    adapter.open_fails = False
    await session.send({"type": "open", "generation": 1, "settings": {}, "restore": []})
    messages = take(session.outbox)
    # The log emitted while opening has no operation; then a runs.
    assert messages[0]["frame"] == {"kind": "event", "operationId": None, "event": {"type": "log", "level": "info", "message": "opened"}}
    assert settles(messages) == {"a": {"status": "done", "text": "hi"}}


@pytest.fixture
async def opened(session):
    await session.send({"type": "open", "generation": 1, "settings": {}, "restore": []})
    take(session.outbox)
    return session


@pytest.mark.parametrize(
    "text, outcome",
    [
        ("raise", {"status": "unanswered", "reason": "bad thing"}),
        ("group", {"status": "unanswered", "reason": "many (2 sub-exceptions)"}),
        ("none", {"status": "unanswered", "reason": "the adapter's run returned NoneType, not an outcome (Done or Unanswered)"}),
        ("unanswered", {"status": "unanswered", "reason": "no answer"}),
    ],
)
async def test_a_misbehaving_turn_settles_and_the_session_goes_on(opened, text, outcome):
    await opened.prompt("a", text)
    await opened.prompt("b", "after")
    assert settles(take(opened.outbox)) == {"a": outcome, "b": {"status": "done", "text": "after"}}


async def test_an_event_the_wire_cannot_carry_fails_the_turn_with_a_clear_reason(opened):
    await opened.prompt("a", "bad-event")
    reason = settles(take(opened.outbox))["a"]["reason"]
    assert reason.startswith("not a container event")


async def test_a_turn_that_ignores_cancellation_settles_aborted_when_it_ends(opened, adapter):
    await opened.prompt("a", "ignore-cancel")
    await opened.prompt("b", "next")
    await opened.send({"type": "abort", "operationId": "a"})
    assert settles(take(opened.outbox)) == {}  # still unwinding; b waits
    adapter.sessions[0].release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert settles(take(opened.outbox)) == {
        "a": {"status": "unanswered", "reason": "aborted"},
        "b": {"status": "done", "text": "next"},
    }


async def test_host_messages_wait_for_the_adapter_call_before_them(session, adapter):
    adapter.open_gate = trio.Event()
    await session.send({"type": "open", "generation": 1, "settings": {}, "restore": []})
    async with trio.open_nursery() as nursery:
        # receive() returns once the message is queued; the inbox holds it
        # while open is awaited.
        nursery.start_soon(session.prompt, "a", "hi")
        await trio.testing.wait_all_tasks_blocked()
        assert session.runner.core.operations() == []
        adapter.open_gate.set()
    await trio.testing.wait_all_tasks_blocked()
    assert settles(take(session.outbox)) == {"a": {"status": "done", "text": "hi"}}


async def test_steer_that_raises_is_reported_and_queues(opened, adapter):
    adapter.steer_raises = True
    await opened.prompt("a", "ignore-cancel")
    await opened.prompt("b", "steered", "steer")
    assert {"type": "error", "message": "cannot steer now"} in take(opened.outbox)
    adapter.sessions[0].release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert settles(take(opened.outbox)) == {"a": {"status": "done", "text": "late"}, "b": {"status": "done", "text": "steered"}}


async def test_configure_reaches_the_session(opened, adapter):
    await opened.send({"type": "configure", "settings": {"model": "big"}})
    assert [s.model for s in adapter.sessions[0].configured] == ["big"]


async def test_a_close_that_raises_is_logged_and_the_new_generation_opens(opened, adapter, caplog):
    adapter.close_raises = True
    with caplog.at_level(logging.WARNING, "router.daemon"):
        await opened.send({"type": "open", "generation": 2, "settings": {}, "restore": []})
    assert adapter.sessions[0].closed and len(adapter.sessions) == 2
    assert "close failed" in caplog.text
    assert opened.runner.core.open_generation == 2


async def test_new_generation_waits_for_the_cancelled_turn(opened, adapter):
    await opened.prompt("a", "ignore-cancel")
    await opened.prompt("b", "queued")
    await opened.send({"type": "open", "generation": 2, "settings": {}, "restore": []})
    assert len(adapter.sessions) == 1 and not adapter.sessions[0].closed  # waiting for a
    adapter.sessions[0].release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert adapter.sessions[0].closed and len(adapter.sessions) == 2
    assert settles(take(opened.outbox)) == {
        "a": {"status": "unanswered", "reason": "aborted"},
        "b": {"status": "done", "text": "queued"},
    }


async def test_shutdown_cancels_turns_and_closes_sessions(opened, daemon, adapter):
    await opened.prompt("a", "hang")
    await daemon.aclose()
    assert adapter.sessions[0].closed
    assert settles(take(opened.outbox)) == {"a": {"status": "unanswered", "reason": "aborted"}}


async def test_shutdown_is_bounded_when_an_adapter_will_not_close(opened, daemon, adapter, autojump_clock):
    adapter.close_hangs = True
    start = trio.current_time()
    await daemon.aclose()
    assert trio.current_time() - start == pytest.approx(SHUTDOWN_GRACE)


class DeadSocket:
    def __init__(self) -> None:
        self.attempts = 0

    async def send_message(self, message: str) -> None:
        self.attempts += 1
        raise WebSocketClosed(None)

    async def aclose(self, code: int = 1000, reason: str | None = None) -> None:
        raise AssertionError("never reached")


async def test_a_dead_socket_never_takes_the_session_down(opened, nursery):
    dead = DeadSocket()
    nursery.start_soon(opened.outbox.run, dead)
    await opened.prompt("a", "one")
    assert opened.outbox.finished.is_set() and dead.attempts == 1
    await opened.prompt("b", "two")  # sends to the dead outbox are dropped
    assert opened.outbox.pending == 0
    fresh = Outbox("fresh")
    opened.runner.attach(fresh)
    await trio.testing.wait_all_tasks_blocked()
    await opened.runner.receive(fresh, json.dumps({"type": "replay", "after": 0}))
    await trio.testing.wait_all_tasks_blocked()
    assert settles(take(fresh)) == {"a": {"status": "done", "text": "one"}, "b": {"status": "done", "text": "two"}}


async def test_outbox_writes_in_order_then_closes(nursery):
    written = []
    closed = []

    class Socket:
        async def send_message(self, message):
            written.append(message)
            await trio.sleep(0)

        async def aclose(self, code=1000, reason=None):
            closed.append((code, reason))

    outbox = Outbox("o")
    for i in range(5):
        outbox.send(str(i))
    nursery.start_soon(outbox.run, Socket())
    outbox.send("5")
    outbox.close(4001, "replaced")
    outbox.send("dropped")
    await outbox.finished.wait()
    assert written == ["0", "1", "2", "3", "4", "5"] and closed == [(4001, "replaced")]
    assert repr(outbox) == "<Outbox o dead pending=0 sent=6>"


async def test_shutdown_during_a_new_generation_still_closes_the_old_session(opened, daemon, adapter):
    """SIGTERM while a new ``open`` waits for the old generation's turn to
    unwind: the old adapter session must still be closed."""
    await opened.prompt("a", "ignore-cancel")
    await opened.send({"type": "open", "generation": 2, "settings": {}, "restore": []})
    assert not adapter.sessions[0].closed  # the inbox waits for a to end
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.aclose)
        await trio.testing.wait_all_tasks_blocked()
        adapter.sessions[0].release.set()
    assert adapter.sessions[0].closed


async def test_a_host_that_reads_slower_than_turns_answer_holds_the_turns_back(opened, nursery):
    # 4,000 pipelined prompts make 12,000 frames, more than an outbox holds
    # (its limit: a whole replay and OUTBOX_SLACK more). With no writer yet
    # (a host that reads slowly), turns wait for room instead of filling
    # the outbox until the connection is closed as not reading.
    count = 4_000
    for i in range(count):
        await opened.runner.receive(
            opened.outbox, json.dumps({"type": "prompt", "operationId": f"op-{i}", "input": "x", "whenBusy": "followUp"})
        )
    await trio.testing.wait_all_tasks_blocked()
    assert not opened.outbox.overflowed and not opened.outbox.closing
    assert OUTBOX_HIGH <= opened.outbox.pending < opened.outbox.limit
    written: list[str] = []

    class Socket:
        async def send_message(self, message):
            written.append(message)
            await trio.sleep(0)

        async def aclose(self, code=1000, reason=None):
            pass

    nursery.start_soon(opened.outbox.run, Socket())
    await trio.testing.wait_all_tasks_blocked()
    outcomes = settles([json.loads(text) for text in written])
    assert len(outcomes) == count and not opened.outbox.overflowed


# A takeover's overlapping links: the steered prompt applied once.


ROUNDS = 48


async def test_a_steer_decided_for_a_turn_that_ends_before_the_adapter_call_is_not_applied_twice(daemon):
    """The older link's prompt starts a turn; the newer link (which replaced
    it, 4001) steers a prompt into it before the turn task has run.

    Whether the turn task or the task that performs the steer runs first is
    Trio's choice (it runs each batch of ready tasks forwards or backwards
    at random), so each round meets one order or the other; ``ROUNDS``
    rounds meet both (a round is one batch: with only one order the test
    would pass by luck with probability 2**-48). Either order is correct
    only if the echo is told of the steered text at most once: folded into
    the turn (``echo: hi a + hi b``), or declined and run as a turn of its
    own (``echo: hi b``). The bug (found by the cluster's three-router kill
    test, ``echo: hi e182 + hi e182``): the steer was decided for the
    running turn, the turn ended before the adapter's ``steer`` was called,
    the echo kept the text for its next turn, and that next turn was the
    steered operation's own.
    """
    daemon.adapter = EchoAdapter()
    for round in range(ROUNDS):
        runner = daemon.session(f"takeover {round}")
        old, new = Outbox("old"), Outbox("new")
        runner.attach(old)
        await runner.receive(old, json.dumps({"type": "replay", "after": 0}))
        await runner.receive(old, json.dumps({"type": "open", "generation": 1, "settings": {}, "restore": []}))
        await trio.testing.wait_all_tasks_blocked()
        # No checkpoint from here to the steer: the turn is started, not run.
        await runner.receive(old, json.dumps({"type": "prompt", "operationId": "a", "input": "hi a", "whenBusy": "steer"}))
        runner.attach(new)
        await runner.receive(new, json.dumps({"type": "replay", "after": 0}))
        await runner.receive(new, json.dumps({"type": "prompt", "operationId": "b", "input": "hi b", "whenBusy": "steer"}))
        await trio.testing.wait_all_tasks_blocked()
        outcomes = settles(take(old) + take(new))
        texts = {outcome["text"] for outcome in outcomes.values()}
        assert set(outcomes) == {"a", "b"}, outcomes
        assert texts in ({"echo: hi a + hi b (turn 1)"}, {"echo: hi a (turn 1)", "echo: hi b (turn 2)"}), (round, texts)
