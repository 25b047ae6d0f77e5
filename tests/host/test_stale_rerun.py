"""A session taken back by a router whose own daemon still holds it from an
earlier hold, with an accepted operation open that this daemon already
knows by its id: the ``on_container_lost`` policy decides, as for a
container lost, not the daemon's memory of operation ids.

The host side is the real reconcile core on a real SQLite store; the
daemon side is the real daemon core (:class:`~router.daemon.core.SessionCore`)
driven without sockets; messages pass between them as wire text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.daemon.core import SessionCore
from router.host.reconcile import ConnectionRules
from router.host.store import Store
from tests.daemon.core_driver import Conn, Driver
from tests.host.core_driver import SESSION, connect, event, frame, hello, message, receive, sends, settle, start
from wire.container import AdapterInfo, Done, converter, dump_message, parse_daemon_message

#: The echo adapter's declaration (router/daemon/adapters/echo.py).
ECHO = AdapterInfo(id="echo", version="1", capabilities=("steer", "rerun"))
#: The policy of ``router serve``'s in-process cluster mode (router/serve.py).
POLICY = "if-declared"
OPEN = ("queued", "running")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "stale.db")
    store.sessions.create(SESSION, settings={})
    yield store
    store.close()


class Pair:
    """One connection between the host core and a daemon core."""

    def __init__(self, store: Store, driver: Driver, name: str) -> None:
        self.store, self.driver, self.conn = store, driver, Conn(name)
        self.seen = 0
        driver.attach(self.conn)
        greeting = converter.structure(self.conn.sent[0], type(hello()))
        self.seen = 1
        self.rules, effects = connect(store, greeting, on_container_lost=POLICY)
        self.to_daemon(effects)

    def to_daemon(self, effects) -> None:
        for message in effects.sends:
            self.driver.send(self.conn, json.loads(dump_message(message)))

    def pump(self) -> None:
        """Pass what the daemon sent to the host, and the host's answers
        back, until neither has more."""
        while self.seen < len(self.conn.texts):
            text = self.conn.texts[self.seen]
            self.seen += 1
            parsed = parse_daemon_message(text)
            with self.store.transaction():
                effects = self.rules.receive(self.store, [parsed])
            with self.store.transaction():
                effects = effects + self.rules.deliver(self.store)
            self.to_daemon(effects)


@pytest.mark.parametrize(
    ("policy", "capabilities", "rerun"),
    [
        (POLICY, ECHO.capabilities, True),
        ("retry", (), True),
        (POLICY, ("steer",), False),
        ("fail", ECHO.capabilities, False),
    ],
)
def test_the_reconcile_core_hands_a_known_open_operation_over_again_when_the_policy_reruns(
    store: Store, policy: str, capabilities: tuple[str, ...], rerun: bool
) -> None:
    """The core alone: the record has ``k`` handed to another router's
    runtime (r1), and this router's daemon (r2), stale, lists ``k`` as
    settled in its earlier hold (its frames never reached the record): the
    policy decides, as for a container lost; a rerun goes as the next
    attempt's id, which the daemon has not taken."""
    store.operations.enqueue(SESSION, "k", "hello")
    store.operations.set_delivered(SESSION, "k", "r1")
    store.operations.start(SESSION, "k")
    store.sessions.set_cursor(SESSION, "r1", 4)
    stale = hello(
        "r2", open=1, last_seq=3, capabilities=capabilities,
        operations=[{"operationId": "k", "status": "settled", "outcome": {"status": "done", "text": "old"}}],
    )  # fmt: skip
    core, effects = connect(store, stale, on_container_lost=policy)
    record = store.operations.get(SESSION, "k")
    prompts = [body["operationId"] for body in sends(effects) if body["type"] == "prompt"]
    if rerun:
        assert record.status in OPEN and record.delivered == "r2"
        assert prompts == ["k~2"]
        assert core.wire_id("k") == "k~2"  # a person's abort names the attempt
    else:
        assert record.outcome == {"status": "unanswered", "reason": "container_lost"}
        assert prompts == []


def test_frames_of_the_given_up_attempt_are_passed_and_the_next_attempts_are_the_operations(store: Store) -> None:
    store.operations.enqueue(SESSION, "k", "hello")
    store.operations.set_delivered(SESSION, "k", "r1")
    store.sessions.set_cursor(SESSION, "r1", 4)
    stale = hello("r2", open=1, last_seq=3, capabilities=ECHO.capabilities,
                  operations=[{"operationId": "k", "status": "running"}])
    core, effects = connect(store, stale, on_container_lost=POLICY)
    assert [body["type"] for body in sends(effects)][:2] == ["abort", "open"]
    receive(
        store, core,
        frame(4, settle("k", reason="aborted")),
        frame(5, start("k~2")),
        frame(6, event("k~2", message("k~2:assistant", "again", operation_id="k~2"))),
        frame(7, settle("k~2", text="again")),
    )  # fmt: skip
    assert store.operations.get(SESSION, "k").outcome == {"status": "done", "text": "again"}
    ids = [entry["id"] for entry in store.messages.all(SESSION)]
    assert ids == ["k:user", "k:assistant"]
    assert store.messages.all(SESSION)[1]["operationId"] == "k"


def test_an_operation_the_stale_daemon_held_runs_again_and_is_done(store: Store) -> None:
    """Router A's daemon starts ``k``; router B takes the session (its
    fresh daemon gets ``k`` again under the policy); router A takes it back
    while its daemon still holds ``k`` from the first hold. ``k`` must end
    ``done`` (run again, as the policy says), never ``container-lost``."""
    store.operations.enqueue(SESSION, "k", "hello")
    daemon_a = Driver(SessionCore(SESSION, runtime_id="rA", adapter=ECHO))
    first = Pair(store, daemon_a, "a1")
    first.pump()
    assert [turn.operation.id for turn in daemon_a.turns] == ["k"]
    assert store.operations.get(SESSION, "k").status == "running"

    # Router A stops (its daemon runs on); router B takes the session.
    daemon_b = Driver(SessionCore(SESSION, runtime_id="rB", adapter=ECHO))
    second = Pair(store, daemon_b, "b1")
    second.pump()
    assert store.operations.get(SESSION, "k").delivered == "rB"
    # Router B is lost before ``k`` settles there; A's turn ends meanwhile.
    daemon_a.finish(daemon_a.turns[0], Done(text="first"))

    # Router A takes the session back: its daemon is stale.
    third = Pair(store, daemon_a, "a2")
    third.pump()
    for turn in list(daemon_a.turns):
        daemon_a.finish(turn, Done(text="again"))
        third.pump()
    record = store.operations.get(SESSION, "k")
    assert record.outcome == {"status": "done", "text": "again"}, record


def test_a_connection_lost_before_the_next_attempt_went_out_hands_it_over_on_the_next(store: Store) -> None:
    """As above, but the connection that met the stale daemon is lost after
    the reconcile, before the next attempt's ``prompt`` went out: the next
    connection (the same daemon, no longer stale) does not take the first
    attempt's report for the operation's outcome."""
    store.operations.enqueue(SESSION, "k", "hello")
    daemon_a = Driver(SessionCore(SESSION, runtime_id="rA", adapter=ECHO))
    Pair(store, daemon_a, "a1").pump()
    daemon_b = Driver(SessionCore(SESSION, runtime_id="rB", adapter=ECHO))
    Pair(store, daemon_b, "b1").pump()
    daemon_a.finish(daemon_a.turns[0], Done(text="first"))

    conn = Conn("a2")
    daemon_a.attach(conn)
    rules = ConnectionRules(SESSION, on_container_lost=POLICY)
    with store.transaction():
        effects = rules.hello(store, converter.structure(conn.sent[0], type(hello())))
    for sent in effects.sends:  # the reconcile's messages only: then the socket dies
        daemon_a.send(conn, json.loads(dump_message(sent)))

    fourth = Pair(store, daemon_a, "a3")
    fourth.pump()
    for turn in list(daemon_a.turns):
        daemon_a.finish(turn, Done(text="again"))
        fourth.pump()
    assert store.operations.get(SESSION, "k").outcome == {"status": "done", "text": "again"}


def test_an_operation_of_the_records_own_is_never_taken_for_an_attempt(store: Store) -> None:
    """``k~2`` is an operation of its own (settled): the daemon's report of
    it is not an attempt of ``k``, and ``k``'s next attempt skips its id."""
    store.operations.enqueue(SESSION, "k~2", "other")
    store.operations.settle(SESSION, "k~2", {"status": "done", "text": "t"})
    store.operations.enqueue(SESSION, "k", "hello")
    store.operations.set_delivered(SESSION, "k", "r1")
    store.sessions.set_cursor(SESSION, "r1", 4)
    stale = hello(
        "r2", open=1, last_seq=3, capabilities=ECHO.capabilities,
        operations=[
            {"operationId": "k", "status": "settled", "outcome": {"status": "done", "text": "old"}},
            {"operationId": "k~2", "status": "settled", "outcome": {"status": "done", "text": "t"}},
        ],
    )  # fmt: skip
    core, effects = connect(store, stale, on_container_lost=POLICY)
    assert [body["operationId"] for body in sends(effects) if body["type"] == "prompt"] == ["k~3"]
    receive(store, core, frame(4, settle("k~2", reason="aborted")), frame(5, settle("k~3", text="again")))
    assert store.operations.get(SESSION, "k").outcome == {"status": "done", "text": "again"}
    assert store.operations.get(SESSION, "k~2").outcome == {"status": "done", "text": "t"}
