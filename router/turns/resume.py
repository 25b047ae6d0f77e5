"""Where a live stream stands, and what a reconnecting reader missed: the
sans-IO part of the live view's resume (``Last-Event-ID``).

Every item a session's live view publishes gets a number, one more than the
item before (a batch takes a consecutive range). The numbers are relative to
the view's **epoch**, a random name the view takes when it is made and again
whenever its stream was interrupted (:meth:`LiveHistory.restart`): a number
from another epoch (before a restart of ``router serve``, before a gap in the
host's events) is recognised as such, never mistaken for a position of this
one. A container session's items also carry a **durable** position, ``(generation,
version)``: the transcript's generation and the highest message version
(``messages.version`` in the host's store) the reader has, which outlives
the process.

An event id (:class:`LiveId`) is dot-separated fields, each a letter and a
value, in this order: ``e<epoch>`` (16 hex), ``s<item number>``, ``g<generation>``,
``v<version>``: ``e1f2e3d4c5b6a7980.s42`` (a Claude Code session),
``e1f2e3d4c5b6a7980.s42.g1.v17`` (a container session), ``g1.v17`` (a message
sent from the record while catching up: only the durable part holds).
:func:`parse_live_id` refuses anything else (``None``), so a malformed id is
answered as a stale one: ``reset``, then a snapshot.

:class:`LiveHistory` keeps the recent batches (at most
:data:`HISTORY_BATCHES` batches and :data:`HISTORY_BYTES` bytes of JSON) and
answers :meth:`LiveHistory.since`: exactly the items after a number it
holds, or ``None``. :class:`StreamCursor` is one reader's side: the ids of
the items it is sent, and the messages it already has (a snapshot or a
catch-up read from the record may show what the first live batches repeat;
those are not sent again).
"""

from __future__ import annotations

import collections
import re
import secrets
from typing import Any, Final, Iterable, Mapping

import attrs

from wire.json import dumps

__all__ = [
    "HISTORY_BATCHES",
    "HISTORY_BYTES",
    "LiveBatch",
    "LiveHistory",
    "LiveId",
    "MAX_LIVE_ID_CHARS",
    "StreamCursor",
    "new_epoch",
    "parse_live_id",
]

#: Batches a live view keeps for resumes (ours: the same as a subscriber's
#: buffer, ``LIVE_BUFFER``: a reader that could still have been kept
#: subscribed can still resume).
HISTORY_BATCHES: Final = 1024
#: Bytes of item JSON a live view keeps for resumes (ours: a few long
#: transcripts' worth per session, so a hundred sessions stay well under a
#: gigabyte; an item larger than this alone is kept, as the newest).
HISTORY_BYTES: Final = 4 * 1024 * 1024
#: The longest event id looked at (ours: the longest valid one is about 80).
MAX_LIVE_ID_CHARS: Final = 200
#: Hex digits of an epoch (ours: 64 random bits never repeat by chance).
EPOCH_HEX: Final = 16

_NUMBER = r"(?:0|[1-9][0-9]{0,17})"
_ID = re.compile(
    rf"(?:e(?P<epoch>[0-9a-f]{{{EPOCH_HEX}}})\.s(?P<seq>{_NUMBER}))?"
    rf"(?:(?(epoch)\.)g(?P<gen>{_NUMBER})\.v(?P<version>{_NUMBER}))?"
)


def new_epoch() -> str:
    return secrets.token_hex(EPOCH_HEX // 2)


@attrs.frozen
class LiveId:
    """A parsed event id; see the module docstring. ``epoch`` and ``seq``
    come together, ``durable`` (``(generation, version)``) may come alone."""

    epoch: str | None = None
    seq: int | None = None
    durable: tuple[int, int] | None = None

    def __str__(self) -> str:
        fields = []
        if self.epoch is not None:
            fields += [f"e{self.epoch}", f"s{self.seq}"]
        if self.durable is not None:
            fields += [f"g{self.durable[0]}", f"v{self.durable[1]}"]
        return ".".join(fields)


def parse_live_id(text: str | None) -> LiveId | None:
    """The id ``text`` names, or ``None`` (absent, empty, malformed)."""
    if not text or len(text) > MAX_LIVE_ID_CHARS:
        return None
    match = _ID.fullmatch(text.strip(" "))
    if match is None or not match.group(0):
        return None
    epoch, seq, gen, version = match.group("epoch", "seq", "gen", "version")
    return LiveId(
        epoch=epoch,
        seq=None if seq is None else int(seq),
        durable=None if gen is None else (int(gen), int(version)),
    )


@attrs.frozen
class LiveBatch:
    """Items numbered ``first``, ``first + 1`` ...; ``durable`` is the
    container session's ``(generation, version)`` once a reader has them
    (``None``: not known, or not a container session). ``encoded`` is each
    item's JSON text (``wire.json.dumps``), made once when the batch is
    published and shared by every reader (empty: not made; a reader makes
    its own)."""

    first: int
    items: tuple[dict[str, Any], ...]
    durable: tuple[int, int] | None = None
    encoded: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)

    @property
    def last(self) -> int:
        return self.first + len(self.items) - 1

    def texts(self) -> tuple[str, ...]:
        """Each item's JSON text: ``encoded``, or made now."""
        return self.encoded or tuple(dumps(item) for item in self.items)


class LiveHistory:
    """The numbering and the recent batches of one live view (see the
    module docstring). ``position`` is the number of the last item published
    (0 before any)."""

    def __init__(self, *, batches: int = HISTORY_BATCHES, max_bytes: int = HISTORY_BYTES) -> None:
        self.max_batches = batches
        self.max_bytes = max_bytes
        self.epoch = new_epoch()
        self.position = 0
        self.bytes = 0
        self._batches: collections.deque[tuple[LiveBatch, int]] = collections.deque()

    def __repr__(self) -> str:
        return f"<LiveHistory epoch={self.epoch} position={self.position} batches={len(self._batches)} bytes={self.bytes}>"

    @property
    def oldest(self) -> int:
        """The number a resume may start after at the earliest."""
        return self._batches[0][0].first - 1 if self._batches else self.position

    def publish(self, items: Iterable[dict[str, Any]], durable: tuple[int, int] | None = None) -> LiveBatch:
        """Number ``items`` (at least one) and keep them."""
        items = tuple(items)
        # Each item encoded once, here: its size for the history's bound
        # and the text every reader's stream sends (docs/bench.md, "Live
        # streams").
        encoded = tuple(dumps(item) for item in items)
        batch = LiveBatch(self.position + 1, items, durable, encoded)
        assert batch.items, "a batch holds at least one item"
        size = sum(map(len, encoded))
        self.position = batch.last
        self._batches.append((batch, size))
        self.bytes += size
        while len(self._batches) > self.max_batches or (self.bytes > self.max_bytes and len(self._batches) > 1):
            _, dropped = self._batches.popleft()
            self.bytes -= dropped
        return batch

    def restart(self) -> None:
        """The stream was interrupted: a new epoch, nothing held."""
        self.epoch = new_epoch()
        self._batches.clear()
        self.bytes = 0

    def holds(self, since: LiveId | None) -> bool:
        """Whether a resume after ``since`` can be served from here."""
        return (
            since is not None
            and since.epoch == self.epoch
            and since.seq is not None
            and self.oldest <= since.seq <= self.position
        )

    def since(self, since: LiveId | None) -> list[LiveBatch] | None:
        """The batches after ``since`` (the first cut to what comes after
        it), or ``None`` when this history does not hold it."""
        if not self.holds(since):
            return None
        assert since is not None and since.seq is not None
        out = []
        for batch, _ in self._batches:
            if batch.last <= since.seq:
                continue
            if batch.first <= since.seq:
                cut = since.seq + 1 - batch.first
                batch = LiveBatch(since.seq + 1, batch.items[cut:], batch.durable, batch.encoded[cut:])
            out.append(batch)
        return out


class StreamCursor:
    """One reader's ids: ``epoch`` of the view it follows, ``floor`` the
    durable position it has already (a snapshot's, a catch-up's), ``known``
    the messages it has (id -> message) that the first live batches may
    repeat."""

    def __init__(
        self,
        epoch: str,
        floor: tuple[int, int] | None = None,
        known: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self.epoch = epoch
        self.floor = floor
        self._known = dict(known or {})

    def id_of(self, seq: int, durable: tuple[int, int] | None) -> str:
        return str(LiveId(self.epoch, seq, self._durable(durable)))

    def _durable(self, durable: tuple[int, int] | None) -> tuple[int, int] | None:
        if durable is None or self.floor is None:
            return durable or self.floor
        if durable[0] != self.floor[0]:
            return durable  # a newer generation; the floor spoke of the old one
        return max(durable, self.floor)

    def items(self, batch: LiveBatch) -> list[tuple[str, dict[str, Any]]]:
        """``(id, item)`` for each item of ``batch`` the reader lacks."""
        return [(id, batch.items[at]) for at, id in self._lacked(batch)]

    def encoded(self, batch: LiveBatch) -> list[tuple[str, str]]:
        """``(id, item's JSON text)`` for the same items as :meth:`items`
        (the text the batch was published with: encoded once for every
        reader)."""
        lacked = self._lacked(batch)
        if not lacked:
            return []
        texts = batch.texts()
        return [(id, texts[at]) for at, id in lacked]

    def _lacked(self, batch: LiveBatch) -> list[tuple[int, str]]:
        """``(index in the batch, id)`` of each item the reader lacks; the
        reader's floor moves to the batch's durable position."""
        durable = self._durable(batch.durable)
        if batch.durable is not None:
            self.floor = durable
        out = []
        # str(LiveId(epoch, seq, durable)), its fixed fields written once a batch.
        head = f"e{self.epoch}.s"
        tail = "" if durable is None else f".g{durable[0]}.v{durable[1]}"
        for at, item in enumerate(batch.items):
            if self._known and item.get("type") == "message":
                message = item["message"]
                if self._known.pop(message.get("id"), None) == message:
                    continue  # shown already, as it is now
            out.append((at, f"{head}{batch.first + at}{tail}"))
        return out
