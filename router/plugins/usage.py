"""Usage: what a session used in each turn, as the usage sources read it.

Theory of operation
-------------------

Each turn is *bracketed*: before it, :meth:`TurnMeter.begin` asks every
switched-on ``usage-source`` module for a mark (``read_turn`` with
``mark: None``); after it, :meth:`TurnMeter.end` asks again with each
module's mark and gets what was used since. A module answers ``None`` when it
does not cover the session at all (the transcript source for a container
session, say); that module is left out of the bracket.

The four token kinds are ``input``, ``output``, ``cache_creation`` and
``cache_read``. A turn's record holds them (``usage``), or ``usage: null``
when no source could tell: an *unknown* turn. Limit checks count known turns
and count unknown ones apart; an unknown turn never counts as zero tokens.
When more than one source knows a turn, the first in the settings' order wins
(the sources never add up: two readings of one turn would count it twice).

A source that fails (raises, misses its deadline, answers in the wrong shape)
makes its reading unknown and is logged; it never fails the turn.

Records go to a :class:`RecordStore`: :class:`JsonlRecords` (one JSON line per
turn, ``usage.jsonl`` in the data directory), :class:`TableRecords` (one row
per turn in a PostgreSQL database the routers share: ``router serve --store
postgresql://…``) or :class:`MemoryRecords`.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import datetime as dt
import errno
import os
from typing import Any, Callable, Final, Mapping, Protocol, Sequence

import attrs

from wire.json import dumps, loads

from router import errors
from router.store.db import PgDatabase, Step, open_migrated
from router.store.worker import Worker
from router.plugins.broker import Broker
from router.plugins.loader import LoadedModule, Loader, Log, default_log
from router.plugins.models import TurnAnswer, TurnUsage, answer_as, nests_deeper
from router.errors import Refusal
from router.host import UsageAfter  # the ledger's answer, the host's store's too

__all__ = ["StoreLedgerStatistics", "TableRecordsStatistics", "JsonlRecordsStatistics", 
    "TOKEN_KINDS",
    "Bracket",
    "JsonlRecords",
    "MemoryLedger",
    "MemoryRecords",
    "RecordIndex",
    "RecordStore",
    "TurnMeter",
    "StoreLedger",
    "TableRecords",
    "UsageAfter",
    "UsageLedger",
    "add_usage",
    "check_usage",
    "copy_json",
    "count_usage",
    "iso",
    "parse_time",
    "read_json_lines",
    "usage_total",
    "zero_usage",
]

#: The four token kinds, in the order they are shown.
TOKEN_KINDS = ("input", "output", "cache_creation", "cache_read")


def zero_usage() -> dict[str, int]:
    return {k: 0 for k in TOKEN_KINDS}


def check_usage(value: object) -> bool:
    """Whether ``value`` is ``{input, output, cache_creation, cache_read}``
    with a count for each and nothing else (:class:`~router.plugins.models.TurnUsage`)."""
    return not isinstance(answer_as(value, TurnUsage, what="usage"), Refusal)


def add_usage(total: dict[str, int], usage: Mapping[str, int]) -> None:
    for k in TOKEN_KINDS:
        total[k] += usage[k]


def usage_total(usage: Mapping[str, int]) -> int:
    return sum(usage[k] for k in TOKEN_KINDS)


def iso(moment: dt.datetime) -> str:
    """An aware time as ISO 8601 in UTC, ``Z``-suffixed, to the millisecond."""
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def parse_time(text: object) -> dt.datetime | None:
    """An ISO 8601 time with a zone (``Z`` or an offset), or ``None``."""
    if type(text) is not str:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def count_usage(
    records: Sequence[Any], matches: Callable[[Mapping[str, Any]], bool], start: dt.datetime
) -> tuple[dict[str, int], int]:
    """The four kinds summed over the known records that ``matches`` and whose
    ``at`` is at or after ``start``, and how many matching turns are unknown
    there (``usage`` null, or a time that cannot be read: counted apart,
    never as zero). A helper for limit checks."""
    kinds = zero_usage()
    unknown = 0
    for record in records:
        if type(record) is not dict or not matches(record):
            continue
        at = parse_time(record.get("at"))
        if at is None:
            unknown += 1
            continue
        if at < start:
            continue
        usage = record.get("usage")
        if type(usage) is not dict:
            unknown += 1
            continue
        for k in TOKEN_KINDS:
            value = usage.get(k)
            if type(value) is int and value > 0:
                kinds[k] += value
    return kinds, unknown


def copy_json(value: Any) -> Any:
    """A copy of a JSON value (objects and arrays new, scalars shared): what
    ``copy.deepcopy`` gives for JSON, several times faster (no memo).
    Anything that is not JSON is deep-copied. Recursive: for values whose
    depth is bounded (a turn record read from the file nests at most
    ``MAX_DEPTH`` levels)."""
    kind = type(value)
    if kind is dict:
        out = dict(value)  # the scalars, copied in C; then what nests
        for key, item in value.items():
            if type(item) not in _SCALARS:
                out[key] = copy_json(item)
        return out
    if kind is list:
        return [item if type(item) in _SCALARS else copy_json(item) for item in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


#: The JSON scalars, immutable and so shared by a copy.
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --------------------------------------------------------------------------- ledger


class UsageLedger(Protocol):
    """The protocol the ``frames`` usage source reads: the usage figures the
    router stored from a container session's ``usage`` events. Events are
    only added; a replayed frame is not counted twice."""

    async def usage_after(self, session: str, mark: int | None) -> UsageAfter:
        """The events of ``session`` after ``mark`` (a mark this ledger
        answered), summed, and the mark after them; ``mark`` None: the
        current mark alone. A read costs the events since the mark, not the
        session's history (a turn's two reads must not grow)."""
        ...


class MemoryLedger:
    """A :class:`UsageLedger` in memory, for tests and the in-process daemon.
    A mark is the number of the session's events so far."""

    def __init__(self) -> None:
        self._events: dict[str, list[tuple[str | None, float | None, float | None]]] = {}

    def add(
        self,
        session: str,
        *,
        input_tokens: float | None = None,
        output_tokens: float | None = None,
        operation_id: str | None = None,
    ) -> None:
        self._events.setdefault(session, []).append((operation_id, input_tokens, output_tokens))

    async def usage_after(self, session: str, mark: int | None) -> UsageAfter:
        events = self._events.get(session, [])
        if mark is None:
            return UsageAfter(mark=len(events), events=0, input_tokens=None, output_tokens=None)
        new = events[mark:]

        def total(values: list[float | None]) -> float | None:
            given = [v for v in values if v is not None]
            return sum(given) if given else None

        return UsageAfter(mark=mark + len(new), events=len(new),
                          input_tokens=total([i for _, i, _ in new]),
                          output_tokens=total([o for _, _, o in new]))


@attrs.frozen
class StoreLedgerStatistics:
    """What a :class:`StoreLedger` did: reads asked of the store, and reads
    held (answered at once: nothing written since)."""

    reads: int
    held: int


class StoreLedger:
    """The host's store (``router.host.store.Store``) as a
    :class:`UsageLedger`: ``store.usage.after``, in the store's worker
    thread (a mark is the rowid of the session's last event).

    A read the store need not be asked is answered from memory: each read
    in the worker thread also notes, per session, the mark it answered and
    the store's count of the session's usage writes
    (``store.usage.writes``, counted before each row). While that count is
    unchanged no row of the session was written since, so a read from that
    same mark (a turn's end after its beginning) or of the mark alone (a
    turn's beginning) is answered at once, no thread hop: nothing after it.
    Only while the store is its record's sole writer (``Store.sole_writer``:
    a SQLite file under its lock, no fence); a record shared by a cluster's
    routers is always asked. ``statistics()`` counts both kinds."""

    def __init__(self, store: Any) -> None:
        self._store = store
        #: session -> (the store's usage writes of it at the read, the mark answered)
        self._seen: dict[str, tuple[int, int]] = {}
        self.reads = 0
        self.held = 0

    def __repr__(self) -> str:
        return f"<StoreLedger reads={self.reads} held={self.held}>"

    def statistics(self) -> StoreLedgerStatistics:
        return StoreLedgerStatistics(reads=self.reads, held=self.held)
    def _sole(self) -> bool:
        store = self._store
        return getattr(store, "sole_writer", False) is True and not store.database.fences

    async def usage_after(self, session: str, mark: int | None) -> Any:
        if not self._sole():
            self.reads += 1
            return await self._store.call(self._store.usage.after, session, mark)
        seen = self._seen.get(session)
        if seen is not None and seen[0] == self._store.usage.writes(session) and mark in (None, seen[1]):
            self.held += 1
            return UsageAfter(mark=seen[1], events=0, input_tokens=None, output_tokens=None)
        self.reads += 1
        writes, read = await self._store.call(self._read, session, mark)
        self._seen[session] = (writes, read.mark)  # noted once its transaction committed
        return read

    def _read(self, session: str, mark: int | None) -> tuple[int, Any]:
        """In the store's worker thread: the store's usage writes of the
        session, taken before the read (a row written after it is a
        change), and the read."""
        return self._store.usage.writes(session), self._store.usage.after(session, mark)


# --------------------------------------------------------------------------- records


class RecordStore(Protocol):
    """Where turn records go. Blocking: from Trio, run the methods through
    :meth:`call`, the records' one worker thread
    (:class:`router.store.worker.Worker`)."""

    async def call(self, fn: Callable[..., Any], *args: Any, retry: bool = True) -> Any:
        """``fn(*args)`` in the records' worker thread (a function that
        uses the records: one of these methods, or one that also asks the
        limit checks); run again after a transient failure unless
        ``retry`` is False."""
        ...

    def append(self, record: Mapping[str, Any]) -> None: ...

    def read(self) -> list[dict[str, Any]]:
        """Every record, in the order appended. The records are the store's
        own: copy one before changing it."""
        ...

    def since(self, start: dt.datetime | None) -> list[dict[str, Any]]:
        """The records that can count from ``start`` on: those at or after
        it, and those whose time cannot be read (which limit checks count
        apart, whatever their time). ``None``: every record."""
        ...


class RecordIndex:
    """Records in memory, in the order added and by time.

    :meth:`since` answers the records from a moment on by bisection, so its
    cost is that of the records it answers, not of every record held. Times
    are kept as POSIX seconds; records mostly arrive in time order, so an
    insertion is nearly always at the end.
    """

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._stamps: list[float] = []
        self._timed: list[dict[str, Any]] = []
        self._untimed: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.records)

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        at = parse_time(record.get("at"))
        if at is None:
            self._untimed.append(record)
            return
        stamp = at.timestamp()
        where = bisect.bisect_right(self._stamps, stamp)
        self._stamps.insert(where, stamp)
        self._timed.insert(where, record)

    def since(self, start: dt.datetime | None) -> list[dict[str, Any]]:
        if start is None:
            return list(self.records)
        where = bisect.bisect_left(self._stamps, start.timestamp())
        return self._untimed + self._timed[where:]


class _OnWorker:
    """A record store whose calls from Trio hop to its one worker thread."""

    worker: Worker

    async def call(self, fn: Callable[..., Any], *args: Any, retry: bool = True) -> Any:
        return await self.worker.call(fn, *args, retry=retry)


class MemoryRecords(_OnWorker):
    def __init__(self, records: Sequence[Mapping[str, Any]] = ()) -> None:
        self.worker = Worker("the turn records")
        self._index = RecordIndex()
        for record in records:
            self.append(record)

    def append(self, record: Mapping[str, Any]) -> None:
        self._index.add(copy.deepcopy(dict(record)))

    def read(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._index.records)

    def since(self, start: dt.datetime | None) -> list[dict[str, Any]]:
        return copy.deepcopy(self._index.since(start))


#: A record line longer than this is not a turn record (ours are a few
#: hundred bytes) and is skipped unparsed.
MAX_RECORD_LINE_BYTES: Final = 64 * 1024
#: How much of the file one read takes at a time.
READ_CHUNK_BYTES: Final = 1 << 20


class _IndexedRecords(_OnWorker):
    """A record store read into a :class:`RecordIndex` by ``_refresh``
    (which reads what was appended since the last read), in its worker's
    one thread (from Trio: :meth:`call`)."""

    _index: RecordIndex

    def _refresh(self) -> None:
        raise NotImplementedError

    def read(self) -> list[dict[str, Any]]:
        self._refresh()
        return list(self._index.records)

    def since(self, start: dt.datetime | None) -> list[dict[str, Any]]:
        self._refresh()
        return self._index.since(start)


@attrs.frozen
class JsonlRecordsStatistics:
    """What :class:`JsonlRecords` read: the records indexed, the offset read
    to, the bytes read, the lines parsed and the rereads from the start."""

    records: int
    offset: int
    bytes_read: int
    lines_parsed: int
    rereads: int


class JsonlRecords(_IndexedRecords):
    """Turn records as JSON lines in one file, read incrementally.

    Each append is one ``write`` of one line on an ``O_APPEND`` descriptor,
    then ``fsync``: a crash leaves at worst a partial last line. Any number
    of processes append to the same file (every router of this user).

    Reading
    -------

    The reader keeps a byte offset (just after the last complete line it
    parsed) and an in-memory :class:`RecordIndex` of every record read, so a
    read costs the lines appended since the last one, however long the
    history: a turn's end no longer reads and parses the whole file. A
    partial last line is left where it is, unread, until its newline
    arrives. A line that is not a JSON object (a torn one, garbage, one
    nested deeper than :data:`~router.plugins.models.MAX_DEPTH` or longer
    than :data:`MAX_RECORD_LINE_BYTES`) is skipped, as before.

    The file is read again from the start when it is not the file the index
    was read from: another inode (it was replaced or removed), a size below
    the offset (it shrank), or a byte before the offset that is not the
    newline the offset was taken after (it was rewritten in place).
    :meth:`statistics` counts the bytes read, the lines parsed and the
    re-reads, which the tests read to check that a turn's read stays small.

    Blocking: from Trio, call it through :meth:`call`, its one worker thread
    (so two threads' reads never interleave).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.worker = Worker("the turn records")
        self._index = RecordIndex()
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._bytes_read = 0
        self._lines_parsed = 0
        self._rereads = 0

    def __repr__(self) -> str:
        return f"<JsonlRecords {self.path!r} records={len(self._index)} offset={self._offset}>"

    def statistics(self) -> JsonlRecordsStatistics:
        return JsonlRecordsStatistics(records=len(self._index), offset=self._offset, bytes_read=self._bytes_read,
                                      lines_parsed=self._lines_parsed, rereads=self._rereads)
    def append(self, record: Mapping[str, Any]) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        line = (dumps(dict(record)) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            written = os.write(fd, line)
            if written < len(line):  # a disk that filled under the write: end the partial line (a bad line, skipped)
                with contextlib.suppress(OSError):
                    os.write(fd, b"\n")
                raise OSError(errno.ENOSPC, "the turn record was written in part (the disk is full)", self.path)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _start_over(self, identity: tuple[int, int] | None) -> None:
        if self._identity is not None:
            self._rereads += 1
        self._index = RecordIndex()
        self._identity = identity
        self._offset = 0

    def _refresh(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if self._identity is not None:
                self._start_over(None)
            return
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            if identity != self._identity or st.st_size < self._offset or (
                self._offset and os.pread(fd, 1, self._offset - 1) != b"\n"
            ):
                self._start_over(identity)
            while True:
                data = os.pread(fd, READ_CHUNK_BYTES, self._offset)
                self._bytes_read += len(data)
                end = data.rfind(b"\n")
                if end < 0:
                    # No complete line: a partial last line waits for its newline
                    # (a line longer than a chunk is skipped whole, unparsed).
                    after = None
                    if len(data) == READ_CHUNK_BYTES:
                        after = self._skip_long_line(fd, self._offset + len(data))
                    if after is None:
                        return
                    self._offset = after
                    continue
                self._parse(data[:end])
                self._offset += end + 1
        finally:
            os.close(fd)

    def _skip_long_line(self, fd: int, offset: int) -> int | None:
        """The offset after the newline that ends an over-long line, or
        ``None`` while it has none yet."""
        while data := os.pread(fd, READ_CHUNK_BYTES, offset):
            self._bytes_read += len(data)
            end = data.find(b"\n")
            if end >= 0:
                return offset + end + 1
            offset += len(data)
        return None  # no newline yet: wait for it, from the line's start

    def _parse(self, data: bytes) -> None:
        for raw in data.split(b"\n"):
            record = _record_of(raw)
            self._lines_parsed += 1
            if record is not None:
                self._index.add(record)


#: The turn records' table on PostgreSQL, as schema steps (``steps[n]``
#: takes version ``n`` to ``n + 1``). ``rowid`` orders them as appended;
#: appends hold the record's lock (one at a time across routers), so rows
#: commit in ``rowid`` order and a reader that read up to a ``rowid`` has
#: missed none below it.
RECORD_MIGRATIONS: Final[tuple[Step, ...]] = (
    # SQLite: none; the records are ``usage.jsonl`` there (:class:`JsonlRecords`).
    Step(sqlite=None, postgresql=(
        "CREATE TABLE turn_records (rowid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, record TEXT NOT NULL)",
    )),
)


@attrs.frozen
class TableRecordsStatistics:
    """What :class:`TableRecords` read: the records indexed, the last row read
    and the rows read."""

    records: int
    last: int
    rows_read: int


class TableRecords(_IndexedRecords):
    """Turn records as rows of ``turn_records`` in a PostgreSQL database,
    read incrementally as :class:`JsonlRecords` reads its file: the reader
    keeps the last ``rowid`` it read and a :class:`RecordIndex` of every
    record, so a read costs the rows appended since the last one. Each
    record is the JSON line ``usage.jsonl`` would hold (``router store
    copy`` moves them unchanged); a row that is not a JSON object is
    skipped, as a bad line is.

    Blocking: from Trio, call it through :meth:`call`, its one worker thread
    on the one connection. :meth:`close` closes it.
    """

    def __init__(self, url: str) -> None:
        self._index = RecordIndex()
        self._last = 0
        self._rows_read = 0
        self._db = open_migrated(url, "records", RECORD_MIGRATIONS, too_new=self._too_new)
        self.worker = Worker("the turn records", db=self._db, grouped=False)

    @staticmethod
    def _too_new(version: int) -> errors.Refusal:
        return errors.Refusal(
            "records-too-new", f"the turn records were written by a newer router (schema {version}); upgrade this one"
        )

    def __repr__(self) -> str:
        return f"<TableRecords records={len(self._index)} last={self._last}>"

    def statistics(self) -> TableRecordsStatistics:
        return TableRecordsStatistics(records=len(self._index), last=self._last, rows_read=self._rows_read)
    @property
    def database(self) -> PgDatabase:
        """The connection, for the fencing hook (``database.fences``)."""
        return self._db

    def append(self, record: Mapping[str, Any]) -> None:
        line = dumps(dict(record))
        with self._db.transaction():
            self._db.execute("INSERT INTO turn_records (record) VALUES (?)", (line,))

    def _refresh(self) -> None:
        rows = self._db.execute(
            "SELECT rowid, record FROM turn_records WHERE rowid > ? ORDER BY rowid", (self._last,)
        ).fetchall()
        for rowid, text in rows:
            self._rows_read += 1
            self._last = rowid
            record = _record_of(text.encode())
            if record is not None:
                self._index.add(record)

    def close(self) -> None:
        """Close the connection once no call runs in the worker thread."""
        self.worker.close()


def _record_of(raw: bytes) -> dict[str, Any] | None:
    """The JSON object one line holds, or ``None``."""
    if len(raw) > MAX_RECORD_LINE_BYTES:
        return None
    try:
        value = loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return value if type(value) is dict and not nests_deeper(value) else None


def read_json_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every line of ``path`` that is a JSON object; a missing file is empty.
    The piece after the last newline is a partial line (a crash mid-append)
    and is skipped, as is any line that is not an object. Reads the whole
    file: for ``changes.jsonl``, read by a person's command."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [record for raw in data.split(b"\n")[:-1] if (record := _record_of(raw)) is not None]


# --------------------------------------------------------------------------- meter


@attrs.frozen(kw_only=True)
class Bracket:
    """A turn being measured: who it is, and each covering source's mark."""

    subject: Mapping[str, Any]
    sources: tuple[tuple[LoadedModule, Any], ...]


def check_turn_answer(value: object, *, first: bool) -> str | None:
    """What is wrong with a ``read_turn`` answer (``None`` is "not mine")."""
    if value is None:
        return None
    parsed = answer_as(value, TurnAnswer, what="the answer (null, or exactly mark and usage)")
    if isinstance(parsed, Refusal):
        return parsed.message
    if first and parsed.usage is not None:
        return "the first read of a turn has no usage yet (answer usage: null)"
    return None


class TurnMeter:
    """Brackets turns with the switched-on usage sources and records them.

    ``deps`` is handed to every ``read_turn`` (the ``frames`` source finds the
    :class:`UsageLedger` under ``"ledger"``); ``options`` maps a source's name
    to its options from the settings.
    """

    def __init__(
        self,
        *,
        loader: Loader,
        broker: Broker,
        records: RecordStore,
        deps: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        log: Log | None = None,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self._loader = loader
        self._broker = broker
        self._records = records
        self._deps = dict(deps or {})
        self._options = dict(options or {})
        self._log = log or default_log
        self._now = now

    def _request(self, module: LoadedModule, subject: Mapping[str, Any], mark: Any) -> dict:
        return {
            **copy.deepcopy(dict(subject)),
            "mark": copy.deepcopy(mark),
            "options": copy.deepcopy(self._options.get(module.name) or {}),
        }

    async def _read(self, module: LoadedModule, request: dict, *, first: bool) -> dict | None:
        answer = await self._broker.call(module, "read_turn", request, self._deps,
                                         crash_code="source-threw")
        if isinstance(answer, Refusal):
            self._log({"event": "usage-unknown", "source": module.name,
                       "session": request.get("session"), **answer.data, "code": answer.code, "message": answer.message})
            return None
        problem = check_turn_answer(answer.value, first=first)
        if problem is not None:
            self._log({"event": "usage-unknown", "source": module.name,
                       "session": request.get("session"), "code": "malformed-answer",
                       "message": problem})
            return None
        return answer.value

    async def begin(self, subject: Mapping[str, Any]) -> Bracket:
        """Mark the start of a turn. ``subject`` describes the session:
        ``session``, ``instance``, ``harness``, ``provider``, ``model``,
        ``account``, ``reach`` (from the launch record) and, where known,
        ``transcript``."""
        sources = []
        # The modules are captured now: a reload during the turn does not
        # change which sources close this bracket.
        for module in self._loader.modules("usage-source"):
            answer = await self._read(module, self._request(module, subject, None), first=True)
            if answer is not None:
                sources.append((module, answer["mark"]))
        return Bracket(subject=copy.deepcopy(dict(subject)), sources=tuple(sources))

    async def end(self, bracket: Bracket) -> dict[str, Any]:
        """Close the bracket, store the turn's record and return it."""
        record = await self.close(bracket)
        # One whole append, tried again when the store blinks (router._transient).
        await self._records.call(self._records.append, record)
        return record

    async def close(self, bracket: Bracket) -> dict[str, Any]:
        """Close the bracket and return the turn's record, not stored: the
        caller appends it (the plug-in layer's turn end, in the worker-thread
        hop that also asks the limit checks)."""
        usage = None
        source = None
        for module, mark in bracket.sources:
            answer = await self._read(module, self._request(module, bracket.subject, mark),
                                      first=False)
            if answer is not None and answer["usage"] is not None:
                usage, source = answer["usage"], module.name
                break
        subject = bracket.subject
        record = {
            "session": subject.get("session"),
            "instance": subject.get("instance"),
            "harness": subject.get("harness"),
            "provider": subject.get("provider"),
            "model": subject.get("model"),
            "account": subject.get("account"),
            "at": iso(self._now()),
            "usage": usage,
            "source": source,
        }
        return record
