"""Sans-IO: the lease rules, one driver per session, and the spread.

Theory of operation
-------------------
Every session of the cluster has one **lease**: a holder (a router's id, or
none), a **fencing number** and an expiry. The rules are those of the
``cluster_leases`` table (:mod:`router.cluster.pg` writes each one as a single
conditional ``UPDATE ... RETURNING`` on the database's clock); this module
states them on a clock handed in, so they are tested without a database:

- **acquire**: a lease that is free (no holder, or expired) goes to the
  caller with the next fencing number; a lease the caller already holds
  and that is still live is extended under the same number; a live lease of
  another router is refused.
- **renew**: extends a live lease of the caller under the number it holds;
  a lease that expired, or that another router took, is lost (no renew
  brings it back: only a new acquire, with a new number).
- **release**: the holder hands the lease back at once; the number stays,
  so the next acquire moves it on.
- **check** (every write of a session's record carries it): the caller is
  the holder, under this number, and the lease has not expired.

So the fencing number of a session only grows, and at any instant at most
one ``(holder, number)`` passes ``check``: a router that stalled past its
expiry (SIGSTOP, a partition) finds every write refused when it wakes,
even before it learns it lost the lease.

The holder's side (:class:`HeldLeases`) keeps the router's own belief: a
lease counts as held until ``sent + ttl - margin``, where ``sent`` is when
the acquire or renew that granted it was *sent* (the database set its
expiry at ``executed + ttl``, later), so the router stops driving a session
before the database would give it to another. The belief is a courtesy
(links close in time); the check is the guarantee.

**The spread** (:func:`plan`): each live router aims at a fair share,
``ceil(sessions / live routers)``; a router under its share takes free
leases (in an order of its own, so routers racing for the same free leases
mostly want different ones), and a router above its share plus a margin
(the hysteresis: without it two routers hand one session back and forth)
hands back the excess, so a router that joins gets sessions back. A free
lease is taken by any router under share, so a dead router's sessions are
taken over as soon as its leases expire.
"""

from __future__ import annotations

import hashlib
import math
from typing import Collection, Final, Iterable, Mapping

import attrs

__all__ = [
    "HOLD_MARGIN",
    "HeldLeases",
    "Lease",
    "LeaseBook",
    "Plan",
    "fair_share",
    "hysteresis",
    "plan",
    "preference",
]

#: Seconds before the database's expiry a router stops believing it holds
#: a lease (ours: covers a renew's round trip and a scheduling hiccup).
HOLD_MARGIN: Final = 1.0


@attrs.frozen(kw_only=True)
class Lease:
    """One session's lease as the book (the table) has it."""

    session: str
    holder: str | None
    fencing: int
    expires_at: float

    def live(self, now: float) -> bool:
        return self.holder is not None and self.expires_at > now


class LeaseBook:
    """The leases table's rules on a clock handed in (see the module
    docstring). Each method is one statement of :mod:`router.cluster.pg`."""

    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}

    def __repr__(self) -> str:
        return f"<LeaseBook sessions={len(self._leases)}>"

    def ensure(self, session: str) -> None:
        """The session exists in the book (free, number 0) if it did not."""
        self._leases.setdefault(session, Lease(session=session, holder=None, fencing=0, expires_at=-math.inf))

    def get(self, session: str) -> Lease | None:
        return self._leases.get(session)

    def sessions(self) -> list[str]:
        return sorted(self._leases)

    def leases(self) -> list[Lease]:
        return [self._leases[each] for each in sorted(self._leases)]

    def acquire(self, session: str, holder: str, now: float, ttl: float) -> Lease | None:
        """The lease for ``holder``, or None when another holds it live."""
        current = self._leases.get(session)
        if current is None:
            return None
        if current.live(now) and current.holder != holder:
            return None
        fencing = current.fencing if current.live(now) else current.fencing + 1
        lease = Lease(session=session, holder=holder, fencing=fencing, expires_at=now + ttl)
        self._leases[session] = lease
        return lease

    def renew(self, session: str, holder: str, fencing: int, now: float, ttl: float) -> Lease | None:
        """The extended lease, or None: it was lost (expired or taken)."""
        if not self.check(session, holder, fencing, now):
            return None
        lease = attrs.evolve(self._leases[session], expires_at=now + ttl)
        self._leases[session] = lease
        return lease

    def release(self, session: str, holder: str, fencing: int, now: float) -> bool:
        """Hand a held lease back; False when it was not held (any more)."""
        if not self.check(session, holder, fencing, now):
            return False
        self._leases[session] = attrs.evolve(self._leases[session], holder=None, expires_at=now)
        return True

    def check(self, session: str, holder: str, fencing: int, now: float) -> bool:
        """Whether a write by ``holder`` under ``fencing`` may commit now."""
        lease = self._leases.get(session)
        return lease is not None and lease.holder == holder and lease.fencing == fencing and lease.expires_at > now


class HeldLeases:
    """One router's belief about the leases it holds (see the module
    docstring): session → fencing number, and until when it counts."""

    def __init__(self, margin: float = HOLD_MARGIN) -> None:
        self.margin = margin
        self._held: dict[str, tuple[int, float]] = {}

    def __repr__(self) -> str:
        return f"<HeldLeases {len(self._held)}>"

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, session: object) -> bool:
        return session in self._held

    def sessions(self) -> list[str]:
        return sorted(self._held)

    def fencing(self, session: str) -> int | None:
        held = self._held.get(session)
        return None if held is None else held[0]

    def granted(self, session: str, fencing: int, sent: float, ttl: float) -> bool:
        """An acquire or renew sent at ``sent`` returned ``fencing``: held
        until ``sent + ttl - margin``. True when the session is newly held
        (or held under a new number: a new driver's start)."""
        before = self._held.get(session)
        self._held[session] = (fencing, sent + ttl - self.margin)
        return before is None or before[0] != fencing

    def lost(self, session: str) -> bool:
        """The database said no (a renew that returned nothing), or the
        router handed it back: no longer held. True when it was held."""
        return self._held.pop(session, None) is not None

    def expire(self, now: float) -> list[str]:
        """The leases whose belief ran out (no renew came back in time):
        dropped, and returned, so their drivers stop."""
        gone = [session for session, (_, until) in self._held.items() if until <= now]
        for session in gone:
            del self._held[session]
        return sorted(gone)

    def next_expiry(self) -> float:
        return min((until for _, until in self._held.values()), default=math.inf)


def fair_share(sessions: int, routers: int) -> int:
    """The most sessions a live router aims at: ``ceil(sessions / routers)``."""
    return math.ceil(sessions / max(1, routers))


def hysteresis(share: int) -> int:
    """How far above its share a router goes before it hands sessions back
    (ours: a tenth of the share, at least one, so one session more or less
    never moves anything)."""
    return max(1, share // 10)


def preference(session: str, router: str) -> int:
    """A stable per-(session, router) order (rendezvous hashing): a router
    takes free sessions and hands back held ones in this order, so routers
    racing for the same free leases mostly want different ones, and hand
    back the ones another prefers."""
    digest = hashlib.blake2b(f"{session}\0{router}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@attrs.frozen(kw_only=True)
class Plan:
    """What one router does this round: leases to try to take, to hand back."""

    acquire: tuple[str, ...]
    release: tuple[str, ...]


def plan(me: str, routers: Collection[str], leases: Iterable[Lease], now: float) -> Plan:
    """This round's moves for router ``me`` (see the module docstring).
    ``routers`` are the live routers (``me`` counted in any case)."""
    live_routers = set(routers) | {me}
    leases = list(leases)
    share = fair_share(len(leases), len(live_routers))
    mine = sorted((lease.session for lease in leases if lease.live(now) and lease.holder == me),
                  key=lambda session: preference(session, me))
    free = sorted((lease.session for lease in leases if not lease.live(now)),
                  key=lambda session: -preference(session, me))
    if len(mine) > share + hysteresis(share):
        return Plan(acquire=(), release=tuple(mine[: len(mine) - share]))
    room = max(0, share - len(mine))
    return Plan(acquire=tuple(free[:room]), release=())


def counts(leases: Iterable[Lease], now: float) -> Mapping[str, int]:
    """Live leases per holder."""
    out: dict[str, int] = {}
    for lease in leases:
        if lease.live(now):
            assert lease.holder is not None
            out[lease.holder] = out.get(lease.holder, 0) + 1
    return out
