"""Usage sources (frames, claude-transcript), the turn meter, and the layer's
turn end: usage lands, then must_stop is asked."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import trio

from router.plugins.broker import Broker
from router.plugins.layer import PluginLayer
from router.plugins.loader import Loader
from router.errors import Refusal
from router.plugins.settings import SettingsDir, apply_plugins_patch
from router.plugins.usage import (
    JsonlRecords,
    MemoryLedger,
    MemoryRecords,
    StoreLedger,
    TurnMeter,
)

from .conftest import write_module

loader = Loader(log=lambda entry: pytest.fail(str(entry)))
loader.load({"usage-source": ["frames", "claude-transcript"]}, only=["usage-source"])
FRAMES = loader.module("usage-source", "frames").module
TRANSCRIPT = loader.module("usage-source", "claude-transcript").module

CONTAINER = {"via": "daemon", "url": "http://x"}
MOD_LINK = {"via": "mod-link"}


# --------------------------------------------------------------------------- frames


async def test_frames_takes_the_difference_between_two_snapshots() -> None:
    ledger = MemoryLedger()
    ledger.add("s", input_tokens=1000, output_tokens=1000, operation_id="op-0")  # earlier turn
    request = {"session": "s", "reach": CONTAINER, "mark": None}
    first = await FRAMES.read_turn(request, {"ledger": ledger})
    assert first["usage"] is None
    ledger.add("s", input_tokens=10, output_tokens=5, operation_id="op-1")
    ledger.add("other", input_tokens=99, operation_id="op-1")
    ledger.add("s", input_tokens=7, operation_id="op-1")  # no output figure: counts what it has
    ledger.add("s", output_tokens=2)  # between turns: no operation
    second = await FRAMES.read_turn({**request, "mark": first["mark"]}, {"ledger": ledger})
    assert second["usage"] == {"input": 17, "output": 7, "cache_creation": 0, "cache_read": 0}
    # The next bracket starts where this one ended.
    ledger.add("s", input_tokens=1, operation_id="op-1")
    third = await FRAMES.read_turn({**request, "mark": second["mark"]}, {"ledger": ledger})
    assert third["usage"]["input"] == 1


async def test_frames_unknown_without_figures_and_not_mine_elsewhere() -> None:
    ledger = MemoryLedger()
    request = {"session": "s", "reach": CONTAINER, "mark": None}
    mark = (await FRAMES.read_turn(request, {"ledger": ledger}))["mark"]
    assert (await FRAMES.read_turn({**request, "mark": mark}, {"ledger": ledger}))["usage"] is None
    ledger.add("s", operation_id="op")  # a usage event with no counts
    assert (await FRAMES.read_turn({**request, "mark": mark}, {"ledger": ledger}))["usage"] is None
    assert await FRAMES.read_turn({**request, "reach": MOD_LINK}, {"ledger": ledger}) is None
    with pytest.raises(Refusal) as caught:
        await FRAMES.read_turn(request, {})
    assert caught.value.code == "no-usage-ledger"
    with pytest.raises(Refusal) as caught:
        await FRAMES.read_turn({**request, "mark": 3}, {"ledger": ledger})
    assert caught.value.code == "bad-mark"


async def test_frames_reads_the_hosts_store(tmp_path: Path) -> None:
    from router.host.store import Store

    with Store(tmp_path / "host.db") as store:
        ledger = StoreLedger(store)
        store.usage.record("s", "op-0", "rt-1", 1, {"type": "usage", "inputTokens": 500})
        request = {"session": "s", "reach": {"via": "in-process"}, "mark": None}
        first = await FRAMES.read_turn(request, {"ledger": ledger})
        store.usage.record("s", "op-1", "rt-1", 2,
                           {"type": "usage", "inputTokens": 12, "outputTokens": 8})
        store.usage.record("s", "op-1", "rt-1", 3,
                           {"type": "usage", "inputTokens": 2.6, "outputTokens": "lots"})
        second = await FRAMES.read_turn({**request, "mark": first["mark"]}, {"ledger": ledger})
        assert second["usage"] == {"input": 15, "output": 8, "cache_creation": 0, "cache_read": 0}


async def test_the_frames_mark_does_not_grow_with_the_sessions_history(tmp_path: Path) -> None:
    # The mark was every operation's totals (read, summed and copied twice a
    # turn); it is the ledger's position, the same size after 300 turns as
    # after one, and the store reads only the events after it.
    from router.host.store import Store

    with Store(tmp_path / "host.db") as store:
        store.sessions.create("s")
        ledger = StoreLedger(store)
        request = {"session": "s", "reach": {"via": "in-process"}, "mark": None}
        for i in range(300):
            store.usage.record("s", f"op-{i}", "rt-1", i, {"type": "usage", "inputTokens": 1, "outputTokens": 1})
        first = await FRAMES.read_turn(request, {"ledger": ledger})
        assert set(first["mark"]) == {"after"} and type(first["mark"]["after"]) is int
        store.usage.record("s", "op-new", "rt-1", 300, {"type": "usage", "inputTokens": 5, "outputTokens": 2})
        read = await store.call(store.usage.after, "s", first["mark"]["after"])
        assert read.events == 1  # what the second read sums: the one event after the mark
        second = await FRAMES.read_turn({**request, "mark": first["mark"]}, {"ledger": ledger})
        assert second["usage"] == {"input": 5, "output": 2, "cache_creation": 0, "cache_read": 0}
        assert set(second["mark"]) == {"after"} and second["mark"]["after"] > first["mark"]["after"]


# --------------------------------------------------------------------------- claude-transcript

SESSION = "0b8f5c2e-1d2a-4c55-9a0e-3f1c2b4d5e6f"


def assistant(message_id: str, *, i=0, o=0, cc=0, cr=0) -> str:
    return json.dumps({
        "parentUuid": "u", "isSidechain": False, "type": "assistant", "sessionId": SESSION,
        "message": {"id": message_id, "type": "message", "role": "assistant",
                    "model": "claude-opus-4-5", "content": [{"type": "text", "text": "…"}],
                    "usage": {"input_tokens": i, "output_tokens": o,
                              "cache_creation_input_tokens": cc, "cache_read_input_tokens": cr,
                              "service_tier": "standard"}},
        "uuid": f"{message_id}-line", "timestamp": "2026-03-01T00:00:00.000Z",
    })


def user(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text},
                       "uuid": "u", "sessionId": SESSION})


@pytest.fixture
def transcript(tmp_path: Path):
    config = tmp_path / "claude"
    path = config / "projects" / "-home-u-project" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    (config / "projects" / "-home-u-other").mkdir()
    env = {"CLAUDE_CONFIG_DIR": str(config)}

    async def read(mark, **extra):
        request = {"session": SESSION, "reach": MOD_LINK, "mark": mark, "options": {}, **extra}
        return await TRANSCRIPT.read_turn(request, {"env": env})

    return path, read


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


async def test_transcript_counts_four_kinds_once_per_message(transcript) -> None:
    path, read = transcript
    append(path, user("earlier") + "\n" + assistant("msg_0", i=1000) + "\n")
    begin = await read(None)
    assert begin["usage"] is None and begin["mark"]["offset"] == path.stat().st_size
    append(path, "\n".join([
        user("hello"),
        # one API message written as two lines (thinking, then text), sharing
        # its id and usage, the last line's output count the final one
        assistant("msg_1", i=10, o=1, cc=200, cr=3000),
        assistant("msg_1", i=10, o=40, cc=200, cr=3000),
        "not json at all",
        json.dumps({"type": "assistant", "message": {"id": "msg_x", "usage": {"input_tokens": -1}}}),
        assistant("msg_2", i=5, o=6, cc=0, cr=3200),
    ]) + "\n" + assistant("msg_3", i=999)[:40])  # a partial last line, still being written
    end = await read(begin["mark"])
    assert end["usage"] == {"input": 15, "output": 46, "cache_creation": 200, "cache_read": 6200}
    assert end["mark"]["offset"] < path.stat().st_size  # the partial line is left for later
    # The partial line completes in the next turn, and is counted there once.
    append(path, assistant("msg_3", i=999)[40:] + "\n" + assistant("msg_2", i=5, o=6) + "\n")
    later = await read(end["mark"])
    assert later["usage"] == {"input": 999, "output": 0, "cache_creation": 0, "cache_read": 0}


async def test_transcript_unknown_turns(transcript, monkeypatch) -> None:
    path, read = transcript
    append(path, user("x") + "\n")
    begin = await read(None)
    append(path, user("no assistant message this turn") + "\n")
    assert (await read(begin["mark"]))["usage"] is None
    # A turn larger than the bound is unknown, and the next starts after it.
    monkeypatch.setattr(TRANSCRIPT, "MAX_TURN_BYTES", 100)
    begin = await read(None)
    append(path, assistant("msg_big", i=1, o=1) + "\n")
    big = await read(begin["mark"])
    assert big["usage"] is None and big["mark"]["offset"] == path.stat().st_size
    monkeypatch.setattr(TRANSCRIPT, "MAX_TURN_BYTES", 32 * 1024 * 1024)
    # A transcript that shrank (rewritten) is unknown.
    begin = await read(None)
    path.write_text(assistant("msg_new", i=3) + "\n")
    assert (await read(begin["mark"]))["usage"] is None


async def test_transcript_that_appears_during_the_first_turn(transcript) -> None:
    path, read = transcript
    begin = await read(None)
    assert begin["mark"] == {"path": None, "offset": 0, "ids": []}
    append(path, user("first") + "\n" + assistant("msg_1", i=2, o=3) + "\n")
    end = await read(begin["mark"])
    assert end["usage"] == {"input": 2, "output": 3, "cache_creation": 0, "cache_read": 0}


async def test_transcript_given_by_path_and_refusals(transcript, tmp_path: Path) -> None:
    path, read = transcript
    elsewhere = tmp_path / "t.jsonl"
    elsewhere.write_text(assistant("m", o=1) + "\n")
    begin = await read(None, transcript=str(elsewhere))
    append(elsewhere, assistant("m2", o=4) + "\n")
    assert (await read(begin["mark"], transcript=str(elsewhere)))["usage"]["output"] == 4
    assert await TRANSCRIPT.read_turn({"session": SESSION, "reach": CONTAINER, "mark": None},
                                      {}) is None
    with pytest.raises(Refusal) as caught:
        await TRANSCRIPT.read_turn({"session": "../../etc", "reach": MOD_LINK, "mark": None},
                                   {"env": {}})
    assert caught.value.code == "bad-session"


# --------------------------------------------------------------------------- the meter


async def test_the_meter_takes_the_first_known_source_and_survives_failing_ones(
    tree: Path, tmp_path: Path
) -> None:
    write_module(tree, "usage-source", "explodes", """
        INTERFACE_VERSION = 1
        async def read_turn(request, deps):
            if request["mark"] is not None:
                raise RuntimeError("disk on fire")
            return {"mark": 0, "usage": None}
    """)
    write_module(tree, "usage-source", "garbled", """
        INTERFACE_VERSION = 1
        async def read_turn(request, deps):
            return {"mark": 0, "usage": {"input": -5}}
    """)
    test_loader = Loader(root=str(tree), log=lambda e: None)
    test_loader.load({"usage-source": ["explodes", "garbled", "frames"]}, only=["usage-source"])
    ledger = MemoryLedger()
    records = JsonlRecords(tmp_path / "data" / "usage.jsonl")
    log: list = []
    meter = TurnMeter(loader=test_loader, broker=Broker(log=log.append), records=records,
                      deps={"ledger": ledger}, log=log.append,
                      now=lambda: dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc))
    subject = {"session": "s", "instance": "coder", "harness": "container", "provider": "p",
               "model": "m", "account": None, "reach": CONTAINER}
    bracket = await meter.begin(subject)
    assert [m.name for m, _ in bracket.sources] == ["explodes", "frames"]
    ledger.add("s", input_tokens=3, output_tokens=4)
    record = await meter.end(bracket)
    assert record == {"session": "s", "instance": "coder", "harness": "container",
                      "provider": "p", "model": "m", "account": None,
                      "at": "2026-03-01T00:00:00.000Z",
                      "usage": {"input": 3, "output": 4, "cache_creation": 0, "cache_read": 0},
                      "source": "frames"}
    assert records.read() == [record]
    assert {(e["source"], e["code"]) for e in log if e.get("event") == "usage-unknown"} == {
        ("garbled", "malformed-answer"), ("explodes", "source-threw")}
    # A torn last line is skipped.
    with open(records.path, "a") as f:
        f.write('{"session": "s", "us')
    assert records.read() == [record]


# --------------------------------------------------------------------------- the layer


async def test_turn_usage_lands_then_the_limit_stops_the_session(settings_dir: Path, monkeypatch) -> None:
    settings = SettingsDir(settings_dir)
    settings.ensure("plugins.json")
    settings.ensure("routes.json")
    revision = settings.read("limits.json").revision
    from router.plugins.limit_checks import apply_limits_patch

    def add_limit(current):
        limits, changes = apply_limits_patch(
            {}, {"tokens": {"instances": {"default": {"limit": 100}}}}, None,
            dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
        return {"limits": limits}, changes

    settings.update("limits.json", revision, add_limit)
    ledger = MemoryLedger()
    records = MemoryRecords()
    log: list = []
    clock = [dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)]
    layer = PluginLayer(settings=settings, records=records, deps={"ledger": ledger},
                        log=log.append, now=lambda: clock[0])
    result = await layer.reload()
    assert result.refused == ()
    launch = await layer.launch("default", session="s-1")
    assert (launch.harness, launch.route, launch.harness_version) == ("echo", "primary", "echo 1")
    assert launch.reach["via"] == "in-process"

    bracket = await layer.begin_turn(launch)
    ledger.add("s-1", input_tokens=40, output_tokens=20)
    record, stop = await layer.end_turn(bracket)
    assert record["usage"]["input"] == 40 and stop is None

    bracket = await layer.begin_turn(launch)
    ledger.add("s-1", input_tokens=30, output_tokens=10)
    hops = []
    real, real_call = trio.to_thread.run_sync, records.worker.call

    async def counted(fn, *args, **kwargs):
        hops.append(fn)
        return await real(fn, *args, **kwargs)

    async def counted_call(fn, *args, **kwargs):
        hops.append(fn)
        return await real_call(fn, *args, **kwargs)

    # A hop is Trio's thread hop or a call on the records' worker (its own
    # thread, fed by a queue: router.store.worker).
    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    monkeypatch.setattr(records.worker, "call", counted_call)
    record, stop = await layer.end_turn(bracket)
    monkeypatch.setattr(trio.to_thread, "run_sync", real)
    monkeypatch.setattr(records.worker, "call", real_call)
    # The record's append and the checks (limits.json, the records they
    # count) share one worker-thread hop, the append first.
    assert len(hops) == 1
    assert records.read()[-1] == record  # the turn's usage landed before the answer
    assert stop.reason == "limit: token-limit tokens.instances.default limit 100 count 100"
    refusal = await layer.launch("default", session="s-2")
    assert refusal.code == "limit-reached"

    report = await layer.report()
    assert [(e["status"], e["count"]) for e in report] == [("counted", 100)]


async def test_a_launch_with_a_check_switched_on_but_refused_fails_closed(
    settings_dir: Path, tree: Path
) -> None:
    write_module(tree, "limit-check", "v1-check", """
        INTERFACE_VERSION = 1
        def may_launch(args): return {"allow": True}
        def must_stop(args): return {"stop": False}
        def report(args): return []
    """)
    settings = SettingsDir(settings_dir)
    settings.ensure("plugins.json")
    doc = settings.read("plugins.json")
    from router.plugins.loader import check_paths

    settings.update("plugins.json", doc.revision, lambda current: apply_plugins_patch(
        current, {"revision": doc.revision, "plugins": {"limit-check": ["v1-check"]}},
        module_exists=lambda k, n: check_paths(k, n, root=str(tree))))
    log: list = []
    layer = PluginLayer(settings=settings, records=MemoryRecords(), root=str(tree), log=log.append)
    result = await layer.reload()
    assert [(r.kind, r.code) for r in result.refused] == [("limit-check", "interface-version")]
    refusal = await layer.launch("default")
    assert refusal.code == "limit-check-failed" and "not-loaded" in refusal.message


@pytest.mark.parametrize("broken", [{"token-limit": True}, 5, True])
async def test_a_limit_check_setting_of_the_wrong_shape_keeps_the_checks_it_had(
    settings_dir: Path, broken
) -> None:
    # The loader refuses the kind and keeps token-limit; the limits must then
    # still be enforced by it, not silently dropped.
    from wire.json import dumps

    (settings_dir / "plugins.json").write_text(dumps(
        {"plugins": {"harness": ["echo"], "limit-check": ["token-limit"]}}))
    (settings_dir / "limits.json").write_text(dumps({"limits": {"tokens": {"instances": {
        "default": {"limit": 10, "since": "2026-01-01T00:00:00Z"}}}}}))
    records = MemoryRecords([{"instance": "default", "at": "2026-02-01T00:00:00Z",
                              "usage": {"input": 50, "output": 0, "cache_creation": 0,
                                        "cache_read": 0}}])
    layer = PluginLayer(settings=SettingsDir(settings_dir), records=records, log=lambda e: None)
    assert (await layer.reload()).refused == ()
    assert (await layer.launch("default")).code == "limit-reached"

    (settings_dir / "plugins.json").write_text(dumps(
        {"plugins": {"harness": ["echo"], "limit-check": broken}}))
    result = await layer.reload()
    assert [(r.kind, r.code, r.kept) for r in result.refused] == [
        ("limit-check", "invalid-plugins", ("token-limit",))]
    assert (await layer.launch("default")).code == "limit-reached"
    assert [e["status"] for e in await layer.report()] == ["counted"]


async def test_an_unreadable_limits_file_stops_the_session_at_the_end_of_its_turn(settings_dir: Path) -> None:
    """Fail closed: a launch refuses when limits.json cannot be read, and a
    running session stops at the end of its turn for the same reason, rather
    than running on with no limits."""
    settings = SettingsDir(settings_dir)
    for name in ("plugins.json", "routes.json", "limits.json"):
        settings.ensure(name)
    ledger = MemoryLedger()
    layer = PluginLayer(settings=settings, records=MemoryRecords(), deps={"ledger": ledger},
                        log=lambda entry: None, now=lambda: dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc))
    await layer.reload()
    launch = await layer.launch("default", session="s-1")
    bracket = await layer.begin_turn(launch)
    (settings_dir / "limits.json").write_text("{ not json")
    ledger.add("s-1", input_tokens=1, output_tokens=1)
    record, stop = await layer.end_turn(bracket)
    assert record["usage"]["input"] == 1  # the turn's usage still lands
    assert stop is not None and stop.failure is not None
    refusal = await layer.launch("default", session="s-2")
    assert stop.reason == f"limit-check-failed: limits.json cannot be read ({refusal.code})"
