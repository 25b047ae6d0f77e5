"""The delivery log's group commit: calls that wait beside one another go
in one transaction, and each caller is answered only once that transaction
is on disk; one call that fails takes nobody else's write with it."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from router.turns.core import Delivery, Person, Proceed, State
from router.turns.delivery_log import DeliveryLog


def _delivery(n: int) -> Delivery:
    return Delivery(event_id=f"e{n}", session="s", message=Person(text=f"hi {n}", message_id=f"m{n}"))


def _committed(path: Path, event_id: str) -> str | None:
    """The state a second connection reads for ``event_id``: only what was
    committed is visible to it."""
    other = sqlite3.connect(path)
    try:
        row = other.execute("SELECT state FROM deliveries WHERE event_id = ?", (event_id,)).fetchone()
    finally:
        other.close()
    return None if row is None else row[0]


async def test_each_caller_is_answered_after_the_commit_that_holds_its_call(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:
        seen: dict[str, str | None] = {}

        async def deliver(n: int) -> None:
            admission = await log.call(log.admit, _delivery(n))
            assert isinstance(admission, Proceed) and admission.new
            answered = attrs.evolve(admission.entry, state=State.ANSWERED, attempts=1, answer={"n": n})
            await log.call(log.put, answered)
            seen[f"e{n}"] = _committed(path, f"e{n}")

        async with trio.open_nursery() as nursery:
            for n in range(50):
                nursery.start_soon(deliver, n)
        assert seen == {f"e{n}": "answered" for n in range(50)}
        assert log.calls == 100
        assert log.batches < log.calls  # calls that waited went together


async def test_a_failing_call_in_a_batch_rolls_back_only_its_own_writes(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:

        def put_then_fail(n: int) -> None:
            log.admit(_delivery(n))
            raise ValueError("this call fails after its write")

        outcomes: dict[int, str] = {}

        async def call(n: int) -> None:
            try:
                if n == 3:
                    await log.call(put_then_fail, n)
                else:
                    await log.call(log.admit, _delivery(n))
                outcomes[n] = "ok"
            except ValueError:
                outcomes[n] = "failed"

        # The worker is held until all eight wait, so they go in one batch
        # (a call alone in its hop runs in its own transactions: the failing
        # one's write would stand, which is not what this test is about).
        release = threading.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.call, lambda: release.wait(60))
            await trio.testing.wait_all_tasks_blocked()
            for n in range(8):
                nursery.start_soon(call, n)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        assert outcomes == {n: "failed" if n == 3 else "ok" for n in range(8)}
        assert log.batches < log.calls
        assert sorted(entry.event_id for entry in log.entries()) == [f"e{n}" for n in range(8) if n != 3]
        assert _committed(path, "e3") is None


async def test_a_cancelled_caller_still_waits_for_its_write(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                for n in range(5):
                    nursery.start_soon(log.call, log.admit, _delivery(n))
                await trio.sleep(0)
                scope.cancel()
        # Every call that started finished its write before its task ended.
        assert sorted(entry.event_id for entry in log.entries()) == [f"e{n}" for n in range(5)]


async def test_a_closed_log_refuses_every_call_of_a_batch(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path / "turns.db")
    log.close()
    with pytest.raises(RuntimeError, match="closed"):
        await log.call(log.admit, _delivery(1))


async def test_the_host_store_groups_transactions_and_isolates_a_failing_one(tmp_path: Path) -> None:
    from router.host import Store

    path = tmp_path / "host.sqlite"
    with Store(path) as store:
        await store.call(store.sessions.create, "s")

        def enqueue(_: Store, n: int) -> None:
            store.operations.enqueue("s", f"op{n}", {"type": "prompt", "text": f"{n}"}, "followUp")
            if n == 2:
                raise ValueError("this transaction fails after its write")

        outcomes: dict[int, str] = {}

        async def submit(n: int) -> None:
            try:
                await store.transact(enqueue, n)
                outcomes[n] = "ok"
            except ValueError:
                outcomes[n] = "failed"

        async with trio.open_nursery() as nursery:
            for n in range(6):
                nursery.start_soon(submit, n)
        calls, batches = store.group_commits
        assert batches < calls
        assert outcomes == {n: "failed" if n == 2 else "ok" for n in range(6)}
        other = sqlite3.connect(path)
        try:
            ids = sorted(row[0] for row in other.execute("SELECT id FROM operations"))
        finally:
            other.close()
        assert ids == [f"op{n}" for n in range(6) if n != 2]
