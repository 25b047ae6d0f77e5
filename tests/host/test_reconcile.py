"""The host's reconcile, deliver and apply core, without sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.host.reconcile import ACK_EVERY, ConnectionRules
from router.host.events import event_json
from router.host.store import Store
from tests.host.core_driver import (
    SESSION,
    caught_up,
    connect,
    event,
    frame,
    hello,
    kinds,
    message,
    persist,
    receive,
    sends,
    settle,
    start,
)
from wire.container import MAX_CHUNK_CHARS, chunk_entries


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "core.db")
    store.sessions.create(SESSION, settings={"model": "m"})
    yield store
    store.close()


# ---------------------------------------------------------------- reconcile: open


def jsons(events):
    """The events as an edge shows them (the tests read their JSON shapes)."""
    return tuple(event_json(event) for event in events)


def test_a_daemon_without_the_generation_gets_open_then_replay(store: Store) -> None:
    core, effects = connect(store, hello(open=None))
    assert sends(effects) == [
        {"type": "open", "generation": 1, "settings": {"model": "m"}, "restore": []},
        {"type": "replay", "after": 0},
    ]
    record = store.sessions.require(SESSION)
    assert (record.cursor_runtime, record.cursor_seq) == ("r1", 0)
    assert (record.open_runtime, record.open_seq) == ("r1", 0)
    assert core.ready and core.runtime_id == "r1"


def test_stored_entries_go_as_restore_chunks_with_the_last_in_open(store: Store) -> None:
    big = "x" * (MAX_CHUNK_CHARS // 3)
    entries = [{"turn": i, "text": big} for i in range(7)]
    store.entries.append(SESSION, 1, entries)
    groups = chunk_entries(entries)
    assert len(groups) > 2
    _, effects = connect(store, hello("r2", open=None, last_seq=4))
    wire = sends(effects)
    assert [body["type"] for body in wire] == ["restore"] * (len(groups) - 1) + ["open", "replay"]
    assert [body["entries"] for body in wire[:-2]] == groups[:-1]
    assert wire[-2]["restore"] == groups[-1]
    assert all(body["generation"] == 1 for body in wire[:-1])
    assert store.sessions.require(SESSION).open_seq == 4


def test_a_daemon_holding_the_generation_gets_configure_instead(store: Store) -> None:
    store.sessions.set_cursor(SESSION, "r1", 7)
    _, effects = connect(store, hello(open=1, last_seq=9))
    assert sends(effects) == [
        {"type": "configure", "settings": {"model": "m"}},
        {"type": "replay", "after": 7},
    ]


def test_another_generation_open_there_is_replaced(store: Store) -> None:
    store.sessions.reset(SESSION, None)
    _, effects = connect(store, hello(open=1))
    assert sends(effects)[0] == {"type": "open", "generation": 2, "settings": {"model": "m"}, "restore": []}


# ---------------------------------------------------------------- reconcile: cursor


def test_the_same_runtime_replays_from_the_cursor(store: Store) -> None:
    store.sessions.set_cursor(SESSION, "r1", 12)
    _, effects = connect(store, hello("r1", open=1, last_seq=20))
    assert sends(effects)[-1] == {"type": "replay", "after": 12}
    assert store.sessions.require(SESSION).cursor_seq == 12


def test_a_new_runtime_resets_the_cursor(store: Store) -> None:
    store.sessions.set_cursor(SESSION, "r1", 12)
    _, effects = connect(store, hello("r2", open=None, last_seq=0))
    assert sends(effects)[-1] == {"type": "replay", "after": 0}
    record = store.sessions.require(SESSION)
    assert (record.cursor_runtime, record.cursor_seq) == ("r2", 0)


def test_a_runtime_that_kept_the_session_from_an_earlier_hold_is_opened_again(store: Store) -> None:
    """The record moved on under r1 while r2 kept the session open (a
    router taking a session back meets its own daemon as it left it): r2's
    queued and running work is aborted first, the generation moves to a new
    number so r2 restores the record's entries into a new adapter session,
    and r2's frames so far are acknowledged, never applied."""
    store.entries.append(SESSION, 1, [{"turn": 1}, {"turn": 2}])
    store.messages.put(SESSION, 1, {"id": "m1", "role": "assistant", "parts": []})
    store.operations.enqueue(SESSION, "old", "x")
    store.operations.settle(SESSION, "old", {"status": "done", "text": "t"})
    store.operations.enqueue(SESSION, "new", "y")
    store.operations.set_delivered(SESSION, "new", "r1")
    store.sessions.set_cursor(SESSION, "r1", 12)
    stale = hello("r2", open=1, last_seq=9, operations=[{"operationId": "old", "status": "running"}])
    _, effects = connect(store, stale)
    assert sends(effects) == [
        {"type": "abort", "operationId": "old"},
        {"type": "open", "generation": 2, "settings": {"model": "m"}, "restore": [{"turn": 1}, {"turn": 2}]},
        {"type": "ack", "seq": 9},
        {"type": "replay", "after": 9},
        {"type": "prompt", "operationId": "new", "input": "y", "whenBusy": "followUp"},
    ][: len(sends(effects))]
    record = store.sessions.require(SESSION)
    assert (record.generation, record.cursor_runtime, record.cursor_seq) == (2, "r2", 9)
    assert store.messages.all(SESSION) == [{"id": "m1", "role": "assistant", "parts": []}]
    assert store.entries.all(SESSION) == [{"turn": 1}, {"turn": 2}]


def test_a_runtime_behind_the_cursor_is_a_new_container_with_a_reused_id(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    store.operations.set_delivered(SESSION, "a", "r1")
    store.operations.start(SESSION, "a")
    store.sessions.set_cursor(SESSION, "r1", 12)
    core, effects = connect(store, hello("r1", open=None, last_seq=0))
    assert sends(effects)[-1] == {"type": "replay", "after": 0}
    assert store.sessions.require(SESSION).cursor_seq == 0
    # ... and what was running there is lost with it.
    assert store.operations.get(SESSION, "a").outcome == {"status": "unanswered", "reason": "container_lost"}


# ---------------------------------------------------------------- reconcile: operations


def _running(store: Store, operation_id: str, runtime: str) -> None:
    store.operations.enqueue(SESSION, operation_id, operation_id)
    store.operations.set_delivered(SESSION, operation_id, runtime)
    store.operations.start(SESSION, operation_id)


def test_a_running_operation_of_a_lost_runtime_fails_by_default(store: Store) -> None:
    _running(store, "a", "r1")
    store.operations.enqueue(SESSION, "b", "queued one")
    store.operations.set_delivered(SESSION, "b", "r1")
    core, effects = connect(store, hello("r2"))
    assert store.operations.get(SESSION, "a").outcome == {"status": "unanswered", "reason": "container_lost"}
    assert [r.operation_id for r in effects.settled] == ["a"]
    assert jsons(effects.events)[0] == {"type": "container", "status": "lost"}
    assert jsons(effects.events)[1]["type"] == "operation-end"
    # The queued one is handed to the new runtime.
    prompts = [body for body in sends(effects) if body["type"] == "prompt"]
    assert [p["operationId"] for p in prompts] == ["b"]
    assert store.operations.get(SESSION, "b").delivered == "r2"


def test_a_running_operation_of_a_lost_runtime_runs_again_under_retry(store: Store) -> None:
    _running(store, "a", "r1")
    core, effects = connect(store, hello("r2"), on_container_lost="retry")
    record = store.operations.get(SESSION, "a")
    assert record.status == "queued" and record.delivered == "r2"
    assert not effects.settled and jsons(effects.events) == ({"type": "container", "status": "lost"},)
    assert [b["operationId"] for b in sends(effects) if b["type"] == "prompt"] == ["a"]


@pytest.mark.parametrize(
    ("capabilities", "rerun"), [(("steer", "rerun"), True), (("rerun",), True), (("steer",), False), ((), False)]
)
def test_under_if_declared_a_lost_operation_runs_again_only_where_the_adapter_declares_rerun(
    store: Store, capabilities: tuple[str, ...], rerun: bool
) -> None:
    _running(store, "a", "r1")
    core, effects = connect(store, hello("r2", capabilities=capabilities), on_container_lost="if-declared")
    record = store.operations.get(SESSION, "a")
    if rerun:
        assert record.status == "queued" and record.delivered == "r2" and not effects.settled
        assert [b["operationId"] for b in sends(effects) if b["type"] == "prompt"] == ["a"]
    else:
        assert record.outcome == {"status": "unanswered", "reason": "container_lost"}
        assert [b for b in sends(effects) if b["type"] == "prompt"] == []
    assert jsons(effects.events)[0] == {"type": "container", "status": "lost"}


def test_operations_the_daemon_still_has_are_left_alone(store: Store) -> None:
    _running(store, "a", "r1")
    store.operations.enqueue(SESSION, "b", "b")
    store.operations.set_delivered(SESSION, "b", "r1")
    store.sessions.set_cursor(SESSION, "r1", 3)
    ops = [{"operationId": "a", "status": "running"}, {"operationId": "b", "status": "queued"}]
    _, effects = connect(store, hello("r1", open=1, last_seq=3, operations=ops))
    assert kinds(effects) == ["configure", "replay"]
    assert store.operations.get(SESSION, "a").status == "running"


def test_an_operation_delivered_but_unknown_there_is_delivered_again_after_caught_up(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    store.operations.set_delivered(SESSION, "a", "r1")  # the prompt was lost with the socket
    store.sessions.set_cursor(SESSION, "r1", 0)
    core, effects = connect(store, hello("r1", open=1))
    assert kinds(effects) == ["configure", "replay"]
    effects = receive(store, core, caught_up(0))
    assert sends(effects) == [{"type": "prompt", "operationId": "a", "input": "x", "whenBusy": "followUp"}]
    assert store.operations.get(SESSION, "a").delivered == "r1"


def test_an_operation_the_daemon_forgot_but_whose_frames_it_kept_is_not_run_twice(store: Store) -> None:
    # The daemon forgets settled operations beyond 1,000 but keeps 10,000
    # frames: "a" is not in hello, yet its settle is among the kept frames.
    store.operations.enqueue(SESSION, "a", "x")
    store.operations.set_delivered(SESSION, "a", "r1")
    store.sessions.set_cursor(SESSION, "r1", 0)
    core, effects = connect(store, hello("r1", open=1, last_seq=2))
    assert "prompt" not in kinds(effects)
    effects = receive(store, core, frame(1, start("a")), frame(2, settle("a", "t")), caught_up(2))
    assert "prompt" not in kinds(effects)
    assert store.operations.get(SESSION, "a").outcome == {"status": "done", "text": "t"}


def test_operations_behind_a_deferred_one_wait_with_it(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "first")
    store.operations.set_delivered(SESSION, "a", "r1")  # its prompt was lost with the socket
    store.operations.enqueue(SESSION, "b", "second")  # submitted while the link was down
    store.sessions.set_cursor(SESSION, "r1", 0)
    core, effects = connect(store, hello("r1", open=1))
    assert "prompt" not in kinds(effects)
    effects = receive(store, core, caught_up(0))
    assert [body["operationId"] for body in sends(effects)] == ["a", "b"]


def test_an_operation_handed_to_another_runtime_is_delivered_at_once(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    store.operations.set_delivered(SESSION, "a", "r0")
    _, effects = connect(store, hello("r1"))
    assert kinds(effects) == ["open", "replay", "prompt"]


def test_operations_settled_there_settle_after_caught_up(store: Store) -> None:
    _running(store, "a", "r1")
    store.sessions.set_cursor(SESSION, "r1", 1)
    report = [{"operationId": "a", "status": "settled", "outcome": {"status": "done", "text": "t"}}]
    core, effects = connect(store, hello("r1", open=1, last_seq=3, operations=report))
    assert not effects.settled and store.operations.get(SESSION, "a").status == "running"
    # A kept frame lands before the report settles the operation.
    effects = receive(store, core, frame(2, event("a", message("a:assistant", "t", "a"))))
    assert store.operations.get(SESSION, "a").status == "running"
    effects = receive(store, core, caught_up(3))
    assert [r.operation_id for r in effects.settled] == ["a"]
    assert store.operations.get(SESSION, "a").outcome == {"status": "done", "text": "t"}
    assert [m["id"] for m in store.messages.all(SESSION)] == ["a:assistant"]


def test_a_settle_frame_replayed_before_caught_up_wins_and_settles_once(store: Store) -> None:
    _running(store, "a", "r1")
    report = [{"operationId": "a", "status": "settled", "outcome": {"status": "done", "text": "t"}}]
    store.sessions.set_cursor(SESSION, "r1", 0)
    core, _ = connect(store, hello("r1", open=1, last_seq=1, operations=report))
    effects = receive(store, core, frame(1, settle("a", "t")), caught_up(1))
    assert [r.operation_id for r in effects.settled] == ["a"]
    assert [e["type"] for e in jsons(effects.events)] == ["operation-end"]


def test_operations_the_host_settled_or_never_had_are_aborted_there(store: Store) -> None:
    store.operations.enqueue(SESSION, "gone", "x")
    store.operations.settle(SESSION, "gone", {"status": "unanswered", "reason": "aborted"})
    ops = [
        {"operationId": "gone", "status": "running"},
        {"operationId": "stranger", "status": "queued"},
        {"operationId": "old", "status": "settled", "outcome": {"status": "done", "text": ""}},
    ]
    _, effects = connect(store, hello("r1", open=None, operations=ops))
    aborts = [body for body in sends(effects) if body["type"] == "abort"]
    assert aborts == [
        {"type": "abort", "operationId": "gone"},
        {"type": "abort", "operationId": "stranger"},
    ]
    assert kinds(effects) == ["open", "abort", "abort", "replay"]


# ---------------------------------------------------------------- deliver


def test_deliver_hands_each_open_operation_to_a_runtime_once(store: Store) -> None:
    core, _ = connect(store, hello())
    store.operations.enqueue(SESSION, "a", "one")
    store.operations.enqueue(SESSION, "b", [{"type": "text", "text": "two"}], "steer")
    with store.transaction():
        effects = core.deliver(store)
    assert sends(effects) == [
        {"type": "prompt", "operationId": "a", "input": "one", "whenBusy": "followUp"},
        {"type": "prompt", "operationId": "b", "input": [{"type": "text", "text": "two"}], "whenBusy": "steer"},
    ]
    with store.transaction():
        assert not core.deliver(store)


def test_the_handoff_goes_in_front_of_the_next_prompt_and_stays_with_it(store: Store) -> None:
    store.sessions.reset(SESSION, "we were talking about cats")
    core, _ = connect(store, hello())
    store.operations.enqueue(SESSION, "a", "go on")
    store.operations.enqueue(SESSION, "b", "and?")
    with store.transaction():
        wire = sends(core.deliver(store))
    note = {"type": "text", "text": "we were talking about cats"}
    assert wire[0]["input"] == [note, {"type": "text", "text": "go on"}]
    assert wire[1]["input"] == "and?"
    assert store.sessions.require(SESSION).handoff is None
    # Delivered again (a new container): the note is still in front.
    _, effects = connect(store, hello("r2"))
    prompts = [body for body in sends(effects) if body["type"] == "prompt"]
    assert prompts[0]["input"] == [note, {"type": "text", "text": "go on"}]


# ---------------------------------------------------------------- apply


def test_start_records_the_user_message_once(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", [{"type": "text", "text": "hi"}, {"type": "image", "mediaType": "image/png", "data": "AA=="}])
    core, _ = connect(store, hello())
    effects = receive(store, core, frame(1, start("a")), frame(2, start("a")))
    created = store.operations.get(SESSION, "a").created_at
    user = {
        "id": "a:user",
        "role": "user",
        "parts": [{"type": "text", "text": "hi"}, {"type": "image", "mediaType": "image/png", "data": "AA=="}],
        "operationId": "a",
        "createdAt": created,
    }
    assert store.messages.all(SESSION) == [user]
    assert [e["type"] for e in jsons(effects.events)] == ["message", "operation-start"]
    assert store.operations.get(SESSION, "a").status == "running"


def test_events_go_out_and_messages_are_stored_and_updated_in_place(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello())
    delta = {"type": "text-delta", "messageId": "a:assistant", "delta": "ec"}
    effects = receive(
        store,
        core,
        frame(1, start("a")),
        frame(2, event("a", delta)),
        frame(3, event("a", message("a:assistant", "draft", "a"))),
        frame(4, event(None, {"type": "log", "level": "info", "message": "between"})),
        frame(5, event("a", message("a:assistant", "final", "a"))),
    )
    assert {**delta, "operationId": "a"} in jsons(effects.events)
    assert [m["id"] for m in store.messages.all(SESSION)] == ["a:user", "a:assistant"]
    assert store.messages.all(SESSION)[1]["parts"] == [{"type": "text", "text": "final"}]


def test_persist_appends_entries_and_settle_settles(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello())
    effects = receive(
        store,
        core,
        frame(1, start("a")),
        frame(2, persist({"turn": 1}, {"turn": 1.5})),
        frame(3, persist({"turn": 2})),
        frame(4, settle("a", "echo")),
    )
    assert store.entries.all(SESSION) == [{"turn": 1}, {"turn": 1.5}, {"turn": 2}]
    assert [r.to_json() for r in effects.settled] == [
        {"operationId": "a", "session": SESSION, "status": "done", "text": "echo"}
    ]
    assert jsons(effects.events)[-1] == {"type": "operation-end", "result": effects.settled[0].to_json()}
    assert sends(effects) == [{"type": "ack", "seq": 4}]  # a settle is acked at once
    record = store.sessions.require(SESSION)
    assert (record.cursor_runtime, record.cursor_seq) == ("r1", 4)


def test_usage_is_recorded_per_operation_once(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello())
    usage = {"type": "usage", "inputTokens": 7, "outputTokens": 3, "costUsd": 0.01}
    receive(store, core, frame(1, start("a")), frame(2, event("a", usage)))
    receive(store, core, frame(2, event("a", usage)))  # replayed: skipped
    [record] = store.usage.records()
    assert (record.operation_id, record.input_tokens, record.output_tokens, record.cost_usd) == ("a", 7, 3, 0.01)


def test_usage_of_a_container_that_reused_a_runtime_id_is_counted(store: Store) -> None:
    usage = {"type": "usage", "inputTokens": 7}
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello("r1"))
    receive(store, core, frame(1, start("a")), frame(2, event("a", usage)), frame(3, settle("a", "one")))
    # A new container under the same id numbers its frames from 1 again.
    store.operations.enqueue(SESSION, "b", "y")
    core, _ = connect(store, hello("r1", open=None, last_seq=0))
    receive(store, core, frame(1, start("b")), frame(2, event("b", usage)), frame(3, settle("b", "two")))
    assert [(r.operation_id, r.input_tokens) for r in store.usage.records()] == [("a", 7), ("b", 7)]


def test_frames_at_or_below_the_cursor_are_skipped(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello())
    receive(store, core, frame(1, start("a")), frame(2, persist({"n": 1})))
    receive(store, core, frame(1, start("a")), frame(2, persist({"n": 1})), frame(3, persist({"n": 2})))
    assert store.entries.all(SESSION) == [{"n": 1}, {"n": 2}]
    assert core.frames_applied == 3 and core.frames_skipped == 2
    # A new connection to the same runtime replays from the cursor.
    running = [{"operationId": "a", "status": "running"}]
    again, effects = connect(store, hello("r1", open=1, last_seq=3, operations=running))
    assert sends(effects)[-1] == {"type": "replay", "after": 3}
    receive(store, again, frame(3, persist({"n": 2})), frame(4, persist({"n": 3})))
    assert store.entries.all(SESSION) == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_an_ack_goes_every_32_frames(store: Store) -> None:
    core, _ = connect(store, hello())
    acks = []
    for seq in range(1, 3 * ACK_EVERY + 5):
        effects = receive(store, core, frame(seq, event(None, {"type": "raw", "value": seq})))
        acks += [body["seq"] for body in sends(effects)]
    assert acks == [ACK_EVERY, 2 * ACK_EVERY, 3 * ACK_EVERY]


def test_a_batch_acks_its_last_frame(store: Store) -> None:
    core, _ = connect(store, hello())
    batch = [frame(seq, event(None, {"type": "raw", "value": seq})) for seq in range(1, 41)]
    assert sends(receive(store, core, *batch)) == [{"type": "ack", "seq": 40}]


def test_frames_before_the_reconcile_are_buffered_and_applied_after(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    core = ConnectionRules(SESSION)
    with store.transaction():
        early = core.receive(store, [frame(1, start("a")), frame(2, settle("a", "t"))])
    assert not early and store.operations.get(SESSION, "a").status == "queued"
    with store.transaction():
        effects = core.hello(store, hello())
    assert store.operations.get(SESSION, "a").status == "done"
    assert kinds(effects) == ["open", "replay", "ack"]
    assert [r.operation_id for r in effects.settled] == ["a"]


def test_persisted_entries_of_an_older_generation_are_not_kept(store: Store) -> None:
    # The daemon still had generation 1 open (and unacked frames of it)
    # when the host reset to generation 2.
    store.sessions.set_cursor(SESSION, "r1", 2)
    store.sessions.reset(SESSION, None)
    core, effects = connect(store, hello("r1", open=1, last_seq=4))
    assert kinds(effects)[0] == "open"
    receive(store, core, frame(3, persist({"old": 3})), frame(4, persist({"old": 4})), frame(5, persist({"new": 5})))
    assert store.entries.all(SESSION) == [{"new": 5}]


def test_a_late_message_of_an_old_operation_stays_in_its_generation(store: Store) -> None:
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello())
    receive(store, core, frame(1, start("a")))
    store.operations.settle(SESSION, "a", {"status": "unanswered", "reason": "aborted"})
    store.sessions.reset(SESSION, None)
    receive(store, core, frame(2, event("a", message("a:assistant", "late", "a"))))
    assert store.messages.all(SESSION) == []
    assert [m["id"] for m in store.messages.all(SESSION, 1)] == ["a:user", "a:assistant"]


def test_late_frames_of_the_connection_open_before_a_reset_stay_in_the_old_generation(store: Store) -> None:
    # The reset commits while this connection (generation 1 open there) is
    # still live; its frames keep coming until the link redials. An
    # operation aborted here runs on there, and persists.
    store.operations.enqueue(SESSION, "a", "x")
    core, _ = connect(store, hello())
    receive(store, core, frame(1, start("a")))
    store.operations.settle(SESSION, "a", {"status": "unanswered", "reason": "aborted"})
    store.sessions.reset(SESSION, None)
    receive(
        store,
        core,
        frame(2, persist({"turn": 1})),
        frame(3, event(None, message("between", "not of generation 2"))),
    )
    assert store.entries.all(SESSION) == []
    assert store.messages.all(SESSION) == []
    assert store.entries.all(SESSION, 1) == [{"turn": 1}]
    # The new connection opens generation 2 with nothing to restore.
    _, effects = connect(store, hello("r1", open=1, last_seq=3))
    assert sends(effects)[0] == {"type": "open", "generation": 2, "settings": {"model": "m"}, "restore": []}


def test_a_connection_that_opened_the_old_generation_delivers_nothing_after_a_reset(store: Store) -> None:
    # Another task resets, then submits, while this connection (generation
    # 1 open there) has a deliver pending: the prompt must wait for the
    # redial, or it runs in the old adapter session (without the new
    # context), and the ``open`` of generation 2 then aborts it.
    core, _ = connect(store, hello())
    store.sessions.reset(SESSION, "the note")
    store.operations.enqueue(SESSION, "b", "after the reset")
    with store.transaction():
        assert not core.deliver(store)
    record = store.operations.get(SESSION, "b")
    assert record.delivered is None and record.handoff is None
    assert store.sessions.require(SESSION).handoff == "the note"
    # The next connection opens generation 2 and hands it over, note in front.
    _, effects = connect(store, hello("r1", open=1))
    assert kinds(effects) == ["open", "replay", "prompt"]
    assert sends(effects)[-1]["input"] == [
        {"type": "text", "text": "the note"},
        {"type": "text", "text": "after the reset"},
    ]


def test_errors_and_second_hellos_change_nothing(store: Store) -> None:
    from wire.container import ErrorMessage

    core, _ = connect(store, hello())
    before = store.dump()
    effects = receive(store, core, ErrorMessage(message="unparseable message"), hello("r9"))
    assert not effects and store.dump() == before


def test_the_core_summarises_itself() -> None:
    core = ConnectionRules("x")
    assert "awaiting hello" in repr(core)
    with pytest.raises(ValueError):
        ConnectionRules("x", on_container_lost="maybe")  # type: ignore[arg-type]


# ---------------------------------------------------------------- history is append-only once settled


def test_a_new_runtime_cannot_rewrite_a_settled_operations_messages(store: Store) -> None:
    """A daemon under a new runtime sends ``message`` events carrying the
    ids of a settled operation's messages (the person's own words and the
    answer): both are refused (passed, recorded with ``history-settled``),
    the record keeps what it had, the outcome stays, and the session goes
    on: a new message and a new operation still land."""
    core, _ = connect(store, hello("r1", open=None))
    store.operations.enqueue(SESSION, "a", "hi")
    with store.transaction():
        core.deliver(store)
    receive(store, core, frame(1, start("a")), frame(2, event("a", message("a:assistant", "echo: hi", "a"))),
            frame(3, settle("a", "echo: hi")))
    before = store.messages.all(SESSION)
    assert [m["id"] for m in before] == ["a:user", "a:assistant"]

    later, _ = connect(store, hello("r2", open=None))
    forged_user = message("a:user", "words the person never said", "a")
    forged_user["message"]["role"] = "user"
    effects = receive(store, later, frame(1, event("a", message("a:assistant", "rewritten", "a"))),
                      frame(2, event("a", forged_user)), frame(3, event(None, message("a:user", "again"))),
                      frame(4, event(None, message("n1", "a new message"))))
    assert store.messages.all(SESSION) == before + [store.messages.all(SESSION)[-1]]
    assert store.messages.all(SESSION)[-1]["id"] == "n1"
    assert store.operations.get(SESSION, "a").outcome == {"status": "done", "text": "echo: hi"}
    skipped = store.skipped_frames.all(SESSION)
    assert [(f.runtime, f.seq) for f in skipped] == [("r2", 1), ("r2", 2), ("r2", 3)]
    assert all(f.reason.startswith("history-settled: ") for f in skipped)
    assert later.frames_refused == 3
    assert {"type": "ack", "seq": 4} in sends(effects)
    store.operations.enqueue(SESSION, "b", "more")
    with store.transaction():
        assert [m.operation_id for m in later.deliver(store).sends] == ["b"]


def test_an_open_operations_message_may_still_be_updated(store: Store) -> None:
    core, _ = connect(store, hello("r1", open=None))
    store.operations.enqueue(SESSION, "a", "hi")
    with store.transaction():
        core.deliver(store)
    receive(store, core, frame(1, start("a")), frame(2, event("a", message("a:assistant", "part", "a"))),
            frame(3, event("a", message("a:assistant", "part and whole", "a"))))
    assert store.messages.all(SESSION)[-1]["parts"] == [{"type": "text", "text": "part and whole"}]
    assert store.skipped_frames.all(SESSION) == []
