"""The park scheduler on Trio: one task that sleeps until the next resume.

:class:`ParkTimer` owns a :class:`~router.limits.schedule.ParkBook` and one
task (:meth:`ParkTimer.run`, in the caller's nursery). The task sleeps in a
cancel scope whose deadline is the book's next resume time; a new or moved
park (:meth:`ParkTimer.limit`, :meth:`ParkTimer.member`) cancels the sleep,
so the deadline is set again (a restartable timer, never a time polled in a
loop). When it wakes it asks the book which parks are due and awaits
``on_resume`` for each, in the book's order, one at a time.

The book speaks epoch milliseconds; ``wall`` (default :func:`time.time`)
is where the epoch comes from, and the sleep converts the distance to the
next resume into Trio's clock, so a test on Trio's virtual clock passes a
``wall`` that follows it.

**Exactly once.** The book forgets a park when it answers it; the caller's
``on_resume`` keeps the park in its durable record until the park's kept
work has all run, marking each piece before it goes out. A process killed
in the middle restarts with the park still recorded (:meth:`restore`), so
its work runs again where it stopped, and each piece already marked is
skipped or answered by its id (the router's pieces are idempotent: an
event id, an operation id).

Error handling: ``on_resume`` raising is logged and the task goes on with
the next park (the park stays in the caller's record for the next start).
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable, Iterable

import trio

from router.limits.schedule import Park, ParkBook, Parked, Resume

__all__ = ["ParkTimer", "wall_ms"]

log = logging.getLogger("router.limits")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ParkTimer:
    """The book and its timer task (see the module docstring)."""

    def __init__(
        self,
        book: ParkBook,
        *,
        on_resume: Callable[[Resume], Awaitable[None]],
        wall: Callable[[], int] = wall_ms,
    ) -> None:
        self.book = book
        self._on_resume = on_resume
        self._wall = wall
        self._sleep: trio.CancelScope | None = None
        self.woken = 0

    def __repr__(self) -> str:
        return f"<ParkTimer {self.book!r} next={self.book.next_due()}>"

    def now(self) -> int:
        return self._wall()

    # ------------------------------------------------------------------ inputs, passed to the book

    def limit(self, account: str, resets_at: int, *, session: str, limit_kind: str = "") -> list[Parked]:
        effects = self.book.limit(account, resets_at, session=session, now=self.now(), limit_kind=limit_kind)
        self._rearm()
        return effects

    def member(self, session: str, account: str) -> list[Parked]:
        effects = self.book.member(session, account, self.now())
        if effects:
            self._rearm()
        return effects

    def restore(self, parks: Iterable[Park]) -> None:
        self.book.restore(parks)
        self._rearm()

    def resume_now(self, session: str) -> Resume | None:
        resume = self.book.resume_now(session)
        self._rearm()
        return resume

    def cancel(self, session: str) -> Park | None:
        park = self.book.cancel(session)
        self._rearm()
        return park

    def _rearm(self) -> None:
        if self._sleep is not None:
            self._sleep.cancel(reason="the park schedule changed")

    # ------------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            due = self.book.next_due()
            with trio.CancelScope() as sleep:
                self._sleep = sleep
                if due is not None:
                    sleep.deadline = trio.current_time() + max(0, due - self.now()) / 1000
                await trio.sleep_forever()
            self._sleep = None
            self.woken += 1
            for resume in self.book.due(self.now()):
                try:
                    await self._on_resume(resume)
                except Exception:
                    log.exception("resuming session %r failed; its park stays recorded", resume.park.session)
