"""Helpers for the adapter tests: a recording AdapterContext, and process checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import trio

from router.daemon.adapter import AdapterContext
from wire.container import ContainerSettings

FAKE_CLI = Path(__file__).with_name("fake_cli.py")
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@attrs.define
class Recorder:
    """What an adapter session reported, in order, with a way to wait for it."""

    events: list[Any] = attrs.Factory(list)
    persisted: list[Any] = attrs.Factory(list)
    logs: list[tuple[str, str]] = attrs.Factory(list)
    _changed: trio.Event = attrs.Factory(trio.Event)

    def emit(self, event: Any) -> None:
        self.events.append(event)
        self._poke()

    def persist(self, entries: Any) -> None:
        self.persisted.extend(entries)
        self._poke()

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))
        self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate) -> Any:
        """Wait until an event satisfies ``predicate``; return it."""
        while True:
            for event in self.events:
                if predicate(event):
                    return event
            await self._changed.wait()

    def context(self, *, session: str = "session-1", restore=(), settings: ContainerSettings | None = None) -> AdapterContext:
        return AdapterContext(
            session=session,
            settings=settings or ContainerSettings(),
            restore=tuple(restore),
            emit=self.emit,
            persist=self.persist,
            log=self.log,
        )

    def of_type(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.get("type") == kind]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for a reaper that
    never comes, as under a container's PID 1, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def read_records(path: Path) -> list[dict[str, Any]]:
    import json

    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
