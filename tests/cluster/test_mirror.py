"""The record's session list kept between notifications (sans-IO): what
each read is planned to read, and the rows after it."""

from __future__ import annotations

import pytest

from router.cluster.mirror import ReadPlan, RecordMirror

LIVE = {"epoch": 1, "live": True, "synced": True}


def filled(every: float = 30.0) -> RecordMirror:
    mirror = RecordMirror(every=every)
    plan = mirror.plan(**LIVE, now=0.0)
    assert plan == ReadPlan(full=True, epoch=1, at=0.0)
    assert mirror.read(plan, {"a": "a0", "b": "b0", "c": "c0"}) == ["a0", "b0", "c0"]
    return mirror


def test_nothing_named_reads_nothing_and_keeps_every_row() -> None:
    mirror = filled()
    plan = mirror.plan(**LIVE, now=1.0)
    assert plan == ReadPlan(full=False, ids=frozenset(), epoch=1, at=1.0)
    assert mirror.read(plan, {}) == ["a0", "b0", "c0"]
    assert mirror.statistics().full == 1 and mirror.statistics().partial == 0


def test_the_named_sessions_alone_are_read_again_in_their_place() -> None:
    mirror = filled()
    mirror.named("b")
    mirror.named("d")  # made since: added last, as the full read's order has it
    mirror.named("c")  # gone since: the read does not find it
    plan = mirror.plan(**LIVE, now=1.0)
    assert plan.ids == {"b", "c", "d"} and not plan.full
    assert mirror.read(plan, {"b": "b1", "d": "d0"}) == ["a0", "b1", "d0"]
    assert mirror.plan(**LIVE, now=2.0).ids == frozenset()  # taken: not read twice
    assert mirror.statistics().named == 3


@pytest.mark.parametrize("why", ["not synced", "not live", "another connection", "empty payload", "too old"])
def test_what_cannot_be_trusted_is_read_whole(why: str) -> None:
    mirror = filled(every=30.0)
    mirror.named("b")
    state = dict(LIVE, now=1.0)
    if why == "not synced":
        state["synced"] = False
    elif why == "not live":
        state["live"] = False
    elif why == "another connection":
        state["epoch"] = 2  # the listener reconnected: what was sent meanwhile is gone
    elif why == "empty payload":
        mirror.named("")
    else:
        state["now"] = 30.0  # the safety net: a notification lost any other way
    plan = mirror.plan(**state)
    assert plan.full
    assert mirror.read(plan, {"a": "a1", "b": "b1"}) == ["a1", "b1"]
    # What the full read took is not read again.
    assert mirror.plan(**dict(state, live=True, synced=True, now=state["now"] + 1)).full is (why == "not live")


def test_rows_read_while_the_listener_was_away_are_read_whole_once_it_is_back() -> None:
    mirror = filled()
    plan = mirror.plan(epoch=1, live=False, synced=False, now=1.0)
    assert plan == ReadPlan(full=True, epoch=None, at=1.0)
    mirror.read(plan, {"a": "a1"})
    assert mirror.plan(epoch=2, live=True, synced=True, now=2.0).full


def test_a_read_that_fails_gives_back_what_it_took() -> None:
    mirror = filled()
    mirror.named("b")
    plan = mirror.plan(**LIVE, now=1.0)
    mirror.failed(plan)  # raised or was cancelled: the rows as they were
    mirror.named("c")
    again = mirror.plan(**LIVE, now=2.0)
    assert again.ids == {"b", "c"}
    whole = mirror.plan(**dict(LIVE, synced=False), now=3.0)
    assert whole.full
    mirror.failed(whole)  # a full read that failed: the next is full too
    assert mirror.plan(**LIVE, now=4.0).full


def test_a_session_named_while_its_read_runs_is_read_again() -> None:
    mirror = filled()
    mirror.named("b")
    plan = mirror.plan(**LIVE, now=1.0)
    mirror.named("b")  # written again after the read began: it may not have seen it
    mirror.read(plan, {"b": "b1"})
    assert mirror.plan(**LIVE, now=2.0).ids == {"b"}


def test_its_repr_and_statistics_say_what_it_holds() -> None:
    mirror = filled()
    mirror.named("a")
    assert repr(mirror) == "<RecordMirror 3 rows named=1 all=False full=1 partial=0>"
    assert mirror.statistics().rows == 3
