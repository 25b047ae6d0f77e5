"""The provider's usage limit in the user-turn router, over the in-process
daemon: a limit one container session meets parks every session of its
account; a delivery while parked is kept and answered ``parked``; at the
reset each session's kept work runs once; a router started again while
parked resumes at the reset; a person resumes or cancels early.

The adapter here plays Claude Code's part as the ``claude-code`` adapter
reports it (a raw ``usage-limit`` event, an ``unanswered`` reason
``usage-limit: ...``); tests/e2e_claude and tests/e2e_mod run the real
binary. Real time: the resets are a second or two ahead and the schedule's
figures are small; every wait is for a condition, bounded by fail_after."""

from __future__ import annotations

import random
import time
from collections import Counter

import trio

from router.daemon import AdapterContext, AdapterTurn
from router.daemon.adapters.echo import emit_answer
from router.limits import ParkBook
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.support.polling import until
from wire.container import AdapterInfo, ContainerOutcome, Done, Unanswered, input_text

WAIT = 30


def book() -> ParkBook:
    return ParkBook(rng=random.Random(4), delay=300, stagger=200, jitter=100)


class LimitAdapter:
    """Answers ``got: <text>``, except while :attr:`resets_at` (epoch ms) is
    ahead: then each turn meets the usage limit, as the claude-code adapter
    reports it. Counts the turns each text ran and each reached the provider."""

    info = AdapterInfo(id="limit", version="1", capabilities=())

    def __init__(self) -> None:
        self.resets_at = 0
        self.ran: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()

    async def open(self, context: AdapterContext) -> "LimitSession":
        return LimitSession(self, context)


class LimitSession:
    def __init__(self, adapter: LimitAdapter, context: AdapterContext) -> None:
        self.adapter, self.context = adapter, context

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        text = input_text(turn.input)
        self.adapter.ran[text] += 1
        if time.time() * 1000 < self.adapter.resets_at:
            self.context.emit({"type": "raw", "value": {"type": "usage-limit", "resetsAt": self.adapter.resets_at,
                                                        "rateLimitType": "five_hour"}})
            return Unanswered(reason="usage-limit: You've hit your 5-hour limit")
        self.adapter.answered[text] += 1
        emit_answer(self.context, turn.operation_id, "got: " + text)
        return Done(text="got: " + text)


async def no_parks_left(log) -> None:
    """Until the record holds no park (a park's record goes once its work ran)."""
    while await log.call(log.parks):
        await trio.sleep(0.01)


async def states(router: TurnRouter) -> dict[str, str]:
    return {entry["id"]: entry["state"] for entry in await router.list()}


async def two_sessions(make_rig, nursery, park_book: ParkBook, reset_in: int):
    """An adapter that meets the limit for ``reset_in`` ms more, the router
    over it with its parking running, and sessions s1 and s2."""
    adapter = LimitAdapter()
    rig = await make_rig(adapter, park_book=park_book)
    await nursery.start(rig.router.parking.run)
    for name in ("s1", "s2"):
        await rig.router.create(name)
    adapter.resets_at = int(time.time() * 1000) + reset_in
    return adapter, rig, rig.router


async def test_a_limit_parks_the_account_keeps_what_comes_and_resumes_each_once(make_rig, nursery):
    adapter, rig, router = await two_sessions(make_rig, nursery, book(), 2_000)
    with trio.fail_after(WAIT):
        reply, body = await router.send("s1", "first", event_id="e1", wait=True)
        # Kept, not failed: the reply says so, with the park.
        assert body["reply"]["status"] == "unanswered" and body["reply"]["kept"] is True
        await until(lambda: router.parking.holding("s2") is not None)
        assert router.parking.holding("s1").resets_at == adapter.resets_at
        assert (await states(router))["s2"] == "parked"
        # A delivery while parked: kept, answered `parked` with the reset, nothing written.
        _, parked = await router.send("s2", "second", event_id="e2")
        assert parked["status"] == "parked" and parked["resetsAt"] == adapter.resets_at
        assert parked["resumeAt"] >= adapter.resets_at + 300
        _, again = await router.send("s2", "second", event_id="e2")  # a resend keeps nothing twice
        assert again["status"] == "parked"
        assert adapter.ran["second"] == 0
        await until(lambda: adapter.answered["first"] == 1 and adapter.answered["second"] == 1)
        await no_parks_left(rig.deliveries)
    assert adapter.ran == Counter({"first": 2, "second": 1})  # the limited turn, then its one resume
    log = rig.deliveries
    assert await log.call(log.kept, "s1") == [] == await log.call(log.kept, "s2")
    assert router.parking.holding("s1") is None and router.parking.holding("s2") is None
    # After the resume, a resend is answered from the record: nothing is written again.
    reply, answer = await router.send("s2", "second", event_id="e2")
    assert answer["status"] == "delivered" and answer["fromRecord"] is True
    assert adapter.ran["second"] == 1


async def test_a_router_started_again_while_parked_resumes_at_the_reset(make_rig, nursery):
    adapter = LimitAdapter()
    rig = await make_rig(adapter, park_book=book())
    adapter.resets_at = int(time.time() * 1000) + 2_500
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as first:
            registry = SessionRegistry()
            await first.start(registry.run)
            router = TurnRouter(deliveries=rig.deliveries, registry=registry, host=rig.host, park_book=book())
            await first.start(router.parking.run)
            await router.create("s1")
            await router.send("s1", "first", event_id="e1", wait=True)
            await until(lambda: router.parking.holding("s1") is not None)
            _, parked = await router.send("s1", "kept across", event_id="e2")
            assert parked["status"] == "parked"
            first.cancel_scope.cancel()  # the router stops while parked
        log = rig.deliveries
        # Every session of the account parked, the host's root among them.
        assert sorted(park.session for park in await log.call(log.parks)) == ["root", "s1"]
        registry = SessionRegistry()
        await nursery.start(registry.run)
        router = TurnRouter(deliveries=rig.deliveries, registry=registry, host=rig.host, park_book=book())
        await nursery.start(router.parking.run)
        assert router.parking.holding("s1") is not None  # still parked after the restart
        await until(lambda: adapter.answered["first"] == 1 and adapter.answered["kept across"] == 1)
        await no_parks_left(log)
    assert adapter.ran == Counter({"first": 2, "kept across": 1})


async def test_a_person_resumes_one_session_early_and_cancels_another(make_rig, nursery):
    adapter, rig, router = await two_sessions(make_rig, nursery, ParkBook(delay=3_600_000), 500)
    with trio.fail_after(WAIT):
        await router.send("s1", "first", event_id="e1", wait=True)
        await until(lambda: router.parking.holding("s2") is not None)
        await router.send("s2", "to cancel", event_id="e2")
        await trio.sleep(0.6)  # past the provider's reset; the park's own time is an hour later
        resumed = await router.resume("s1")
        assert resumed["resumed"] is True and "parked" in resumed["was"]
        await until(lambda: adapter.answered["first"] == 1)
        cancelled = await router.cancel_park("s2")
        assert cancelled == {"session": "s2", "cancelled": True, "dropped": ["e2"], "was": cancelled["was"]}
        assert (await router.cancel_park("s2"))["cancelled"] is False
        assert router.parking.holding("s2") is None and adapter.ran["to cancel"] == 0
        _, refused = await router.send("s2", "to cancel", event_id="e2")  # the person resends it
        assert refused["status"] == "delivered"
        await until(lambda: adapter.answered["to cancel"] == 1)


async def test_a_limit_one_router_learns_parks_the_account_in_another(make_rig, nursery, tmp_path):
    """Claude Code starts one router per session: the account limits file
    they share carries a limit from one router to the next."""
    shared = tmp_path / "account-limits.json"
    adapter = LimitAdapter()
    first = await make_rig(adapter, name="first", park_book=book(), shared_limits=shared)
    second = await make_rig(name="second", park_book=book(), shared_limits=shared)  # the echo adapter
    for rig in (first, second):
        await nursery.start(rig.router.parking.run)
    await first.router.create("a1")
    await second.router.create("b1")
    adapter.resets_at = int(time.time() * 1000) + 60_000
    with trio.fail_after(WAIT):
        await first.router.send("a1", "first", event_id="e1", wait=True)
        await until(lambda: shared.exists())
        # The other router parks its session of the account when it lists it, and keeps what comes.
        assert (await states(second.router))["b1"] == "parked"
        _, parked = await second.router.send("b1", "kept elsewhere", event_id="eb")
        assert parked["status"] == "parked" and parked["resetsAt"] == adapter.resets_at
        # A person resumes it early: the same limit in the file does not park it again.
        assert (await second.router.resume("b1"))["resumed"] is True
        _, answer = await second.router.send("b1", "after the resume", event_id="eb2", wait=True)
        assert answer["status"] == "delivered" and answer["reply"]["status"] == "done"


async def test_the_shared_file_is_read_again_only_when_it_changed(make_rig, nursery, tmp_path, monkeypatch):
    """Before each delivery the router checks the shared account limits: while
    the file keeps its identity no worker thread reads it; another router's
    write (a new file renamed over it) is seen by the next delivery."""
    from functools import partial

    from router.limits import shared as shared_limits
    from router.plugins import watched

    monkeypatch.setattr(watched, "COARSE_CLOCK_NS", 0)  # keep a file written a moment ago
    shared = tmp_path / "account-limits.json"
    shared_limits.record(shared, "someone-else", resets_at=1, limit_kind="five_hour", source="x", at=0)
    rig = await make_rig(name="one", park_book=book(), shared_limits=shared)
    await nursery.start(rig.router.parking.run)
    await rig.router.create("s1")
    reads = []
    real = trio.to_thread.run_sync

    async def counted(fn, *args, **kwargs):
        if (fn.func if isinstance(fn, partial) else fn) is shared_limits.read:
            reads.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    with trio.fail_after(WAIT):
        for n in range(4):
            _, answer = await rig.router.send("s1", f"m{n}", event_id=f"e{n}", wait=True)
            assert answer["status"] == "delivered"
        assert len(reads) <= 1  # the first check may read it; none after
        # Another router learns the account's limit: the file is replaced.
        shared_limits.record(shared, "default", resets_at=int(time.time() * 1000) + 60_000,
                             limit_kind="five_hour", source="elsewhere", at=0)
        _, parked = await rig.router.send("s1", "after", event_id="after")
        assert parked["status"] == "parked"
