"""What the board says of each session besides its router's listing
(``router.board.service.describe``), from the facts the main job hands in."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import attrs

from router.board.service import Activity, Facts, describe


@attrs.frozen
class _Record:
    id: str
    settings: dict[str, Any]
    updated_at: int


@attrs.frozen
class _Launch:
    harness: str
    model: str


class _Store:
    """The host store's face that describe reads: ``call`` and ``sessions.all``."""

    def __init__(self, records: list[_Record]) -> None:
        self.records = records
        self.sessions = SimpleNamespace(all=lambda: self.records)

    async def call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


class _Deliveries(_Store):
    def __init__(self, launches: dict[str, _Launch]) -> None:
        super().__init__([])
        self.known = launches
        self.asked = 0

    def launches(self) -> dict[str, _Launch]:
        self.asked += 1
        return dict(self.known)


async def test_container_and_claude_code_sessions_are_described() -> None:
    facts = Facts(
        store=_Store([_Record("root", {}, 111), _Record("set", {"model": "opus"}, 222), _Record("launched", {}, 333)]),
        deliveries=_Deliveries({"launched": _Launch("codex", "gpt"), "set": _Launch("codex", "gpt")}),
        harness="echo",
        cwd="/work/project",
    )
    entries = [
        {"id": "root", "kind": "container", "state": "idle", "busy": False},
        {"id": "set", "kind": "container", "state": "idle", "busy": False},
        {"id": "launched", "kind": "container", "state": "working", "busy": True},
        {"id": "cc", "kind": "claude-code", "state": "idle", "busy": False, "connected": True, "model": "sonnet"},
        {"id": "other", "kind": "claude-code", "state": "unreachable", "busy": False, "connected": False},
    ]
    activity = Activity(clock=lambda: 999)
    described = {item["id"]: item for item in await describe(entries, facts, activity)}
    assert described["root"] == {**entries[0], "harness": "echo", "lastActivity": 111}  # no launch, no model
    assert described["set"]["model"] == "opus" and described["set"]["harness"] == "codex"  # settings first
    assert described["launched"]["model"] == "gpt" and described["launched"]["lastActivity"] == 333
    assert described["cc"] == {**entries[3], "harness": "claude-code", "cwd": "/work/project",
                               "lastActivity": 999}
    assert "model" not in described["other"] and described["other"]["cwd"] == "/work/project"
    assert facts.deliveries.asked == 1  # every session's launch read at once, not one query per session


async def test_nothing_known_besides_the_listing() -> None:
    entries = [{"id": "root", "kind": "container", "state": "idle", "busy": False}]
    assert await describe(entries, Facts(), Activity()) == [{**entries[0], "harness": "echo"}]
