"""Any number of routers started at once on a new PostgreSQL database:
each creates or finds the schema, none exits (the migration lock in
``router.store.db``; before it, two of three simultaneous starts failed with
``relation "sessions" already exists``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from router.store.db import parse_target
from router.record import open_record
from tests.api.processes import serve
from tests.support.postgres import Cluster


def test_records_opened_at_once_on_a_new_database_all_open(postgres: Cluster, tmp_path: Path) -> None:
    for attempt in range(3):
        url = postgres.create_database()
        failures: list[BaseException] = []
        together = threading.Barrier(4)

        def open_one(index: int) -> None:
            together.wait()
            try:
                open_record(parse_target(url), tmp_path / f"{attempt}-{index}").close()
            except BaseException as error:  # noqa: BLE001 (the test's record of it)
                failures.append(error)

        threads = [threading.Thread(target=open_one, args=(index,)) for index in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == [], failures


@pytest.mark.timeout(240)
async def test_three_routers_started_at_once_on_a_new_database_all_serve(pg_url: str, tmp_path: Path) -> None:
    served = []

    async def start(index: int, ready: trio.Event) -> None:
        (tmp_path / f"r{index}").mkdir()
        async with serve(tmp_path / f"r{index}", "--store", pg_url) as one:
            served.append(one)
            ready.set()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        events = [trio.Event() for _ in range(3)]
        for index, ready in enumerate(events):
            nursery.start_soon(start, index, ready)
        for ready in events:
            await ready.wait()  # `serve` raises (failing the test) when a router exits instead
        for one in served:
            async with one.client() as client:
                assert (await client.get("/healthz")).status_code == 200
        nursery.cancel_scope.cancel()
