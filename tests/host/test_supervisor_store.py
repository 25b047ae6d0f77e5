"""A launcher's supervisor meets a store that is away past its retry budget
(``store-unavailable``): it waits and reads again (docs/reliability.md).

The fault campaign's PostgreSQL phase found it: with each router on its
own in-process daemon (the default cluster mode), PostgreSQL restarted
while a supervisor read the session's record or its open operations, and
``store-unavailable`` left the supervisor: ``router serve`` exited (status
1), 7 times in one run. No database is needed here: the supervisor's
store is a stand-in that is away for its first reads."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import router.host.supervisor as supervisor_module
from router._transient import unavailable
from router.host.supervisor import Supervisor


class Launcher:
    name = "stand-in"
    default_harness = "echo"

    def core(self) -> Any:
        return object()


class AwayStore:
    """Away (past the budget) for its first ``away`` calls, then answers."""

    def __init__(self, away: int) -> None:
        self.away = away
        self.calls = 0

    async def call(self, fn: Any, *args: Any) -> Any:
        self.calls += 1
        if self.calls <= self.away:
            raise unavailable(ConnectionRefusedError("connection refused"))
        return fn(*args)

    class operations:  # noqa: N801 (the store's repository, as the supervisor reads it)
        @staticmethod
        def all(**_: Any) -> list[str]:
            return ["op"]


async def test_the_open_work_is_read_again_until_the_store_is_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor_module, "STORE_PAUSE", (0.01, 0.02))
    store = AwayStore(away=3)
    supervisor = Supervisor("s1", launcher=Launcher(), store=store, owner=None)  # type: ignore[arg-type]
    with trio.fail_after(10):
        assert await supervisor._open_work() is True  # raised store-unavailable out of the supervisor before
    assert store.calls == 4
