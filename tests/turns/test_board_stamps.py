"""The turn router's listing carries each container session's record stamp
from its own read (``router.board.state.StampedListing``), so the board
describes the sessions without reading every record again
(router/board/service.py)."""

from __future__ import annotations

from router.board.service import Activity, Facts, describe
from router.board.state import StampedListing


class _Unread:
    """A store the board must not read: the listing's stamps cover it."""

    async def call(self, fn, *args):
        raise AssertionError("the board read the record again")

    @property
    def sessions(self):
        raise AssertionError("the board read the record again")


async def test_the_listing_carries_its_reads_stamps_and_the_board_takes_them(make_rig) -> None:
    rig = await make_rig()
    await rig.router.create("s1")
    await rig.router.send("s1", "hi", event_id="e1", wait=True)
    listed = await rig.router.list()
    assert isinstance(listed, StampedListing)
    record = await rig.store.call(rig.store.sessions.get, "s1")
    assert listed.stamps["s1"] == (record.updated_at, record.settings.get("model"))
    [item] = [each for each in await describe(listed, Facts(store=_Unread()), Activity(), stamps=listed.stamps)
              if each["id"] == "s1"]
    assert item["lastActivity"] == record.updated_at
