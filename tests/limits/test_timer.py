"""The park timer on Trio's virtual clock (``autojump_clock``): thousands of
sessions resume once each, at their times; a restart in the middle (the
durable parks reloaded into a new timer) neither runs one twice nor drops
one; a schedule change re-arms the sleep."""

from __future__ import annotations

import random

import trio

from router.limits import ParkBook, ParkTimer, Resume

#: Where the virtual clock's 0 falls on the epoch (ms): 2026-12-01T00:00:00Z.
EPOCH0 = 1_796_083_200_000


def wall() -> int:
    return EPOCH0 + int(trio.current_time() * 1000)


async def test_thousands_resume_once_each_at_their_time(autojump_clock):
    ran: list[tuple[str, int]] = []

    async def on_resume(resume: Resume) -> None:
        ran.append((resume.park.session, wall()))

    timer = ParkTimer(ParkBook(rng=random.Random(5), delay=5_000, stagger=50, jitter=50), on_resume=on_resume,
                      wall=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(timer.run)
        for n in range(2_000):
            timer.member(f"s{n}", f"acct{n % 4}")
        for n in range(4):
            timer.limit(f"acct{n}", wall() + 60_000 * (n + 1), session=f"s{n}", limit_kind="five_hour")
        await trio.sleep(4 * 60 + 5 + 60)  # past the last reset, its delay and 500 staggered sessions
        nursery.cancel_scope.cancel()
    assert sorted(session for session, _ in ran) == sorted(f"s{n}" for n in range(2_000))
    by_session = dict(ran)
    for n in range(2_000):
        park_reset = EPOCH0 + 60_000 * (n % 4 + 1)
        assert by_session[f"s{n}"] >= park_reset + 5_000


async def test_a_restart_in_the_middle_runs_each_once(autojump_clock):
    """The durable record is the list of parks not yet resumed (the router
    drops a park once its work ran); a restart reloads it."""
    durable: dict[str, object] = {}
    ran: list[str] = []

    async def on_resume(resume: Resume) -> None:
        ran.append(resume.park.session)
        durable.pop(resume.park.session)

    def start() -> ParkTimer:
        return ParkTimer(ParkBook(rng=random.Random(9), delay=1_000, stagger=1_000, jitter=500),
                         on_resume=on_resume, wall=wall)

    first = start()
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        for n in range(100):
            first.member(f"s{n}", "A")
        for effect in first.limit("A", wall() + 10_000, session="s0"):
            durable[effect.park.session] = effect.park
        await trio.sleep(11 + 40)  # the delay, then about 40 of the 100 staggered sessions
        nursery.cancel_scope.cancel()
    halfway = list(ran)
    assert 20 < len(halfway) < 80

    second = start()
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        second.restore(durable.values())  # type: ignore[arg-type]
        await trio.sleep(200)
        nursery.cancel_scope.cancel()
    assert sorted(ran) == sorted(f"s{n}" for n in range(100))
    assert len(ran) == len(set(ran)) and not durable


async def test_a_new_park_re_arms_a_longer_sleep(autojump_clock):
    ran: list[tuple[str, float]] = []

    async def on_resume(resume: Resume) -> None:
        ran.append((resume.park.session, trio.current_time()))

    timer = ParkTimer(ParkBook(delay=0, stagger=0, jitter=0), on_resume=on_resume, wall=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(timer.run)
        timer.limit("A", wall() + 3_600_000, session="late")
        await trio.sleep(1)
        timer.limit("B", wall() + 10_000, session="soon")  # earlier than the sleep's deadline
        await trio.sleep(3_700)
        nursery.cancel_scope.cancel()
    assert [session for session, _ in ran] == ["soon", "late"]
    assert ran[0][1] == 11.0 and ran[1][1] == 3_600.0


async def test_a_resume_that_raises_leaves_the_others_running(autojump_clock):
    ran: list[str] = []

    async def on_resume(resume: Resume) -> None:
        if resume.park.session == "bad":
            raise OSError("the record could not be written")
        ran.append(resume.park.session)

    timer = ParkTimer(ParkBook(delay=0, stagger=10, jitter=0), on_resume=on_resume, wall=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(timer.run)
        timer.member("good", "A")
        timer.limit("A", wall() + 1_000, session="bad")
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert ran == ["good"]
