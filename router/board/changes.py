"""What changed on the board between two surveys (sans-IO).

The board's live stream (``GET /board/live``) re-surveys every router and
sends the differences: a session that appears, one whose listing changed
(its state, its activity, anything the router says of it), one that went
away. A session is known by the router that holds it and its id (two
routers may each hold a ``root``).
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["board_changes", "board_key", "by_key"]

Key = tuple[str, str]


def board_key(item: dict[str, Any]) -> Key:
    """A listed session's key: (its router's name, its id)."""
    router = item.get("router")
    name = router.get("name") if type(router) is dict else None
    return (str(name or ""), str(item.get("id")))


def by_key(items: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {board_key(item): item for item in items}


def board_changes(before: dict[Key, dict[str, Any]], after: dict[Key, dict[str, Any]]) -> list[dict[str, Any]]:
    """The events that take a client from ``before`` to ``after``:
    ``session-removed`` (with the session's ``id`` and ``router``) first,
    then ``session-added`` and ``session-changed`` (with the whole listing),
    each group in ``after``'s order. Applying them in order to ``before``
    gives ``after``; two equal boards give none."""
    events: list[dict[str, Any]] = []
    for key, item in before.items():
        if key not in after:
            events.append({"type": "session-removed", "session": {"id": item.get("id"), "router": item.get("router")}})
    for key, item in after.items():
        if key not in before:
            events.append({"type": "session-added", "session": item})
        elif before[key] is not item and before[key] != item:  # a kept row (router.board.kept) is the same object
            events.append({"type": "session-changed", "session": item})
    return events
