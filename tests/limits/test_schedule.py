"""The park scheduler (``router.limits.schedule``), without a clock: any
sequence of limits, members, ticks, early resumes, cancels and restarts
keeps its invariants; thousands of sessions; resets written in several
time zones are one epoch."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from router.limits import DELAY_MS, JITTER_MS, STAGGER_MS, ParkBook


def book(seed: int = 1, **figures: int) -> ParkBook:
    return ParkBook(rng=random.Random(seed), **figures)


def test_a_limit_parks_every_session_of_its_account_and_no_other():
    parks = book()
    for session, account in [("a1", "A"), ("a2", "A"), ("b1", "B")]:
        assert parks.member(session, account, now=0) == []
    effects = parks.limit("A", 60_000, session="a2", now=1_000, limit_kind="five_hour")
    assert [each.park.session for each in effects] == ["a2", "a1"]  # the one that learned it first
    assert parks.park_of("b1") is None
    first, second = (each.park for each in effects)
    assert first.source == second.source == "a2"
    assert first.resume_at == 60_000 + DELAY_MS + first.jitter
    assert second.resume_at == 60_000 + DELAY_MS + STAGGER_MS + second.jitter
    assert 0 <= first.jitter < JITTER_MS and 0 <= second.jitter < JITTER_MS
    # A session that joins the account while it is limited parks at once, after them.
    (late,) = parks.member("a3", "A", now=2_000)
    assert late.park.slot == 2 and late.park.resets_at == 60_000


def test_nothing_resumes_before_its_time_and_each_resumes_once():
    parks = book(delay=1_000, stagger=100, jitter=0)
    parks.member("s1", "A", 0)
    parks.limit("A", 10_000, session="s2", now=0)
    assert parks.due(10_999) == []
    assert [r.park.session for r in parks.due(11_000)] == ["s2"]
    assert parks.due(11_000) == []
    assert [r.park.session for r in parks.due(99_000)] == ["s1"]
    assert parks.due(99_000) == [] and parks.next_due() is None and parks.limit_of("A") is None


def test_a_later_reset_moves_every_park_keeping_slots_and_an_earlier_one_changes_nothing():
    parks = book(delay=0, stagger=10, jitter=5)
    parks.member("s1", "A", 0)
    before = {e.park.session: e.park for e in parks.limit("A", 1_000, session="s0", now=0)}
    moved = {e.park.session: e.park for e in parks.limit("A", 5_000, session="s1", now=10)}
    assert set(moved) == {"s0", "s1"}
    for session, park in moved.items():
        assert park.slot == before[session].slot and park.jitter == before[session].jitter
        assert park.resume_at == before[session].resume_at + 4_000
    assert parks.limit("A", 2_000, session="s0", now=20) == []
    assert parks.due(4_999) == []


def test_an_early_resume_is_not_parked_again_by_the_same_limit():
    parks = book()
    parks.limit("A", 50_000, session="s1", now=0)
    resume = parks.resume_now("s1")
    assert resume is not None and resume.why == "person"
    assert parks.member("s1", "A", now=1) == []  # known to the account already
    assert parks.resume_now("s1") is None and parks.cancel("s1") is None


def test_restart_reloads_the_same_schedule_and_draws_nothing_new():
    parks = book(seed=7)
    for n in range(20):
        parks.member(f"s{n}", "A" if n % 2 else "B", 0)
    parks.limit("A", 100_000, session="s1", now=0)
    parks.limit("B", 200_000, session="s0", now=0)
    stored = parks.parks()
    reloaded = book(seed=999)
    reloaded.restore(stored)
    assert reloaded.parks() == stored
    # A session parking after the restart takes the next slot, never a used one.
    (late,) = reloaded.member("late", "A", now=5)
    assert late.park.slot == 10


def test_thousands_of_sessions_on_three_accounts():
    parks = book(seed=3)
    accounts = ("A", "B", "C")
    for n in range(3_000):
        parks.member(f"s{n}", accounts[n % 3], 0)
    resets = {"A": 1_000_000, "B": 2_000_000, "C": 3_000_000}
    for account, reset in resets.items():
        assert len(parks.limit(account, reset, session=f"s{accounts.index(account)}", now=0)) == 1_000
    seen: list[str] = []
    last_at: dict[str, int] = {}
    now = 0
    while (at := parks.next_due()) is not None:
        now = at
        for resume in parks.due(now):
            park = resume.park
            assert park.resume_at <= now and park.resume_at >= resets[park.account] + DELAY_MS
            # the stagger holds within an account: at least stagger - jitter apart
            if park.account in last_at:
                assert park.resume_at - last_at[park.account] >= STAGGER_MS - JITTER_MS
            last_at[park.account] = park.resume_at
            seen.append(park.session)
    assert sorted(seen) == sorted(f"s{n}" for n in range(3_000))
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("zone", [0, -8, 5.5, 9, 14, -12])
def test_a_reset_written_in_any_time_zone_is_the_same_epoch(zone):
    """The provider gives the reset as an epoch; a person may read it in any
    zone. Nothing in the book depends on the zone the reset was read in."""
    utc = datetime(2026, 12, 1, 6, 40, tzinfo=timezone.utc)
    local = utc.astimezone(timezone(timedelta(hours=zone)))
    epoch_ms = int(local.timestamp() * 1000)
    assert epoch_ms == int(utc.timestamp() * 1000)
    parks = book(jitter=0)
    (parked,) = parks.limit("A", epoch_ms, session="s", now=0)
    assert parked.park.resume_at == int(utc.timestamp() * 1000) + DELAY_MS


class ParkMachine(RuleBasedStateMachine):
    """Any interleaving keeps: a parked session resumes at most once per
    park, never before its reset plus the delay (unless a person resumed
    it), and every park is answered once the clock passes its time; a
    restart in the middle changes none of that."""

    def __init__(self) -> None:
        super().__init__()
        self.book = ParkBook(rng=random.Random(0), delay=100, stagger=10, jitter=10)
        self.now = 0
        self.open_parks: dict[str, int] = {}  # session -> its park's resume_at
        self.ended: list[tuple[str, int]] = []  # (session, since) of every park that ended

    sessions = st.sampled_from([f"s{n}" for n in range(8)])
    accounts = st.sampled_from(["A", "B", "C"])

    def _record(self, effects) -> None:
        for effect in effects:
            self.open_parks[effect.park.session] = effect.park.resume_at

    @rule(session=sessions, account=accounts)
    def member(self, session, account):
        self._record(self.book.member(session, account, self.now))

    @rule(session=sessions, account=accounts, ahead=st.integers(-50, 5_000), kind=st.sampled_from(["five_hour", ""]))
    def limit(self, session, account, ahead, kind):
        parked_elsewhere = self.book.park_of(session)
        if parked_elsewhere is not None and parked_elsewhere.account != account:
            return  # one session, one account (the router's account rule)
        self._record(self.book.limit(account, self.now + ahead, session=session, now=self.now, limit_kind=kind))
        assert self.book.park_of(session) is not None

    @rule(step=st.integers(0, 3_000))
    def tick(self, step):
        self.now += step
        for resume in self.book.due(self.now):
            park = resume.park
            assert park.session in self.open_parks, "resumed twice"
            assert park.resume_at <= self.now
            assert park.resume_at >= park.resets_at + 100
            del self.open_parks[park.session]
            self.ended.append((park.session, park.since))

    @rule(session=sessions)
    def resume_now(self, session):
        resume = self.book.resume_now(session)
        assert (resume is not None) == (session in self.open_parks)
        if resume is not None:
            del self.open_parks[session]
            self.ended.append((session, resume.park.since))

    @rule(session=sessions)
    def cancel(self, session):
        park = self.book.cancel(session)
        assert (park is not None) == (session in self.open_parks)
        self.open_parks.pop(session, None)

    @rule()
    def restart(self):
        stored = self.book.parks()
        self.book = ParkBook(rng=random.Random(1), delay=100, stagger=10, jitter=10)
        self.book.restore(stored)

    @invariant()
    def parks_are_what_the_effects_said(self):
        assert {p.session: p.resume_at for p in self.book.parks()} == self.open_parks

    @invariant()
    def nothing_overdue_after_a_tick(self):
        due = self.book.next_due()
        assert due is None or due in self.open_parks.values()

    @precondition(lambda self: self.open_parks)
    @rule()
    def run_out_the_clock(self):
        self.tick(max(self.open_parks.values()) - self.now)
        assert not self.open_parks


TestParkMachine = ParkMachine.TestCase
TestParkMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
