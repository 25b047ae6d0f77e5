"""LocalBoard.holder: a session open in this router is served here at once,
with no listing of every session (no store read, no worker-thread hop); a
hidden one, or one not open, is looked for as before."""

from __future__ import annotations

from typing import Any

from router.board.service import LocalBoard


class Router:
    """A TurnRouter's face as the board reads it: ``is_open`` and ``list``."""

    def __init__(self, open_ids: set[str], listed: list[str]) -> None:
        self.open_ids = open_ids
        self.listed = listed
        self.lists = 0

    def is_open(self, session_id: str) -> bool:
        return session_id in self.open_ids

    async def list(self) -> list[dict[str, Any]]:
        self.lists += 1
        return [{"id": each} for each in self.listed]


async def test_an_open_session_is_served_here_without_a_listing() -> None:
    router = Router({"s-1"}, ["s-1"])
    board = LocalBoard(router, env={})
    assert await board.holder("s-1") is None
    assert router.lists == 0


async def test_a_listed_session_not_open_is_still_served_here() -> None:
    router = Router(set(), ["s-2"])
    board = LocalBoard(router, env={})
    assert await board.holder("s-2") is None
    assert router.lists == 1


async def test_a_hidden_open_session_is_not_taken_as_listed(monkeypatch) -> None:
    router = Router({"root"}, ["root"])
    board = LocalBoard(router, env={}, hidden=frozenset({"root"}))

    class NoOthers:
        def holders(self, session: str) -> list[Any]:
            return []

    async def others() -> NoOthers:
        return NoOthers()

    monkeypatch.setattr(board, "others", others)
    assert await board.holder("root") is None
    assert router.lists == 1  # looked for among the others, as before
