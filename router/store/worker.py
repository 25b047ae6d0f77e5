"""Group commit for a SQLite connection served by one worker thread.

:class:`GroupCommit` runs calls (plain functions over the connection) in a
worker thread, one batch at a time: calls that arrive while a batch is in
the thread wait, and all of them go in the next hop together. The owner's
``run_batch`` (run in the thread) decides the transaction: typically one
``BEGIN IMMEDIATE`` … ``COMMIT`` around the batch with a savepoint per call
(:meth:`Call.run` in it), so a call that raises undoes only its own writes.
Each caller is answered once its batch returned, that is, after the commit
that holds its call: "answered" still means "on disk", and under load one
thread hop and one commit serve many calls.

**Transient failures** (:mod:`router._transient`): a call whose
transaction met a full disk, a dropped connection or a restarting server
is run again, whole, after a pause, while :data:`DEFAULT_POLICY` allows
(the batch it was in failed whole: the other calls are tried again too,
each on its own count); past the budget its caller gets
``store-unavailable``. A call that failed on its own (its data, a bug, the
fence) is answered with its error at once, as before. ``retry=False`` is
for a caller whose function changes more than the record (the session
link's cores): it gets ``store-unavailable`` at the first transient
failure and starts over from the record itself.

There is no writer task: the first caller to arrive runs the batch, and when
it is done the first caller still waiting runs the next one. Waiting is
shielded from cancellation: a cancelled caller still waits for its write to
commit or roll back, as a call in a thread with ``abandon_on_cancel=False``
would.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any, Callable

import trio

from router._transient import DEFAULT_POLICY, NO_RETRY, RetryPolicy, is_transient, retrying

__all__ = ["Call", "GroupCommit", "run_in_savepoints"]


class Call:
    """One call waiting for a batch: its function, then its result or error.
    ``wake`` is set when it is done, or when its caller is to run the next
    batch."""

    __slots__ = ("fn", "wake", "finished", "value", "error")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.wake = trio.Event()
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<Call {self.fn!r} {'finished' if self.finished else 'waiting'}>"

    def run(self) -> bool:
        """Run it (in the worker thread); whether it returned. An exception
        is kept for its caller, never raised here."""
        try:
            self.value = self.fn()
        except Exception as exc:
            self.fail(exc)
            return False
        self.finished = True
        return True

    def fail(self, error: BaseException) -> None:
        self.value, self.error, self.finished = None, error, True

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def run_in_savepoints(db: sqlite3.Connection, batch: list[Call]) -> None:
    """Run every call of ``batch`` in a savepoint of its own on ``db``, inside
    the caller's transaction: a call that raises has only its own writes
    undone (its error is kept for its caller) and the next one goes on."""
    for call in batch:
        db.execute("SAVEPOINT call")
        if call.run():
            db.execute("RELEASE call")
        elif is_transient(call.error):
            # The database failed, not the call: the transaction may be
            # gone with it (SQLite rolls back on a full disk), so no call of
            # it is kept, and each is tried again whole.
            raise call.error  # type: ignore[misc]
        else:
            db.execute("ROLLBACK TO call")
            db.execute("RELEASE call")


class GroupCommit:
    """Batches of calls through one worker thread (see the module docstring).
    ``run_batch(calls)`` runs in the thread and must finish every call
    (:meth:`Call.run` or :meth:`Call.fail`)."""

    def __init__(self, run_batch: Callable[[list[Call]], None], limiter: trio.CapacityLimiter, *,
                 policy: RetryPolicy = DEFAULT_POLICY, what: str = "the store") -> None:
        self._run_batch = run_batch
        self._limiter = limiter
        self._policy = policy
        self._what = what
        self._queue: list[Call] = []
        self._running = False
        #: Calls made, and the thread hops (batches) that ran them.
        self.calls = 0
        self.batches = 0
        #: Tries again after a transient failure, and calls refused past the budget.
        self.retries = 0
        self.unavailable = 0

    def __repr__(self) -> str:
        return (f"<GroupCommit calls={self.calls} batches={self.batches} waiting={len(self._queue)} "
                f"retries={self.retries} unavailable={self.unavailable}>")

    def statistics(self) -> dict[str, int]:
        return {"calls": self.calls, "batches": self.batches, "waiting": len(self._queue),
                "retries": self.retries, "unavailable": self.unavailable}

    async def call(self, fn: Callable[[], Any], *, retry: bool = True) -> Any:
        """``fn()`` in the worker thread, in the next batch; run again whole
        after a transient failure (``retry``), ``store-unavailable`` past
        the budget."""
        try:
            return await self._once(fn)  # the path that succeeds: one try, nothing more made
        except Exception as error:
            if not self._policy.transient(error):
                raise
            first = error
        try:
            return await retrying(functools.partial(self._once, fn), policy=self._policy if retry else NO_RETRY,
                                  what=self._what, on_retry=self._retried, failed=first)
        except Exception as error:
            if getattr(error, "code", None) == "store-unavailable":
                self.unavailable += 1
            raise

    def _retried(self, error: BaseException) -> None:
        self.retries += 1

    async def _once(self, fn: Callable[[], Any]) -> Any:
        call = Call(fn)
        self.calls += 1
        self._queue.append(call)
        with trio.CancelScope(shield=True):
            if self._running:
                await call.wake.wait()  # done, or handed the next batch
            if not call.finished:
                await self._next()
        return call.result()

    async def _next(self) -> None:
        self._running = True
        batch, self._queue = self._queue, []
        self.batches += 1
        try:
            await trio.to_thread.run_sync(self._run_batch, batch, limiter=self._limiter)
        finally:
            for each in batch:
                if not each.finished:  # run_batch raised before reaching it
                    each.fail(RuntimeError("the batch this call was in failed"))
                each.wake.set()
            if self._queue:
                self._queue[0].wake.set()  # its caller runs the next batch
            else:
                self._running = False
