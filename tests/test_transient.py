"""The transient policy (router/_transient.py): which errors are retried,
the budget and the backoff; and the group commit retrying whole calls."""

from __future__ import annotations

import errno
import random
import sqlite3

import psycopg
import psycopg.errors
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.store.worker import GroupCommit
from router._transient import DEFAULT_POLICY, NO_RETRY, RetryPolicy, StoreUnavailable, is_transient, unavailable
from router.cluster.pg import LeaseLost
from router.errors import Refusal


def _sqlite_error(cls: type, text: str, code: int | None) -> sqlite3.Error:
    error = cls(text)
    if code is not None:
        error.sqlite_errorcode = code
    return error


def _fence_error() -> psycopg.Error:
    """What the fence trigger raises: its own SQLSTATE class (RL409)."""
    cls = psycopg.errors.lookup("RL409") if "RL409" in psycopg.errors._sqlcodes else psycopg.DatabaseError
    return cls("lease-lost: router a does not hold session s")


TABLE = [
    # (error, transient)
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
    (psycopg.errors.CrashShutdown("crash"), True),
    (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
    (psycopg.OperationalError("connection failed: Connection refused"), True),
    (psycopg.OperationalError("the connection is closed"), True),
    (psycopg.errors.SerializationFailure("could not serialize"), True),
    (psycopg.errors.IdleInTransactionSessionTimeout("idle-in-transaction timeout"), True),
    (psycopg.errors.UniqueViolation("duplicate key"), False),
    (psycopg.errors.SyntaxError("syntax error"), False),
    (psycopg.errors.UndefinedTable("no such table"), False),
    (psycopg.InterfaceError("misuse"), False),
    (_fence_error(), False),
    (_sqlite_error(sqlite3.OperationalError, "database or disk is full", 13), True),
    (_sqlite_error(sqlite3.OperationalError, "database or disk is full", None), True),
    (_sqlite_error(sqlite3.OperationalError, "disk I/O error", 10 | (3 << 8)), True),  # SQLITE_IOERR_WRITE
    (_sqlite_error(sqlite3.OperationalError, "database is locked", 5), True),
    (_sqlite_error(sqlite3.OperationalError, "no such table: x", 1), False),
    (_sqlite_error(sqlite3.IntegrityError, "UNIQUE constraint failed", 19 | (8 << 8)), False),
    (_sqlite_error(sqlite3.DatabaseError, "file is not a database", 26), False),
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (OSError(errno.EIO, "Input/output error"), True),
    (FileNotFoundError(errno.ENOENT, "No such file"), False),
    (PermissionError(errno.EACCES, "Permission denied"), False),
    (StoreUnavailable("store-unavailable", "already given up below"), True),
    (LeaseLost("lease-lost", "router a does not hold s"), False),
    (Refusal("bad-store", "no"), False),
    (ValueError("a bug"), False),
    (RuntimeError("the batch this call was in failed"), False),
]


def _name(value: object) -> str:
    return type(value).__name__ if isinstance(value, BaseException) else str(value)


@pytest.mark.parametrize(("error", "transient"), TABLE, ids=_name)
def test_which_errors_are_transient(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient
    attempts = DEFAULT_POLICY.start(rng=random.Random(0))
    delay = attempts.failed(error, now=100.0)
    assert (delay is not None) is transient


def test_the_refusal_says_resend_with_the_same_event_id() -> None:
    refused = unavailable(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
    assert isinstance(refused, Refusal) and refused.code == "store-unavailable"
    assert "resend with the same event id" in refused.message
    assert "AdminShutdown" in refused.message
    assert unavailable(refused) is refused


def test_no_retry_gives_up_at_once_on_a_transient_error() -> None:
    attempts = NO_RETRY.start()
    assert attempts.failed(OSError(errno.ENOSPC, "full"), now=0.0) is None


def test_a_policy_that_cannot_work_is_refused() -> None:
    for bad in ({"first": 0}, {"factor": 0.5}, {"most": 0.01, "first": 0.1}, {"jitter": 1.0}, {"budget": -1}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


@settings(max_examples=300, deadline=None)
@given(
    budget=st.floats(0, 60), first=st.floats(0.001, 2), factor=st.floats(1, 4), extra=st.floats(0, 5),
    jitter=st.floats(0, 0.99), seed=st.integers(0, 2**32), gaps=st.lists(st.floats(0, 3), max_size=60),
)
def test_delays_stay_within_the_budget_and_grow_to_the_cap(
    budget: float, first: float, factor: float, extra: float, jitter: float, seed: int, gaps: list[float],
) -> None:
    """Invariants: every delay is positive, at most ``most`` and never ends
    past the budget counted from the first failure; the undisturbed delay
    never shrinks; once past the budget every answer is "give up"."""
    policy = RetryPolicy(budget=budget, first=first, factor=factor, most=first + extra, jitter=jitter)
    attempts = policy.start(rng=random.Random(seed))
    now = 1000.0
    gave_up = False
    for gap in gaps:
        delay = attempts.failed(OSError(errno.ENOSPC, "full"), now=now)
        if delay is None:
            gave_up = True
            assert now >= 1000.0 + budget
            continue
        assert not gave_up, "a policy that gave up never tries again"
        assert 0 < delay <= policy.most
        assert now + delay <= 1000.0 + budget + 1e-9
        now += delay + gap
    assert attempts.tries == len(gaps)


async def test_group_commit_retries_a_whole_call_until_it_succeeds() -> None:
    runs: list[int] = []

    def run_batch(batch):  # noqa: ANN001
        for call in batch:
            call.run()

    def flaky() -> str:
        runs.append(1)
        if len(runs) < 3:
            raise sqlite3.OperationalError("database or disk is full")
        return "done"

    group = GroupCommit(run_batch)
    assert await group.call(flaky) == "done"
    assert len(runs) == 3
    assert group.statistics().retries == 2 and group.statistics().unavailable == 0


async def test_group_commit_refuses_past_the_budget_and_never_retries_the_statement_s_fault(
    autojump_clock,  # noqa: ANN001
) -> None:
    def run_batch(batch):  # noqa: ANN001
        for call in batch:
            call.run()

    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    faults: list[int] = []

    def constraint() -> None:
        faults.append(1)
        raise sqlite3.IntegrityError("UNIQUE constraint failed")

    group = GroupCommit(run_batch)
    began = trio.current_time()
    with pytest.raises(StoreUnavailable) as refused:
        await group.call(full)
    assert refused.value.code == "store-unavailable"
    assert trio.current_time() - began == pytest.approx(DEFAULT_POLICY.budget)
    assert group.statistics().unavailable == 1
    with pytest.raises(sqlite3.IntegrityError):
        await group.call(constraint)
    assert faults == [1]
    once: list[int] = []

    def full_once() -> None:
        once.append(1)
        full()

    with pytest.raises(StoreUnavailable):
        await group.call(full_once, retry=False)
    assert once == [1]  # a caller with state of its own: never run twice
