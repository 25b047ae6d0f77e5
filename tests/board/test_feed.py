"""The board's live feed surveys at once when poked or when the board's
change event fires (a cluster's notification), not only every interval
(router/board/feed.py)."""

from __future__ import annotations

from typing import Any

import trio

from tests.support.polling import until

#: An interval no test waits for: a survey that comes is a poke's.
NEVER = 3600.0


class Listing:
    def __init__(self, ids: list[str]) -> None:
        self.sessions = [{"id": each, "router": {"name": "r"}} for each in ids]
        self.skipped: list[Any] = []

    def to_json(self) -> dict[str, Any]:
        return {"sessions": self.sessions}


class Board:
    def __init__(self) -> None:
        self.ids = ["a"]
        self.listings = 0
        self.event = trio.Event()

    async def listing(self) -> Listing:
        self.listings += 1
        return Listing(list(self.ids))

    def changed(self) -> trio.Event:
        self.event = trio.Event()
        return self.event


async def test_a_poke_makes_the_feed_survey_and_send_the_change_at_once() -> None:
    from router.board.feed import BoardFeed

    board = Board()
    feed = BoardFeed(board, interval=NEVER)
    feed.poke()  # no viewer: nothing runs, nothing is counted
    assert feed.statistics().pokes == 0
    async with trio.open_nursery() as nursery:
        events = feed.events(nursery)
        with trio.fail_after(30):
            snapshot = await events.__anext__()
            assert [each["id"] for each in snapshot["sessions"]] == ["a"]
            board.ids.append("b")
            feed.poke()
            feed.poke()  # a burst: coalesced
            event = await events.__anext__()
        assert event["type"] == "session-added" and event["session"]["id"] == "b"
        assert feed.statistics().pokes == 2
        await events.aclose()


async def test_the_boards_change_event_makes_the_feed_survey() -> None:
    from router.board.feed import BoardFeed

    board = Board()
    feed = BoardFeed(board, interval=NEVER)
    async with trio.open_nursery() as nursery:
        events = feed.events(nursery)
        with trio.fail_after(30):
            await events.__anext__()
            await until(lambda: board.listings == 1)
            board.ids = []
            board.event.set()  # another router of the cluster changed the record
            event = await events.__anext__()
        assert event["type"] == "session-removed" and event["session"]["id"] == "a"
        await events.aclose()
