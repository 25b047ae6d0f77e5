"""The host's record: the adapter's persisted entries, in order, per generation.

One repository of :mod:`router.host.record` (its module docstring says how
they work); callers reach it as an attribute of the store
(:class:`router.host.store.Store`), named for its table. The table is
described in :mod:`router.host.store`'s docstring.
"""

from __future__ import annotations

import json
from typing import Sequence

from router.host.record.base import Unit, dump_json
from wire.json import JsonValue

__all__ = ["Entries"]


class Entries:
    """The ``entries`` table (see the module docstring)."""

    def __init__(self, unit: Unit) -> None:
        self._unit = unit

    def __repr__(self) -> str:
        return "<Entries>"

    def append(self, session: str, generation: int, entries: Sequence[JsonValue]) -> None:
        if not entries:
            return
        with self._unit.transaction():
            # One statement: each row's position is one past the highest
            # so far (the rows before it in this call included).
            self._unit.executemany(
                "INSERT INTO entries (session, generation, position, data) VALUES (?, ?,"
                " (SELECT COALESCE(MAX(position), 0) + 1 FROM entries WHERE session = ? AND generation = ?), ?)",
                [(session, generation, session, generation, dump_json(e)) for e in entries],
            )

    def all(self, session: str, generation: int | None = None) -> list[JsonValue]:
        """The adapter's persisted entries of ``generation`` (default: the
        current one), in order."""
        with self._unit.transaction():
            if generation is None:
                generation = self._unit.sessions.require(session).generation
            rows = self._unit.execute(
                "SELECT data FROM entries WHERE session = ? AND generation = ? ORDER BY position",
                (session, generation),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]
