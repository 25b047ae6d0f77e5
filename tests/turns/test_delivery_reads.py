"""The reads and hops a delivery no longer makes (docs/bench.md, *`router
serve` under load*), each with what must still hold:

- an idle inbox admits a delivery in the call that plans it (no ``admit``
  call of its own); a busy one has it admitted at once, as before; resends
  and reused event ids are answered as before, exactly once;
- the ``frames`` usage source's ledger answers a read from memory while the
  store wrote no usage row of the session, and reads the store after one
  (the sum exact); a store that is not its record's sole writer is always
  read;
- a launcher's supervisor does not read the record for a demand while its
  daemon runs, and reads it once for a run of settle checks;
- ``limits.json`` is read again at a turn's end only when it changed.

No test here asserts a time."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

from router.host.lifecycle import LifecycleCore
from router.host.store import Store
from router.host.supervisor import Supervisor
from router.plugins import watched
from router.plugins.layer import PluginLayer
from router.plugins.settings import SettingsDir
from router.plugins.usage import MemoryRecords, StoreLedger, StoreLedgerStatistics
from router.turns.core import Answered, DeliveryRefused, Delivery, Person
from tests.support.polling import until

# --------------------------------------------------------------------------- the inbox


class GatedLayer:
    """A plug-in layer whose turn brackets wait for ``gate`` to open (so a
    delivery stays in its inbox's hand while the test looks)."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.settings = SimpleNamespace(read=lambda name: SimpleNamespace(value=None))

    async def begin_turn(self, launch: Any) -> str:
        await self.gate.wait()
        return "bracket"

    async def end_turn(self, bracket: str) -> tuple[dict[str, Any], None]:
        return {"usage": None}, None


def _counting(rig: Any) -> list[str]:
    calls: list[str] = []
    real = rig.deliveries.call

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    rig.deliveries.call = counted
    return calls


async def test_an_idle_inbox_admits_in_the_call_that_plans(make_rig: Any) -> None:
    rig = await make_rig()
    await rig.router.session("root")
    calls = _counting(rig)
    for n in range(3):
        reply, body = await rig.router.send("root", f"text {n}", event_id=f"e{n}", wait=True)
        assert isinstance(reply, Answered) and body["status"] == "delivered", body
    assert "admit" not in calls
    assert calls.count("_plan") == 3
    # A resend is answered from the record, once; a reused id for another message is refused.
    again, _ = await rig.router.send("root", "text 0", event_id="e0")
    assert isinstance(again, Answered) and again.from_record
    other, body = await rig.router.send("root", "another text", event_id="e0")
    assert isinstance(other, DeliveryRefused) and other.code == "event-id-conflict", body
    entries = await rig.deliveries.call(rig.deliveries.entries, "root")
    assert sorted(entry.event_id for entry in entries) == ["e0", "e1", "e2"]
    operations = await rig.store.call(lambda: rig.store.operations.all(session="root"))
    assert sorted(operation.id for operation in operations) == ["e0", "e1", "e2"]  # each written once


async def test_a_busy_inbox_has_the_next_delivery_admitted_at_once(make_rig: Any) -> None:
    layer = GatedLayer()
    rig = await make_rig(layer=layer)
    await rig.router.session("root")
    calls = _counting(rig)
    replies: dict[str, Any] = {}

    async def send(event_id: str) -> None:
        replies[event_id] = await rig.router.deliver(
            Delivery(event_id=event_id, session="root", message=Person(text=event_id, message_id=event_id)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, "first")
        with trio.fail_after(10):
            await until(lambda: "_plan" in calls)  # the first is in the inbox's hand, its bracket waiting
        nursery.start_soon(send, "second")
        with trio.fail_after(10):
            await until(lambda: "admit" in calls)  # admitted while the first is written
        assert "second" not in replies
        layer.gate.set()
    assert all(isinstance(reply, Answered) and not reply.from_record for reply in replies.values()), replies
    assert calls.count("admit") == 1


# --------------------------------------------------------------------------- the usage ledger


def _store_with_session(path: Path, **options: Any) -> Store:
    store = Store(path, **options)
    store.sessions.create("s")
    return store


async def test_the_ledger_answers_from_memory_until_a_usage_row_is_written(tmp_path: Path) -> None:
    store = _store_with_session(tmp_path / "host.db")
    try:
        ledger = StoreLedger(store)
        first = await ledger.usage_after("s", None)
        assert ledger.statistics() == StoreLedgerStatistics(reads=1, held=0)
        # A turn's end and the next turn's beginning, nothing written: no read.
        assert (await ledger.usage_after("s", first.mark)).events == 0
        assert (await ledger.usage_after("s", None)).mark == first.mark
        assert ledger.statistics() == StoreLedgerStatistics(reads=1, held=2)
        await store.call(store.usage.record, "s", "op", "r", 1, {"type": "usage", "inputTokens": 4, "outputTokens": 2})
        after = await ledger.usage_after("s", first.mark)
        assert (after.events, after.input_tokens, after.output_tokens) == (1, 4, 2)
        assert ledger.statistics() == StoreLedgerStatistics(reads=2, held=2)
        assert (await ledger.usage_after("s", after.mark)).events == 0
        assert ledger.statistics() == StoreLedgerStatistics(reads=2, held=3)
    finally:
        store.close()


async def test_a_store_that_is_not_the_sole_writer_is_always_read(tmp_path: Path) -> None:
    _store_with_session(tmp_path / "host.db").close()
    store = Store(tmp_path / "host.db", exclusive=False)  # another process may write it
    try:
        ledger = StoreLedger(store)
        mark = (await ledger.usage_after("s", None)).mark
        await ledger.usage_after("s", mark)
        await ledger.usage_after("s", None)
        assert ledger.statistics() == StoreLedgerStatistics(reads=3, held=0)
    finally:
        store.close()


# --------------------------------------------------------------------------- the supervisor


class Launcher:
    name = "stand-in"
    default_harness = "echo"

    def core(self) -> LifecycleCore:
        return LifecycleCore(idle_timeout=None)


class CountingStore:
    """Open work: none. Counts the reads."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, fn: Any, *args: Any) -> Any:
        self.calls += 1
        return fn(*args)

    class operations:  # noqa: N801 (the store's repository, as the supervisor reads it)
        @staticmethod
        def all(**_: Any) -> list[str]:
            return []


async def test_the_supervisor_reads_once_for_a_run_of_checks_and_never_for_a_demand_while_running() -> None:
    store = CountingStore()
    supervisor = Supervisor("s1", launcher=Launcher(), store=store, owner=None)  # type: ignore[arg-type]
    supervisor.core.state = "running"
    for _ in range(3):
        supervisor.demand()
    for _ in range(3):
        supervisor.check_idle()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor._loop)
        with trio.fail_after(10):
            await until(lambda: supervisor._receive.statistics().current_buffer_used == 0 and store.calls == 1)
            await until(lambda: not supervisor.core.wanted)  # the last check saw no open work
        nursery.cancel_scope.cancel()
    assert store.calls == 1


# --------------------------------------------------------------------------- limits.json


def _layer(tmp_path: Path) -> PluginLayer:
    return PluginLayer(settings=SettingsDir(tmp_path / "settings"), records=MemoryRecords())


def test_limits_json_is_read_again_only_when_it_changed(tmp_path: Path, monkeypatch: Any) -> None:
    layer = _layer(tmp_path)
    (tmp_path / "settings").mkdir()
    path = tmp_path / "settings" / "limits.json"
    path.write_text(json.dumps({"limits": {"a": {"turns": 5}}}))
    # A file written within the coarse clock's window is read every time
    # (tests/plugins/test_watched.py); here the window is none.
    monkeypatch.setattr(watched, "COARSE_CLOCK_NS", 0)
    reads: list[str] = []
    real = layer.settings.read
    monkeypatch.setattr(layer.settings, "read", lambda name: reads.append(name) or real(name))
    first = layer._limits_document()
    assert layer._limits_document() is first and reads == ["limits.json"]
    path.write_text(json.dumps({"limits": {"a": {"turns": 6}}}))  # same size, a new time
    assert layer._limits_document().value == {"limits": {"a": {"turns": 6}}}
    assert reads == ["limits.json", "limits.json"]
