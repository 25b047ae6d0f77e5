"""The lease rules and the spread, on a model clock (no database).

A run is a list of steps over a few routers sharing one :class:`LeaseBook`:
time passes, a router runs a lease round (its plan, then acquire / release /
renew, each executed a delay after it was sent), a router stalls (misses
rounds) or dies, a router joins. After every step:

- no session is believed held by two routers, and a router that believes
  it holds a session passes the book's check (belief implies the right to
  write);
- every session's fencing number only grows;
- a (router, number) whose lease expired in the book without a renew never
  passes the check again (a stalled router's late writes are refused).

And once every router runs its rounds undisturbed, every session is held
and no router is above its share plus the hysteresis.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from router.cluster import HeldLeases, LeaseBook, fair_share, hysteresis, plan

TTL = 10.0
SESSIONS = [f"s{i}" for i in range(12)]


class Model:
    def __init__(self, routers: int) -> None:
        self.now = 0.0
        self.book = LeaseBook()
        for session in SESSIONS:
            self.book.ensure(session)
        self.held = {f"r{i}": HeldLeases() for i in range(routers)}
        self.dead: set[str] = set()
        self.fencing = {session: 0 for session in SESSIONS}
        #: (session, router, number) that expired in the book unrenewed.
        self.expired: set[tuple[str, str, int]] = set()

    def live(self) -> list[str]:
        return [router for router in self.held if router not in self.dead]

    def advance(self, dt: float) -> None:
        for lease in self.book.leases():
            if lease.holder is not None and lease.expires_at <= self.now + dt:
                self.expired.add((lease.session, lease.holder, lease.fencing))
        self.now += dt

    def round(self, router: str, delay: float) -> None:
        """One lease round of ``router``: sent now, executed ``delay`` later."""
        if router in self.dead:
            return
        held = self.held[router]
        held.expire(self.now)
        sent = self.now
        moves = plan(router, self.live(), self.book.leases(), self.now)
        self.advance(delay)
        for session in moves.release:
            fencing = held.fencing(session)
            if fencing is not None:
                self.book.release(session, router, fencing, self.now)
            held.lost(session)
        for session in held.sessions():
            fencing = held.fencing(session)
            assert fencing is not None
            if self.book.renew(session, router, fencing, self.now, TTL) is None:
                held.lost(session)
            else:
                held.granted(session, fencing, sent, TTL)
        for session in moves.acquire:
            lease = self.book.acquire(session, router, self.now, TTL)
            if lease is not None:
                held.granted(session, lease.fencing, sent, TTL)

    def check(self) -> None:
        believers: dict[str, list[str]] = {}
        for router, held in self.held.items():
            if router in self.dead:
                continue
            held.expire(self.now)
            for session in held.sessions():
                believers.setdefault(session, []).append(router)
                fencing = held.fencing(session)
                assert fencing is not None
                assert self.book.check(session, router, fencing, self.now), (session, router, fencing, self.now)
        for session, routers in believers.items():
            assert len(routers) == 1, (session, routers)
        for lease in self.book.leases():
            assert lease.fencing >= self.fencing[lease.session]
            self.fencing[lease.session] = lease.fencing
        for session, router, fencing in self.expired:
            assert not self.book.check(session, router, fencing, self.now)


step = st.one_of(
    st.tuples(st.just("advance"), st.floats(0.1, 15.0)),
    st.tuples(st.just("round"), st.integers(0, 3), st.floats(0.0, 0.9)),
    st.tuples(st.just("stall"), st.integers(0, 3), st.floats(5.0, 40.0)),
    st.tuples(st.just("die"), st.integers(0, 3)),
    st.tuples(st.just("join"),),
)


def run(model: Model, steps: list[tuple]) -> None:
    for each in steps:
        kind = each[0]
        if kind == "advance":
            model.advance(each[1])
        elif kind == "round":
            model.round(f"r{each[1] % len(model.held)}", each[2])
        elif kind == "stall":
            # Everyone else goes on with rounds every 2 s; the stalled one
            # wakes with its old belief and must first look at its clock.
            stalled = f"r{each[1] % len(model.held)}"
            end = model.now + each[2]
            while model.now < end:
                for router in model.live():
                    if router != stalled:
                        model.round(router, 0.1)
                model.advance(2.0)
        elif kind == "die":
            victim = f"r{each[1] % len(model.held)}"
            if len(model.live()) > 1:
                model.dead.add(victim)
        else:
            model.held[f"r{len(model.held)}"] = HeldLeases()
        model.check()


@settings(max_examples=300, deadline=None)
@given(routers=st.integers(1, 3), steps=st.lists(step, max_size=40))
def test_one_holder_and_fencing_only_grows(routers: int, steps: list[tuple]) -> None:
    model = Model(routers)
    run(model, steps)


@settings(max_examples=150, deadline=None)
@given(routers=st.integers(1, 3), steps=st.lists(step, max_size=30))
def test_undisturbed_rounds_hold_every_session_within_share(routers: int, steps: list[tuple]) -> None:
    model = Model(routers)
    run(model, steps)
    # Settle: every live router runs a round every 2 s for a few lease times.
    for _ in range(40):
        for router in model.live():
            model.round(router, 0.1)
        model.advance(2.0)
        model.check()
    for router in model.live():
        model.round(router, 0.1)
    model.check()
    leases = model.book.leases()
    assert all(lease.live(model.now) and lease.holder in model.live() for lease in leases)
    share = fair_share(len(SESSIONS), len(model.live()))
    for router in model.live():
        assert len(model.held[router]) <= share + hysteresis(share)


def test_acquire_renew_release_by_the_rules() -> None:
    book = LeaseBook()
    book.ensure("s")
    first = book.acquire("s", "a", 0.0, TTL)
    assert first is not None and first.fencing == 1
    assert book.acquire("s", "b", 5.0, TTL) is None  # live, another's
    assert book.acquire("s", "a", 5.0, TTL).fencing == 1  # type: ignore[union-attr]  # own, live: same number
    assert book.renew("s", "a", 1, 14.9, TTL) is not None
    assert book.renew("s", "a", 1, 30.0, TTL) is None  # expired: lost
    taken = book.acquire("s", "b", 30.0, TTL)
    assert taken is not None and taken.fencing == 2
    assert not book.check("s", "a", 1, 31.0)
    assert book.release("s", "b", 2, 31.0)
    assert not book.check("s", "b", 2, 31.0)
    assert book.acquire("s", "a", 31.0, TTL).fencing == 3  # type: ignore[union-attr]


def test_a_joining_router_gets_its_share_back() -> None:
    model = Model(2)
    for _ in range(10):
        for router in model.live():
            model.round(router, 0.1)
        model.advance(2.0)
    assert sum(len(held) for held in model.held.values()) == len(SESSIONS)
    model.held["r2"] = HeldLeases()
    for _ in range(20):
        for router in model.live():
            model.round(router, 0.1)
        model.advance(2.0)
        model.check()
    share = fair_share(len(SESSIONS), 3)
    assert len(model.held["r2"]) >= share - hysteresis(share)
    assert sum(len(held) for held in model.held.values()) == len(SESSIONS)


def test_a_dead_routers_sessions_are_taken_after_expiry() -> None:
    model = Model(3)
    for _ in range(10):
        for router in model.live():
            model.round(router, 0.1)
        model.advance(2.0)
    victims = model.held["r0"].sessions()
    assert victims
    model.dead.add("r0")
    taken_at = math.inf
    for _ in range(20):
        for router in model.live():
            model.round(router, 0.1)
        model.advance(1.0)
        model.check()
        if all(any(session in model.held[r] for r in model.live()) for session in victims):
            taken_at = model.now
            break
    assert taken_at < 20 * 2.0 + TTL


@pytest.mark.parametrize("sessions,routers,share", [(100, 3, 34), (100, 1, 100), (0, 2, 0), (5, 0, 5)])
def test_fair_share(sessions: int, routers: int, share: int) -> None:
    assert fair_share(sessions, routers) == share
