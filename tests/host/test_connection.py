"""The link core without sockets (:mod:`router.host.connection`), and the
link's deadlines on virtual time: the give-up scope and the health wait."""

from __future__ import annotations

import math
import random

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.host.connection import REDIAL, GiveUp, HostLinkCore, Pause, Requests
from router.host.link import (
    Backoff,
    DaemonEndpoint,
    LinkDropped,
    LinkRefused,
    LinkUnreachable,
    wait_healthy,
)
from router.host.session_link import SessionLink
from router.host.settings import HostSettings
from router.host.store import Store
from wire.container import AdapterInfo

ADAPTER = AdapterInfo(id="echo", version="1", capabilities=("steer",))
DROPPED = LinkDropped("link-dropped", "the socket closed")


def core(give_up_after: float | None = None) -> HostLinkCore:
    return HostLinkCore(backoff=Backoff(base=1.0, cap=8.0, rng=random.Random(1)), give_up_after=give_up_after)


def live(link: HostLinkCore) -> None:
    link.attempt()
    link.hello_received()
    link.reconciling()
    link.reconciled("r1", ADAPTER)


# ---------------------------------------------------------------- requests

ASKS = st.sampled_from(["deliver", "configure", "abort a", "abort b", "abort c", "redial"])
EVENTS = st.sampled_from(["attempt", "hello", "reconciling", "reconciled", "take", "end", "interrupt"])
#: Where a connection may be for each connection event to happen.
PHASES = {
    "attempt": ("down",),
    "hello": ("dialling",),
    "reconciling": ("hello",),
    "reconciled": ("reconciling",),
    "take": ("live",),
    "interrupt": ("live",),
    "end": ("dialling", "hello", "reconciling", "live"),
}
NEXT = {"attempt": "dialling", "hello": "hello", "reconciling": "reconciling", "reconciled": "live", "end": "down"}


class Model:
    """What was asked and not done yet, as the module docstring says it is
    done: a reconcile does everything asked before it starts, a take hands
    out the rest, a dial does a redial."""

    def __init__(self) -> None:
        self.asked: dict[str, None] = {}

    def ask(self, name: str) -> None:
        self.asked[name] = None

    def expected_take(self) -> Requests | None:
        aborts = tuple(name.split(" ", 1)[1] for name in self.asked if name.startswith("abort "))
        deliver, configure = "deliver" in self.asked, "configure" in self.asked
        if not (deliver or configure or aborts):
            return None
        return Requests(deliver=deliver, configure=configure, aborts=aborts)

    def done(self, names: object) -> None:
        for name in list(self.asked):
            if name in names:  # type: ignore[operator]
                del self.asked[name]


def step(link: HostLinkCore, model: Model, phase: str, action: str) -> str:
    """Apply one action (a no-op where the phase does not allow it); the
    new phase. Every invariant is checked as it goes."""
    if action in ("deliver", "configure", "redial") or action.startswith("abort "):
        model.ask(action)
        if action == "deliver":
            link.ask_deliver()
        elif action == "configure":
            link.ask_configure()
        elif action == "redial":
            link.ask_redial()
        else:
            link.ask_abort([action.split(" ", 1)[1]])
        return phase
    if phase not in PHASES[action]:
        return phase
    if action == "attempt":
        link.attempt()
        model.done({"redial"})
    elif action == "hello":
        link.hello_received()
    elif action == "reconciling":
        link.reconciling()
        model.done(set(model.asked))
    elif action == "reconciled":
        link.reconciled("r1", ADAPTER)
    elif action == "take":
        expected = model.expected_take()
        taken = link.take()
        assert taken == expected  # everything outstanding, nothing already done
        model.done({"deliver", "configure", *(f"abort {op}" for op in taken.aborts)} if taken else ())
    elif action == "interrupt":
        assert (link.interrupt() is REDIAL) == ("redial" in model.asked)
    elif action == "end":
        decision = link.ended(DROPPED, now=0.0)
        assert decision == REDIAL if "redial" in model.asked else type(decision) is Pause
    return NEXT.get(action, phase)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(ASKS, EVENTS), max_size=60))
def test_any_sequence_leaves_nothing_asked_undone_and_nothing_done_twice(actions: list[str]) -> None:
    link, model, phase = core(), Model(), "down"
    for action in actions:
        phase = step(link, model, phase, action)
        assert set(link.pending()) == set(model.asked)
    # Whatever state it was left in, the next connection does the rest.
    if phase != "down":
        phase = step(link, model, phase, "end")
    for action in ("attempt", "hello", "reconciling", "reconciled", "take"):
        phase = step(link, model, phase, action)
    assert link.pending() == () and model.asked == {}
    assert link.take() is None


def test_aborts_are_taken_in_the_order_asked_each_once() -> None:
    link = core()
    live(link)
    link.ask_abort(["c", "a"])
    link.ask_abort(["b", "c"])
    assert link.take() == Requests(aborts=("c", "a", "b"))
    assert link.take() is None


# ---------------------------------------------------------------- decisions


def test_the_backoff_starts_over_after_a_good_connection_not_after_our_own_failure() -> None:
    link = core()
    link.started(0.0)
    for expected in (1, 2, 3):  # unreachable: the pauses grow
        link.attempt()
        assert type(link.ended(DROPPED, now=0.0)) is Pause
        assert link.backoff.attempt == expected
    live(link)
    link.ended(DROPPED, now=5.0)  # a good connection the peer dropped
    assert link.backoff.attempt == 1
    for expected in (2, 3, 4):  # a bug on every connection: no starting over
        live(link)
        failure = LinkDropped("internal-error", "the connection failed: ValueError()")
        assert type(link.ended(failure, now=5.0, internal=True)) is Pause
        assert link.backoff.attempt == expected
    assert link.internal_failures == 3 and link.connections == 4


def test_the_backoff_keeps_growing_while_connections_fail_soon_after_hello() -> None:
    """A daemon that fails right after ``hello``: every connection is
    reconciled and lost within a second. The backoff starts over only
    after a connection that stayed live ``healthy_after`` seconds (before,
    at every reconcile: a redial 1.3 times a second forever)."""
    link = HostLinkCore(backoff=Backoff(base=1.0, cap=8.0, rng=random.Random(1)), healthy_after=10.0)
    link.started(0.0)
    now = 0.0
    pauses = []
    for expected in range(1, 7):
        link.attempt()
        link.hello_received()
        link.reconciling()
        link.reconciled("r1", ADAPTER, now=now)
        decision = link.ended(DROPPED, now=now + 0.5)
        assert type(decision) is Pause and link.backoff.attempt == expected
        assert link.last_lived == 0.5
        pauses.append(decision.seconds)
        now += 0.5 + decision.seconds
    assert pauses[-1] >= 4.0  # at the cap's half at least: no tight loop
    assert link.short_lived == 6
    link.attempt()
    link.hello_received()
    link.reconciling()
    link.reconciled("r1", ADAPTER, now=now)
    link.ended(DROPPED, now=now + 10.0)  # healthy for a while, then lost
    assert link.backoff.attempt == 1


def test_a_failure_that_cannot_heal_gives_up_at_once() -> None:
    link = core()
    link.started(0.0)
    link.attempt()
    refused = LinkRefused("unauthorized", "wrong token")
    assert link.ended(refused, now=1.0) == GiveUp(refused)
    assert (link.state, link.failure) == ("failed", refused)


def test_a_redial_skips_the_pause_and_starts_the_backoff_over() -> None:
    link = core()
    live(link)
    link.ask_redial()
    assert link.interrupt() is REDIAL
    assert link.ended(None, now=3.0) is REDIAL
    assert link.backoff.attempt == 0
    link.attempt()
    assert not link.redial_asked and link.interrupt() is None


def test_the_give_up_deadline_moves_with_the_connections() -> None:
    link = core(give_up_after=30.0)
    assert link.give_up_deadline == math.inf
    link.started(100.0)
    assert link.give_up_deadline == 130.0
    link.attempt()
    link.ended(DROPPED, now=110.0)
    assert link.give_up_deadline == 130.0  # no hello: the clock runs on
    link.attempt()
    link.hello_received()
    assert link.give_up_deadline == math.inf  # no give-up while a hello holds
    link.ended(DROPPED, now=120.0)  # ... and a hello never reconciled did not reach the daemon
    assert link.give_up_deadline == 130.0
    live(link)
    assert link.give_up_deadline == math.inf
    link.ended(DROPPED, now=200.0)
    assert link.give_up_deadline == 230.0  # unreachable again from the end of a good one
    error = link.gave_up()
    assert (error.code, link.state) == ("link-dropped", "failed")
    assert error.message == "the socket closed; gave up after 30 s without a connection"
    assert core().give_up_deadline == math.inf  # no give_up_after: never


def test_its_repr_summarises_its_state() -> None:
    link = core()
    link.ask_deliver()
    assert repr(link) == "<HostLinkCore idle runtime=None connections=0 attempt=0 pending=('deliver',)>"


# ---------------------------------------------------------------- virtual time


async def test_the_health_wait_is_one_scope_with_its_pauses(autojump_clock: trio.abc.Clock) -> None:
    start = trio.current_time()
    checks: list[float] = []
    reported: list[str] = []

    async def check(endpoint: DaemonEndpoint) -> None:
        checks.append(trio.current_time() - start)
        raise LinkUnreachable("daemon-unhealthy", f"check {len(checks)}")

    with pytest.raises(LinkUnreachable) as caught:
        await wait_healthy(
            DaemonEndpoint("ws://h:1", "t"), timeout=10.0, check=check,
            failed=lambda error: reported.append(error.message),
        )  # fmt: skip
    assert trio.current_time() - start == 10.0
    # 250 ms doubling to 2 s (the reference's waitHealthy), until the scope ends.
    assert checks == [0.0, 0.25, 0.75, 1.75, 3.75, 5.75, 7.75, 9.75]
    assert caught.value.message == "check 8" and reported == [f"check {n}" for n in range(1, 9)]


async def test_a_health_wait_that_answers_returns_at_once(autojump_clock: trio.abc.Clock) -> None:
    start = trio.current_time()
    answers = iter([LinkUnreachable("daemon-unhealthy", "not yet"), None])

    async def check(endpoint: DaemonEndpoint) -> None:
        answer = next(answers)
        if answer is not None:
            raise answer

    await wait_healthy(DaemonEndpoint("ws://h:1", "t"), timeout=10.0, check=check)
    assert trio.current_time() - start == 0.25


class Owner:
    def __init__(self) -> None:
        self.failed_at: float | None = None

    def backoff(self) -> Backoff:
        return Backoff(base=1.0, cap=30.0, rng=random.Random(3))

    def settled(self, session: str, results: object) -> None:
        raise AssertionError("nothing settles here")

    def failed(self, link: SessionLink) -> None:
        self.failed_at = trio.current_time()

    def ended(self, link: SessionLink) -> None:
        pass


async def test_the_link_gives_up_exactly_at_its_deadline(autojump_clock: trio.abc.Clock, tmp_path) -> None:
    """A daemon that never answers its health check, on virtual time: the
    link's give-up scope ends it exactly ``give_up_after`` after it started,
    cutting the attempt in flight, with the health wait's last failure."""
    start = trio.current_time()
    attempts: list[float] = []

    async def never_healthy(endpoint: DaemonEndpoint, *, timeout: float, failed) -> None:
        attempts.append(trio.current_time() - start)
        with trio.move_on_after(timeout):
            failed(LinkUnreachable("daemon-unhealthy", "503"))
            await trio.sleep_forever()
        raise LinkUnreachable("daemon-unhealthy", "503")

    owner = Owner()
    with Store(tmp_path / "host.db") as store:
        link = SessionLink(
            owner, "root", store=store, endpoint=DaemonEndpoint("ws://h:1", "t"),
            settings=HostSettings(health_wait=10.0, give_up_after=25.0), health_wait=never_healthy,
        )  # fmt: skip
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run)
            await link.wait_state("connecting")
            assert link.statistics().give_up_deadline == start + 25.0
            await link.wait_state("failed")
    assert owner.failed_at == start + 25.0
    assert link.failure is not None and link.failure.code == "daemon-unhealthy"
    assert link.failure.message == "503; gave up after 25 s without a connection"
    # Three attempts: at 0, after 10 s of health wait and the first pause,
    # and again after 10 s and the second (the owner's seeded backoff); the
    # third was cut.
    pauses = Owner().backoff()
    first, second = pauses.next(), pauses.next()
    assert attempts == [0.0, 10.0 + first, 20.0 + first + second]
