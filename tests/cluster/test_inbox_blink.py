"""An inbox delivery whose lease moved meets a database that is away: the
refusal cannot be recorded, and the router goes on (docs/cluster.md).

The fault campaign's PostgreSQL phase (docs/reliability.md) found it: a
router stopped past its lease, continued while PostgreSQL restarted, had
an inbox delivery whose lease had moved (``LeaseLost``); recording that
refusal (``record_refusal``) met the restart past the retry budget
(``store-unavailable``), and the error left the inbox's nursery: ``router
serve`` exited (status 1), 16 times in one run. No database is needed here:
the member's database is a stand-in that refuses that one write."""

from __future__ import annotations

from typing import Any

import trio

from router._transient import unavailable
from router.cluster import pg
from router.cluster.member import ClusterMember


class AwayDatabase:
    """A cluster database that is away for every call (past the budget)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(fn.__name__)
        raise unavailable(ConnectionRefusedError("connection refused"), "the cluster's database")


async def test_a_refusal_that_cannot_be_recorded_leaves_the_row_and_the_router_runs_on() -> None:
    db = AwayDatabase()
    member = ClusterMember(db, "postgresql://nowhere/none", "a")  # type: ignore[arg-type]

    async def moved(event_id: str, session: str, body: str) -> tuple[str, bool]:
        raise pg.LeaseLost("lease-lost", f"the lease of {session!r} moved while {event_id} was delivered",
                           session=session, holder="a", fencing=None, what=f"answer to {event_id}")

    member._in_flight.add("e1")
    with trio.fail_after(10):
        await member._answer(moved, "e1", "s1", "{}")  # raised store-unavailable out of the inbox before
    assert db.calls == ["record_refusal"]
    assert "e1" not in member._in_flight  # the row stays in the inbox, for the next read


async def test_a_handler_write_refused_by_the_fence_while_the_database_is_away_is_left_too() -> None:
    db = AwayDatabase()
    member = ClusterMember(db, "postgresql://nowhere/none", "a")  # type: ignore[arg-type]
    refused = pg.LeaseLost("lease-lost", "fenced", session="s1", holder="a", fencing=3, what="delivery e2")

    async def fenced(event_id: str, session: str, body: str) -> tuple[str, bool]:
        raise RuntimeError("the handler's write") from refused

    with trio.fail_after(10):
        await member._answer(fenced, "e2", "s1", "{}")
    assert db.calls == ["record_refusal"]
