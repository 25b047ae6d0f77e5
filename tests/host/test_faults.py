"""Fault tests: real daemons (ours and the reference), real sockets, real
processes. Each scenario breaks something the host must survive (the daemon,
the socket, the host itself) and checks that nothing was lost and nothing
happened twice.

Not here because it is covered at the API level against both daemons:
"reset while busy is refused; reset when idle opens a new generation and the
handoff reaches the next prompt" (``test_host_api.py``,
``test_reset_is_refused_while_busy_and_opens_a_new_generation_when_idle``).
"""

from __future__ import annotations

import functools
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from router.host.host import Host, HostSession
from router.host.events import event_json
from router.host.link import DaemonEndpoint
from router.host.store import Store
from tests.host.conftest import start_host
from tests.host.proxy import CuttingProxy
from tests.support.daemons import REPO, Daemon, spawn_daemon


async def next_start(stream: Any, operation_id: str) -> None:
    async for batch in stream:
        batch = [event_json(event) for event in batch]
        for event in batch:
            if event["type"] == "operation-start" and event["operationId"] == operation_id:
                return
    raise AssertionError("the stream ended first")


# ---------------------------------------------------------------- the daemon dies


@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_a_daemon_killed_mid_turn_is_replaced_and_the_session_resumes(
    kind: str, policy: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    store = Store(tmp_path / "host.db")
    async with spawn_daemon(kind, runtime_id="runtime-1") as first:  # type: ignore[arg-type]
        host = await start_host(
            nursery, store, DaemonEndpoint(first.url, first.token), on_container_lost=policy
        )
        session = host.session()
        assert (await session.prompt("first"))[0].text == "echo: first (turn 1)"
        async with session.events() as stream:
            await session.submit("slow 1500 second", operation_id="second")
            await session.submit("third", operation_id="third")
            await next_start(stream, "second")
            first.kill()
            await first.process.wait()
            async with spawn_daemon(kind, runtime_id="runtime-2", port=first.port) as second:  # type: ignore[arg-type]
                third = await session.wait("third")
                lost = await session.wait("second")
                seen = []
                async for batch in stream:
                    batch = [event_json(event) for event in batch]
                    seen += batch
                    if any(e["type"] == "container" for e in seen):
                        break
                assert {"type": "container", "status": "lost"} in seen
                assert host.session().link.runtime_id == "runtime-2" == second.runtime_id
    store_entries = store.entries.all("root")
    if policy == "fail":
        assert (lost.status, lost.reason) == ("unanswered", "container_lost")
        # The restored entry (turn 1) reached the new daemon: it counts on.
        assert third.text == "echo: third (turn 2)"
        assert store_entries == [{"turn": 1, "text": "first"}, {"turn": 2, "text": "third"}]
    else:
        assert lost.text == "echo: second (turn 2)"
        assert third.text == "echo: third (turn 3)"
        assert [e["turn"] for e in store_entries] == [1, 2, 3]
    ids = [m["id"] for m in store.messages.all("root")]
    assert len(ids) == len(set(ids))  # the retried turn's user message is there once
    assert {"second:user", "third:user", "third:assistant"} <= set(ids)
    await host.aclose()
    store.close()


# ---------------------------------------------------------------- the socket drops

WORKLOAD = [("w1", "one"), ("w2", "slow 20 two"), ("w3", "fail three"), ("w4", "four"), ("w5", "five")]


def normalized(messages: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k != "createdAt"} for m in messages]


async def run_workload(host: Host, session_id: str) -> dict:
    session = await host.sessions.create(session_id)
    for operation_id, text in WORKLOAD:
        await session.submit(text, operation_id=operation_id)
    results = []
    for operation_id, _ in WORKLOAD:
        result = (await session.wait(operation_id)).to_json()
        del result["session"]
        results.append(result)
    store = host.store
    return {
        "results": results,
        "messages": normalized(await store.call(store.messages.all, session_id)),
        "entries": await store.call(store.entries.all, session_id),
        "operations": [(o.id, o.status) for o in await store.call(store.operations.all)],
    }


async def through_proxy(daemon: Daemon, directory: Path, session_id: str, **proxy: Any) -> tuple[dict, CuttingProxy]:
    async with trio.open_nursery() as nursery:
        cutter = await nursery.start(CuttingProxy(daemon.port, **proxy).run)
        with Store(directory / f"{session_id}.db") as store:
            host = await start_host(nursery, store, DaemonEndpoint(cutter.url, daemon.token))
            with trio.fail_after(60):
                outcome = await run_workload(host, session_id)
            await host.aclose()  # before the store closes: no link may still use it
        nursery.cancel_scope.cancel()
    return outcome, cutter


@pytest.mark.parametrize("direction", ["down", "up"])
async def test_cutting_the_socket_at_any_message_changes_nothing(
    daemon: Daemon, direction: str, tmp_path: Path
) -> None:
    expected, clean = await through_proxy(daemon, tmp_path, f"clean-{direction}", direction=direction)
    assert [r["status"] for r in expected["results"]] == ["done", "done", "unanswered", "done", "done"]
    assert expected["results"][3]["text"] == "echo: four (turn 3)"
    total = clean.messages
    assert total >= len(WORKLOAD)
    rng = random.Random(f"{daemon.kind}-{direction}")
    plans: list[set[int]] = [{n} for n in range(1, total + 1)]
    plans += [set(rng.sample(range(1, total + 1), 3)) for _ in range(6)]  # several cuts in one run
    outcomes: dict[int, tuple[dict, CuttingProxy]] = {}
    limiter = trio.CapacityLimiter(8)

    async def one(index: int, cuts: set[int]) -> None:
        async with limiter:
            outcomes[index] = await through_proxy(
                daemon, tmp_path, f"cut-{direction}-{index}", cut_at=cuts, direction=direction
            )

    async with trio.open_nursery() as nursery:
        for index, cuts in enumerate(plans):
            nursery.start_soon(one, index, cuts)
    cut_runs = 0
    for index, cuts in enumerate(plans):
        outcome, cutter = outcomes[index]
        assert outcome == expected, f"cut at {sorted(cuts)}"
        cut_runs += cutter.cuts > 0
        if cutter.cuts:
            assert cutter.connections > 1, f"cut at {sorted(cuts)} but never reconnected"
    # The cuts happened (a run can end before a late cut point comes).
    assert cut_runs >= total // 2


# ---------------------------------------------------------------- the host settled what the daemon still runs


async def test_an_operation_the_host_settled_offline_is_aborted_there_on_reconnect(
    daemon: Daemon, tmp_path: Path, nursery: trio.Nursery
) -> None:
    cutter = await nursery.start(CuttingProxy(daemon.port).run)
    store = Store(tmp_path / "host.db")
    host = await start_host(nursery, store, DaemonEndpoint(cutter.url, daemon.token))
    session = host.session()
    async with session.events() as stream:
        # Ten minutes: far past the test's own timeout, so only an abort ends it.
        await session.submit("slow 600000 stuck", operation_id="stuck")
        await next_start(stream, "stuck")
    cutter.block()
    link = session.link
    await link.wait_state("connecting", "backoff")  # the drop is seen
    assert await session.abort()  # settled here; the daemon cannot hear it
    assert (await session.wait("stuck")).reason == "aborted"
    await session.submit("after", operation_id="after")  # must not be aborted with it
    cutter.unblock()
    # One turn at a time: "after" runs only once "stuck" was aborted there.
    result = await session.wait("after")
    assert result.text == "echo: after (turn 1)"
    assert link.connections >= 2
    await host.aclose()
    store.close()
    # The daemon's own record: aborted there.
    report = await daemon_hello(daemon, "root")
    stuck = next(op for op in report["operations"] if op["operationId"] == "stuck")
    assert stuck == {"operationId": "stuck", "status": "settled", "outcome": {"status": "unanswered", "reason": "aborted"}}


async def daemon_hello(daemon: Daemon, session: str) -> dict:
    """The daemon's ``hello`` for a session, read with a bare client."""
    import json

    from trio_websocket import open_websocket_url

    from wire.container import CONTAINER_TOKEN_HEADER

    async with open_websocket_url(
        daemon.session_url(session), extra_headers=[(CONTAINER_TOKEN_HEADER.encode(), daemon.token.encode())]
    ) as ws:
        return json.loads(await ws.get_message())


# ---------------------------------------------------------------- the host dies


async def test_a_host_killed_at_random_points_loses_nothing_and_doubles_nothing(
    daemon: Daemon, tmp_path: Path
) -> None:
    store_path = tmp_path / "host.db"
    rng = random.Random(f"host-kill-{daemon.kind}")
    environment = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    operations = 8
    kills = 0
    answers = []
    phases: list[str] = []
    for number in range(1, operations + 1):
        text = f"slow {rng.choice([0, 300, 800])} message {number}"
        command = [
            sys.executable, "-m", "router", "prompt",
            "--daemon", daemon.url, "--token", daemon.token, "--store", str(store_path),
            "--id", f"op-{number}", text,
        ]  # fmt: skip
        for attempt in range(5):
            output = tmp_path / f"op-{number}-{attempt}.out"
            with open(output, "wb") as stdout, open(output.with_suffix(".err"), "wb") as stderr:
                async with trio.open_nursery() as nursery:
                    process = await nursery.start(
                        functools.partial(
                            trio.run_process, command, env=environment, stdout=stdout, stderr=stderr, check=False
                        )
                    )
                    if attempt < 3:  # killed at a random point, up to three times per operation
                        with trio.move_on_after(rng.uniform(0.1, 1.0)):
                            await process.wait()
                        if process.returncode is None:
                            process.send_signal(signal.SIGKILL)
                            kills += 1
            if process.returncode == -signal.SIGKILL:
                phases.append(_phase(store_path, f"op-{number}"))
            stdout_text = output.read_text()
            if process.returncode == 0:
                answers.append(stdout_text.strip())
                break
            assert process.returncode == -signal.SIGKILL, (
                f"router prompt exited {process.returncode}: {output.with_suffix('.err').read_text()}"
            )
        else:
            raise AssertionError(f"op-{number} never finished")
    assert kills > 0
    print(f"host killed {kills} times; the operation was then: {sorted(phases)}")
    # Each operation ran once, in order: the echo adapter's turns count 1..N.
    assert answers == [
        f'{{"status":"done","text":"echo: message {n} (turn {n})"}}' for n in range(1, operations + 1)
    ]
    with Store(store_path) as store:
        assert [(o.id, o.status) for o in store.operations.all()] == [
            (f"op-{n}", "done") for n in range(1, operations + 1)
        ]
        assert [m["id"] for m in store.messages.all("root")] == [
            f"op-{n}:{role}" for n in range(1, operations + 1) for role in ("user", "assistant")
        ]
        assert store.entries.all("root") == [
            {"turn": n, "text": f"message {n}"} for n in range(1, operations + 1)
        ]


def _phase(store_path: Path, operation_id: str) -> str:
    """Where an operation stood when its host was killed."""
    if not store_path.exists():
        return "no store"
    with Store(store_path, exclusive=False) as store:
        if store.sessions.get("root") is None:
            return "no session"
        record = store.operations.get("root", operation_id)
        if record is None:
            return "not submitted"
        if record.status == "queued" and record.delivered is None:
            return "queued"
        return "delivered" if record.status == "queued" else record.status


# ---------------------------------------------------------------- many sessions, many tasks


async def test_two_hundred_sessions_and_concurrent_submissions_settle_exactly_once(
    daemon: Daemon, store: Store, nursery: trio.Nursery
) -> None:
    host = await start_host(nursery, store, DaemonEndpoint(daemon.url, daemon.token))
    sessions = [await host.sessions.create(f"s{i:03}") for i in range(200)]
    per_session = 3
    results: dict[tuple[str, str], list[Any]] = {}

    async def submit_and_wait(session: HostSession, operation_id: str) -> None:
        await session.submit(f"{session.id} {operation_id}", operation_id=operation_id)
        result = await session.wait(operation_id)
        results.setdefault((session.id, operation_id), []).append(result)

    async with trio.open_nursery() as tasks:
        for session in sessions:
            for j in range(per_session):
                # Two tasks submit each operation, with the same key.
                tasks.start_soon(submit_and_wait, session, f"op{j}")
                tasks.start_soon(submit_and_wait, session, f"op{j}")
    assert len(results) == 200 * per_session
    for session in sessions:
        turns = []
        for j in range(per_session):
            first, second = results[(session.id, f"op{j}")]
            assert first == second and first.status == "done"
            prefix = f"echo: {session.id} op{j} (turn "
            assert first.text.startswith(prefix)
            turns.append(int(first.text[len(prefix) : -1]))
        assert sorted(turns) == list(range(1, per_session + 1))
    assert len(store.operations.all(statuses=("done",))) == 200 * per_session
    for session in sessions[:: 20]:
        assert len(store.messages.all(session.id)) == 2 * per_session
        assert len(store.entries.all(session.id)) == per_session


async def test_a_new_daemon_gets_a_large_history_in_restore_chunks(
    kind: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    from wire.container import MAX_CHUNK_CHARS, chunk_entries

    store = Store(tmp_path / "host.db")
    big = MAX_CHUNK_CHARS * 6 // 10  # two never share a chunk
    async with spawn_daemon(kind, runtime_id="runtime-1") as first:  # type: ignore[arg-type]
        host = await start_host(nursery, store, DaemonEndpoint(first.url, first.token))
        session = host.session()
        for n in range(1, 4):
            result, _ = await session.prompt(f"{n}" + "x" * big)
            assert result.text.endswith(f"(turn {n})")
        assert len(chunk_entries(store.entries.all("root"))) == 3
        first.kill()
        await first.process.wait()
        async with spawn_daemon(kind, runtime_id="runtime-2", port=first.port):  # type: ignore[arg-type]
            # Three restore chunks (two ``restore``, the last in ``open``)
            # reached the new daemon: its echo adapter counts them.
            result, _ = await session.prompt("after")
            assert result.text == "echo: after (turn 4)"
        await host.aclose()
    store.close()
