"""A restart of ``router serve`` must not lose the turn it cut (docs/reliability.md).

Its in-process echo daemon dies with it, so the operation running at the
kill is lost with its container. The echo adapter declares ``rerun`` and
``router serve``'s policy is ``if-declared``: the restarted host runs the
turn again, and a resend of the delivery (same event id) is answered with
the echo text, exactly once. Real processes: ``router serve`` SIGKILLed in
the middle of a slow turn, then started again on the same data.
"""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from router.host.store import Store
from tests.api.processes import send, serve, stop
from tests.support.polling import until


def running(data: Path, operation_id: str) -> bool:
    path = data / "host.sqlite"
    if not path.exists():
        return False
    with Store(path, exclusive=False, create=False) as store:
        record = store.operations.get("root", operation_id)
    return record is not None and record.status == "running"


async def test_a_turn_cut_by_a_restart_of_serve_runs_again_and_is_answered_once(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    cut: dict[str, object] = {}

    async with serve(tmp_path, name="first") as served:

        async def deliver() -> None:
            cut["first"] = await send(served.url, "root", "slow 8000 hi", "--event-id", "e1", token=served.token)

        nursery.start_soon(deliver)
        with trio.move_on_after(60) as waited:
            await until(lambda: running(tmp_path / "data", "e1") or "first" in cut, step=0.05)
        assert not waited.cancelled_caught and "first" not in cut, (cut, served.log())
        await stop(served.process, signal.SIGKILL)  # mid-turn: the daemon dies with it

    with Store(tmp_path / "data" / "host.sqlite", exclusive=False, create=False) as store:
        assert store.operations.get("root", "e1").status == "running"  # cut, not settled

    async with serve(tmp_path, name="second") as served:
        with trio.fail_after(120):
            status, answer, err = await send(served.url, "root", "slow 8000 hi", "--event-id", "e1", token=served.token)
        assert status == 0, (answer, err, served.log())
        assert answer["reply"] == {"operationId": "e1", "session": "root", "status": "done", "text": "echo: hi (turn 1)"}
        with trio.fail_after(60):
            status, again, _ = await send(served.url, "root", "slow 8000 hi", "--event-id", "e1", token=served.token)
        assert status == 0 and again["reply"] == answer["reply"]
        assert await stop(served.process, signal.SIGTERM) == 0

    with Store(tmp_path / "data" / "host.sqlite", exclusive=False, create=False) as store:
        record = store.operations.get("root", "e1")
        messages = store.messages.all("root")
        entries = store.entries.all("root")
    assert record.outcome == {"status": "done", "text": "echo: hi (turn 1)"}
    # Answered once: one assistant message, one persisted turn.
    assert [message["id"] for message in messages] == ["e1:user", "e1:assistant"]
    assert entries == [{"turn": 1, "text": "hi"}]
