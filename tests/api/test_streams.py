"""Live streams at the API's edge: a cap per credential (429
``too-many-streams``, the slot given back when a stream ends), and the
board's live stream surveying once for every viewer and sending a keep-alive
comment when quiet (docs/turns.md, "Connections")."""

from __future__ import annotations

from typing import Any, AsyncIterator

import httpx
import pytest
import trio

from router.api.context import ApiConfig, of
from router.api.server import ApiServer
from router.board.service import LocalBoard
from tests.api.conftest import AUTH, TOKEN, Api
from tests.api.sse import SseReader
from tests.support.polling import until

LIVE = "/sessions/root/live"


async def start(api: Api, nursery: trio.Nursery, env: dict[str, str], *, board: bool = False,
                max_streams: int = 2, keepalive: float = 15.0) -> ApiServer:
    local = LocalBoard(api.router, env=env) if board else None
    server = ApiServer(api.router, api.server.layer, port=0, token=TOKEN, board=local,
                       config=ApiConfig(max_streams=max_streams, live_keepalive=keepalive))
    await nursery.start(server.run)
    return server


@pytest.fixture
async def client(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), headers=AUTH) as client:
        yield client


def held(server: ApiServer) -> dict[str, int]:
    return server.statistics().streams.held


async def test_a_credential_holds_at_most_its_cap_of_live_streams(
    api: Api, nursery: trio.Nursery, env: dict[str, str], client: httpx.AsyncClient,
) -> None:
    await api.send("root", {"text": "first", "eventId": "e0", "wait": True})
    server = await start(api, nursery, env, max_streams=2)
    url = f"{server.url}{LIVE}"
    async with client.stream("GET", url) as first, client.stream("GET", url) as second:
        # Each reader is kept: a dropped one is collected, and closes its response.
        readers = [SseReader(response) for response in (first, second)]
        for reader in readers:
            await reader.until(lambda event: event["event"] == "snapshot")
        refused = await client.get(url)
        assert refused.status_code == 429
        body = refused.json()
        assert body["error"] == "too-many-streams" and body["message"] and body["limit"] == 2
        assert held(server) == {"token": 2}
    # Both closed by the client: their slots come back, and a stream opens again.
    with trio.fail_after(30):
        await until(lambda: held(server) == {})
    async with client.stream("GET", url) as again:
        assert again.status_code == 200
        await SseReader(again).until(lambda event: event["event"] == "snapshot")


async def test_a_refused_live_request_takes_no_slot(
    api: Api, nursery: trio.Nursery, env: dict[str, str], client: httpx.AsyncClient,
) -> None:
    server = await start(api, nursery, env, max_streams=1)
    response = await client.get(f"{server.url}/sessions/nobody/live")
    assert response.status_code == 404 and response.json()["error"] == "unknown-session"
    assert held(server) == {}


async def test_the_board_stream_surveys_once_for_every_viewer(
    api: Api, nursery: trio.Nursery, env: dict[str, str], client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = await start(api, nursery, env, board=True, max_streams=8)
    board = of(server.app).board
    calls = 0
    listing = board.listing

    async def counted() -> Any:
        nonlocal calls
        calls += 1
        return await listing()

    monkeypatch.setattr(board, "listing", counted)
    monkeypatch.setattr(board.feed, "interval", 0.05)
    assert board.feed.statistics().running is False
    url = f"{server.url}/board/live"
    with trio.fail_after(60):
        async with client.stream("GET", url) as a, client.stream("GET", url) as b, \
                client.stream("GET", url) as c:
            readers = [SseReader(response) for response in (a, b, c)]  # kept (see above)
            for reader in readers:
                [snapshot] = await reader.until(lambda event: event["event"] == "snapshot")
                assert [each["id"] for each in snapshot["data"]["sessions"]] == ["root"]
            assert board.feed.statistics().viewers == 3
            surveys = board.feed.statistics().surveys
            await until(lambda: board.feed.statistics().surveys >= surveys + 5)
            # One survey for the three: each is one listing, not three (one
            # more may be under way).
            assert calls - board.feed.statistics().surveys in (0, 1)
            # A session that appears reaches every viewer from the one survey.
            created = await client.post(f"{server.url}/sessions", json={"id": "second"})
            assert created.status_code == 201
            for reader in readers:
                added = await reader.until(lambda event: event["event"] == "session-added")
                assert added[-1]["data"]["session"]["id"] == "second"
        # The task ends with its last viewer.
        await until(lambda: board.feed.statistics().viewers == 0 and not board.feed.statistics().running)


async def test_a_session_created_here_reaches_a_board_viewer_without_waiting_for_the_next_survey(
    api: Api, nursery: trio.Nursery, env: dict[str, str], client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = await start(api, nursery, env, board=True, max_streams=8)
    board = of(server.app).board
    monkeypatch.setattr(board.feed, "interval", 3600.0)  # the fallback survey never comes in this test
    api.router.on_change = board.feed.poke  # as the main job wires it (router/serve.py)
    with trio.fail_after(60):
        async with client.stream("GET", f"{server.url}/board/live") as response:
            reader = SseReader(response)
            [snapshot] = await reader.until(lambda event: event["event"] == "snapshot")
            assert [each["id"] for each in snapshot["data"]["sessions"]] == ["root"]
            created = await client.post(f"{server.url}/sessions", json={"id": "poked"})
            assert created.status_code == 201
            added = await reader.until(lambda event: event["event"] == "session-added")
            assert added[-1]["data"]["session"]["id"] == "poked"
    assert board.feed.statistics().pokes >= 1


async def test_a_board_viewer_that_falls_behind_is_dropped_not_waited_for() -> None:
    from router.board.feed import BoardFeed

    class Listing:
        def __init__(self, n: int) -> None:
            self.sessions = [{"id": f"s{n}", "router": {"name": "r"}}]
            self.skipped: list[Any] = []

        def to_json(self) -> dict[str, Any]:
            return {"sessions": self.sessions}

    class Board:
        n = 0

        async def listing(self) -> Listing:
            self.n += 1
            return Listing(self.n)

        def changed(self) -> None:
            return None

    feed = BoardFeed(Board(), interval=0.001, buffer=2)
    async with trio.open_nursery() as nursery:
        slow = feed.events(nursery)
        assert (await slow.__anext__())["type"] == "snapshot"
        with trio.fail_after(30):
            await until(lambda: feed.statistics().fanout.dropped == 1)  # never read again: dropped
            events = []
            with pytest.raises(Exception) as lagged:
                while True:
                    events.append(await slow.__anext__())
        assert getattr(lagged.value, "code", None) == "board-lagged" and len(events) <= 2 * 2
        await slow.aclose()
        assert feed.statistics().viewers == 0 and feed.statistics().running is False


async def test_a_quiet_board_stream_sends_a_keep_alive_comment_and_keeps_its_ids(
    api: Api, nursery: trio.Nursery, env: dict[str, str], client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = await start(api, nursery, env, board=True, keepalive=0.05)
    monkeypatch.setattr(of(server.app).board.feed, "interval", 0.05)
    async with client.stream("GET", f"{server.url}/board/live") as response:
        reader = SseReader(response)
        snapshot = await reader.next()
        assert snapshot["event"] == "snapshot"
        stream = snapshot["id"].rsplit("-", 1)[0]
        assert await reader.next() == {"comment": "keep-alive"}
        created = await client.post(f"{server.url}/sessions", json={"id": "mine"})
        assert created.status_code == 201, created.text
        added = await reader.until(lambda event: event.get("event") == "session-added")
        # A comment takes no id: the events after the snapshot go on from 2.
        assert [event["id"] for event in added] == [f"{stream}-{n}" for n in range(2, 2 + len(added))]
