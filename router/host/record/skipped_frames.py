"""The host's record: the frames the host passed without applying them, and why.

One repository of :mod:`router.host.record` (its module docstring says how
they work); callers reach it as an attribute of the store
(:class:`router.host.store.Store`), named for its table. The table is
described in :mod:`router.host.store`'s docstring.
"""

from __future__ import annotations

from router.host.record.base import SKIPPED_TEXT_CHARS, SkippedFrame, Unit, storable

__all__ = ["SkippedFrames"]


class SkippedFrames:
    """The ``skipped_frames`` table (see the module docstring)."""

    def __init__(self, unit: Unit) -> None:
        self._unit = unit

    def __repr__(self) -> str:
        return "<SkippedFrames>"

    def add(self, session: str, runtime: str, seq: int, reason: str, text: str) -> None:
        """Keep the note of a frame passed without applying it: its runtime
        and seq, why, and the start of its text (at most
        :data:`SKIPPED_TEXT_CHARS` characters)."""
        with self._unit.transaction():
            self._unit.execute(
                "INSERT INTO skipped_frames (session, runtime, seq, reason, text, at) VALUES (?, ?, ?, ?, ?, ?)",
                (session, runtime, seq, reason, storable(text[:SKIPPED_TEXT_CHARS]), self._unit.now()),
            )

    def all(self, session: str) -> list[SkippedFrame]:
        """The frames of ``session`` the host passed without applying, oldest first."""
        with self._unit.transaction():
            rows = self._unit.execute(
                "SELECT session, runtime, seq, reason, text, at FROM skipped_frames"
                " WHERE session = ? ORDER BY rowid",
                (session,),
            ).fetchall()
        return [
            SkippedFrame(session=row[0], runtime=row[1], seq=row[2], reason=row[3], text=row[4], at=row[5])
            for row in rows
        ]
