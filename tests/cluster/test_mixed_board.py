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


async def test_a_router_that_does_not_hold_a_session_does_not_warn_about_it(pg_url: str, tmp_path: Path) -> None:
    """A router of a cluster that does not hold ``root`` meets ``not-holder``
    at every try to follow its events: that is a line at INFO once, not a
    warning at every try (it was 8 warnings in 20 s per session while a
    page was open)."""
    import httpx
    import trio

    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with serve(tmp_path / "one", "--name", "one", "--store", pg_url) as one, \
            serve(tmp_path / "two", "--name", "two", "--store", pg_url) as two:
        async with one.client() as client:
            with trio.fail_after(60):
                while True:  # the lease round gives root a holder
                    listed = (await client.get("/sessions")).json()["sessions"]
                    holder = next((item["router"] for item in listed if item["id"] == "root"), None)
                    if holder:
                        break
                    await trio.sleep(0.1)
        other = two if holder["name"] == "one" else one
        async with httpx.AsyncClient(base_url=other.url, headers=other.headers, timeout=60) as client:
            async with trio.open_nursery() as nursery:
                async def watch(path: str) -> None:  # what the page keeps open
                    async with client.stream("GET", path) as stream:
                        async for _ in stream.aiter_bytes():
                            pass

                nursery.start_soon(watch, "/board/live")
                nursery.start_soon(watch, "/sessions/root/live")
                for turn in range(1, 6):  # each answered through the holder; the tries go on meanwhile
                    sent = await client.post("/sessions/root/messages",
                                             json={"text": f"slow 300 hi {turn}", "eventId": f"e{turn}",
                                                   "wait": True})
                    assert sent.status_code == 200, sent.text
                nursery.cancel_scope.cancel()
        warned = [line for line in other.stderr.read_text().splitlines()
                  if "WARNING" in line and "live view reset" in line]
        assert warned == [], warned
