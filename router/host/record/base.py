"""The host's record's rows, and what every table's repository works through.

The record (:class:`router.host.store.Store`) is split into one repository
per table, each a module of this package: :mod:`.sessions`,
:mod:`.operations`, :mod:`.messages`, :mod:`.entries`, :mod:`.usage`,
:mod:`.skipped_frames`; the store holds one of each, named for its table
(``store.sessions.get(id)``, ``store.operations.enqueue(...)``). A
repository holds the :class:`Unit` it works through (the store: its
connection, its transactions, its clock, the change hook, and the other
repositories) and nothing else; each of its methods is one transaction of
its own, or joins the caller's (nested transactions join the outer one),
so the statements of one call, or of one applied frame across tables,
commit together. They run in the store's worker thread
(:meth:`router.host.store.Store.call`), or synchronously where no Trio
runs. This module holds the rows they read into (frozen attrs records),
the JSON helpers and the refusal type.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, ContextManager, Final, Iterable, Literal, Protocol, Sequence

import attrs

from router.errors import Refusal
from wire.json import JsonValue

__all__ = [
    "DAEMON_COLUMNS", "DaemonRecord", "Marks", "MessageLog", "OPEN_STATUSES", "OperationRecord", "OperationStatus",
    "Refused", "SETTLED_STATUSES", "SKIPPED_TEXT_CHARS", "SessionRecord", "SkippedFrame", "Unit", "UsageAfter",
    "UsageRecord", "WhenBusy", "dump_json", "figure", "load_json", "storable",
]


class Unit(Protocol):
    """What a repository works through: the store (see the module docstring)."""

    #: The repositories another one reads through (a reset asks for open
    #: operations; an enqueue reads the session's generation): the
    #: :class:`router.host.record.Sessions` and
    #: :class:`router.host.record.Operations` of the same store (typed Any
    #: here: their modules import this one).
    sessions: Any
    operations: Any
    #: Told of a change a notification is made of, inside the transaction
    #: that writes it: ``(database, what, record)``; None: nobody listens.
    on_change: Callable[[Any, str, dict[str, Any]], None] | None

    @property
    def database(self) -> Any: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def transaction(self) -> ContextManager[Any]: ...

    def now(self) -> int: ...


OperationStatus = Literal["queued", "running", "done", "unanswered"]
WhenBusy = Literal["followUp", "steer"]

#: Statuses of an operation that has not settled.
OPEN_STATUSES: Final = ("queued", "running")
#: Statuses of a settled operation.
SETTLED_STATUSES: Final = ("done", "unanswered")
#: How much of a skipped frame's text the record keeps: enough to see what
#: it was, not a copy of a 64 MiB message.
SKIPPED_TEXT_CHARS: Final = 2000


@attrs.frozen(kw_only=True)
class MessageLog:
    """A session's transcript changes as :meth:`router.host.record.Messages.log` reads
    them: the current ``generation``, the session's highest message
    ``version``, and ``messages`` as ``(version, message)`` pairs."""

    generation: int
    version: int
    messages: list[tuple[int, dict]]


class Refused(Refusal):
    """A refusal of the store or of the host's API: ``code`` (kebab-case),
    ``message`` (a sentence a person can act on), ``data``; see
    :class:`router.errors.Refusal`."""


def dump_json(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def load_json(text: str | None) -> JsonValue:
    return None if text is None else json.loads(text)


def storable(text: str) -> str:
    """``text`` as SQLite can hold it: a lone surrogate (which JSON from a
    JavaScript peer may carry) becomes ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


def figure(value: object) -> float | None:
    """A usage figure, or None when the adapter sent no finite number."""
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return value  # type: ignore[return-value]
    return None


# --------------------------------------------------------------------------- records

#: The daemon columns of ``sessions`` (schema v7), as :class:`DaemonRecord` names them.
DAEMON_COLUMNS: Final = ("url", "token", "runtime", "container", "launcher", "harness", "state", "reason")


@attrs.frozen(kw_only=True)
class DaemonRecord:
    """A session's own daemon, as the record has it (every field may be
    None: a session on the host's default endpoint has none set)."""

    url: str | None = None
    token: str | None = attrs.field(default=None, repr=False)
    runtime: str | None = None
    container: str | None = None
    launcher: str | None = None
    harness: str | None = None
    state: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class SessionRecord:
    id: str
    parent: str | None
    generation: int
    cursor_runtime: str | None
    cursor_seq: int
    #: The wire's ``ContainerSettings`` object.
    settings: dict
    handoff: str | None
    open_runtime: str | None
    open_seq: int
    created_at: int
    updated_at: int
    daemon: DaemonRecord = attrs.field(factory=DaemonRecord)


@attrs.frozen
class Marks:
    """The part of a session's row that applying frames (and queueing an
    operation) reads: the cursor (the last frame applied), the open mark
    (where the daemon stood at the last ``open``) and the generation."""

    cursor_runtime: str | None
    cursor_seq: int
    open_runtime: str | None
    open_seq: int
    #: The adapter session the daemon should have open.
    generation: int


@attrs.frozen(kw_only=True)
class OperationRecord:
    session: str
    id: str
    ordinal: int
    generation: int
    #: The wire's ``ContainerInput``: a string or a list of parts.
    input: JsonValue
    when_busy: WhenBusy
    status: OperationStatus
    #: ``{"status": "done", "text": ...}`` or ``{"status": "unanswered", "reason": ...}``.
    outcome: dict | None
    delivered: str | None
    handoff: str | None
    created_at: int
    started_at: int | None
    settled_at: int | None

    @property
    def settled(self) -> bool:
        return self.status in SETTLED_STATUSES


@attrs.frozen(kw_only=True)
class UsageRecord:
    """Usage figures of one operation (or of a session's events between
    turns, with ``operation_id`` None), summed over its ``usage`` events."""

    session: str
    operation_id: str | None
    #: Sums; None when no event of the group reported the figure.
    input_tokens: float | None
    output_tokens: float | None
    cost_usd: float | None
    #: How many ``usage`` events were summed.
    events: int
    #: The first and last event's time, ms since the epoch.
    first_at: int
    last_at: int


@attrs.frozen(kw_only=True)
class UsageAfter:
    """A session's ``usage`` events after a mark, summed: what
    :meth:`router.host.record.Usage.after` and every usage ledger
    (:class:`router.plugins.usage.UsageLedger`) answer.

    ``mark`` is where the next read starts (the store's: the last event's
    rowid, the mark asked for when there is none after it, 0 when the
    session has none; a memory ledger's: a count), ``events`` how many were
    summed. The wire's ``usage`` event carries ``inputTokens`` and
    ``outputTokens``, each optional: a sum is None when no event summed
    reported that figure."""

    mark: int
    events: int
    input_tokens: float | None
    output_tokens: float | None


@attrs.frozen(kw_only=True)
class SkippedFrame:
    """A frame the host passed without applying (it could not parse or
    apply it): where it came from, why, and the start of its text."""

    session: str
    runtime: str
    seq: int
    reason: str
    text: str
    at: int
