"""The host's record: the sessions: creation, forks, the cursor, the open mark, settings, the handoff, the daemon columns, generations.

One repository of :mod:`router.host.record` (its module docstring says how
they work); callers reach it as an attribute of the store
(:class:`router.host.store.Store`), named for its table. The table is
described in :mod:`router.host.store`'s docstring.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from router.host.record.base import (
    DAEMON_COLUMNS, OPEN_STATUSES, DaemonRecord, Marks, Refused, SessionRecord, Unit, dump_json,
)

__all__ = ["Sessions"]


class Sessions:
    """The ``sessions`` table (see the module docstring)."""

    def __init__(self, unit: Unit) -> None:
        self._unit = unit

    def __repr__(self) -> str:
        return "<Sessions>"

    _SESSION_COLUMNS = (
        "id, parent, generation, cursor_runtime, cursor_seq, settings, handoff, "
        "open_runtime, open_seq, created_at, updated_at, daemon_url, daemon_token, daemon_runtime, "
        "daemon_container, launcher, harness, launcher_state, launcher_reason"
    )

    #: :data:`DAEMON_COLUMNS` -> its column in ``sessions``.
    _DAEMON_COLUMN = {
        "url": "daemon_url", "token": "daemon_token", "runtime": "daemon_runtime", "container": "daemon_container",
        "launcher": "launcher", "harness": "harness", "state": "launcher_state", "reason": "launcher_reason",
    }

    @staticmethod
    def _session_of(row: tuple) -> SessionRecord:
        return SessionRecord(
            id=row[0],
            parent=row[1],
            generation=row[2],
            cursor_runtime=row[3],
            cursor_seq=row[4],
            settings=json.loads(row[5]),
            handoff=row[6],
            open_runtime=row[7],
            open_seq=row[8],
            created_at=row[9],
            updated_at=row[10],
            daemon=DaemonRecord(**dict(zip(DAEMON_COLUMNS, row[11:19]))),
        )

    def get(self, id: str) -> SessionRecord | None:
        with self._unit.transaction():
            row = self._unit.execute(f"SELECT {self._SESSION_COLUMNS} FROM sessions WHERE id = ?", (id,)).fetchone()
        return None if row is None else self._session_of(row)

    def require(self, id: str) -> SessionRecord:
        record = self.get(id)
        if record is None:
            raise Refused(
                "unknown-session", f"there is no container session {id!r}; create it first"
            )
        return record

    def marks(self, id: str) -> Marks:
        """The session's cursor, open mark and generation only (what
        applying a batch of frames reads, without the rest of the row)."""
        with self._unit.transaction():
            row = self._unit.execute(
                "SELECT cursor_runtime, cursor_seq, open_runtime, open_seq, generation FROM sessions WHERE id = ?",
                (id,),
            ).fetchone()
        if row is None:
            self.require(id)  # the refusal
        return Marks(*row)

    def all(self) -> list[SessionRecord]:
        """Every session, oldest first."""
        with self._unit.transaction():
            rows = self._unit.execute(f"SELECT {self._SESSION_COLUMNS} FROM sessions ORDER BY ordinal").fetchall()
        return [self._session_of(row) for row in rows]

    def create(
        self, id: str, *, settings: dict | None = None, parent: str | None = None
    ) -> tuple[SessionRecord, bool]:
        """Create a session, or return the one with this id unchanged.
        Returns the record and whether this call created it."""
        if type(id) is not str or not id:
            raise Refused(
                "bad-session-id",
                f"a session id must be a non-empty string, not {id!r}; a daemon refuses an empty one",
            )
        with self._unit.transaction():
            existing = self.get(id)
            if existing is not None:
                return existing, False
            now = self._unit.now()
            (ordinal,) = self._unit.execute("SELECT COALESCE(MAX(ordinal), 0) + 1 FROM sessions").fetchone()
            self._unit.execute(
                "INSERT INTO sessions (id, parent, ordinal, settings, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (id, parent, ordinal, dump_json(settings or {}), now, now),
            )
            return self.require(id), True

    def fork(self, id: str, parent: str) -> SessionRecord:
        """A new session ``id`` that continues ``parent``'s current
        generation: its messages and persisted entries, copied, and its
        settings. The fork starts at generation 1 with no cursor."""
        with self._unit.transaction():
            source = self.require(parent)
            if self.get(id) is not None:
                raise Refused(
                    "session-exists", f"a container session {id!r} exists; fork into a new id"
                )
            record, _ = self.create(id, settings=source.settings, parent=parent)
            self._unit.execute(
                "INSERT INTO messages (session, generation, id, position, operation_id, data,"
                " created_at, updated_at)"
                " SELECT ?, 1, id, position, operation_id, data, created_at, updated_at"
                " FROM messages WHERE session = ? AND generation = ?",
                (id, parent, source.generation),
            )
            self._unit.execute(
                "INSERT INTO entries (session, generation, position, data)"
                " SELECT ?, 1, position, data FROM entries WHERE session = ? AND generation = ?",
                (id, parent, source.generation),
            )
            return record

    def _touch(self, id: str, assignments: str, params: Sequence[Any]) -> None:
        self._unit.execute(
            f"UPDATE sessions SET {assignments}, updated_at = ? WHERE id = ?",
            (*params, self._unit.now(), id),
        )

    def set_cursor(self, id: str, runtime: str, seq: int) -> None:
        with self._unit.transaction():
            self._touch(id, "cursor_runtime = ?, cursor_seq = ?", (runtime, seq))

    def set_open_mark(self, id: str, runtime: str, seq: int) -> None:
        """Record that ``open`` for the current generation went to
        ``runtime`` when its newest frame was ``seq``."""
        with self._unit.transaction():
            self._touch(id, "open_runtime = ?, open_seq = ?", (runtime, seq))

    def set_daemon(self, id: str, **fields: str | None) -> DaemonRecord:
        """Set some of a session's daemon fields (:data:`DAEMON_COLUMNS`;
        None clears one); the others stay. Returns the daemon record. A
        daemon that became unreachable is told to the unit's ``on_change``
        in the same transaction."""
        unknown = set(fields) - set(DAEMON_COLUMNS)
        if unknown:
            raise ValueError(f"not daemon fields: {sorted(unknown)}")
        with self._unit.transaction():
            self.require(id)
            if fields:
                names = list(fields)
                self._touch(id, ", ".join(f"{self._DAEMON_COLUMN[name]} = ?" for name in names),
                            [fields[name] for name in names])
            daemon = self.require(id).daemon
            on_change = self._unit.on_change
            if fields.get("state") == "unreachable" and on_change is not None:
                on_change(self._unit.database, "unreachable", {"session": id, "reason": fields.get("reason") or ""})
            return daemon

    def set_settings(self, id: str, settings: dict) -> None:
        with self._unit.transaction():
            self.require(id)
            self._touch(id, "settings = ?", (dump_json(settings),))

    def take_handoff(self, id: str) -> str | None:
        """The pending handoff note, removed from the session."""
        with self._unit.transaction():
            record = self.require(id)
            if record.handoff is not None:
                self._touch(id, "handoff = NULL", ())
            return record.handoff

    def reset(self, id: str, handoff: str | None) -> int:
        """Start a new generation (no entries, an empty transcript) with an
        optional handoff note. Refused while the session has open
        operations. Returns the new generation."""
        with self._unit.transaction():
            record = self.require(id)
            if self._unit.operations.all(session=id, statuses=OPEN_STATUSES):
                raise Refused(
                    "session-busy",
                    f"container session {id!r} has operations queued or running; "
                    "wait for them or abort them before a reset",
                )
            generation = record.generation + 1
            self._touch(id, "generation = ?, handoff = ?", (generation, handoff))
            return generation

    def reopen(self, id: str) -> int:
        """Move the current generation, as it stands, to a new number: its
        transcript, persisted entries and operations are relabelled (nothing
        copied, nothing dropped), so a daemon that holds the old number open
        from an earlier hold is sent ``restore`` and ``open`` for the new one
        and rebuilds its adapter session from the record (the reconcile's
        stale daemon: :mod:`router.host.reconcile`). Returns the new
        generation."""
        with self._unit.transaction():
            record = self.require(id)
            old, new = record.generation, record.generation + 1
            for table in ("messages", "entries", "operations"):
                self._unit.execute(
                    f"UPDATE {table} SET generation = ? WHERE session = ? AND generation = ?",
                    (new, id, old),
                )
            self._touch(id, "generation = ?", (new,))
            return new
