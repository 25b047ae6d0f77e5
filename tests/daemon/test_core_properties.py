"""Hypothesis drives SessionCore with random host messages, connections and
adapter results, in any order the runner allows, and checks the invariants:

- frame seqs go up by exactly one, from 1;
- an operation settles at most once while it is remembered, and the outcome
  ``hello`` reports for it is the one its ``settle`` frame carried;
- ``replay(after)`` sends exactly the kept frames above ``after``, in order,
  then ``caught-up`` with the last seq; after it, the live connection gets
  every new frame, in order, with no gap;
- kept frames are the newest, consecutive, at most the limit;
- at most one turn runs, and it is the running operation's.

Small limits (kept frames, remembered operations) make the trimming rules
fire within a few dozen steps.
"""

from __future__ import annotations

import json

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from router.daemon.core import OpenSession, SessionCore, Steer, TurnCancelled, TurnFailed
from tests.daemon.core_driver import ECHO_INFO, Conn, Driver
from wire.container import Done, Unanswered

MAX_KEPT = 7
SETTLED_KEPT = 4
IDS = st.sampled_from(["a", "b", "c", "d", "e", "f"])
GENERATIONS = st.integers(0, 3)
ENTRIES = st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=5), st.none()), max_size=3)


@attrs.frozen
class TurnEnds:
    result: object


#: How a turn can end: the adapter's outcome, an error, its own
#: cancellation, or a value that is not an outcome.
TURN_RESULTS = st.sampled_from([Done(text="ok"), Unanswered(reason="no"), TurnFailed("boom"), TurnCancelled(), None]).map(TurnEnds)


@attrs.frozen
class Answer:
    """The adapter answers the pending call: a steer taken (``ok``) or not,
    an open that works or fails."""

    ok: bool
    fail: bool


ANSWERS = st.builds(Answer, st.booleans(), st.booleans())


class RecordingCore(SessionCore):
    """Records every frame as it is numbered (the kept ones get trimmed)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list = []

    def _frame(self, frame: dict) -> None:
        super()._frame(frame)
        self.log.append(self._kept[-1])


def host_messages(seq_hint: int):
    seqs = st.integers(0, seq_hint + 3)
    prompts = st.builds(
        lambda i, t, w: {"type": "prompt", "operationId": i, "input": t, "whenBusy": w},
        IDS,
        st.sampled_from(["hi", "slow 10 x", "fail no"]),
        st.sampled_from(["followUp", "steer"]),
    )
    aborts = st.builds(lambda i: {"type": "abort", "operationId": i}, IDS)
    return st.one_of(
        prompts,
        prompts,
        prompts,
        aborts,
        st.builds(lambda g, e: {"type": "restore", "generation": g, "entries": e}, GENERATIONS, ENTRIES),
        st.builds(lambda g, e: {"type": "open", "generation": g, "settings": {}, "restore": e}, GENERATIONS, ENTRIES),
        st.builds(lambda a: {"type": "replay", "after": a}, seqs),
        aborts,
        st.just({"type": "abort"}),
        st.just({"type": "configure", "settings": {"model": "m"}}),
        st.builds(lambda s: {"type": "ack", "seq": s}, seqs),
        st.sampled_from(["", "{", "null", '{"type":"prompt","operationId":1}', '{"type":"ack","seq":1.5}']),
    )


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = RecordingCore("s", runtime_id="r", adapter=ECHO_INFO, max_kept_frames=MAX_KEPT, settled_kept=SETTLED_KEPT)
        self.driver = Driver(self.core, auto=False)
        self.conns: list[Conn] = []
        self.checked = 0  # frames of core.log already checked
        self.settled: dict[str, dict] = {}  # remembered operation -> its settle outcome
        self.known: set[str] = set()
        #: Per live connection: index in conn.sent after which frames must be
        #: consecutive (set at its last caught-up).
        self.live_from: dict[int, int] = {}

    # ---------------------------------------------------------------- rules

    @initialize(opened=st.booleans())
    def start(self, opened: bool) -> None:
        """Most runs start as a host does: connected, replaying, open."""
        if not opened:
            return
        self.connect()
        self.driver.send(self.conns[-1], {"type": "replay", "after": 0})
        self.live_from[id(self.conns[-1])] = len(self.conns[-1].sent)
        self.driver.send(self.conns[-1], {"type": "open", "generation": 1, "settings": {}, "restore": []})
        self.driver.answer_open()

    @rule()
    def connect(self) -> None:
        conn = Conn(f"c{len(self.conns)}")
        self.conns.append(conn)
        self.driver.attach(conn)
        assert conn.sent[-1]["type"] == "hello"
        assert conn.sent[-1]["lastSeq"] == self.core.seq

    @precondition(lambda self: self.core.conn is not None)
    @rule()
    def disconnect(self) -> None:
        self.core.detach(self.core.conn)

    @precondition(lambda self: self.conns)
    @rule(data=st.data(), old=st.sampled_from([False, False, False, True]))
    def host_sends(self, data, old: bool) -> None:
        """A burst of host messages from one connection, with turns ending
        between them (as they do while a host keeps sending)."""
        conn = self.conns[0] if old else self.conns[-1]
        steps = data.draw(st.lists(st.one_of(host_messages(self.core.seq), TURN_RESULTS, ANSWERS), min_size=1, max_size=12))
        for step in steps:
            if isinstance(step, (str, dict)):
                if self.driver.pending:
                    continue  # the runner waits for the adapter before the next message
                self._send(conn, step)
            elif isinstance(step, TurnEnds):
                if self.driver.turns:
                    self.driver.finish(self.driver.turns[0], step.result)
            elif self.driver.pending:
                if isinstance(self.driver.pending[0], Steer):
                    self.driver.answer_steer(step.ok, fail=None if step.ok or not step.fail else RuntimeError("steer broke"))
                else:
                    self.driver.answer_open(fail=RuntimeError("cannot open") if step.fail else None)
            self.check_all()

    def _send(self, conn: Conn, message) -> None:
        current = self.core.conn is conn
        before_sent = len(conn.sent)
        running = self.core.running
        kept_before = self.core.kept()
        seq_before = self.core.seq
        known_before = {op["operationId"] for op in self.core.hello()["operations"]}
        self.driver.send(conn, message)
        new = conn.sent[before_sent:]
        if not current:
            assert new == [], "a replaced or closed connection is ignored"
            return
        if isinstance(message, str):
            assert new == [{"type": "error", "message": "unparseable message"}]
            assert self.core.seq == seq_before
            return
        if message["type"] == "abort" and running is not None:
            target = message.get("operationId")
            if target is None or target in {running.operation_id, *(op.id for op in running.folded)}:
                assert running in self.driver.cancelled, "abort cancels the running turn"
        operations = self.core.hello()["operations"]
        if message["type"] == "prompt" and message["operationId"] not in known_before and any(
            op["operationId"] == message["operationId"] for op in operations
        ):
            # A new operation is when old settled ones are forgotten (as in
            # the reference: only then; a settle or an abort forgets none).
            assert len(operations) <= SETTLED_KEPT or all(op["status"] != "settled" for op in operations)
        if message["type"] == "ack":
            acked = message["seq"]
            assert self.core.kept() == [k for k in kept_before if k.seq > acked]
        if message["type"] == "replay":
            after = message["after"]
            expected = [json.loads(k.text) for k in kept_before if k.seq > after]
            assert new == expected + [{"type": "caught-up", "lastSeq": seq_before}]
            self.live_from[id(conn)] = len(conn.sent)

    def check_all(self) -> None:
        self.seqs_go_up_by_one()
        self.operations_settle_once_and_outcomes_never_change()
        self.kept_frames_are_the_newest_consecutive()
        self.a_live_connection_gets_every_new_frame()
        self.at_most_one_turn_runs()
        self.hello_matches_state()

    @precondition(lambda self: self.driver.pending and isinstance(self.driver.pending[0], OpenSession))
    @rule(fail=st.booleans())
    def adapter_opens(self, fail: bool) -> None:
        self.driver.answer_open(fail=RuntimeError("cannot open") if fail else None)

    @precondition(lambda self: self.driver.pending and isinstance(self.driver.pending[0], Steer))
    @rule(took=st.booleans(), fail=st.booleans())
    def adapter_steers(self, took: bool, fail: bool) -> None:
        self.driver.answer_steer(took, fail=RuntimeError("steer broke") if fail else None)

    @precondition(lambda self: self.driver.turns)
    @rule(end=TURN_RESULTS)
    def turn_ends(self, end) -> None:
        self.driver.finish(self.driver.turns[0], end.result)

    @rule(event=st.sampled_from([
        {"type": "text-delta", "messageId": "m", "delta": "d"},
        {"type": "usage", "inputTokens": 3},
        {"type": "raw", "value": [1, {"x": None}]},
    ]))
    def adapter_emits(self, event) -> None:
        self.driver.perform(self.core.emit(event))

    @rule(entries=ENTRIES)
    def adapter_persists(self, entries) -> None:
        self.driver.perform(self.core.persist(entries))

    # ---------------------------------------------------------------- invariants

    @invariant()
    def seqs_go_up_by_one(self) -> None:
        log = self.core.log
        for index in range(self.checked, len(log)):
            assert log[index].seq == index + 1
        assert self.core.seq == len(log)

    @invariant()
    def operations_settle_once_and_outcomes_never_change(self) -> None:
        now = {op["operationId"]: op for op in self.core.operations()}
        # Forgotten since the last step: a later prompt with the id is new.
        for gone in self.known - now.keys():
            self.settled.pop(gone, None)
        for kept in self.core.log[self.checked:]:
            frame = kept.frame
            if frame["kind"] == "settle":
                op = frame["operationId"]
                assert op not in self.settled, f"{op} settled twice"
                self.settled[op] = frame["outcome"]
        self.checked = len(self.core.log)
        self.known = set(now)
        for op_id, op in now.items():
            if op["status"] == "settled":
                assert op["outcome"] == self.settled[op_id]
            else:
                assert op_id not in self.settled

    @invariant()
    def kept_frames_are_the_newest_consecutive(self) -> None:
        kept = [k.seq for k in self.core.kept()]
        assert len(kept) <= MAX_KEPT
        if kept:
            assert kept == list(range(kept[0], kept[0] + len(kept)))
            assert kept[-1] == self.core.seq

    @invariant()
    def a_live_connection_gets_every_new_frame(self) -> None:
        conn = self.core.conn
        if conn is None or not self.core.live:
            return
        start = self.live_from[id(conn)]
        caught_up = conn.sent[start - 1]["lastSeq"]
        seqs = [m["seq"] for m in conn.sent[start:] if m["type"] == "frame"]
        assert seqs == list(range(caught_up + 1, caught_up + 1 + len(seqs)))

    @invariant()
    def at_most_one_turn_runs(self) -> None:
        turns = self.driver.turns
        assert len(turns) <= 1
        running = self.core.running
        if running is None:
            assert not turns
        else:
            assert turns == [running]
        # Every running operation is the running turn's, or steered into it.
        in_turn = set() if running is None else {running.operation_id, *(op.id for op in running.folded)}
        status = {op["operationId"]: op["status"] for op in self.core.operations()}
        assert {op for op, state in status.items() if state == "running"} == in_turn

    @invariant()
    def hello_matches_state(self) -> None:
        hello = self.core.hello()
        assert hello["lastSeq"] == self.core.seq


TestCore = CoreMachine.TestCase
TestCore.settings = settings(max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.text(), st.binary().map(lambda b: b.decode("utf-8", "replace")), host_messages(5).map(json.dumps)))
def test_receive_never_raises(text: str) -> None:
    core = SessionCore("s", runtime_id="r", adapter=ECHO_INFO)
    conn = Conn("c")
    Driver(core).attach(conn)
    message, effects = core.receive(conn, text)
    assert (message is None) != (effects == [])
    if message is None:
        assert len(effects) == 1 and json.loads(effects[0].text)["type"] == "error"
