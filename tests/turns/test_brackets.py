"""The turn brackets' sans-IO core (``router.turns.brackets``), without
sockets: which call comes when, a bracket opened ahead of a write, turns that
overlap, end while opening or run while the one before closes, failures
that fail closed, stops taken once; invariants under hypothesis. And the
Trio meter over a fake layer whose calls raise."""

from __future__ import annotations

from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.plugins.limit_checks import MustStop
from router.plugins.routing import LaunchRecord
from router.turns.brackets import (
    Begin,
    BeginFailed,
    BracketCore,
    End,
    Phase,
    StopInfo,
    StopSession,
    attached_launch,
    bracket_failure,
    launch_of_json,
    launch_to_json,
)
from router.turns.session_brackets import SessionBrackets

STOP = StopInfo(reason="limit: token-limit tokens.instances.default limit 5 count 7", check="token-limit", at="t")


def test_a_turn_is_begun_then_ended() -> None:
    core = BracketCore()
    assert core.turn_started("op1") == [Begin()]
    assert core.phase is Phase.OPENING and not core.measuring
    assert core.begun("b1") == []
    assert core.open and core.running == {"op1"}
    assert core.turn_ended("op1") == [End(bracket="b1")]
    assert core.measuring
    assert core.ended(None) == []
    assert core.phase is Phase.IDLE and not core.measuring and core.stopped is None


def test_a_write_opens_the_bracket_ahead_of_its_turn() -> None:
    core = BracketCore()
    assert core.writing("op1") == [Begin()]
    assert core.begun("b1") == []
    assert core.open and not core.measuring  # open, nothing has run yet
    assert core.turn_started("op1") == []
    assert core.turn_ended("op1") == [End(bracket="b1")]
    assert core.ended(STOP) == [StopSession(stop=STOP)]
    assert core.stopped == STOP


def test_a_write_that_made_no_turn_drops_its_bracket() -> None:
    core = BracketCore()
    core.writing("op1")
    core.begun("b1")
    assert core.not_writing("op1") == []
    assert core.phase is Phase.IDLE and core.dropped_count == 1 and core.ended_count == 0
    # Dropped while still opening: dropped once it opens.
    core.writing("op2")
    core.not_writing("op2")
    assert core.begun("b2") == [] and core.phase is Phase.IDLE and core.dropped_count == 2


def test_a_steered_input_shares_the_running_turns_bracket() -> None:
    core = BracketCore()
    core.turn_started("op1")
    core.begun("b1")
    assert core.writing("op2") == []
    assert core.turn_started("op2") == []
    assert core.turn_ended("op2") == []
    assert core.turn_ended("op1") == [End(bracket="b1")]


def test_a_turn_that_ends_while_opening_closes_once_open() -> None:
    core = BracketCore()
    core.turn_started("op1")
    assert core.turn_ended("op1") == []
    assert core.measuring
    assert core.begun("b1") == [End(bracket="b1")]


def test_a_turn_queued_behind_the_one_closing_gets_the_next_bracket() -> None:
    core = BracketCore()
    core.turn_started("op1")
    core.begun("b1")
    core.writing("op2")  # queued behind op1
    assert core.turn_ended("op1") == [End(bracket="b1")]
    assert core.turn_started("op2") == []
    assert core.ended(None) == [Begin()]
    assert core.begun("b2") == []
    assert core.turn_ended("op2") == [End(bracket="b2")]
    # A turn that ran wholly while the one before closed gets a bracket too.
    core.ended(None)
    core.turn_started("op3")
    core.begun("b3")
    core.turn_ended("op3")
    core.turn_started("op4")
    core.turn_ended("op4")
    assert core.ended(None) == [Begin()]
    assert core.begun("b4") == [End(bracket="b4")]


def test_a_failed_begin_stops_the_session_when_its_turn_ends() -> None:
    core = BracketCore()
    core.turn_started("op1")
    failure = bracket_failure("begin_turn", OSError("disk"), "t")
    assert core.begun(BeginFailed(stop=failure)) == []
    assert core.stopped is None  # the turn is not cut short
    assert core.turn_ended("op1") == [StopSession(stop=failure)]
    assert core.phase is Phase.IDLE and core.ended_count == 1
    assert failure.reason == (
        "limit-check-failed: turn-bracket check failed: begin_turn raised OSError "
        "(the turn's usage could not be recorded; see the log)"
    )


def test_a_stop_is_taken_once_until_resumed() -> None:
    core = BracketCore()
    for n, expected in ((1, [StopSession(stop=STOP)]), (2, [])):
        core.turn_started(f"op{n}")
        core.begun(f"b{n}")
        core.turn_ended(f"op{n}")
        assert core.ended(STOP) == expected
    assert core.resume() == STOP and core.stopped is None and core.resume() is None


def test_one_turn_at_a_time_ends_the_one_before() -> None:
    core = BracketCore(one_turn=True)
    core.turn_started("t1")
    core.begun("b1")
    assert core.turn_started("t2") == [End(bracket="b1")]
    assert core.ended(None) == [Begin()]
    core.begun("b2")
    assert core.all_ended() == [End(bracket="b2")]


def test_resync_ends_and_starts_what_changed() -> None:
    core = BracketCore()
    core.turn_started("op1")
    core.begun("b1")
    assert core.resync(["op1"]) == []
    assert core.resync([]) == [End(bracket="b1")]
    core.ended(None)
    assert core.resync(["op2"]) == [Begin()]


def test_a_stopped_core_starts_stopped() -> None:
    assert BracketCore(stopped=STOP).stopped == STOP


def test_attached_records_and_their_json() -> None:
    routes = {
        "models": {"claude-opus-4-5": {"provider": "anthropic"}, "echo": {"provider": "echo"}},
        "instances": {"coder": {"harness": "claude-code", "model": "claude-opus-4-5", "thinking": "high",
                                "account": "max-plan"}},
    }
    record = attached_launch(session="s1", instance="coder", harness="claude-code", via="mod-link",
                             routes=routes, counts_account=True)
    assert record.subject() == {"instance": "coder", "provider": "anthropic", "model": "claude-opus-4-5",
                                "account": "max-plan"}
    assert record.route == "attached" and record.reach == {"via": "mod-link"} and record.thinking == "high"
    # The session's own model wins; a route to another harness says nothing.
    other = attached_launch(session="s1", instance="coder", harness="echo", via="in-process", routes=routes,
                            model="echo")
    assert other.subject() == {"instance": "coder", "provider": "echo", "model": "echo", "account": None}
    bare = attached_launch(session="s1", instance="x", harness="echo", via="in-process", routes=None)
    assert bare.subject() == {"instance": "x", "provider": None, "model": None, "account": None}
    # Kept without env and with only reach.via: they may hold a secret.
    secret = LaunchRecord(
        instance="i", session="s", route="primary", route_reason="r", harness="container", model="m",
        thinking="off", provider="p", account=None, harness_version="container-protocol 1",
        reach={"via": "daemon", "url": "ws://x", "token": "hunter2"}, env={"TOKEN": "hunter2"},
    )
    kept = launch_to_json(secret)
    assert "hunter2" not in repr(kept) and kept["reach"] == {"via": "daemon"}
    back = launch_of_json(kept)
    assert back is not None and back.subject() == secret.subject() and back.env == {}
    assert launch_of_json({"not": "one"}) is None and launch_of_json([]) is None


# --------------------------------------------------------------------------- properties

_INPUTS = st.lists(
    st.tuples(
        st.sampled_from(["write", "unwrite", "start", "end", "all", "resync", "answer", "answer-stop",
                         "answer-fail", "resume"]),
        st.sampled_from(["a", "b", "c"]),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(_INPUTS, st.booleans())
def test_one_call_at_a_time_and_quiet_at_the_end(inputs: list[tuple[str, str]], one_turn: bool) -> None:
    core = BracketCore(one_turn=one_turn)
    pending: list[Any] = []  # the call in flight (at most one)
    stops = 0

    def take(effects: list[Any]) -> None:
        nonlocal stops
        for effect in effects:
            if isinstance(effect, StopSession):
                stops += 1
                assert core.stopped == effect.stop
            else:
                pending.append(effect)
        assert len(pending) <= 1, pending
        if pending:
            assert core.phase is (Phase.OPENING if isinstance(pending[0], Begin) else Phase.CLOSING)
        else:
            assert core.phase in (Phase.IDLE, Phase.OPEN)
        if core.phase is Phase.IDLE:
            assert not core.measuring and core.bracket is None
        if core.phase is Phase.OPEN:
            assert core.running or core.expected  # an open bracket waits for something

    def answer(stop: StopInfo | None, fail: bool = False) -> None:
        if not pending:
            return
        effect = pending.pop()
        if isinstance(effect, Begin):
            take(core.begun(BeginFailed(stop=STOP) if fail else object()))
        else:
            assert isinstance(effect, End)
            take(core.ended(STOP if fail else stop))

    for action, turn in inputs:
        stopped_before = core.stopped
        if action == "write":
            take(core.writing(turn))
        elif action == "unwrite":
            take(core.not_writing(turn))
        elif action == "start":
            take(core.turn_started(turn))
        elif action == "end":
            take(core.turn_ended(turn))
        elif action == "all":
            take(core.all_ended())
        elif action == "resync":
            take(core.resync([turn]))
        elif action == "answer":
            answer(None)
        elif action == "answer-stop":
            answer(STOP)
        elif action == "answer-fail":
            answer(None, fail=True)
        else:
            core.resume()
        if stopped_before is not None and action != "resume":
            assert core.stopped == stopped_before  # a stop stays until resumed
    # Everything ends and every call is answered: the core comes to rest.
    take(core.all_ended())
    for turn in ("a", "b", "c"):
        take(core.not_writing(turn))
    while pending:
        answer(None)
    assert core.phase is Phase.IDLE and not core.measuring and not core.running and not core.expected
    assert core.begun_count == core.ended_count + core.dropped_count + (0 if core.phase is Phase.IDLE else 1)
    assert stops <= core.begun_count + 1


# --------------------------------------------------------------------------- the Trio meter


class FakeLayer:
    """begin_turn / end_turn that answer, stop, or raise, as told."""

    def __init__(self) -> None:
        self.begin_raises = False
        self.end_raises = False
        self.stop: MustStop | None = None
        self.calls: list[str] = []

    async def begin_turn(self, launch: LaunchRecord) -> str:
        self.calls.append("begin")
        await trio.lowlevel.checkpoint()
        if self.begin_raises:
            raise RuntimeError("begin broke")
        return "bracket"

    async def end_turn(self, bracket: str) -> tuple[dict[str, Any], MustStop | None]:
        self.calls.append("end")
        await trio.lowlevel.checkpoint()
        if self.end_raises:
            raise OSError("records broke")
        return {"usage": None}, self.stop


async def test_the_meter_fails_closed_and_goes_on(nursery: trio.Nursery) -> None:
    layer = FakeLayer()
    stops: list[StopInfo] = []

    async def launch() -> LaunchRecord:
        return attached_launch(session="s", instance="default", harness="echo", via="in-process", routes=None)

    async def on_stop(stop: StopInfo) -> None:
        stops.append(stop)
        raise RuntimeError("a failing stop is logged, not raised")

    meter = SessionBrackets("s", layer=layer, launch=launch, on_stop=on_stop)
    await nursery.start(meter.run)

    meter.turn_started("op1")
    await meter.wait_until(lambda core: core.open)
    meter.turn_ended("op1")
    await meter.wait_until(lambda core: core.ended_count == 1)
    assert meter.core.stopped is None and layer.calls == ["begin", "end"]

    layer.begin_raises = True
    meter.turn_started("op2")
    await meter.wait_until(lambda core: core.open)
    assert meter.core.stopped is None  # the turn runs on
    meter.turn_ended("op2")
    await meter.wait_until(lambda core: core.stopped is not None)
    assert "begin_turn raised RuntimeError" in meter.core.stopped.reason
    assert meter.failures == 1

    meter.resume()
    layer.begin_raises, layer.end_raises = False, True
    meter.turn_started("op3")
    meter.turn_ended("op3")
    await meter.wait_until(lambda core: core.stopped is not None)
    assert "end_turn raised OSError" in meter.core.stopped.reason
    assert [s.check for s in stops] == ["turn-bracket", "turn-bracket"]
    assert meter.statistics().failures == 2

    meter.resume()
    layer.end_raises = False
    layer.stop = MustStop(check="token-limit", reason=STOP.reason)
    meter.writing("op4")
    await meter.wait_until(lambda core: core.open)
    meter.turn_started("op4")
    meter.turn_ended("op4")
    await meter.wait_until(lambda core: core.stopped is not None)
    assert meter.core.stopped.reason == STOP.reason and meter.core.stopped.check == "token-limit"
    assert len(stops) == 3


async def test_closing_a_session_lets_its_meter_store_the_turn_that_ended(nursery: trio.Nursery) -> None:
    """A router stopped right after a turn still counts the turn: the
    registry lets the meter finish ``end_turn`` (and the stop it causes)
    before it cancels the session, instead of dropping the record."""
    from router.turns.registry import Session, SessionKind, SessionRegistry

    class SlowEnd(FakeLayer):
        async def end_turn(self, bracket: str) -> tuple[dict[str, Any], MustStop | None]:
            answer = await super().end_turn(bracket)
            await trio.sleep(0.2)  # reading usage, writing the record
            self.calls.append("stored")
            return answer

    layer = SlowEnd()
    layer.stop = MustStop(check="token-limit", reason=STOP.reason)
    stops: list[StopInfo] = []

    async def launch() -> LaunchRecord:
        return attached_launch(session="s", instance="default", harness="echo", via="in-process", routes=None)

    async def on_stop(stop: StopInfo) -> None:
        await trio.sleep(0.1)  # recording the stop
        stops.append(stop)

    registry = await nursery.start(SessionRegistry().run)
    meter = SessionBrackets("s", layer=layer, launch=launch, on_stop=on_stop)
    send, _ = trio.open_memory_channel[Any](1)
    await registry.open(Session(id="s", kind=SessionKind.CONTAINER, inbox=send, brackets=meter), [("meter", meter.run)])
    meter.turn_started("op1")
    await meter.wait_until(lambda core: core.open)
    meter.turn_ended("op1")
    await registry.aclose()
    assert layer.calls == ["begin", "end", "stored"]
    assert [stop.check for stop in stops] == ["token-limit"]
    assert registry.get("s") is None
