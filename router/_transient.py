"""The store's transient failures: which errors are worth another try, how
many tries, how long apart; and the refusal a caller gets when the budget
is spent.

Theory of operation
-------------------

A record's database can blink without being wrong: PostgreSQL restarts
(fast or immediate), an operator terminates a backend, the network drops
the connection, the disk fills and is freed. None of these says anything
about the statement that met it, and each is over after a while. So every
worker that runs a record's transactions (the group commit of the host's
store and of the delivery record, the cluster's pool, the turn records)
asks one :class:`RetryPolicy` what a failure means:

- :meth:`RetryPolicy.transient` sorts the error: psycopg's
  ``OperationalError`` and its subclasses (``AdminShutdown``,
  ``CrashShutdown``, ``CannotConnectNow``, a lost connection, a lock or
  serialization failure) and the end of a transaction left idle past
  ``idle_in_transaction_session_timeout`` (25P03); SQLite's ``SQLITE_FULL``, ``SQLITE_IOERR``,
  ``SQLITE_BUSY``, ``SQLITE_LOCKED`` and ``SQLITE_CANTOPEN`` (by the error
  code Python 3.11 keeps on the exception, ``sqlite_errorcode``, or its
  sentence); an ``OSError`` whose errno is ``ENOSPC``, ``EDQUOT`` or
  ``EIO``; and :class:`StoreUnavailable` itself (a nested worker already
  gave up). Anything else (a constraint, a syntax error, the fence's
  ``lease-lost``, a bug) is the statement's own doing and is never retried.
- :class:`Attempts` (one per call) says, at each failure, either "again
  after ``d`` seconds" or "give up": the delays grow from
  :attr:`RetryPolicy.first` by :attr:`RetryPolicy.factor` up to
  :attr:`RetryPolicy.most`, with up to :attr:`RetryPolicy.jitter` of each
  taken off at random (so routers that met the same restart do not come
  back in step), and no delay ends past :attr:`RetryPolicy.budget` seconds
  after the first failure.

The policy is sans-IO: the caller owns the clock and the sleep (Trio's),
and what is retried is always a *whole* transaction (a call's function,
which begins, and commits or rolls back, its own transaction), never a part
of one. A retried transaction begins again, so it runs the fences again:
a router that lost a lease meanwhile is refused as any other write is.

When the budget is spent the caller raises :class:`StoreUnavailable`
(``store-unavailable``, HTTP 503), whose sentence says to resend with the
same event id: the work was not done, and doing it again is safe, because
every write a client starts is idempotent on its id.
"""

from __future__ import annotations

import errno
import math
import os
import random
import sqlite3
import sys
from typing import Awaitable, Callable, Final, Mapping, TypeVar

import attrs
import trio

from router.errors import Refusal

__all__ = [
    "Attempts", "BUDGET_ENV", "DEFAULT_POLICY", "NO_RETRY", "RetryPolicy", "StoreUnavailable", "is_transient",
    "retrying", "unavailable",
]

T = TypeVar("T")

#: SQLite's primary result codes that say "the disk or the file, not the
#: statement" (sqlite.org/rc.html): BUSY 5, LOCKED 6, IOERR 10, FULL 13,
#: CANTOPEN 14. An extended code carries its primary one in its low byte.
_SQLITE_TRANSIENT: Final = frozenset({5, 6, 10, 13, 14})
#: The same, by SQLite's own sentences (an error built without the code).
_SQLITE_SENTENCES: Final = ("database or disk is full", "disk i/o error", "database is locked",
                            "unable to open database file")
#: PostgreSQL SQLSTATEs psycopg does not file under ``OperationalError``
#: that still say "the session, not the statement": 25P03, the server ended
#: a transaction left idle past ``idle_in_transaction_session_timeout`` (a
#: stalled router; docs/cluster.md).
_PG_TRANSIENT: Final = frozenset({"25P03"})
#: ``OSError`` numbers that are the disk's state, not the path's.
_OS_TRANSIENT: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


class StoreUnavailable(Refusal):
    """The record's database failed transiently past the retry budget: this
    request was not done; resend it with the same event id."""


def unavailable(error: BaseException, what: str = "the store") -> StoreUnavailable:
    """The refusal a caller gets for ``error`` once the budget is spent."""
    if isinstance(error, StoreUnavailable):
        return error
    reason = " ".join(str(error).split())[:200] or type(error).__name__
    return StoreUnavailable(
        "store-unavailable",
        f"{what} is unavailable for now ({type(error).__name__}: {reason}); nothing was done: "
        "resend with the same event id",
        cause=type(error).__name__,
    )


def _transient_sqlite(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if type(code) is int and code & 0xFF in _SQLITE_TRANSIENT:
        return True
    text = str(error).lower()
    return any(sentence in text for sentence in _SQLITE_SENTENCES)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is the database blinking (see the module docstring)."""
    if isinstance(error, StoreUnavailable):
        return True
    if isinstance(error, sqlite3.Error):
        return _transient_sqlite(error)
    if isinstance(error, OSError):
        return error.errno in _OS_TRANSIENT
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(error, psycopg.Error):
        # The fence's refusal has a SQLSTATE of its own class (RL409), which
        # psycopg does not map to OperationalError: never retried.
        return isinstance(error, psycopg.OperationalError) or getattr(error, "sqlstate", None) in _PG_TRANSIENT
    return False


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Which errors are transient, the budget, the backoff (see the module
    docstring). Frozen: one policy is shared by every worker."""

    #: Seconds from the first failure within which a retry may start.
    budget: float = 8.0
    #: The first delay, and how each next one grows, up to ``most``.
    first: float = 0.05
    factor: float = 2.0
    most: float = 1.0
    #: The share of each delay that may be taken off at random.
    jitter: float = 0.25
    #: Whether an error is worth another try.
    transient: Callable[[BaseException], bool] = is_transient

    def __attrs_post_init__(self) -> None:
        if not (self.budget >= 0 and self.first > 0 and self.factor >= 1 and self.most >= self.first
                and 0 <= self.jitter < 1):
            raise ValueError(f"a retry policy needs budget >= 0, 0 < first <= most, factor >= 1, "
                             f"0 <= jitter < 1: {self!r}")

    def start(self, *, rng: random.Random | None = None) -> Attempts:
        """The attempts of one call."""
        return Attempts(self, rng or random.Random())


#: The environment variable that sets :attr:`RetryPolicy.budget` of
#: :data:`DEFAULT_POLICY` (seconds, 0 to 300), read once when the router
#: starts; the process tests shorten it.
BUDGET_ENV: Final = "ROUTER_STORE_RETRY_BUDGET"


def _budget(env: Mapping[str, str]) -> float:
    text = env.get(BUDGET_ENV)
    if text is None:
        return 8.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 300:
        raise SystemExit(f"router: {BUDGET_ENV}={text!r} is not a number of seconds from 0 to 300; "
                         "set it right or unset it")
    return value


#: What every worker uses: about eight seconds of tries (a PostgreSQL fast
#: or immediate restart on one machine is back within a second or two;
#: longer, the request is refused and the client resends it).
DEFAULT_POLICY: Final = RetryPolicy(budget=_budget(os.environ))
#: Never retry (a transient error still becomes ``store-unavailable``).
NO_RETRY: Final = RetryPolicy(budget=0.0)


class Attempts:
    """One call's tries: :meth:`failed` with each failure and the time it
    met it, the delay before the next try or ``None`` (give up, raise)."""

    __slots__ = ("policy", "rng", "tries", "began", "_next")

    def __init__(self, policy: RetryPolicy, rng: random.Random) -> None:
        self.policy = policy
        self.rng = rng
        self.tries = 0
        #: When the first failure came (the budget counts from it).
        self.began: float | None = None
        self._next = policy.first

    def __repr__(self) -> str:
        return f"<Attempts tries={self.tries} began={self.began}>"

    def failed(self, error: BaseException, now: float) -> float | None:
        """The seconds to wait before trying again, or ``None``: ``error``
        is not transient, or the budget is spent."""
        self.tries += 1
        if not self.policy.transient(error):
            return None
        if self.began is None:
            self.began = now
        left = self.began + self.policy.budget - now
        if left <= 0:
            return None
        delay = self._next * (1 - self.policy.jitter * self.rng.random())
        self._next = min(self._next * self.policy.factor, self.policy.most)
        return min(delay, left)


# --------------------------------------------------------------------------- Trio

async def retrying(attempt: Callable[[], Awaitable[T]], *, policy: RetryPolicy = DEFAULT_POLICY,
                   what: str = "the store", on_retry: Callable[[BaseException], None] | None = None,
                   failed: BaseException | None = None) -> T:
    """``await attempt()`` (one whole transaction, or a read), again after
    each transient failure while ``policy`` allows; then
    :class:`StoreUnavailable`. A failure that is not transient raises as it
    is. A cancellation during a wait between tries ends it (the failed try
    left nothing written). ``failed``: the error the caller's own first try
    met (the next try waits its delay first, or gives up at once)."""
    attempts: Attempts | None = None  # made at the first failure: nothing on the path that succeeds
    while True:
        try:
            if failed is not None:
                error, failed = failed, None
                raise error
            return await attempt()
        except Exception as error:
            if attempts is None:
                attempts = policy.start()
            delay = attempts.failed(error, trio.current_time())
            if delay is None:
                if policy.transient(error):
                    raise unavailable(error, what) from error
                raise
            if on_retry is not None:
                on_retry(error)
        await trio.sleep(delay)
