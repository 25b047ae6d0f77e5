"""The host's record: the usage events: kept one per frame, summed per operation and after a mark.

One repository of :mod:`router.host.record` (its module docstring says how
they work); callers reach it as an attribute of the store
(:class:`router.host.store.Store`), named for its table. The table is
described in :mod:`router.host.store`'s docstring.
"""

from __future__ import annotations

from router.host.record.base import Unit, UsageAfter, UsageRecord, dump_json, figure

__all__ = ["Usage"]


class Usage:
    """The ``usage`` table (see the module docstring)."""

    def __init__(self, unit: Unit) -> None:
        self._unit = unit
        #: Rows this repository was asked to write, per session (counted
        #: before each insert, in the worker thread): see :meth:`writes`.
        self._writes: dict[str, int] = {}

    def __repr__(self) -> str:
        return "<Usage>"

    def record(
        self, session: str, operation_id: str | None, runtime: str, seq: int, event: dict
    ) -> None:
        """Keep one ``usage`` event, which came in frame ``runtime``/``seq``.
        Called once per frame: the apply core's cursor skips replays."""
        self._writes[session] = self._writes.get(session, 0) + 1  # before the row: see writes
        with self._unit.transaction():
            self._unit.execute(
                "INSERT INTO usage (session, runtime, seq, operation_id,"
                " input_tokens, output_tokens, cost_usd, raw, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session,
                    runtime,
                    seq,
                    operation_id,
                    figure(event.get("inputTokens")),
                    figure(event.get("outputTokens")),
                    figure(event.get("costUsd")),
                    dump_json(event),
                    self._unit.now(),
                ),
            )

    def writes(self, session: str) -> int:
        """How many ``usage`` rows of ``session`` this repository was asked
        to write since the store opened (any thread; no query). Counted
        before each insert, so a reader that took this count inside a read
        in the worker thread and finds it unchanged later knows no row of
        the session was written since, as long as the store is its
        record's sole writer (``Store.sole_writer``)."""
        return self._writes.get(session, 0)

    def records(
        self, session_id: str | None = None, since: int | None = None
    ) -> list[UsageRecord]:
        """Usage figures per operation, for the plug-in layer's limits.

        One :class:`UsageRecord` per ``(session, operation)`` that reported
        usage, summing its ``usage`` events; events between turns (no
        operation) form one record per session with ``operation_id`` None.
        ``session_id`` narrows to one session; ``since`` (ms since the epoch)
        counts only events recorded at or after it. Ordered by the last
        event's time, oldest first. From Trio code:
        ``await store.call(store.usage.records, session_id, since)``.
        """
        where, params = [], []
        if session_id is not None:
            where.append("session = ?")
            params.append(session_id)
        if since is not None:
            where.append("at >= ?")
            params.append(since)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._unit.transaction():
            rows = self._unit.execute(
                "SELECT session, operation_id, SUM(input_tokens), SUM(output_tokens),"
                " SUM(cost_usd), COUNT(*), MIN(at), MAX(at) FROM usage"
                f" {clause} GROUP BY session, operation_id ORDER BY MAX(at), session, operation_id NULLS FIRST",
                params,
            ).fetchall()
        return [
            UsageRecord(
                session=row[0],
                operation_id=row[1],
                input_tokens=row[2],
                output_tokens=row[3],
                cost_usd=row[4],
                events=row[5],
                first_at=row[6],
                last_at=row[7],
            )
            for row in rows
        ]

    def after(self, session: str, mark: int | None = None) -> UsageAfter:
        """The ``usage`` events of ``session`` recorded after ``mark``
        (a :attr:`UsageAfter.mark` this method answered before), summed,
        and the new mark: the session's last event so far. ``mark`` None
        asks for the mark alone (nothing is summed). What the ``frames``
        usage source brackets a turn with: each read costs the events since
        the mark (the ``usage_session`` index), however long the session's
        history. From Trio code: ``await store.call(store.usage.after, session, mark)``.
        """
        with self._unit.transaction():
            if mark is None:
                (last,) = self._unit.execute("SELECT MAX(rowid) FROM usage WHERE session = ?", (session,)).fetchone()
                return UsageAfter(mark=last or 0, events=0, input_tokens=None, output_tokens=None)
            last, events, input_tokens, output_tokens = self._unit.execute(
                "SELECT MAX(rowid), COUNT(*), SUM(input_tokens), SUM(output_tokens) FROM usage"
                " WHERE session = ? AND rowid > ?",
                (session, mark),
            ).fetchone()
        return UsageAfter(mark=mark if last is None else last, events=events,
                          input_tokens=input_tokens, output_tokens=output_tokens)
