"""The board's changes between two surveys (``router.board.changes``):
applied in order to the board before, they give the board after."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from router.board.changes import board_changes, board_key, by_key

_items = st.lists(
    st.fixed_dictionaries({
        "id": st.sampled_from(["root", "a", "b", "c"]),
        "state": st.sampled_from(["idle", "working", "stopped"]),
        "router": st.fixed_dictionaries({"name": st.sampled_from(["serve-1-aaaa", "serve-2-bbbb", "mcp-3-cccc"])}),
    }),
    max_size=12,
)


def _apply(board: dict[Any, Any], events: list[dict[str, Any]]) -> dict[Any, Any]:
    board = dict(board)
    for event in events:
        key = board_key(event["session"])
        if event["type"] == "session-removed":
            assert key in board
            del board[key]
        elif event["type"] == "session-added":
            assert key not in board
            board[key] = event["session"]
        else:
            assert event["type"] == "session-changed" and key in board
            board[key] = event["session"]
    return board


@given(_items, _items)
def test_the_changes_take_one_board_to_the_other(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    old, new = by_key(before), by_key(after)
    events = board_changes(old, new)
    assert _apply(old, events) == new
    assert board_changes(new, new) == []


def test_two_routers_each_with_a_root_are_two_sessions() -> None:
    one = {"id": "root", "state": "idle", "router": {"name": "serve-1-aaaa"}}
    two = {"id": "root", "state": "idle", "router": {"name": "serve-2-bbbb"}}
    assert board_changes(by_key([one]), by_key([one, two])) == [{"type": "session-added", "session": two}]
    working = {**two, "state": "working"}
    assert board_changes(by_key([one, two]), by_key([one, working])) == [
        {"type": "session-changed", "session": working}]
    assert board_changes(by_key([one, working]), by_key([working])) == [
        {"type": "session-removed", "session": {"id": "root", "router": {"name": "serve-1-aaaa"}}}]


def test_activity_moves_only_when_the_facts_change() -> None:
    from router.board.service import Activity

    now = [1000]
    activity = Activity(clock=lambda: now[0])
    assert activity.stamp("s", ("idle",)) == 1000
    now[0] = 2000
    assert activity.stamp("s", ("idle",)) == 1000  # nothing changed
    assert activity.stamp("s", ("working",)) == 2000
    assert activity.stamp("other", ("idle",)) == 2000
