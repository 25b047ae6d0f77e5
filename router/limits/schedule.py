"""When parked sessions resume: the park scheduler, without I/O.

Theory of operation
-------------------
The provider (a Claude Code subscriber's account) answers a request with
its *usage limit* and the epoch second the limit resets at. Every session
signed in to that account would meet the same answer, so the moment one
session learns of a limit, every session of its account **parks**: it
takes no writes until the reset, its work is kept, and at the reset each
resumes once. This class decides who parks and when each resumes; the Trio
layer (:mod:`router.limits.runner`) keeps the record, sleeps until
:meth:`ParkBook.next_due` and carries out what :meth:`ParkBook.due` says.

Inputs, each a plain method call that answers the effects to carry out:

=====================================  ================================================
``member(session, account, now)``      a session of ``account`` is known (opened,
                                       listed): it parks at once if the account
                                       is limited now
``limit(account, resets_at, ...)``     a session learned the account's limit
``due(now)``                           the clock moved: the sessions to resume now
``resume_now(session)``                a person resumes a session early
``cancel(session)``                    a person ends a park and drops its kept work
``restore(parks)``                     a restart: the durable parks, as they were
=====================================  ================================================

Effects are :class:`Parked` (record it, tell the viewers) and
:class:`Resume` (run the session's kept work, once). Nothing changes when a
method raises.

**Every time is an epoch in milliseconds** (an ``int``): the provider's
reset is an epoch, and local time never enters (a reset shown in another
time zone is the same number).

**The schedule.** A park's resume time is fixed when it parks and stored
with it, so a restart resumes it at the same instant and a reloaded book
draws no new jitter: ``resets_at + delay + slot * stagger + jitter``, where
``slot`` numbers the sessions of the account in the order they parked
(0, 1, 2 ...) and ``jitter`` is drawn once, in ``[0, jitter)``, from the
book's seeded RNG. With ``jitter <= stagger`` the sessions of one account
resume in the order they parked, at least ``stagger - jitter`` apart, so
they do not all reach the provider in one second. A later limit of the
same account (the reset moved on) moves every park of it to the new reset,
keeping slots and jitter.

**Exactly once.** :meth:`due` removes each park it answers: a second call
never answers it again; the Trio layer marks the kept work it runs, so a
restart in the middle neither runs it twice nor drops it (see
:mod:`router.limits.runner`).
"""

from __future__ import annotations

import heapq
import random
from typing import Final, Iterable

import attrs

__all__ = [
    "DELAY_MS",
    "JITTER_MS",
    "STAGGER_MS",
    "Park",
    "ParkBook",
    "ParkBookStatistics",
    "Parked",
    "Resume",
]

#: How long after the provider's reset the first session resumes (ours: the
#: reset is a whole epoch second and our clock may be behind the provider's
#: by a few seconds; a resume into a limit that has not yet reset would
#: park again for nothing).
DELAY_MS: Final = 5_000
#: The gap between two sessions of one account at the reset (ours: two
#: sessions a second reach the provider, so a hundred parked sessions are
#: all back within a minute).
STAGGER_MS: Final = 500
#: The random part of each resume time, drawn once in ``[0, JITTER_MS)``
#: (ours: no more than the stagger, so the order holds; routers on two
#: machines parked on one account do not resume in lock step).
JITTER_MS: Final = 500


@attrs.frozen(kw_only=True)
class Park:
    """One parked session: its account's limit and when it resumes."""

    session: str
    account: str
    #: The provider's reset, epoch ms.
    resets_at: int
    #: The provider's name for the limit (``five_hour``, ``seven_day``...);
    #: "" when it gave none.
    limit_kind: str
    #: The session that learned of the limit.
    source: str
    #: When it parked, epoch ms.
    since: int
    #: Its place among its account's parks (the stagger's multiplier).
    slot: int
    #: Drawn once, in ``[0, jitter)`` ms.
    jitter: int
    #: When it resumes, epoch ms.
    resume_at: int

    def to_json(self) -> dict[str, object]:
        return {"account": self.account, "resetsAt": self.resets_at, "limitKind": self.limit_kind,
                "source": self.source, "since": self.since, "resumeAt": self.resume_at}


@attrs.frozen(kw_only=True)
class Parked:
    """Effect: ``park`` is new (or moved to a later reset): keep it durably
    and tell the session's viewers."""

    park: Park


@attrs.frozen(kw_only=True)
class Resume:
    """Effect: run the session's kept work now, once. ``why`` is ``reset``
    (its time came) or ``person`` (resumed early)."""

    park: Park
    why: str


@attrs.frozen(kw_only=True)
class ParkBookStatistics:
    """What :meth:`ParkBook.statistics` answers: sessions parked, accounts
    at their limit, sessions known per account, and resumes so far."""

    parked: int
    accounts: int
    members: int
    resumed: int


class ParkBook:
    """Who is parked and when each resumes (see the module docstring).

    ``delay``, ``stagger`` and ``jitter`` are milliseconds; ``rng`` draws
    the jitter (seed it for a repeatable schedule)."""

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        delay: int = DELAY_MS,
        stagger: int = STAGGER_MS,
        jitter: int = JITTER_MS,
    ) -> None:
        if min(delay, stagger, jitter) < 0:
            raise ValueError("delay, stagger and jitter are not negative")
        self.delay, self.stagger, self.jitter = delay, stagger, jitter
        self._rng = rng or random.Random()
        self._parks: dict[str, Park] = {}
        #: account -> (resets_at, limit_kind, source) of its latest limit.
        self._limits: dict[str, tuple[int, str, str]] = {}
        self._members: dict[str, str] = {}
        self._by_account: dict[str, set[str]] = {}
        self._next_slot: dict[str, int] = {}
        #: account -> how many of its sessions are parked.
        self._count: dict[str, int] = {}
        #: (resume_at, session) for every park; stale pairs are skipped.
        self._heap: list[tuple[int, str]] = []
        self.resumed = 0

    def __repr__(self) -> str:
        return f"<ParkBook parked={len(self._parks)} limited={sorted(self._limits)} resumed={self.resumed}>"

    def statistics(self) -> ParkBookStatistics:
        return ParkBookStatistics(parked=len(self._parks), accounts=len(self._limits), members=len(self._members),
                                  resumed=self.resumed)

    # ------------------------------------------------------------------ reading

    def park_of(self, session: str) -> Park | None:
        return self._parks.get(session)

    def parks(self) -> list[Park]:
        """Every park, in resume order."""
        return sorted(self._parks.values(), key=lambda park: (park.resume_at, park.session))

    def limit_of(self, account: str) -> int | None:
        """The account's reset while parks of it wait, else None."""
        limit = self._limits.get(account)
        return None if limit is None else limit[0]

    def next_due(self) -> int | None:
        """The earliest resume time (epoch ms), or None when nothing is parked."""
        while self._heap:
            at, session = self._heap[0]
            park = self._parks.get(session)
            if park is not None and park.resume_at == at:
                return at
            heapq.heappop(self._heap)
        return None

    # ------------------------------------------------------------------ inputs

    def member(self, session: str, account: str, now: int) -> list[Parked]:
        """``session`` belongs to ``account``; a session new to the account
        parks if the account is limited (one known before does not: a person
        may have resumed it early)."""
        if self._members.get(session) == account:
            return []
        self._join(session, account)
        limit = self._limits.get(account)
        if limit is None or session in self._parks:
            return []
        resets_at, kind, source = limit
        return [self._park(session, account, resets_at, kind, source, now)]

    def limit(self, account: str, resets_at: int, *, session: str, now: int, limit_kind: str = "") -> list[Parked]:
        """``session`` (of ``account``) learned the account's limit, which
        resets at ``resets_at``. Every known session of the account parks
        (``session`` first); parks of an earlier reset move to this one.
        A reset already past still parks until ``resets_at + delay``: the
        provider said no just now."""
        self._join(session, account)
        known = self._limits.get(account)
        if known is not None and known[0] >= resets_at:
            resets_at, limit_kind = known[0], known[1]
        self._limits[account] = (resets_at, limit_kind, session)
        effects: list[Parked] = []
        for each in [session, *sorted(self._by_account[account] - {session})]:
            park = self._parks.get(each)
            if park is None:
                effects.append(self._park(each, account, resets_at, limit_kind, session, now))
            elif park.resets_at < resets_at:
                moved = self._schedule(attrs.evolve(park, resets_at=resets_at, limit_kind=limit_kind))
                effects.append(Parked(park=moved))
        return effects

    def due(self, now: int) -> list[Resume]:
        """Every park whose time has come at ``now``, in resume order, each
        answered once and forgotten."""
        out: list[Resume] = []
        while (at := self.next_due()) is not None and at <= now:
            _, session = heapq.heappop(self._heap)
            out.append(Resume(park=self._unpark(session), why="reset"))
        return out

    def resume_now(self, session: str) -> Resume | None:
        """A person resumes ``session`` before its time; None when it is not
        parked. Its account stays limited for the others."""
        if session not in self._parks:
            return None
        return Resume(park=self._unpark(session), why="person")

    def cancel(self, session: str) -> Park | None:
        """A person ends ``session``'s park; its kept work is dropped (the
        Trio layer answers it). None when it is not parked."""
        if session not in self._parks:
            return None
        return self._unpark(session)

    def restore(self, parks: Iterable[Park]) -> None:
        """Reload the durable parks after a restart, exactly as stored (no
        new jitter, no new slots): their accounts are limited again."""
        for park in parks:
            if park.session not in self._parks:
                self._count[park.account] = self._count.get(park.account, 0) + 1
            self._parks[park.session] = park
            self._join(park.session, park.account)
            known = self._limits.get(park.account)
            if known is None or known[0] < park.resets_at:
                self._limits[park.account] = (park.resets_at, park.limit_kind, park.source)
            self._next_slot[park.account] = max(self._next_slot.get(park.account, 0), park.slot + 1)
            heapq.heappush(self._heap, (park.resume_at, park.session))

    # ------------------------------------------------------------------ inner

    def _join(self, session: str, account: str) -> None:
        before = self._members.get(session)
        if before is not None and before != account:
            self._by_account[before].discard(session)
        self._members[session] = account
        self._by_account.setdefault(account, set()).add(session)

    def _park(self, session: str, account: str, resets_at: int, kind: str, source: str, now: int) -> Parked:
        slot = self._next_slot.get(account, 0)
        self._next_slot[account] = slot + 1
        jitter = self._rng.randrange(self.jitter) if self.jitter else 0
        park = Park(session=session, account=account, resets_at=resets_at, limit_kind=kind, source=source,
                    since=now, slot=slot, jitter=jitter, resume_at=0)
        return Parked(park=self._schedule(park))

    def _schedule(self, park: Park) -> Park:
        park = attrs.evolve(park, resume_at=park.resets_at + self.delay + park.slot * self.stagger + park.jitter)
        if park.session not in self._parks:
            self._count[park.account] = self._count.get(park.account, 0) + 1
        self._parks[park.session] = park
        heapq.heappush(self._heap, (park.resume_at, park.session))
        return park

    def _unpark(self, session: str) -> Park:
        park = self._parks.pop(session)
        self.resumed += 1
        self._count[park.account] -= 1
        if not self._count[park.account]:
            del self._count[park.account]
            # The account's last park ended: it is no longer limited, and
            # the next limit numbers its slots from 0 again.
            self._limits.pop(park.account, None)
            self._next_slot.pop(park.account, None)
        return park
