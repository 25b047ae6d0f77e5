"""The apply core, fuzzed: however often and however cut up the daemon's
frames arrive, the store ends as if each had been applied once, in order.

A daemon's whole frame log is generated first (starts, events, persisted
entries, settles, over a handful of operations and message ids). The
undisturbed run applies it on one connection, in order, then ``caught-up``.
The disturbed run delivers it over several connections, each cut at a random
point, with earlier frames re-sent at random inside each connection and
random batch boundaries; every reconnect is a ``hello`` reporting the
daemon's state and a replay from the host's cursor, as the daemon does. A
final full replay on yet another connection must change nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.host.reconcile import ConnectionRules
from router.host.store import Store
from tests.host.core_driver import (
    SESSION,
    caught_up,
    event,
    frame,
    hello,
    message,
    persist,
    settle,
    start,
)

OPERATIONS = ["a", "b", "c", "d"]

operation_ids = st.sampled_from(OPERATIONS + ["unknown"])
maybe_operation = st.one_of(st.none(), operation_ids)
entry = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.fixed_dictionaries({"turn": st.integers(0, 9)}))

frame_bodies = st.one_of(
    operation_ids.map(start),
    st.builds(
        lambda op, mid, text: event(op, message(mid, text, op)),
        maybe_operation,
        st.sampled_from(["m1", "m2", "m3"]),
        st.text(max_size=4),
    ),
    st.builds(
        lambda op, n: event(op, {"type": "usage", "inputTokens": n, "outputTokens": n + 1}),
        maybe_operation,
        st.integers(0, 100),
    ),
    st.builds(lambda op: event(op, {"type": "text-delta", "messageId": "m1", "delta": "d"}), maybe_operation),
    st.lists(entry, min_size=1, max_size=3).map(lambda entries: persist(*entries)),
    st.builds(lambda op, text: settle(op, text), operation_ids, st.text(max_size=3)),
    st.builds(lambda op, reason: settle(op, reason=reason), operation_ids, st.sampled_from(["aborted", "x"])),
)


def daemon_report(log: list[dict]) -> list[dict]:
    """What the daemon's ``hello`` says of each operation, having produced
    the whole log."""
    state: dict[str, dict] = {op: {"operationId": op, "status": "queued"} for op in OPERATIONS}
    for body in log:
        op = body.get("operationId")
        if op not in state or state[op]["status"] == "settled":
            continue
        if body["kind"] == "start":
            state[op] = {"operationId": op, "status": "running"}
        elif body["kind"] == "settle":
            state[op] = {"operationId": op, "status": "settled", "outcome": body["outcome"]}
    return list(state.values())


#: Stores on tmpfs when there is one: the property makes hundreds of them.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def fresh_store(directory: str, name: str) -> Store:
    store = Store(Path(directory) / name, clock=lambda: 1_000)
    store.sessions.create(SESSION)
    for op in OPERATIONS:
        store.operations.enqueue(SESSION, op, f"input {op}")
        store.operations.set_delivered(SESSION, op, "r1")
    return store


def connection(store: Store, log: list[dict]) -> ConnectionRules:
    core = ConnectionRules(SESSION)
    # The daemon holds the generation (the host opened it before the first
    # frame), has produced the whole log, and reports where it stands.
    greeting = hello("r1", open=1, last_seq=len(log), operations=daemon_report(log))
    with store.transaction():
        core.hello(store, greeting)
    return core


def apply(store: Store, core: ConnectionRules, messages: list[Any]) -> None:
    with store.transaction():
        core.receive(store, messages)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=st.lists(frame_bodies, min_size=1, max_size=40),
    data=st.data(),
)
def test_any_disturbed_delivery_ends_as_one_in_order_delivery(log: list[dict], data: st.DataObject) -> None:
    frames = [frame(seq, body) for seq, body in enumerate(log, 1)]
    with tempfile.TemporaryDirectory(dir=SCRATCH, prefix="router-host-") as directory:
        with fresh_store(directory, "once.db") as once:
            core = connection(once, log)
            apply(once, core, [*frames, caught_up(len(frames))])
            expected = once.dump()

        with fresh_store(directory, "disturbed.db") as disturbed:
            connections = data.draw(st.integers(1, 5), label="connections")
            for number in range(connections):
                core = connection(disturbed, log)
                after = disturbed.sessions.require(SESSION).cursor_seq
                stream: list[Any] = []
                for item in frames[after:]:
                    # Re-send earlier frames now and then (duplicates, replays).
                    if data.draw(st.booleans(), label="resend"):
                        back = data.draw(st.integers(1, item.seq), label="from")
                        stream.extend(frames[back - 1 : item.seq - 1])
                    stream.append(item)
                last = number == connections - 1
                if last:
                    stream.append(caught_up(len(frames)))
                else:
                    stream = stream[: data.draw(st.integers(0, len(stream)), label="cut")]
                while stream:
                    size = data.draw(st.integers(1, 8), label="batch")
                    apply(disturbed, core, stream[:size])
                    stream = stream[size:]
            assert disturbed.dump() == expected

            # Everything again, once more, on a new connection: nothing changes.
            core = connection(disturbed, log)
            apply(disturbed, core, [*frames, caught_up(len(frames))])
            assert disturbed.dump() == expected
