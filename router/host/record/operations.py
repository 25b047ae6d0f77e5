"""The host's record: the operations: queued idempotently, started, requeued, settled, delivered.

One repository of :mod:`router.host.record` (its module docstring says how
they work); callers reach it as an attribute of the store
(:class:`router.host.store.Store`), named for its table. The table is
described in :mod:`router.host.store`'s docstring.
"""

from __future__ import annotations

import json
from typing import Sequence

from router.host.record.base import (
    OPEN_STATUSES, SETTLED_STATUSES, OperationRecord, Refused, Unit, WhenBusy, dump_json, load_json,
)
from router.host.schema import OPEN_TERM
from wire.json import JsonValue

__all__ = ["Operations"]


class Operations:
    """The ``operations`` table (see the module docstring)."""

    def __init__(self, unit: Unit) -> None:
        self._unit = unit

    def __repr__(self) -> str:
        return "<Operations>"

    _OPERATION_COLUMNS = (
        "session, id, ordinal, generation, input, when_busy, status, outcome, delivered, "
        "handoff, created_at, started_at, settled_at"
    )

    @staticmethod
    def _operation_of(row: tuple) -> OperationRecord:
        return OperationRecord(
            session=row[0],
            id=row[1],
            ordinal=row[2],
            generation=row[3],
            input=json.loads(row[4]),
            when_busy=row[5],
            status=row[6],
            outcome=load_json(row[7]),
            delivered=row[8],
            handoff=row[9],
            created_at=row[10],
            started_at=row[11],
            settled_at=row[12],
        )

    def enqueue(
        self, session: str, id: str, input: JsonValue, when_busy: WhenBusy = "followUp"
    ) -> tuple[OperationRecord, bool]:
        """Durably queue an operation. Idempotent on ``(session, id)``: a
        second call stores nothing and returns the first record. Returns the
        record and whether this call created it."""
        if when_busy not in ("followUp", "steer"):
            raise Refused("bad-when-busy", f"whenBusy is 'followUp' or 'steer', not {when_busy!r}")
        with self._unit.transaction():
            existing = self.get(session, id)
            if existing is not None:
                return existing, False
            generation = self._unit.sessions.marks(session).generation
            (ordinal,) = self._unit.execute("SELECT COALESCE(MAX(ordinal), 0) + 1 FROM operations").fetchone()
            rows = self._unit.execute(
                "INSERT INTO operations (session, id, ordinal, generation, input, when_busy,"
                " status, created_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)"
                f" RETURNING {self._OPERATION_COLUMNS}",
                (session, id, ordinal, generation, dump_json(input), when_busy, self._unit.now()),
            ).fetchall()
            return self._operation_of(rows[0]), True

    def get(self, session: str, id: str) -> OperationRecord | None:
        with self._unit.transaction():
            row = self._unit.execute(
                f"SELECT {self._OPERATION_COLUMNS} FROM operations WHERE session = ? AND id = ?",
                (session, id),
            ).fetchone()
        return None if row is None else self._operation_of(row)

    def all(
        self, *, session: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[OperationRecord]:
        """Operations in submission order, narrowed to a session and statuses."""
        where, params = [], []
        if session is not None:
            where.append("session = ?")
            params.append(session)
        if statuses is not None:
            if not statuses:
                return []
            if set(statuses) == set(OPEN_STATUSES):
                where.append(OPEN_TERM)  # the partial index's own term: it reads only open operations
            else:
                where.append(f"status IN ({', '.join('?' for _ in statuses)})")
                params.extend(statuses)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._unit.transaction():
            rows = self._unit.execute(
                f"SELECT {self._OPERATION_COLUMNS} FROM operations {clause} ORDER BY ordinal", params
            ).fetchall()
        return [self._operation_of(row) for row in rows]

    def open_sessions(self) -> list[str]:
        """Ids of sessions with queued or running operations, oldest first."""
        with self._unit.transaction():
            rows = self._unit.execute(
                "SELECT s.id FROM sessions s WHERE EXISTS (SELECT 1 FROM operations o"
                " WHERE o.session = s.id AND o.status IN ('queued', 'running')) ORDER BY s.ordinal"
            ).fetchall()
        return [row[0] for row in rows]

    def start(self, session: str, id: str) -> bool:
        """``queued`` → ``running``. False when it was not queued."""
        return self.start_record(session, id) is not None

    def start_record(self, session: str, id: str) -> OperationRecord | None:
        """``queued`` → ``running``: the record as it is now (one statement:
        the update returns the row), or None when it was not queued."""
        with self._unit.transaction():
            rows = self._unit.execute(
                "UPDATE operations SET status = 'running', started_at = ?"
                f" WHERE session = ? AND id = ? AND status = 'queued' RETURNING {self._OPERATION_COLUMNS}",
                (self._unit.now(), session, id),
            ).fetchall()
        return self._operation_of(rows[0]) if rows else None

    def requeue(self, session: str, id: str) -> bool:
        """``running`` → ``queued``, undelivered, to run again."""
        with self._unit.transaction():
            return (
                self._unit.execute(
                    "UPDATE operations SET status = 'queued', delivered = NULL, started_at = NULL"
                    " WHERE session = ? AND id = ? AND status = 'running'",
                    (session, id),
                ).rowcount
                > 0
            )

    def settle(self, session: str, id: str, outcome: dict) -> bool:
        """Settle a queued or running operation with a wire outcome
        (``{"status": "done", "text"}`` or ``{"status": "unanswered",
        "reason"}``). False when it had settled already or does not exist."""
        return self.settle_record(session, id, outcome) is not None

    def settle_record(self, session: str, id: str, outcome: dict) -> OperationRecord | None:
        """:meth:`settle`, returning the settled record (one statement: the
        update returns the row), or None when it had settled already or
        does not exist. A turn that ended ``done`` is told to the unit's
        ``on_change`` in the same transaction."""
        status = outcome.get("status")
        if status not in SETTLED_STATUSES:
            raise ValueError(f"not an outcome: {outcome!r}")
        with self._unit.transaction():
            rows = self._unit.execute(
                "UPDATE operations SET status = ?, outcome = ?, settled_at = ?"
                " WHERE session = ? AND id = ? AND status IN ('queued', 'running')"
                f" RETURNING {self._OPERATION_COLUMNS}",
                (status, dump_json(outcome), self._unit.now(), session, id),
            ).fetchall()
            on_change = self._unit.on_change
            if rows and status == "done" and on_change is not None:
                on_change(self._unit.database, "turn-ended",
                          {"session": session, "operation": id, "text": str(outcome.get("text") or "")})
        return self._operation_of(rows[0]) if rows else None

    def set_delivered(
        self, session: str, id: str, runtime: str | None, *, handoff: str | None = None
    ) -> None:
        """Record the runtime an operation was handed to (None: not handed
        to any live one). ``handoff``, when given, is attached to it."""
        with self._unit.transaction():
            if handoff is None:
                self._unit.execute(
                    "UPDATE operations SET delivered = ? WHERE session = ? AND id = ?",
                    (runtime, session, id),
                )
            else:
                self._unit.execute(
                    "UPDATE operations SET delivered = ?, handoff = ? WHERE session = ? AND id = ?",
                    (runtime, handoff, session, id),
                )
