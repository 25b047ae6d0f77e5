"""The board keeps each session's row until what it is made of changes
(router/board/kept.py, router/board/service.py's LocalBoard): a session
whose listing, record or holder changes is described again, one that does
not is not; the record is read once per listing (the router's own read);
the listing's kept JSON text is what encoding it afresh gives."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import attrs
import trio

from router.board.kept import Kept, listing_text
from router.board.service import Facts, LocalBoard
from wire.json import dumps, loads


@attrs.frozen
class _Record:
    id: str
    settings: dict[str, Any]
    updated_at: int


class _Store:
    """The host store's face the board reads (``call``, ``sessions.all``),
    counting the reads."""

    def __init__(self, records: dict[str, _Record]) -> None:
        self.records = records
        self.reads = 0
        self.sessions = SimpleNamespace(all=self._all)

    async def call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    def _all(self) -> list[_Record]:
        self.reads += 1
        return list(self.records.values())


class _Router:
    """``TurnRouter.list``'s face: container sessions with a state."""

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states

    async def list(self, *, containers: bool = True) -> list[dict[str, Any]]:
        if not containers:
            return []
        return [{"id": id, "kind": "container", "busy": state == "working", "state": state}
                for id, state in self.states.items()]


class _Cluster:
    """A cluster's face: who holds what, and the change event a
    notification sets."""

    def __init__(self, holders: dict[str, dict[str, Any]]) -> None:
        self.held = holders
        self.event = trio.Event()
        self.holder_reads = 0

    async def holders(self) -> dict[str, dict[str, Any]]:
        self.holder_reads += 1
        return dict(self.held)

    def board_changed(self) -> trio.Event:
        return self.event

    async def sockets(self) -> set[str]:
        return set()

    id = "here"

    async def routers(self) -> dict[str, str]:
        return {}

    def listening(self) -> tuple[int, bool]:
        return 1, True

    def on_router_changed(self, callback: Any) -> None:
        pass


def _router_row(name: str) -> dict[str, Any]:
    return {"id": name, "apiUrl": f"http://{name}", "socket": None, "info": dumps({"name": name})}


def test_a_row_is_made_again_only_for_another_key() -> None:
    kept = Kept()
    first = kept.row("a", ("idle", 1), lambda: {"id": "a", "state": "idle"})
    assert kept.row("a", ("idle", 1), lambda: {"id": "a", "state": "other"}) is first
    again = kept.row("a", ("working", 1), lambda: {"id": "a", "state": "working"})
    assert again["state"] == "working"
    assert (kept.statistics().made, kept.statistics().kept) == (2, 1)
    assert kept.text(again) == dumps(again) and kept.text(again) == dumps(again)
    assert kept.statistics().encoded == 1  # made once
    assert kept.text({"id": "a", "state": "working"}) == dumps(again)  # equal, not the kept one: encoded afresh
    kept.only(["b"])
    assert kept.statistics().rows == 0


def test_the_listings_text_is_its_json() -> None:
    kept = Kept()
    rows = [kept.row(name, name, lambda name=name: {"id": name, "n": 1.5, "s": "ü\u2028"}) for name in "abc"]
    rest = {"skipped": [{"router": "r", "error": "no-answer"}]}
    text = listing_text([*rows, {"id": "other"}], rest, kept.text)
    assert text == dumps({"sessions": [*rows, {"id": "other"}], **rest})
    assert listing_text([], {}, kept.text) == dumps({"sessions": []})


async def test_a_changed_session_is_described_again_and_an_unchanged_one_is_not() -> None:
    router = _Router({"a": "idle", "b": "idle", "c": "idle"})
    store = _Store({each: _Record(each, {}, 100) for each in "abc"})
    board = LocalBoard(router, env={}, facts=Facts(store=store))
    board.info = {"name": "here"}
    first = await board.own()
    assert board.statistics().described == 3
    second = await board.own()
    assert second == first and all(a is b for a, b in zip(first, second))  # the same rows, kept
    assert board.statistics().described == 3 and board.statistics().rows_made == 3

    router.states["b"] = "working"  # its listing changes
    store.records["c"] = _Record("c", {"model": "opus"}, 200)  # its record changes
    third = {item["id"]: item for item in await board.own()}
    assert board.statistics().described == 5  # b and c again, a not
    assert third["a"] is first[0]
    assert third["b"]["state"] == "working" and third["c"]["model"] == "opus" and third["c"]["lastActivity"] == 200

    del router.states["a"]
    assert [item["id"] for item in await board.own()] == ["b", "c"]
    assert board.statistics().described == 5


async def test_the_listings_body_is_made_of_the_kept_rows() -> None:
    router = _Router({"a": "idle", "b": "working"})
    board = LocalBoard(router, env={"XDG_RUNTIME_DIR": "/nonexistent-board-test"},
                       facts=Facts(store=_Store({each: _Record(each, {}, 1) for each in "ab"})))
    board.info = {"name": "here"}
    for _ in range(2):
        body = (await board.listing()).to_json()
        assert dumps(body) == dumps(dict(body)) and loads(dumps(body))["sessions"] == body["sessions"]
    assert board.statistics().encoded == 2  # each row's text made once over both answers


async def test_in_a_cluster_a_row_is_made_again_when_its_holder_changes() -> None:
    router = _Router({"a": "idle", "b": "idle"})
    store = _Store({each: _Record(each, {}, 100) for each in "ab"})
    cluster = _Cluster({"a": _router_row("one"), "b": _router_row("two")})
    board = LocalBoard(router, env={}, facts=Facts(store=store, cluster=cluster))
    board.info = {"name": "one"}
    first = {item["id"]: item for item in await board.own()}
    assert first["a"]["router"] == {"name": "one", "cluster": "one", "url": "http://one"} and first["a"]["clustered"]
    again = {item["id"]: item for item in await board.own()}
    assert again["a"] is first["a"] and again["b"] is first["b"]
    cluster.held["b"] = _router_row("three")  # a takeover: the row names the new holder
    del cluster.held["a"]  # held by none, between a death and a takeover
    after = {item["id"]: item for item in await board.own()}
    assert after["b"]["router"]["cluster"] == "three" and after["a"]["router"] is None
    assert board.statistics().described == 2 and board.statistics().rows_made == 4  # described once each
    assert cluster.holder_reads == 3
    await board.own(shared=False)  # a cluster's router asks for what it alone holds: no container session
    assert cluster.holder_reads == 3  # nothing to name a holder for: not read


async def test_the_routers_own_read_of_the_record_is_used_not_a_second_one() -> None:
    from router.board.state import StampedListing

    stamps = {"a": (100, None), "b": (150, "opus")}

    class _Stamped(_Router):
        async def list(self, *, containers: bool = True) -> list[dict[str, Any]]:
            listed = StampedListing(dict(stamps))
            listed += await super().list(containers=containers)  # in place, as TurnRouter.list extends it
            return listed

    router = _Stamped({"a": "idle", "b": "idle"})
    store = _Store({each: _Record(each, {}, 100) for each in "ab"})
    board = LocalBoard(router, env={}, facts=Facts(store=store))
    rows = {item["id"]: item for item in await board.own()}
    assert store.reads == 0 and rows["b"]["lastActivity"] == 150 and rows["b"]["model"] == "opus"
    router.states["new"] = "idle"  # not in the stamps (another read's): the record is read
    store.records["new"] = _Record("new", {}, 500)
    assert {item["id"]: item for item in await board.own()}["new"]["lastActivity"] == 500
    assert store.reads == 1


async def test_a_refusal_of_a_read_beside_the_listing_stays_a_refusal() -> None:
    import pytest

    from router.errors import Refusal

    class _Down(_Cluster):
        async def holders(self) -> dict[str, dict[str, Any]]:
            raise Refusal("store-unavailable", "the record cannot be reached; try again")

    board = LocalBoard(_Router({"a": "idle"}), env={}, facts=Facts(store=_Store({"a": _Record("a", {}, 1)}),
                                                                    cluster=_Down({})))
    with pytest.raises(Refusal) as refused:
        await board.own()
    assert refused.value.code == "store-unavailable"


def test_an_encoded_object_is_written_as_the_text_it_carries_made_once() -> None:
    from wire.json import Encoded

    made: list[int] = []

    def make() -> str:
        made.append(1)
        return '{"a":1}'

    value = Encoded({"a": 1}, make)
    assert value == {"a": 1} and dumps(value) == '{"a":1}' and dumps(value) == '{"a":1}'
    assert made == [1]
    assert dumps([value]) == '[{"a":1}]'  # inside another value: encoded as the dict it is
    assert dumps({**value, "b": 2}) == '{"a":1,"b":2}'  # a copy is a plain dict
