"""The record's session list kept between the cluster's notifications
(sans-IO).

The board of a cluster listed every session's record on every survey: a
thousand rows read and built for each ``GET /sessions`` and each change
the live board shows, though between two surveys one session changes, or
none. Every write of a session's record or of its operations notifies the
cluster with the session's id (``cluster_board``, a row trigger:
:func:`router.cluster.pg.install_board_notify`). :class:`RecordMirror`
keeps each session's row as last read and the ids named since; a read
takes them (:meth:`RecordMirror.plan`) and re-reads only those
(:meth:`RecordMirror.read`): a survey costs per change, not per session.

Theory of operation
-------------------

The rows are as fresh as a read of the record when every notification of
a write committed before the read began has been taken. The caller makes
sure of that before it plans: it sends its own mark on the cluster's sync
channel and waits for it to come back on the same listening connection
(PostgreSQL delivers notifications in the order their transactions
committed, so every earlier one came before it). What cannot be made sure
of is read whole (a *full* plan):

- nothing read yet, or an empty payload (a router that notifies "something
  changed" without naming a session: everything may have);
- the listener is not live, or listened on another connection than the
  one the rows were read under (notifications sent while it was away are
  gone): ``epoch`` is the listener's connection count;
- the mark did not come back (the caller plans with ``synced=False``);
- the rows are older than ``every`` seconds: the safety net for a
  notification lost any other way.

A full read's rows count from the connection live when it was planned:
whatever commits after is named on it. A read that fails (or is
cancelled) gives back what its plan took (:meth:`RecordMirror.failed`), so
the next plan reads it again; nothing changes if the read raises. Plans
are taken one at a time (the caller holds a lock from plan to read):
a second reader waits for the first's rows, then takes what was named
since.

A session named again while its read runs is named for the next plan,
which reads it again: a read may repeat, never miss. A session a partial
read does not find is gone from the rows; one it finds that was not there
(made since) is added last, as the full read's order (by creation) has it.

``statistics()``: ``full`` and ``partial`` reads planned, ``named`` (ids
re-read by partial reads), ``rows``.
"""

from __future__ import annotations

import math
from typing import Any, Final, Mapping

import attrs

__all__ = ["MirrorStatistics", "ReadPlan", "REREAD_EVERY", "RecordMirror"]

#: Seconds after which the rows are read whole again, notifications or not
#: (ours: the safety net for a notification lost in a way the listener
#: cannot see; a full read of 1,000 sessions costs ~20 ms of CPU).
REREAD_EVERY: Final = 30.0


@attrs.frozen(kw_only=True)
class ReadPlan:
    """What one read is to read: every session (``full``) or the sessions
    ``ids`` (none: the rows are as fresh as a read), and what the rows
    will then count from (``epoch``: the listener's connection, None when
    it was not live; ``at``: when it was planned)."""

    full: bool
    ids: frozenset[str] = frozenset()
    epoch: int | None = None
    at: float = 0.0


@attrs.frozen
class MirrorStatistics:
    full: int
    partial: int
    named: int
    rows: int


class RecordMirror:
    """Each session's row as last read, and the sessions named since (see
    the module docstring)."""

    def __init__(self, *, every: float = REREAD_EVERY) -> None:
        self.every = every
        self._rows: dict[str, Any] | None = None
        self._named: set[str] = set()
        self._all = True
        self._epoch: int | None = None
        self._read_at = -math.inf
        self.full = 0
        self.partial = 0
        self.named_read = 0

    def __repr__(self) -> str:
        rows = "unread" if self._rows is None else f"{len(self._rows)} rows"
        return f"<RecordMirror {rows} named={len(self._named)} all={self._all} full={self.full} partial={self.partial}>"

    def statistics(self) -> MirrorStatistics:
        return MirrorStatistics(full=self.full, partial=self.partial, named=self.named_read,
                                rows=0 if self._rows is None else len(self._rows))

    def named(self, payload: str) -> None:
        """A notification: session ``payload`` changed (empty: any may have)."""
        if payload:
            self._named.add(payload)
        else:
            self._all = True

    def plan(self, *, epoch: int, live: bool, synced: bool, now: float) -> ReadPlan:
        """The next read's plan, taking what was named (see the module
        docstring): ``epoch``, ``live``: the listener's connection count
        and whether it listens now; ``synced``: every notification of a
        write committed before now was taken; ``now``: the clock."""
        trusted = (self._rows is not None and not self._all and live and synced and epoch == self._epoch
                   and now - self._read_at < self.every)
        if not trusted:
            self._all, self._named = False, set()
            self.full += 1
            return ReadPlan(full=True, epoch=epoch if live else None, at=now)
        ids, self._named = frozenset(self._named), set()
        if ids:
            self.partial += 1
            self.named_read += len(ids)
        return ReadPlan(full=False, ids=ids, epoch=epoch, at=now)

    def read(self, plan: ReadPlan, rows: Mapping[str, Any]) -> list[Any]:
        """``plan``'s read is done: ``rows`` (session id -> row) of every
        session in order (a full plan) or of the sessions of ``plan.ids``
        found (a partial one). Every row now, in order."""
        if plan.full:
            self._rows = dict(rows)
            self._epoch, self._read_at = plan.epoch, plan.at
        else:
            assert self._rows is not None
            for session in plan.ids:
                row = rows.get(session)
                if row is None:
                    self._rows.pop(session, None)
                else:
                    self._rows[session] = row
        return list(self._rows.values())

    def failed(self, plan: ReadPlan) -> None:
        """``plan``'s read did not finish: what it took is to read again."""
        if plan.full:
            self._all = True
        else:
            self._named |= plan.ids
