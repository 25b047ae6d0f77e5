"""SessionCore without sockets: each rule of the reference daemon, one test."""

from __future__ import annotations

import json

import pytest

from router.daemon.core import (
    AwaitTurn,
    CancelTurn,
    CloseSession,
    OpenSession,
    SessionCore,
    SessionStatistics,
    TurnCancelled,
    TurnFailed,
)
from tests.daemon.core_driver import ECHO_INFO, Conn, Driver, open_, prompt
from wire.container import MAX_CHUNK_CHARS, Done, Unanswered


def live(driver: Driver, name: str = "host", after: int = 0) -> Conn:
    conn = Conn(name)
    driver.attach(conn)
    driver.send(conn, {"type": "replay", "after": after})
    return conn


def kinds(conn: Conn) -> list[tuple]:
    out = []
    for m in conn.frames():
        f = m["frame"]
        out.append((m["seq"], f["kind"], f.get("operationId")))
    return out


def test_attach_sends_hello_at_once():
    d = Driver()
    conn = Conn("a")
    d.attach(conn)
    assert conn.sent == [{
        "type": "hello", "protocol": 1, "runtimeId": "r", "session": "s",
        "adapter": {"id": "echo", "version": "1", "capabilities": ["steer"]},
        "open": None, "lastSeq": 0, "operations": [],
    }]
    # The reference's key order, byte for byte.
    assert conn.texts[0].startswith('{"type":"hello","protocol":1,"runtimeId":"r","session":"s","adapter":')


def test_frames_are_kept_and_sent_only_after_replay():
    d = Driver()
    conn = Conn("a")
    d.attach(conn)
    d.send(conn, open_())
    d.send(conn, prompt("op1"))
    assert conn.frames() == []  # not live yet
    (turn,) = d.turns
    d.finish(turn, Done(text="ok"))
    assert [k.seq for k in d.core.kept()] == [1, 2]
    d.send(conn, {"type": "replay", "after": 0})
    assert kinds(conn) == [(1, "start", "op1"), (2, "settle", "op1")]
    assert conn.sent[-1] == {"type": "caught-up", "lastSeq": 2}
    d.send(conn, prompt("op2"))
    assert kinds(conn)[-1] == (3, "start", "op2")  # live now


def test_replay_after_a_cursor_and_ack():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    for i in range(3):
        d.send(conn, prompt(f"op{i}"))
        d.finish(d.turns[0], Done(text="x"))
    assert d.core.seq == 6
    d.send(conn, {"type": "ack", "seq": 2})
    assert [k.seq for k in d.core.kept()] == [3, 4, 5, 6]
    again = Conn("b")
    d.attach(again)
    d.send(again, {"type": "replay", "after": 4})
    assert [m["seq"] for m in again.frames()] == [5, 6]
    d.send(again, {"type": "replay", "after": 0})  # acked frames are gone
    assert [m["seq"] for m in again.frames()][2:] == [3, 4, 5, 6]


def test_kept_frames_are_bounded_oldest_dropped():
    core = SessionCore("s", runtime_id="r", adapter=ECHO_INFO, max_kept_frames=3)
    d = Driver(core)
    conn = live(d)
    d.send(conn, open_())
    for i in range(3):
        d.send(conn, prompt(f"op{i}"))
        d.finish(d.turns[0], Done(text="x"))
    assert [k.seq for k in core.kept()] == [4, 5, 6]
    late = Conn("late")
    d.attach(late)
    d.send(late, {"type": "replay", "after": 0})
    assert [m["seq"] for m in late.frames()] == [4, 5, 6]
    assert late.sent[-1] == {"type": "caught-up", "lastSeq": 6}


def test_prompt_is_idempotent_on_operation_id():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("op1"))
    d.send(conn, prompt("op1", "other"))
    assert len(d.turns) == 1 and d.core.seq == 1
    d.finish(d.turns[0], Done(text="x"))
    d.send(conn, prompt("op1"))  # settled: still ignored
    assert d.turns == [] and d.core.seq == 2


def test_one_turn_at_a_time_in_order():
    d = Driver()
    conn = live(d)
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b"))
    assert d.turns == []  # nothing open yet
    d.send(conn, open_())
    assert [t.operation_id for t in d.turns] == ["a"]
    d.finish(d.turns[0], Done(text="1"))
    assert [t.operation_id for t in d.turns] == ["b"]


def test_abort_queued_settles_it_aborted():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b"))
    d.send(conn, {"type": "abort", "operationId": "b"})
    settle = conn.frames()[-1]["frame"]
    assert settle == {"kind": "settle", "operationId": "b", "outcome": {"status": "unanswered", "reason": "aborted"}}
    d.finish(d.turns[0], Done(text="1"))
    assert d.turns == []  # b never starts


def test_aborted_queued_operations_leave_the_queue():
    """As the reference, which splices them out: a host that prompts and
    aborts while nothing can start (no session open here; or a long turn)
    must not grow the queue (each entry holds its prompt's input)."""
    d = Driver()
    conn = live(d)
    for i in range(50):
        d.send(conn, prompt(f"op{i}"))
        d.send(conn, {"type": "abort", "operationId": f"op{i}"})
    for i in range(50, 100):
        d.send(conn, prompt(f"op{i}"))
    d.send(conn, {"type": "abort"})
    assert len(d.core._queue) == 0
    d.send(conn, prompt("last"))
    d.send(conn, open_())
    assert [t.operation_id for t in d.turns] == ["last"]


@pytest.mark.parametrize(
    "result, outcome",
    [
        (Done(text="late"), {"status": "unanswered", "reason": "aborted"}),
        (TurnCancelled(), {"status": "unanswered", "reason": "aborted"}),
        (TurnFailed("boom"), {"status": "unanswered", "reason": "aborted"}),
        (Unanswered(reason="own"), {"status": "unanswered", "reason": "own"}),
    ],
)
def test_abort_running_cancels_the_turn_and_settles_by_the_reference_rule(result, outcome):
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    (turn,) = d.turns
    d.send(conn, {"type": "abort", "operationId": "a"})
    assert turn in d.cancelled
    d.finish(turn, result)
    assert conn.frames()[-1]["frame"] == {"kind": "settle", "operationId": "a", "outcome": outcome}


def test_an_adapter_error_settles_unanswered_with_its_text():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    d.finish(d.turns[0], TurnFailed("the model is down"))
    assert conn.frames()[-1]["frame"]["outcome"] == {"status": "unanswered", "reason": "the model is down"}


def test_a_returned_value_that_is_not_an_outcome_settles_unanswered():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    d.finish(d.turns[0], "done")
    reason = conn.frames()[-1]["frame"]["outcome"]["reason"]
    assert "not an outcome" in reason


def test_abort_without_id_aborts_every_operation():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    for op in "abc":
        d.send(conn, prompt(op))
    running = d.turns[0]
    d.send(conn, {"type": "abort"})
    assert running in d.cancelled
    settled = [m["frame"]["operationId"] for m in conn.frames() if m["frame"]["kind"] == "settle"]
    assert settled == ["b", "c"]
    d.finish(running, TurnCancelled())
    assert d.turns == []
    statuses = {op["operationId"]: op["status"] for op in d.core.operations()}
    assert statuses == {"a": "settled", "b": "settled", "c": "settled"}


def test_steer_folds_into_the_running_turn_and_settles_with_it():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a", "slow 100 x"))
    d.send(conn, prompt("b", "more", "steer"))
    assert d.sessions[0].steered == ["more"]
    assert kinds(conn)[-1] == (2, "start", "b")
    assert len(d.turns) == 1
    d.send(conn, {"type": "abort", "operationId": "b"})  # aborts the shared turn
    assert d.turns[0] in d.cancelled
    d.finish(d.turns[0], TurnCancelled())
    settles = [m["frame"] for m in conn.frames() if m["frame"]["kind"] == "settle"]
    assert [s["operationId"] for s in settles] == ["a", "b"]
    assert settles[0]["outcome"] == settles[1]["outcome"]


def test_steer_declined_queues():
    d = Driver(auto=False)
    conn = live(d)
    d.send(conn, open_())
    d.answer_open()
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b", "more", "steer"))
    d.answer_steer(took=False)
    d.finish(d.turns[0], Done(text="1"))
    assert [t.operation_id for t in d.turns] == ["b"]


def test_steer_answered_after_the_turn_ended_queues():
    d = Driver(auto=False)
    conn = live(d)
    d.send(conn, open_())
    d.answer_open()
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b", "more", "steer"))
    d.finish(d.turns[0], Done(text="1"))  # ends while the steer is pending
    d.answer_steer(took=True)
    assert [t.operation_id for t in d.turns] == ["b"]


def test_steer_that_raises_is_declined_and_reported():
    d = Driver(auto=False)
    conn = live(d)
    d.send(conn, open_())
    d.answer_open()
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b", "more", "steer"))
    d.answer_steer(fail=RuntimeError("no steering today"))
    assert conn.of_type("error") == [{"type": "error", "message": "no steering today"}]
    d.finish(d.turns[0], Done(text="1"))
    assert [t.operation_id for t in d.turns] == ["b"]


def test_follow_up_while_busy_queues_even_when_the_adapter_steers():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b"))
    assert d.sessions[0].steered == []


def test_steer_without_steering_adapter_queues():
    d = Driver(can_steer=False)
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b", "x", "steer"))
    assert kinds(conn) == [(1, "start", "a")]


def test_open_same_generation_is_ignored():
    d = Driver()
    conn = live(d)
    d.send(conn, open_(1))
    d.send(conn, open_(1))
    assert len(d.sessions) == 1


def test_new_generation_aborts_waits_closes_then_opens_with_gathered_restore():
    d = Driver()
    conn = live(d)
    d.send(conn, open_(1))
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b"))
    running = d.turns[0]
    d.send(conn, {"type": "restore", "generation": 9, "entries": [0]})
    d.send(conn, {"type": "restore", "generation": 2, "entries": [1, 2]})  # resets: other generation
    d.send(conn, {"type": "restore", "generation": 2, "entries": [3]})
    start = len(d.effects)
    d.send(conn, open_(2, [4]))
    effects = d.effects[start:]
    order = [type(e) for e in effects if type(e) in (CancelTurn, AwaitTurn, CloseSession, OpenSession)]
    assert order == [CancelTurn, AwaitTurn, CloseSession, OpenSession]
    assert d.sessions[0].closed
    assert d.sessions[1].restore == (1, 2, 3, 4)
    # a settled aborted; b runs on the new session, not the closed one.
    assert d.core.operations()[0]["outcome"] == {"status": "unanswered", "reason": "aborted"}
    assert [t.operation_id for t in d.turns] == ["b"] and d.turns[0].session is d.sessions[1]
    assert d.core.hello()["open"] == 2


def test_open_uses_gathered_restore_only_of_its_generation():
    d = Driver()
    conn = live(d)
    d.send(conn, {"type": "restore", "generation": 1, "entries": ["x"]})
    d.send(conn, open_(2, ["y"]))
    assert d.sessions[0].restore == ("y",)
    d.send(conn, {"type": "restore", "generation": 3, "entries": ["z"]})
    d.send(conn, open_(2))  # same generation: ignored, and the gathering is dropped
    d.send(conn, open_(3))
    assert d.sessions[-1].restore == ()


def test_open_failure_reports_and_leaves_operations_queued():
    d = Driver(auto=False)
    conn = live(d)
    d.send(conn, prompt("a"))
    d.send(conn, open_(1))
    d.answer_open(fail=RuntimeError("no credentials"))
    assert conn.of_type("error") == [{"type": "error", "message": "no credentials"}]
    assert d.core.hello()["open"] is None
    assert d.core.operations() == [{"operationId": "a", "status": "queued"}]
    d.send(conn, open_(1))
    d.answer_open()
    assert [t.operation_id for t in d.turns] == ["a"]


def test_a_newer_connection_replaces_the_older():
    d = Driver()
    first = live(d, "first")
    second = Conn("second")
    d.attach(second)
    assert first.closed == (4001, "replaced by a newer connection")
    d.send(first, prompt("ignored"))
    assert d.core.operations() == []
    d.send(first, "not json")  # not even an error goes back
    assert first.of_type("error") == []
    assert not d.core.live  # the new one has not asked for replay


def test_detach_of_a_replaced_connection_changes_nothing():
    d = Driver()
    first = live(d, "first")
    second = live(d, "second")
    d.core.detach(first)
    assert d.core.conn is second and d.core.live


def test_garbage_gets_an_error_and_changes_nothing():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    before = (d.core.seq, d.core.kept(), d.core.operations(), d.core.hello())
    for text in ["", "{", "[]", "null", '{"type":"prompt"}', '{"type":"nope"}', '{"type":"ack","seq":-1}']:
        d.send(conn, text)
    assert conn.of_type("error") == [{"type": "error", "message": "unparseable message"}] * 7
    assert (d.core.seq, d.core.kept(), d.core.operations(), d.core.hello()) == before


def test_settled_operations_beyond_the_limit_are_forgotten_oldest_first():
    core = SessionCore("s", runtime_id="r", adapter=ECHO_INFO, settled_kept=3)
    d = Driver(core)
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("long"))  # stays running: never forgotten
    d.send(conn, prompt("q1"))
    d.send(conn, {"type": "abort", "operationId": "q1"})
    d.send(conn, prompt("q2"))
    d.send(conn, {"type": "abort", "operationId": "q2"})
    d.send(conn, prompt("q3"))
    assert [op["operationId"] for op in core.operations()] == ["long", "q2", "q3"]
    d.send(conn, prompt("q1"))  # forgotten, so given again: a new operation
    assert [op["operationId"] for op in core.operations()] == ["long", "q3", "q1"]


def test_only_a_new_operation_forgets_settled_ones_as_in_the_reference():
    core = SessionCore("s", runtime_id="r", adapter=ECHO_INFO, settled_kept=3)
    d = Driver(core)
    conn = live(d)
    d.send(conn, open_())
    for name in ("a", "b", "c", "d"):
        d.send(conn, prompt(name))  # a runs, the others queue: nothing settled to forget
    d.send(conn, {"type": "abort", "operationId": "a"})
    d.finish(d.turns[0], TurnCancelled())
    # Four remembered, one settled: an abort (or a settle) forgets none...
    assert [(op["operationId"], op["status"]) for op in core.operations()] == [
        ("a", "settled"), ("b", "running"), ("c", "queued"), ("d", "queued")
    ]
    d.send(conn, prompt("b"))  # ...nor does a prompt the daemon knows already...
    assert len(core.operations()) == 4
    d.send(conn, prompt("e"))  # ...only a new operation does.
    assert [op["operationId"] for op in core.operations()] == ["b", "c", "d", "e"]


def test_events_carry_the_running_operation_or_null():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.perform(d.core.log("info", "between turns"))
    d.send(conn, prompt("a"))
    d.perform(d.core.emit({"type": "text-delta", "messageId": "m", "delta": "x"}))
    frames = [m["frame"] for m in conn.frames() if m["frame"]["kind"] == "event"]
    assert frames == [
        {"kind": "event", "operationId": None, "event": {"type": "log", "level": "info", "message": "between turns"}},
        {"kind": "event", "operationId": "a", "event": {"type": "text-delta", "messageId": "m", "delta": "x"}},
    ]


@pytest.mark.parametrize("event", [{"type": "nope"}, {"type": "text-delta"}, "text", {"type": "raw", "value": float("nan")}])
def test_an_event_the_wire_cannot_carry_is_refused_to_the_adapter(event):
    d = Driver()
    live(d)
    with pytest.raises(ValueError):
        d.core.emit(event)
    assert d.core.seq == 0


def test_persist_goes_out_in_chunks():
    d = Driver()
    conn = live(d)
    big = "x" * (MAX_CHUNK_CHARS // 2)
    d.perform(d.core.persist([big, big, big, 1]))
    groups = [m["frame"]["entries"] for m in conn.frames()]
    assert groups == [[big], [big], [big, 1]]
    with pytest.raises(ValueError):
        d.core.persist("not a list")
    with pytest.raises(ValueError):
        d.core.persist([object()])
    assert d.core.seq == 3


def test_hello_lists_operations_in_order_with_state():
    d = Driver()
    conn = live(d)
    d.send(conn, open_(4))
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b"))
    d.send(conn, {"type": "abort", "operationId": "b"})
    d.send(conn, prompt("c"))
    hello = d.core.hello()
    assert hello["open"] == 4 and hello["lastSeq"] == d.core.seq
    assert hello["operations"] == [
        {"operationId": "a", "status": "running"},
        {"operationId": "b", "status": "settled", "outcome": {"status": "unanswered", "reason": "aborted"}},
        {"operationId": "c", "status": "queued"},
    ]


def test_configure_reaches_the_open_session_only():
    d = Driver()
    conn = live(d)
    d.send(conn, {"type": "configure", "settings": {"model": "m1"}})
    d.send(conn, open_())
    d.send(conn, {"type": "configure", "settings": {"model": "m2"}})
    assert [s.model for s in d.sessions[0].configured] == ["m2"]


def test_shutdown_aborts_waits_and_closes():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    effects = d.core.shutdown()
    assert [type(e) for e in effects] == [CancelTurn, AwaitTurn, CloseSession]
    d.perform(effects)
    assert d.sessions[0].closed
    assert conn.frames()[-1]["frame"]["outcome"] == {"status": "unanswered", "reason": "aborted"}


def test_repr_and_statistics_summarise_state():
    d = Driver()
    conn = live(d)
    d.send(conn, open_())
    d.send(conn, prompt("a"))
    d.send(conn, prompt("b"))
    stats = d.core.statistics()
    assert stats == SessionStatistics(
        seq=1, kept=1, operations=2, queued=1, running="a", open=1, connected=True, live=True,
    )
    assert repr(d.core) == "<SessionCore 's' seq=1 kept=1 operations=2 queued=1 running='a' open=1 live>"
    assert json.loads(conn.texts[-1])["seq"] == 1
