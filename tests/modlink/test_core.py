"""The sans-IO link core, without sockets: the claim, the queue, the pending
calls, the state, and the subscribers' bounded queues. Then ModLink.call on
virtual time, with no socket at all."""

from __future__ import annotations

import itertools

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.modlink import (
    LinkCore,
    ModBadResult,
    ModCallError,
    ModCallTimeout,
    ModLink,
    SubscriberQueue,
)
from wire.mod import (
    ModAppendEvent,
    ModAppendMessage,
    ModAppendOrigin,
    ModHelloEvent,
    ModModelEvent,
    ModResultError,
    ModResultOk,
    ModRowWritten,
    ModSessionEndEvent,
    ModSessionIdEvent,
    ModSetEffortArgs,
    ModSetEffortResult,
    ModStepEvent,
    ModStepText,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
    ModUnknownEvent,
    ModWireError,
)


def counting_core() -> LinkCore:
    counter = itertools.count(1)
    return LinkCore(new_id=lambda: f"r{next(counter)}")


def step(turn: str = "t", index: int = 0, text: str = "x", done: bool = False) -> ModStepEvent:
    return ModStepEvent(turn_id=turn, index=index, model="m", parts=(ModStepText(text=text),), done=done)


APPEND = ModAppendEvent(
    uuid="u",
    door="note",
    origin=ModAppendOrigin(kind="plugin"),
    message=ModAppendMessage(type="user", content=()),
)

# --------------------------------------------------------------------------- claim


def test_first_named_instance_holds_the_link() -> None:
    core = LinkCore()
    assert core.claim(None)
    assert core.state.instance is None  # a post naming none claims nothing
    assert core.admit("a") and core.state.instance is None  # asking claims nothing
    assert core.claim("a")
    assert core.claim("a")
    assert not core.admit("b")
    assert not core.claim("b")
    assert core.claim(None)
    assert core.state.instance == "a"
    assert core.refused_posts == 2


def test_of_two_posts_admitted_together_only_the_first_to_prove_good_claims() -> None:
    core = LinkCore()
    assert core.admit("a") and core.admit("b")  # both read their bodies
    assert core.claim("b")
    assert not core.claim("a")
    assert core.state.instance == "b"
    assert core.refused_posts == 1


# --------------------------------------------------------------------------- calls


def test_each_request_goes_to_exactly_one_poll() -> None:
    core = counting_core()
    assert not core.has_work
    first = core.start_call("session.model")
    second = core.start_call("set-effort", ModSetEffortArgs(effort=3))
    assert core.has_work
    assert core.take_requests() == [first, second]
    assert core.take_requests() == []
    third = core.start_call("config.list")
    assert core.take_requests() == [third]


def test_a_result_settles_its_call_once() -> None:
    core = counting_core()
    request = core.start_call("session.model")
    core.take_requests()
    (outcome,) = core.accept_results([ModResultOk(id=request.id, value="opus")])
    assert outcome.value == "opus" and outcome.error is None
    assert core.accept_results([ModResultOk(id=request.id, value="opus")]) == []
    assert core.dropped_results == 1


def test_results_are_typed_by_call() -> None:
    core = counting_core()
    effort = core.start_call("set-effort", ModSetEffortArgs(effort="high"))
    failed = core.start_call("session.model")
    malformed = core.start_call("session.model")
    broken = core.start_call("config.list")
    outcomes = core.accept_results(
        [
            ModResultOk(id=effort.id, value={"effort": "high"}),
            ModResultError(id=failed.id, error="no session"),
            ModResultOk(id=malformed.id, value=42),
        ],
        {broken.id: "$.results[3].ok: expected a boolean"},
    )
    by_id = {outcome.request_id: outcome for outcome in outcomes}
    assert by_id[effort.id].value == ModSetEffortResult(effort="high")
    assert isinstance(by_id[failed.id].error, ModCallError) and by_id[failed.id].error.error == "no session"
    assert isinstance(by_id[malformed.id].error, ModBadResult)
    assert isinstance(by_id[broken.id].error, ModBadResult)
    assert core.statistics().pending == 0


def test_an_abandoned_call_is_unqueued_and_its_result_dropped() -> None:
    core = counting_core()
    request = core.start_call("session.model")
    core.abandon_call(request.id)
    assert not core.has_work
    assert core.take_requests() == []
    assert core.accept_results([ModResultOk(id=request.id, value="m")]) == []
    assert core.dropped_results == 1


def test_a_bad_call_changes_nothing() -> None:
    core = counting_core()
    with pytest.raises(ModWireError):
        core.start_call("no.such.call")
    with pytest.raises(ModWireError):
        core.start_call("session.model", ModSetEffortArgs(effort=1))
    with pytest.raises(ModWireError):
        core.start_call("set-effort", None)
    assert core.statistics().pending == 0 and not core.has_work


def test_close_returns_the_waiting_calls() -> None:
    core = counting_core()
    a = core.start_call("session.model")
    b = core.start_call("config.list")
    core.take_requests()
    queue = core.subscribe()
    assert core.close() == [a.id, b.id]
    assert queue.closed
    assert core.subscribe().closed


# --------------------------------------------------------------------------- state


def test_state_follows_the_events() -> None:
    core = LinkCore()
    core.accept_events([ModHelloEvent(session_id="s1", claude_version="2.1.309", interactive=False)])
    assert core.state.version_ok is False and core.state.session_id == "s1"
    core.accept_events([ModHelloEvent(session_id="s1", claude_version="2.1.310-dev.1", interactive=True)])
    assert core.state.version_ok is True and core.state.claude_version == "2.1.310-dev.1"
    core.accept_events([ModTurnStartEvent(turn_id="t1"), step("t1")])
    assert core.state.turn_running and core.state.turn_id == "t1" and core.state.model == "m"
    core.accept_events([ModModelEvent(model="opus"), ModTurnCompleteEvent(turn_id="t1", stop_reason="answer")])
    assert not core.state.turn_running and core.state.model == "opus"
    core.accept_events([ModSessionEndEvent(reason="clear"), ModSessionIdEvent(session_id="s2")])
    assert core.state.session_id == "s2" and core.state.hello_session_id == "s1" and core.state.ended is None
    core.accept_events([ModUnknownEvent(kind="later", raw={"kind": "later"})])
    assert core.events_accepted == 9


# --------------------------------------------------------------------------- subscribers


def test_a_full_queue_sheds_superseded_snapshots_first() -> None:
    queue = SubscriberQueue(4)
    for event in [step(text="a"), step(index=1, text="b"), step(text="ab"), APPEND]:
        queue.push(event)
    queue.push(ModTurnCompleteEvent(turn_id="t", stop_reason="answer"))
    kept = [queue.pop() for _ in range(len(queue))]
    # The first snapshot of step 0 was superseded by "ab", so it went.
    assert kept == [step(index=1, text="b"), step(text="ab"), APPEND, ModTurnCompleteEvent(turn_id="t", stop_reason="answer")]
    assert queue.shed == 1


def test_a_full_queue_sheds_the_oldest_snapshot_when_none_is_superseded() -> None:
    queue = SubscriberQueue(2)
    queue.push(step(index=0))
    queue.push(step(index=1))
    queue.push(step(index=2))
    assert [queue.pop().index for _ in range(2)] == [1, 2]  # type: ignore[union-attr]


def test_a_queue_full_of_what_it_may_not_shed_overflows() -> None:
    queue = SubscriberQueue(2)
    queue.push(APPEND)
    queue.push(ModSessionEndEvent(reason="other"))
    queue.push(ModTurnCompleteEvent(turn_id="t", stop_reason="answer"))
    assert queue.overflowed
    queue.push(step())  # taken no more
    assert len(queue) == 2


_EVENTS = st.one_of(
    st.builds(step, turn=st.sampled_from("ab"), index=st.integers(0, 3), text=st.text(max_size=3), done=st.booleans()),
    st.just(APPEND),
    st.builds(ModTurnCompleteEvent, turn_id=st.sampled_from("ab"), stop_reason=st.just("answer")),
    st.just(ModSessionEndEvent(reason="clear")),
    st.just(ModModelEvent(model="m")),
)


@settings(max_examples=300)
@given(st.lists(_EVENTS, max_size=60), st.integers(1, 12))
def test_a_queue_loses_only_snapshots_and_keeps_order(events: list, capacity: int) -> None:  # type: ignore[type-arg]
    queue = SubscriberQueue(capacity)
    for event in events:
        queue.push(event)
    kept = [queue.pop() for _ in range(len(queue))]
    assert len(kept) <= capacity
    if not queue.overflowed:
        # Every event that is not a step snapshot is kept, in order.
        assert [e for e in kept if not isinstance(e, ModStepEvent)] == [
            e for e in events if not isinstance(e, ModStepEvent)
        ]
        assert queue.shed == len(events) - len(kept)
    else:
        # What was kept before the overflow is a prefix of the non-step events.
        others = [e for e in events if not isinstance(e, ModStepEvent)]
        kept_others = [e for e in kept if not isinstance(e, ModStepEvent)]
        assert kept_others == others[: len(kept_others)]
    # The kept events are a subsequence of what was pushed.
    it = iter(events)
    assert all(any(e is k for e in it) for k in kept)


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("call"), st.sampled_from(["session.model", "config.list", "command.list"])),
            st.tuples(st.just("take"), st.none()),
            st.tuples(st.just("answer"), st.integers(0, 20)),
            st.tuples(st.just("abandon"), st.integers(0, 20)),
        ),
        max_size=40,
    )
)
def test_core_calls_never_double_hand_or_double_settle(ops: list) -> None:  # type: ignore[type-arg]
    core = counting_core()
    issued: list[str] = []
    handed: list[str] = []
    settled: list[str] = []
    abandoned: set[str] = set()
    for op, arg in ops:
        if op == "call":
            issued.append(core.start_call(arg).id)
        elif op == "take":
            handed += [r.id for r in core.take_requests()]
        elif op == "answer" and issued:
            rid = issued[arg % len(issued)]
            settled += [o.request_id for o in core.accept_results([ModResultOk(id=rid, value="v")])]
        elif op == "abandon" and issued:
            rid = issued[arg % len(issued)]
            if rid not in settled:
                abandoned.add(rid)
            core.abandon_call(rid)
    assert len(handed) == len(set(handed))
    assert len(settled) == len(set(settled))
    assert not (set(settled) & abandoned)
    assert core.statistics().pending == len(set(issued) - set(settled) - abandoned)


# --------------------------------------------------------------------------- ModLink.call, no socket, virtual time


async def test_call_times_out_and_the_late_answer_is_dropped(autojump_clock: trio.abc.Clock) -> None:
    link = ModLink("s", env={"XDG_RUNTIME_DIR": "/nonexistent"})
    with pytest.raises(ModCallTimeout) as caught:
        await link.call("session.model", deadline=7)
    assert isinstance(caught.value, trio.TooSlowError)
    assert link.statistics().core.pending == 0
    assert link.statistics().core.queued == 0  # never polled: taken back out of the queue


async def test_call_is_answered_by_a_result(autojump_clock: trio.abc.Clock) -> None:
    link = ModLink("s", env={"XDG_RUNTIME_DIR": "/nonexistent"})
    core = link._core
    async with trio.open_nursery() as nursery:
        got = []

        async def caller() -> None:
            got.append(await link.call("set-effort", ModSetEffortArgs(effort=None), deadline=60))

        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        (request,) = core.take_requests()
        link._settle(core.accept_results([ModResultOk(id=request.id, value={"effort": None})]))
    assert got == [ModSetEffortResult(effort=None)]


async def test_a_cancelled_caller_leaves_nothing_behind(autojump_clock: trio.abc.Clock) -> None:
    link = ModLink("s", env={"XDG_RUNTIME_DIR": "/nonexistent"})
    with trio.move_on_after(1):
        await link.call("session.model", deadline=60)
    assert link.statistics().core.pending == 0 and link.statistics().core.queued == 0


async def test_mod_error_is_raised_by_name(autojump_clock: trio.abc.Clock) -> None:
    link = ModLink("s", env={"XDG_RUNTIME_DIR": "/nonexistent"})
    async with trio.open_nursery() as nursery:

        async def answer() -> None:
            await trio.testing.wait_all_tasks_blocked()
            (request,) = link._core.take_requests()
            link._settle(link._core.accept_results([ModResultError(id=request.id, error="not now")]))

        nursery.start_soon(answer)
        with pytest.raises(ModCallError, match="not now"):
            await link.call("session.model", deadline=60)


def test_row_written_is_the_typed_result() -> None:
    core = counting_core()
    from wire.mod import ModSessionMessageArgs, ModUnreadCard

    request = core.start_call(
        "session.message", ModSessionMessageArgs(content=({"type": "text", "text": "x"},), message=ModUnreadCard(text="x"))
    )
    (outcome,) = core.accept_results([ModResultOk(id=request.id, value={"as": "row", "uuid": "u1"})])
    assert outcome.value == ModRowWritten(uuid="u1")


def test_every_mod_link_error_is_a_refusal_with_its_code() -> None:
    import pickle

    import trio

    from router.errors import Refusal
    from router.modlink import (
        ModBadResult,
        ModCallError,
        ModCallTimeout,
        ModLinkClosed,
        ModLinkRefused,
        ModSubscriberOverflow,
    )

    cases = [
        (ModLinkRefused("link-in-use", "a live server answers", path="/run/x"), "link-in-use"),
        (ModCallError("session.model", "not now"), "mod-call-failed"),
        (ModBadResult("session.model", "a number"), "mod-bad-result"),
        (ModCallTimeout("session.model", 5), "mod-call-timeout"),
        (ModLinkClosed("the mod link is closed"), "link-closed"),
        (ModSubscriberOverflow("fell behind"), "subscriber-overflow"),
    ]
    for error, code in cases:
        assert isinstance(error, Refusal) and error.code == code and error.message
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and again == error
    refused, failed, bad, timeout = (case[0] for case in cases[:4])
    assert refused.path == "/run/x" and refused.to_json()["path"] == "/run/x"
    assert ModLinkRefused("no-socket-path", "no base").path is None
    assert (failed.call, failed.error) == ("session.model", "not now")
    assert isinstance(bad, ModCallError) and bad.error == "a number"
    assert isinstance(timeout, trio.TooSlowError) and timeout.deadline == 5
    assert pickle.loads(pickle.dumps(timeout)).call == "session.model"
