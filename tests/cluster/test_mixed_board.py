"""One board for every router of the user on the machine, whatever its
store: a router with a SQLite record and a router of a PostgreSQL cluster
each list both ``root`` sessions (the cluster's listing once dropped every
other router's session that had the id of one of its own)."""

from __future__ import annotations

from pathlib import Path

from tests.api.processes import serve


async def test_a_sqlite_router_and_a_cluster_router_show_one_board(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "alone").mkdir()
    (tmp_path / "member").mkdir()
    async with serve(tmp_path / "alone", "--name", "alone") as alone, \
            serve(tmp_path / "member", "--name", "member", "--store", pg_url) as member:
        boards = []
        for served in (alone, member):
            async with served.client() as client:
                listed = (await client.get("/sessions")).json()["sessions"]
            boards.append(sorted((item["id"], (item.get("router") or {}).get("name")) for item in listed))
        assert boards[0] == boards[1] == [("root", "alone"), ("root", "member")], boards
