"""Bounding what a peer can put in the log: one small :class:`logging.Filter`.

A peer (a daemon, a host, an agent's process) chooses the text of many
lines the router logs: an ``error`` message, a frame that does not parse,
an adapter's failure. Unbounded, one peer fills the disk: a 60 MiB error
went into the log as one line, and a daemon repeating an error wrote
700,000 lines in 40 s (the fault campaign, docs/reliability.md).

:class:`PeerLogFilter`, on a handler (:func:`guard_handlers` puts it on
every handler of the root logger: ``router serve``, ``router daemon``),
does two things to each record before it is formatted:

- **Cut.** Every string argument longer than ``max_chars`` (and a message
  that is longer once formatted) is cut to that many characters, with
  ``… (N characters cut)`` after it. The cut happens on the arguments
  first, so a 60 MiB argument is never copied into a 60 MiB line.
- **Rate-limit repeats.** Records with the same logger, level, format
  string (the call site's template) and first argument (the router's lines
  name their session first, so one session's flood does not silence the
  others'; a peer's text comes later) pass ``burst`` per
  ``window`` seconds; the rest of the window is dropped and counted, and
  the first record of that kind after the window says how many were
  dropped (``[N similar lines dropped]``). A record with ``exc_info``
  counts as any other.

The filter is thread-safe (a lock around its counts) and keeps at most
``max_keys`` kinds (the oldest forgotten first), so the kinds themselves
cannot grow without bound.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Final

import attrs

__all__ = ["PeerLogFilter", "PeerLogStatistics", "cut", "guard_handlers", "MAX_CHARS", "BURST", "WINDOW"]

#: The longest string argument (and formatted message) kept, in characters.
MAX_CHARS: Final = 2000
#: Records of one kind that pass per window.
BURST: Final = 20
#: The window, in seconds.
WINDOW: Final = 10.0
#: Kinds remembered at once.
MAX_KEYS: Final = 1024


def cut(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} characters cut)"


@attrs.frozen(kw_only=True)
class PeerLogStatistics:
    """What the guard's ``statistics()`` answers: records passed, dropped,
    cut short, and the kinds of record it has seen."""

    passed: int
    dropped: int
    cut: int
    kinds: int


class PeerLogFilter(logging.Filter):
    """Cuts long lines and drops repeats beyond a burst (see the module)."""

    def __init__(
        self,
        *,
        max_chars: int = MAX_CHARS,
        burst: int = BURST,
        window: float = WINDOW,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.max_chars = max_chars
        self.burst = burst
        self.window = window
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        #: kind -> [window start, passed in it, dropped in it]
        self._kinds: collections.OrderedDict[tuple, list] = collections.OrderedDict()
        self.passed = 0
        self.dropped = 0
        self.cut = 0

    def __repr__(self) -> str:
        return f"<PeerLogFilter passed={self.passed} dropped={self.dropped} cut={self.cut} kinds={len(self._kinds)}>"

    def statistics(self) -> PeerLogStatistics:
        return PeerLogStatistics(passed=self.passed, dropped=self.dropped, cut=self.cut, kinds=len(self._kinds))

    def filter(self, record: logging.LogRecord) -> bool:
        dropped_before = self._admit(record)
        if dropped_before is None:
            return False
        self._cut(record)
        if dropped_before:
            record.msg = f"{record.msg} [{dropped_before} similar lines dropped]"
        return True

    def _admit(self, record: logging.LogRecord) -> int | None:
        """None to drop ``record``; else how many of its kind were dropped
        in the window that just ended (0 mostly)."""
        args = record.args
        first = str(args[0])[:100] if isinstance(args, tuple) and args else ""
        key = (record.name, record.levelno, str(record.msg)[:200], first)
        now = self.clock()
        with self._lock:
            kind = self._kinds.get(key)
            if kind is None:
                kind = self._kinds[key] = [now, 0, 0]
                while len(self._kinds) > self.max_keys:
                    self._kinds.popitem(last=False)
            else:
                self._kinds.move_to_end(key)
            reported = 0
            if now - kind[0] >= self.window:
                reported = kind[2]
                kind[0], kind[1], kind[2] = now, 0, 0
            if kind[1] >= self.burst:
                kind[2] += 1
                self.dropped += 1
                return None
            kind[1] += 1
            self.passed += 1
            return reported

    def _cut(self, record: logging.LogRecord) -> None:
        limit = self.max_chars
        cut_any = False
        if isinstance(record.msg, str) and len(record.msg) > limit:
            record.msg, cut_any = cut(record.msg, limit), True
        args = record.args
        if isinstance(args, tuple) and args:
            bounded: list[Any] = []
            for arg in args:
                if isinstance(arg, (str, bytes, bytearray)) and len(arg) > limit:
                    arg, cut_any = cut(arg if isinstance(arg, str) else repr(arg[: limit + 1]), limit), True
                bounded.append(arg)
            record.args = tuple(bounded)
        try:
            message = record.getMessage()
        except Exception:
            return  # the handler reports the bad call as logging always does
        if len(message) > limit + 200:
            record.msg, record.args, cut_any = cut(message, limit), None, True
        if cut_any:
            self.cut += 1


def guard_handlers(filter: PeerLogFilter | None = None, logger: logging.Logger | None = None) -> PeerLogFilter:
    """Put one :class:`PeerLogFilter` on every handler of ``logger`` (the
    root logger by default): call it after ``logging.basicConfig``."""
    guard = filter or PeerLogFilter()
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(each, PeerLogFilter) for each in handler.filters):
            handler.addFilter(guard)
    return guard
