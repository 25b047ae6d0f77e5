"""The host's record: the transcript: messages stored in place, read by generation and by version.

One repository of :mod:`router.host.record` (its module docstring says how
they work); callers reach it as an attribute of the store
(:class:`router.host.store.Store`), named for its table. The table is
described in :mod:`router.host.store`'s docstring.
"""

from __future__ import annotations

import json
from typing import Sequence

from router.host.record.base import MessageLog, Unit, dump_json

__all__ = ["Messages"]


class Messages:
    """The ``messages`` table (see the module docstring)."""

    def __init__(self, unit: Unit) -> None:
        self._unit = unit

    def __repr__(self) -> str:
        return "<Messages>"

    def put(
        self, session: str, generation: int, message: dict, operation_id: str | None = None
    ) -> int:
        """Store a transcript message; one with the same id in the same
        generation is replaced in place (its position kept). Returns its
        ``version`` now (what a live reader of it holds: the live view's
        durable position, without reading it back later)."""
        now = self._unit.now()
        with self._unit.transaction():
            self._unit.execute(
                "INSERT INTO messages (session, generation, id, position, operation_id, data,"
                " created_at, updated_at) VALUES (?, ?, ?,"
                " (SELECT COALESCE(MAX(position), 0) + 1 FROM messages"
                "  WHERE session = ? AND generation = ?), ?, ?, ?, ?)"
                " ON CONFLICT (session, generation, id) DO UPDATE SET"
                " data = excluded.data, operation_id = excluded.operation_id,"
                " updated_at = excluded.updated_at",
                (session, generation, message["id"], session, generation, operation_id,
                 dump_json(message), now, now),
            )  # fmt: skip
            (version,) = self._unit.execute(
                "SELECT version FROM messages WHERE session = ? AND generation = ? AND id = ?",
                (session, generation, message["id"]),
            ).fetchone()
        return version

    def owner(self, session: str, generation: int, id: str) -> tuple[str | None, dict] | None:
        """The stored message ``id`` of ``generation`` as ``(operation id,
        message)``; None when there is none."""
        with self._unit.transaction():
            row = self._unit.execute(
                "SELECT operation_id, data FROM messages WHERE session = ? AND generation = ? AND id = ?",
                (session, generation, id),
            ).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def all(self, session: str, generation: int | None = None) -> list[dict]:
        """The transcript of ``generation`` (default: the current one, that
        is, since the last reset), in order of first appearance."""
        with self._unit.transaction():
            if generation is None:
                generation = self._unit.sessions.require(session).generation
            rows = self._unit.execute(
                "SELECT data FROM messages WHERE session = ? AND generation = ? ORDER BY position",
                (session, generation),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def _message_version(self, session: str) -> int:
        (version,) = self._unit.execute("SELECT COALESCE(MAX(version), 0) FROM messages WHERE session = ?", (session,)).fetchone()
        return version

    def log(self, session: str, since: int | None = None) -> MessageLog:
        """The current generation's messages changed after version
        ``since``, oldest change first; with ``since`` None, every message
        in transcript order. One transaction, so ``version`` is exactly what
        the messages read reflect."""
        with self._unit.transaction():
            generation = self._unit.sessions.require(session).generation
            version = self._message_version(session)
            if since is None:
                sql = "SELECT version, data FROM messages WHERE session = ? AND generation = ? ORDER BY position"
                params: tuple = (session, generation)
            else:
                sql = (
                    "SELECT version, data FROM messages WHERE session = ? AND generation = ? AND version > ?"
                    " ORDER BY version"
                )
                params = (session, generation, since)
            rows = self._unit.execute(sql, params).fetchall()
        return MessageLog(
            generation=generation, version=version, messages=[(row[0], json.loads(row[1])) for row in rows]
        )

    def versions(self, session: str, ids: Sequence[str]) -> MessageLog:
        """The current generation, the session's highest message version,
        and the ``(version, message)`` now of each of ``ids`` stored in
        the generation (in the order asked, each once)."""
        with self._unit.transaction():
            generation = self._unit.sessions.require(session).generation
            version = self._message_version(session)
            found: list[tuple[int, dict]] = []
            for mid in dict.fromkeys(ids):
                row = self._unit.execute(
                    "SELECT version, data FROM messages WHERE session = ? AND generation = ? AND id = ?",
                    (session, generation, mid),
                ).fetchone()
                if row is not None:
                    found.append((row[0], json.loads(row[1])))
        return MessageLog(generation=generation, version=version, messages=found)
