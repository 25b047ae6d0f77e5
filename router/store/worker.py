"""One worker per database: the thread every call hops to, group commit,
the file lock, close.

Every record the router keeps (the host's store, the delivery record, the
turn records, the paired devices, the cluster's tables) is one database
connection (or one file) used from one worker thread at a time; a
:class:`Worker` is that thread's one door, and the only way Trio code
reaches the database:

- :meth:`Worker.call` runs a plain function in the worker thread, in the
  next **group commit** (:class:`GroupCommit`): calls that arrive while a
  batch is in the thread wait, and all of them go in the next hop
  together. With a database, a batch of more than one call is one
  transaction (``BEGIN IMMEDIATE`` … ``COMMIT`` on SQLite, ``BEGIN`` plus
  the record's advisory lock on PostgreSQL: :meth:`router.store.db.Database.begin`)
  with a savepoint per call (:func:`run_in_savepoints`), so a call that
  raises undoes only its own writes. Each caller is answered once its batch
  returned, that is, after the commit that holds its call: "answered"
  still means "on disk", and under load one thread hop and one commit serve
  many calls. Without a database (a JSON-lines file) the calls of a batch
  simply run one after another in the one hop.
- :meth:`Worker.close` waits for a batch in the thread to end (closing
  SQLite under a running statement crashes the interpreter), closes the
  connection and drops the file lock (:func:`router.store.sqlite.lock_file`)
  the owner took; a call after it is refused. Closing twice is harmless.

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

**The hop**: each worker has one thread of its own, fed by a queue (the
database's one writer): a call is put on the queue and its task sleeps;
the thread takes every call waiting as its next batch, runs it, and hands
the batch's outcomes back to Trio in one ``run_sync_soon``. A
``to_thread.run_sync`` per batch cost twice the CPU per call (a task step
for the batch's runner, the job handed to a thread of Trio's cache under
locks, the thread renamed for the job and back, the outcome captured and
delivered). The thread ends after :data:`IDLE`
seconds without a call, and at :meth:`Worker.close`; the next call starts
another. Waiting is not cancellable: a cancelled caller still waits for
its write to commit or roll back, as a call in a thread with
``abandon_on_cancel=False`` would.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from typing import TYPE_CHECKING, Any, Callable, ContextManager, TypeVar

import attrs
import trio

from router._transient import DEFAULT_POLICY, NO_RETRY, RetryPolicy, is_transient, retrying
from router.store.sqlite import release_lock

if TYPE_CHECKING:
    from router.store.db import Database

__all__ = ["Call", "GroupCommit", "Worker", "WorkerStatistics", "run_in_savepoints"]

T = TypeVar("T")


class Call:
    """One call waiting for a batch: its function, then its result or error;
    the task waiting for it and the Trio run that task is in (the thread
    wakes it there)."""

    __slots__ = ("fn", "task", "token", "finished", "value", "error")

    def __init__(self, fn: Callable[[], Any], task: trio.lowlevel.Task, token: trio.lowlevel.TrioToken) -> None:
        self.fn = fn
        self.task = task
        self.token = token
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


def run_in_savepoints(db: Database, batch: list[Call]) -> None:
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
    (:meth:`Call.run` or :meth:`Call.fail`).

    The thread is the group commit's own, fed by a queue: a call is put on
    it and its task sleeps (uncancellable) until the thread hands back the
    batch that held it (one ``run_sync_soon`` per batch). The thread takes
    every call waiting when it is free as its next batch, and ends after
    :data:`IDLE` seconds with nothing to do (or at :meth:`stop`); the next
    call starts another."""

    def __init__(self, run_batch: Callable[[list[Call]], None], *,
                 policy: RetryPolicy = DEFAULT_POLICY, what: str = "the store") -> None:
        self._run_batch = run_batch
        self._policy = policy
        self._what = what
        self._queue: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        #: Guards ``_alive``: a call is put, and the thread started if none runs, in one step.
        self._starting = threading.Lock()
        self._alive = False
        #: Calls made, and the thread hops (batches) that ran them.
        self.calls = 0
        self.batches = 0
        #: Tries again after a transient failure, and calls refused past the budget.
        self.retries = 0
        self.unavailable = 0

    def __repr__(self) -> str:
        return (f"<GroupCommit calls={self.calls} batches={self.batches} waiting={self._queue.qsize()} "
                f"retries={self.retries} unavailable={self.unavailable}>")

    def statistics(self) -> WorkerStatistics:
        return WorkerStatistics(calls=self.calls, batches=self.batches, waiting=self._queue.qsize(),
                                retries=self.retries, unavailable=self.unavailable)

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
        call = Call(fn, trio.lowlevel.current_task(), trio.lowlevel.current_trio_token())
        self.calls += 1
        with self._starting:
            self._queue.put(call)
            if not self._alive:
                self._alive = True
                threading.Thread(target=self._serve, name=f"worker: {self._what}", daemon=True).start()
        # Uncancellable, as a thread call with abandon_on_cancel=False: a
        # cancelled caller still waits for its write to commit or roll back.
        await trio.lowlevel.wait_task_rescheduled(_refuse_abort)
        return call.result()

    def stop(self) -> None:
        """Let the thread end once the calls put before this are done."""
        self._queue.put(None)

    def _serve(self) -> None:
        """The thread: a batch of every call waiting, then the next."""
        while True:
            try:
                first = self._queue.get(timeout=IDLE)
            except queue.Empty:
                with self._starting:
                    if self._queue.empty():
                        self._alive = False
                        return
                continue
            batch: list[Call] = []
            stopping = first is None
            if first is not None:
                batch.append(first)
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                else:
                    batch.append(more)
            if batch:
                self._run(batch)
            if stopping:
                with self._starting:
                    if self._queue.empty():
                        self._alive = False
                        return

    def _run(self, batch: list[Call]) -> None:
        self.batches += 1
        failed: BaseException | None = None
        try:
            self._run_batch(batch)
        except BaseException as error:  # noqa: BLE001 (handed to every caller of the batch, never lost)
            failed = error
        for each in batch:
            if not each.finished:  # run_batch raised before reaching it
                each.fail(RuntimeError("the batch this call was in failed"))
                each.error.__cause__ = failed  # type: ignore[union-attr]
        tokens: dict[trio.lowlevel.TrioToken, list[Call]] = {}
        for each in batch:
            tokens.setdefault(each.token, []).append(each)
        for token, calls in tokens.items():
            try:
                token.run_sync_soon(_wake, calls)
            except trio.RunFinishedError:  # pragma: no cover (a waiting caller keeps its run alive)
                pass


#: Seconds a group commit's thread waits for a call before it ends.
IDLE = 10.0


def _refuse_abort(raise_cancel: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


def _wake(calls: list[Call]) -> None:
    """In Trio's thread: hand each caller its call's outcome."""
    for each in calls:
        trio.lowlevel.reschedule(each.task)


@attrs.frozen
class WorkerStatistics:
    """What a :class:`Worker` (its :class:`GroupCommit`) did: calls made, thread hops (batches) that
    ran them, calls waiting now, tries again after a transient failure, and
    calls refused past the budget."""

    calls: int
    batches: int
    waiting: int
    retries: int
    unavailable: int


class Worker:
    """One database's worker (see the module docstring).

    ``db``: the connection (None: the owner's function reaches its file
    itself). ``lock_fd``: a file lock the owner took, dropped by
    :meth:`close`. ``transaction``: what a batch of several calls runs in
    (default ``db.transaction``; the host's store passes its own, which
    nested transactions join). ``alone``: whether a batch of one call may
    run without that transaction around it (the owner's methods then take
    their own); default: when the database has no fences. ``grouped=False``:
    the calls of a batch run one after another in the hop, each taking its
    own transactions (the turn records, whose calls also ask the limit
    checks).
    """

    def __init__(self, what: str, *, db: Database | None = None, lock_fd: int | None = None,
                 transaction: Callable[[], ContextManager[Any]] | None = None,
                 alone: Callable[[], bool] | None = None, grouped: bool = True,
                 policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self.what = what
        self.db = db
        self._lock_fd = lock_fd
        self._transaction = transaction or (db.transaction if db is not None and grouped else None)
        self._alone = alone or (lambda: db is None or not db.fences)
        #: Held while a batch runs in the thread, and by close().
        self._in_use = threading.Lock()
        self._closed = False
        self._group = GroupCommit(self._run_batch, policy=policy, what=what)

    def __repr__(self) -> str:
        stats = self.statistics()
        return (f"<Worker {self.what} calls={stats.calls} batches={stats.batches} waiting={stats.waiting}"
                f"{' closed' if self._closed else ''}>")

    def statistics(self) -> WorkerStatistics:
        return self._group.statistics()

    @property
    def closed(self) -> bool:
        return self._closed

    async def call(self, fn: Callable[..., T], *args: Any, retry: bool = True) -> T:
        """``fn(*args)`` in the worker thread, in the next group commit (see
        the module docstring); answered once the transaction holding it
        committed."""
        return await self._group.call(functools.partial(fn, *args) if args else fn, retry=retry)

    def _run_batch(self, batch: list[Call]) -> None:
        """In the worker thread: one group commit."""
        with self._in_use:
            if self._closed:
                error = RuntimeError(f"{self.what} is closed")
                for call in batch:
                    call.fail(error)
                return
            if self._transaction is None:  # not grouped: the calls one after another
                for call in batch:
                    call.run()
                return
            if len(batch) == 1 and self._alone():  # nothing to group: the call's own transactions
                batch[0].run()
                return
            try:
                with self._transaction():
                    run_in_savepoints(self.db, batch)  # type: ignore[arg-type]
            except Exception as exc:  # no COMMIT (a fence refused, the database failed): no call of it is kept
                for call in batch:
                    call.fail(exc)
            except BaseException:  # rolled back: no caller may hear its call was kept
                for call in batch:
                    call.fail(RuntimeError("the group commit was interrupted"))
                raise

    @contextlib.contextmanager
    def held(self) -> Any:
        """Wait for a batch in the thread to end, and keep the next one out
        while the block runs (what :meth:`close` does around closing)."""
        with self._in_use:
            yield

    def close(self) -> None:
        """Close the connection and drop the file lock, once no batch runs;
        calls after it are refused. Closing twice is harmless."""
        with self._in_use:
            self.close_held()

    def close_held(self) -> None:
        """:meth:`close`, for a caller already inside :meth:`held`."""
        if self._closed:
            return
        self._closed = True
        self._group.stop()
        try:
            if self.db is not None:
                self.db.close()
        finally:
            release_lock(self._lock_fd)
            self._lock_fd = None
