"""The lifecycle of a launched session's daemon: the sans-IO core
(``router.host.lifecycle``) without sockets, any sequence of inputs with
hypothesis, and the supervisor (``router.host.supervisor``) over a fake
launcher module on trio's autojump clock."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.host import Host, HostSettings, Launcher, Store
from router.host.lifecycle import (
    DaemonInfo,
    FailOpen,
    LifecycleCore,
    Publish,
    RedialLink,
    Start,
    StopContainer,
    Watch,
)


def daemon(n: int) -> DaemonInfo:
    return DaemonInfo(url=f"ws://127.0.0.1:{9000 + n}", token=f"t{n}", runtime=f"r{n}", container=f"c{n}")


def kinds(effects: list[Any]) -> list[str]:
    return [type(effect).__name__ for effect in effects]


def test_nothing_starts_until_there_is_work() -> None:
    core = LifecycleCore(idle_timeout=10)
    assert core.state == "stopped" and core.daemon is None
    assert core.work_done(0.0) == []  # a settle with nothing running arms nothing
    assert core.idle_deadline == math.inf
    effects = core.demand()
    assert effects == [Publish("starting", None, None), Start(0.0)]
    assert core.demand() == []  # one start in flight
    effects = core.started(daemon(1), now=5.0)
    assert effects == [Watch("c1"), Publish("running", None, daemon(1))]
    assert core.state == "running" and core.daemon == daemon(1) and core.idle_deadline == math.inf


def test_a_lost_daemon_with_work_is_replaced_and_a_stale_loss_changes_nothing() -> None:
    core = LifecycleCore()
    core.demand()
    core.started(daemon(1), now=0.0)
    assert core.lost("c0", "killed") == []  # not the one it holds
    effects = core.lost("c1", "killed by SIGKILL")
    assert effects == [StopContainer("c1", "lost: killed by SIGKILL"), RedialLink(),
                       Publish("replacing", "lost: killed by SIGKILL; replacing it", None), Start(0.0)]
    assert core.state == "replacing" and core.daemon is None and core.starting
    assert core.lost("c1", "again") == []
    core.started(daemon(2), now=1.0)
    assert (core.state, core.starts, core.losses) == ("running", 2, 1)


def test_a_lost_idle_daemon_waits_for_the_next_delivery() -> None:
    core = LifecycleCore()
    core.demand()
    core.started(daemon(1), now=0.0)
    core.work_done(1.0)
    effects = core.lost("c1", "exited with status 0")
    assert kinds(effects) == ["StopContainer", "RedialLink", "Publish"] and core.state == "stopped"
    assert kinds(core.demand()) == ["Publish", "Start"]


def test_idle_stop_at_the_deadline_and_start_again_on_demand() -> None:
    core = LifecycleCore(idle_timeout=30)
    core.demand()
    core.started(daemon(1), now=0.0)
    core.work_done(now=100.0)
    assert core.idle_deadline == 130.0
    assert core.idle_expired(129.0) == []  # early: a deadline that fired before its time
    effects = core.idle_expired(130.0)
    assert effects == [StopContainer("c1", "idle for 30 s"), Publish("idle-stopped", "idle for 30 s", None)]
    assert core.state == "idle-stopped" and core.daemon is None and core.idle_deadline == math.inf
    assert core.lost("c1", "stopped") == []  # its own stop, reported by the watch
    assert kinds(core.demand()) == ["Publish", "Start"]


def test_demand_disarms_the_idle_stop() -> None:
    core = LifecycleCore(idle_timeout=30)
    core.demand()
    core.started(daemon(1), now=0.0)
    core.work_done(now=10.0)
    core.demand()
    assert core.idle_deadline == math.inf
    assert core.idle_expired(1000.0) == []


def test_a_daemon_that_starts_after_the_work_ended_is_armed_for_idle() -> None:
    core = LifecycleCore(idle_timeout=5)
    core.demand()
    core.work_done(now=1.0)  # the work was aborted while the daemon started
    core.started(daemon(1), now=2.0)
    assert core.idle_deadline == 7.0


def test_failed_starts_retry_then_unreachable_with_the_reason_and_a_later_delivery_tries_again() -> None:
    core = LifecycleCore(max_failures=3, retry_base=1.0, retry_cap=30.0)
    core.demand()
    first = core.start_failed("image-missing", "no image router:nope")
    assert first == [Publish("starting", "start 1 of 3 failed: image-missing: no image router:nope", None),
                     Start(1.0)]
    assert core.start_failed("image-missing", "no image router:nope")[-1] == Start(2.0)
    last = core.start_failed("image-missing", "no image router:nope")
    assert last == [
        Publish("unreachable", "image-missing: no image router:nope (3 starts failed in a row)", None),
        FailOpen(Refusal("image-missing", "no image router:nope (3 starts failed in a row); send again to try again")),
    ]
    assert core.state == "unreachable" and not core.starting and not core.wanted
    assert core.reason == "image-missing: no image router:nope"
    again = core.demand()
    assert kinds(again) == ["Publish", "Start"] and core.failures == 0 and core.state == "starting"


def test_a_daemon_of_an_earlier_run_is_adopted_once() -> None:
    core = LifecycleCore(idle_timeout=10)
    effects = core.adopted(daemon(7), now=3.0)
    assert effects == [Watch("c7"), Publish("running", "adopted from an earlier run of the router", daemon(7))]
    assert (core.state, core.daemon, core.adoptions, core.starts, core.idle_deadline) == (
        "running", daemon(7), 1, 0, 13.0)
    assert core.adopted(daemon(8), now=4.0) == []  # it has one
    assert core.demand() == [] and core.idle_deadline == math.inf


def test_close_stops_the_running_daemon_only() -> None:
    core = LifecycleCore()
    assert core.close() == []
    core.demand()
    core.started(daemon(1), now=0.0)
    assert core.close() == [StopContainer("c1", "the router stops")]
    assert core.daemon is None


# --------------------------------------------------------------------------- any sequence of inputs

inputs = st.lists(
    st.one_of(
        st.just(("demand",)),
        st.tuples(st.just("work_done"), st.floats(0, 100)),
        st.tuples(st.just("started"), st.integers(0, 3)),
        st.tuples(st.just("start_failed"), st.sampled_from(["image-missing", "start-failed"])),
        st.tuples(st.just("lost"), st.integers(0, 3)),
        st.tuples(st.just("idle_expired"), st.floats(0, 200)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(inputs)
def test_any_inputs_keep_the_invariants(steps: list[tuple]) -> None:
    """A driver that does what the core says (a start is answered only
    while one is in flight; a watch reports only a watched container)
    never sees two starts in flight, a daemon outside ``running``, a stop
    of a container it never started, or a watch without a start."""
    core = LifecycleCore(idle_timeout=10, max_failures=3)
    in_flight = 0
    watched: set[str] = set()
    started: set[str] = set()
    for step in steps:
        name = step[0]
        if name == "demand":
            effects = core.demand()
        elif name == "work_done":
            effects = core.work_done(step[1])
        elif name == "started":
            if not in_flight:
                continue
            effects = core.started(daemon(len(started)), now=0.0)
            started.add(f"c{len(started)}")
        elif name == "start_failed":
            if not in_flight:
                continue
            effects = core.start_failed(step[1], "no")
        elif name == "lost":
            if not watched:
                continue
            effects = core.lost(sorted(watched)[step[1] % len(watched)], "killed")
        else:
            effects = core.idle_expired(step[1] + (core.idle_deadline if math.isfinite(core.idle_deadline) else 0))
        in_flight -= name in ("started", "start_failed")
        for effect in effects:
            if type(effect) is Start:
                in_flight += 1
            elif type(effect) is Watch:
                assert effect.container in started
                watched.add(effect.container)
            elif type(effect) is StopContainer:
                assert effect.container in started
                watched.discard(effect.container)
        assert in_flight in (0, 1) and in_flight == core.starting
        assert (core.daemon is not None) == (core.state == "running")
        assert core.state != "unreachable" or not core.starting
        assert core.daemon is None or core.daemon.container in watched
        assert math.isinf(core.idle_deadline) or (core.state == "running" and not core.wanted)


# --------------------------------------------------------------------------- the supervisor, on virtual time


class FakeModule:
    """A launcher module whose daemons are endless waits; ``kill`` ends
    one as a ``docker kill`` would. ``refuse`` makes starts fail."""

    def __init__(self) -> None:
        self.starts: list[dict] = []
        self.stops: list[str] = []
        self.refuse: dict | None = None
        self.exits: dict[str, trio.Event] = {}

    async def start(self, context: dict) -> dict:
        await trio.sleep(0.5)  # a start takes time
        self.starts.append(context)
        if self.refuse is not None:
            return self.refuse
        container = f"c{len(self.starts)}"
        self.exits[container] = trio.Event()
        return {"url": "ws://127.0.0.1:1", "container": container, "state": "running"}

    async def wait(self, context: dict, container: str) -> dict:
        await self.exits[container].wait()
        return {"state": "killed", "exit_code": 137, "reason": "killed by SIGKILL"}

    async def inspect(self, context: dict, container: str) -> dict:
        return {"state": "running"}

    async def stop(self, context: dict, container: str) -> None:
        self.stops.append(container)
        await trio.sleep(0.1)
        self.exits[container].set()

    async def remove_workspace(self, context: dict) -> None:
        await trio.lowlevel.checkpoint()

    def kill(self, container: str) -> None:
        self.exits[container].set()


async def settle_down() -> None:
    await trio.testing.wait_all_tasks_blocked()


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only once every task has been blocked for a
    moment of real time: the store works in a thread, and a clock that
    jumped while it did would fire timers early. On a loaded machine a
    store call can outlast any such moment, so the tests here set no
    deadline of their own in virtual time (one would fire while the store
    works): a hang is caught by pytest's timeout, in real time."""
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "host.db") as opened:
        yield opened


def launcher(module: FakeModule, **options: Any) -> Launcher:
    return Launcher(name="fake", module=module, owner="o1", **options)


async def test_supervisor_start_on_demand_replace_and_idle_on_virtual_time(
    store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    module = FakeModule()
    host = Host(store, None, HostSettings(), launcher=launcher(module, idle_timeout=60))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        supervisor = host.supervisor("root")
        await settle_down()
        assert module.starts == [] and supervisor.core.state == "stopped"
        supervisor.demand()  # no open work: a spent demand
        await settle_down()
        assert module.starts == [] and supervisor.core.state == "stopped"
        await store.call(store.operations.enqueue, "root", "op1", "hi", "followUp")
        supervisor.demand()
        endpoint = await supervisor.endpoint()
        assert endpoint.url == "ws://127.0.0.1:1" and len(module.starts) == 1
        first = module.starts[0]
        assert first["labels"] == {"router.owner": "o1", "router.session": "root"}
        assert first["harness"] == "echo" and first["token"] and first["runtime"].startswith("r-")
        record = await store.call(store.sessions.require, "root")
        assert (record.daemon.state, record.daemon.container, record.daemon.url) == ("running", "c1", endpoint.url)

        module.kill("c1")  # lost with work open: replaced at once, a new runtime
        while supervisor.core.starts < 2:
            await trio.sleep(0.05)
        assert module.stops == ["c1"] and module.starts[1]["runtime"] != first["runtime"]
        assert module.starts[1]["token"] != first["token"]

        await store.call(store.operations.settle, "root", "op1", {"status": "done", "text": "hi"})
        checked = trio.current_time()
        supervisor.check_idle()  # nothing open: idle from now
        while math.isinf(supervisor.core.idle_deadline):
            await trio.sleep(0.01)
        deadline = supervisor.core.idle_deadline
        assert checked + 60 <= deadline < trio.current_time() + 60
        while supervisor.core.state != "idle-stopped":
            await trio.sleep(0.25)
        assert deadline <= trio.current_time() <= deadline + 0.25
        assert module.stops == ["c1", "c2"] and supervisor.core.losses == 1  # its own stop is no loss
        await store.call(store.operations.enqueue, "root", "op2", "again", "followUp")
        supervisor.demand()
        await supervisor.endpoint()
        assert len(module.starts) == 3
        host.close()
    assert module.stops == ["c1", "c2", "c3"]  # the host stopped: its daemon with it


async def test_supervisor_unreachable_settles_open_work_and_tries_again_later(
    store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    module = FakeModule()
    module.refuse = {"code": "image-missing", "message": "no image router:nope"}
    host = Host(store, None, HostSettings(), launcher=launcher(module, max_failures=2))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        session = host.session("root")
        receipt = await session.submit("hi", operation_id="op1")
        result = await session.wait(receipt.operation_id)
        assert (result.status, result.reason) == ("unanswered", "image-missing")
        assert len(module.starts) == 2
        supervisor = host.supervisor("root")
        assert supervisor.core.state == "unreachable"
        record = await store.call(store.sessions.require, "root")
        assert record.daemon.state == "unreachable"
        assert "image-missing: no image router:nope" in record.daemon.reason
        listed = await host.sessions.list()
        assert listed[0]["daemon"]["state"] == "unreachable"

        module.refuse = None  # the image is there now: the next delivery starts it
        await session.submit("again", operation_id="op2")
        await supervisor.endpoint()
        assert len(module.starts) == 3 and supervisor.core.state == "running"
        host.close()


async def test_each_step_is_an_event_and_a_live_view_notice(
    store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    from router.host import DaemonChanged
    from router.turns.live import container_items

    module = FakeModule()
    host = Host(store, None, HostSettings(), launcher=launcher(module, idle_timeout=5))
    seen: list[DaemonChanged] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        async with host.session("root").events() as stream:

            async def collect() -> None:
                async for batch in stream:
                    seen.extend(event for event in batch if type(event) is DaemonChanged)

            nursery.start_soon(collect)
            await store.call(store.operations.enqueue, "root", "op1", "hi", "followUp")
            supervisor = host.supervisor("root")
            supervisor.demand()
            await supervisor.endpoint()
            module.kill("c1")
            while supervisor.core.starts < 2:
                await trio.sleep(0.05)
            await store.call(store.operations.settle, "root", "op1", {"status": "done", "text": "hi"})
            supervisor.check_idle()
            while not seen or seen[-1].state != "idle-stopped":  # the event comes after the core's state and its record
                await trio.sleep(0.5)
            host.close()
    assert [event.state for event in seen] == ["starting", "running", "replacing", "running", "idle-stopped"]
    assert seen[1].container == "c1" and seen[2].reason == "lost: killed by SIGKILL; replacing it"
    notices = [item for event in seen for item in container_items(event)]
    assert [(n["type"], n["code"], n["level"]) for n in notices][2] == ("notice", "daemon-replacing", "warning")
    assert "its daemon was lost; a new one is starting" in notices[2]["message"]


async def test_a_start_that_hangs_is_cut_by_its_deadline(
    store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    class Hangs(FakeModule):
        async def start(self, context: dict) -> dict:
            self.starts.append(context)
            await trio.sleep_forever()

    module = Hangs()
    host = Host(store, None, HostSettings(), launcher=launcher(module, max_failures=1, start_timeout=5))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        session = host.session("root")
        await session.submit("hi", operation_id="op1")
        result = await session.wait("op1")
        assert (result.status, result.reason) == ("unanswered", "start-timeout")
        host.close()


# --------------------------------------------------------------------------- ending a session


class RefusesRemoval(FakeModule):
    """A launcher whose ``remove_workspace`` answers ``answer`` (the docker
    launcher's ``workspace-in-use`` while a container still mounts it)."""

    def __init__(self, answer: object) -> None:
        super().__init__()
        self.answer = answer
        self.removed: list[str] = []

    async def remove_workspace(self, context: dict) -> object:
        await trio.lowlevel.checkpoint()
        self.removed.append(context["workspace"])
        return self.answer


async def test_ending_a_session_removes_its_workspace_and_marks_it_ended(store: Store) -> None:
    module = RefusesRemoval(None)
    host = Host(store, None, HostSettings(), launcher=launcher(module))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        await host.end_session("root", reason="ended by a test")
        assert module.removed == [launcher(module).context("root", harness="echo")["workspace"]]
        assert await host.ended("root")
        (listed,) = await host.sessions.list()
        assert listed["ended"] is True
        assert (listed["daemon"]["state"], listed["daemon"]["reason"]) == ("ended", "ended by a test")
        host.close()


async def test_a_launchers_refusal_to_remove_the_workspace_is_the_hosts_refusal(store: Store) -> None:
    module = RefusesRemoval({"code": "workspace-in-use", "message": "the workspace w1 is still mounted"})
    host = Host(store, None, HostSettings(), launcher=launcher(module))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        with pytest.raises(Refusal) as refused:
            await host.end_session("root")
        assert (refused.value.code, refused.value.message) == ("workspace-in-use", "the workspace w1 is still mounted")
        assert refused.value.to_json() == {"error": "workspace-in-use", "message": "the workspace w1 is still mounted"}
        assert not await host.ended("root")  # not ended: the person may try again once the workspace is free
        module.answer = {"code": "Not Kebab", "message": 7}  # neither null nor a refusal
        with pytest.raises(Refusal) as malformed:
            await host.end_session("root")
        assert (malformed.value.code, malformed.value.message) == (
            "malformed-answer", "the fake launcher's remove_workspace answered {'code': 'Not Kebab', 'message': 7}, "
            "not null or {code, message}")
        assert not await host.ended("root")
        host.close()
