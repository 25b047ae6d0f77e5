"""The one worker per database (``router.store.worker.Worker``) on a real
SQLite file: calls that wait together share one hop and one transaction, a
call that raises undoes only its own writes, close waits for the batch in
the thread and refuses the calls after it, and the worker's ``__repr__``
and ``statistics()`` do no I/O."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from router.store.db import SqliteDatabase, Step, migrate
from router.store.sqlite import lock_file
from router.store.worker import Worker, WorkerStatistics

STEPS = (Step(sqlite=("CREATE TABLE rows (n INTEGER NOT NULL UNIQUE)",),
              postgresql=("CREATE TABLE rows (n BIGINT NOT NULL UNIQUE)",)),)


def _open(tmp_path: Path) -> SqliteDatabase:
    db = SqliteDatabase(tmp_path / "w.sqlite", "test")
    migrate(db, STEPS, too_new=lambda version: RuntimeError(f"v{version}"))
    return db


def _rows(db: SqliteDatabase) -> list[int]:
    return [row[0] for row in db.execute("SELECT n FROM rows ORDER BY n").fetchall()]


async def test_calls_waiting_together_share_one_hop_and_a_failing_call_undoes_only_its_own(tmp_path: Path) -> None:
    db = _open(tmp_path)
    worker = Worker("the test record", db=db)
    gate = threading.Event()
    results: dict[int, object] = {}

    def insert(n: int) -> int:
        if n == 0:
            gate.wait(10)  # holds the first hop until the others queued behind it
        # 4 repeats 0, written by the first hop before the others run (in whatever
        # order Trio starts them): its duplicate fails, and nothing else does.
        db.execute("INSERT INTO rows (n) VALUES (?)", (0 if n == 4 else n,))
        return n

    async def one(n: int) -> None:
        try:
            results[n] = await worker.call(insert, n)
        except Exception as error:  # the duplicate: its own error, nobody else's
            results[n] = type(error).__name__

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0)
        await trio.testing.wait_all_tasks_blocked()
        for n in (1, 2, 3, 4):
            nursery.start_soon(one, n)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert results == {0: 0, 1: 1, 2: 2, 3: 3, 4: "IntegrityError"}
    assert _rows(db) == [0, 1, 2, 3]
    stats = worker.statistics()
    assert isinstance(stats, WorkerStatistics)
    assert (stats.calls, stats.batches, stats.waiting) == (5, 2, 0)
    worker.close()


async def test_close_waits_for_the_batch_in_the_thread_then_refuses_and_drops_the_file_lock(tmp_path: Path) -> None:
    path = tmp_path / "w.sqlite"
    lock = lock_file(path)
    assert lock is not None
    db = _open(tmp_path)
    worker = Worker("the test record", db=db, lock_fd=lock)
    inside, release = threading.Event(), threading.Event()

    def slow() -> str:
        inside.set()
        release.wait(10)
        db.execute("INSERT INTO rows (n) VALUES (7)")
        return "done"

    async with trio.open_nursery() as nursery:
        answers: list[str] = []

        async def call() -> None:
            answers.append(await worker.call(slow))

        nursery.start_soon(call)
        await trio.to_thread.run_sync(inside.wait, 10)
        closing = threading.Thread(target=worker.close)
        closing.start()
        assert not worker.closed and answers == []  # close waits for the call in the thread
        release.set()
        await trio.to_thread.run_sync(closing.join, 10)
    assert answers == ["done"] and worker.closed
    with pytest.raises(RuntimeError, match="the test record is closed"):
        await worker.call(lambda: None)
    again = lock_file(path)  # the lock went with the worker
    assert again is not None
    worker.close()  # twice: harmless
    os.close(again)


async def test_ungrouped_calls_run_one_after_another_each_on_its_own(tmp_path: Path) -> None:
    seen: list[str] = []
    worker = Worker("the test file")

    def note(text: str) -> str:
        if text == "bad":
            raise ValueError(text)
        seen.append(text)
        return text

    async def one(text: str) -> object:
        try:
            return await worker.call(note, text)
        except ValueError as error:
            return str(error)

    async with trio.open_nursery() as nursery:
        for text in ("a", "bad", "b"):
            nursery.start_soon(one, text)
    assert sorted(seen) == ["a", "b"]
    assert "calls=3" in repr(worker) and "closed" not in repr(worker)
    worker.close()
    assert "closed" in repr(worker)


async def test_a_cancelled_caller_still_waits_for_its_write_and_hears_it_and_the_thread_ends_at_close(
    tmp_path: Path,
) -> None:
    db = _open(tmp_path)
    worker = Worker("the cancelled record", db=db)
    inside, release = threading.Event(), threading.Event()
    heard: list[str] = []

    def slow() -> str:
        inside.set()
        release.wait(10)
        db.execute("INSERT INTO rows (n) VALUES (5)")
        return "kept"

    async def call() -> None:
        try:
            heard.append(await worker.call(slow))
        except trio.Cancelled:
            heard.append("cancelled")
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.to_thread.run_sync(inside.wait, 10)
        nursery.cancel_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert heard == []  # still waiting for its write, not cancelled out of it
        release.set()
    assert heard == ["kept"] and _rows(db) == [5]
    (thread,) = [each for each in threading.enumerate() if each.name == "worker: the cancelled record"]
    worker.close()
    await trio.to_thread.run_sync(thread.join, 10)
    assert not thread.is_alive()  # its one thread ends with it
