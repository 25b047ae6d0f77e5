"""A value read from files, kept while the files are unchanged.

Theory of operation
-------------------

The settings files (``plugins.json``, the shared limits file ...) are read
on the request path, and a read in a worker thread costs a thread hop (a
fraction of a millisecond of wall time, and the GIL's hand-over) on every
request. :class:`Watched` keeps the value of its last read with the
**identity** of the files it came from, ``(st_ino, st_size, st_mtime_ns,
st_ctime_ns)`` of each (``lstat``: a file swapped for a link is a change
too; a file that is not there has an identity of its own), and reads again
only when an identity differs. A change is therefore seen by the next
call, whoever made it (another process included): a write in place
changes the size or the times, a rename over the file the inode.

Two races, and why neither can serve a stale value:

- The identities are taken **before** the read. A write that lands between
  them leaves the new content kept under the old identities, so the next
  call sees identities that differ and reads again.
- A file's times have a coarse clock (the kernel's timestamps advance in
  ticks of a few milliseconds; some filesystems keep whole seconds), so two
  writes in place of the same size within one tick leave the same identity.
  As git does with its index ("racy clean"), a value is kept only when
  every file's ``st_mtime_ns`` and ``st_ctime_ns`` are older than
  :data:`COARSE_CLOCK_NS` before the read began; a file written since is
  read again on every call until it is that old.

The ``lstat`` calls run on the Trio thread: a metadata call on a local
file, a few microseconds, where the thread hop it saves costs a hundred
times that. The read itself stays in a worker thread.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Final, Generic, Sequence, TypeVar

import attrs
import trio

__all__ = ["COARSE_CLOCK_NS", "Watched", "WatchedStatistics", "identity", "settled"]

T = TypeVar("T")

#: How old a file's times must be before a value read from it is kept:
#: 2 s, the coarsest timestamp a filesystem the data directory may sit on
#: keeps (FAT's modification time has a 2-second resolution).
COARSE_CLOCK_NS: Final = 2_000_000_000

Identity = tuple[int, int, int, int] | str


def identity(path: str | os.PathLike[str]) -> Identity:
    """``(st_ino, st_size, st_mtime_ns, st_ctime_ns)`` of ``path`` (not
    following a link), ``"absent"`` when it is not there, ``"unreadable"``
    when it cannot be looked at (never kept: see :meth:`Watched.get`)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    except OSError:
        return "unreadable"
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(key: Sequence[Identity], began_ns: int, coarse_ns: int | None = None) -> bool:
    """Whether a value read after ``key`` was taken at ``began_ns`` may be
    kept: every file looked at, and none written within ``coarse_ns``
    (:data:`COARSE_CLOCK_NS` unless given) of ``began_ns``."""
    coarse_ns = COARSE_CLOCK_NS if coarse_ns is None else coarse_ns
    for each in key:
        if each == "unreadable":
            return False
        if not isinstance(each, str) and max(each[2], each[3]) >= began_ns - coarse_ns:
            return False
    return True


@attrs.frozen(kw_only=True)
class WatchedStatistics:
    """What ``statistics()`` answers: the calls, and how many read the files."""

    calls: int
    reads: int


class Watched(Generic[T]):
    """``await watched.get()``: ``read()`` in a worker thread, or the value
    of the last read while ``paths()`` all have the identities they had
    then. ``paths`` is asked on every call (it may depend on the value: the
    files of the modules a settings file names). A caller whose read is
    not one blocking function (it awaits) passes no ``read`` and uses
    :meth:`begin`, its read, then :meth:`keep`, after :meth:`kept`.

    ``statistics()`` counts the calls and the reads. ``coarse_ns``: see
    :data:`COARSE_CLOCK_NS` (tests pass 0, with files whose size changes)."""

    def __init__(self, paths: Callable[[], Sequence[str | os.PathLike[str]]], read: Callable[[], T] | None = None,
                 *, coarse_ns: int | None = None) -> None:
        self._read = read
        self._paths = paths
        self._coarse_ns = coarse_ns
        self._key: tuple[Identity, ...] | None = None
        self._value: T | None = None
        self._calls = 0
        self._reads = 0

    def __repr__(self) -> str:
        return f"<Watched calls={self._calls} reads={self._reads} kept={self._key is not None}>"

    def statistics(self) -> WatchedStatistics:
        return WatchedStatistics(calls=self._calls, reads=self._reads)

    def _identities(self) -> tuple[Identity, ...]:
        return tuple(identity(path) for path in self._paths())

    def kept(self) -> T | None:
        """The kept value when the files still have its identities, else None
        (no read, no await)."""
        if self._key is not None and self._identities() == self._key:
            return self._value
        return None

    def keep(self, value: T, key: tuple[Identity, ...], began_ns: int) -> None:
        """Keep ``value``, read after ``key`` was taken at ``began_ns``, unless
        a file was written too recently to trust its identity."""
        self._key, self._value = (key, value) if settled(key, began_ns, self._coarse_ns) else (None, None)

    def forget(self) -> None:
        """Keep nothing: the next call reads."""
        self._key, self._value = None, None

    def begin(self) -> tuple[tuple[Identity, ...], int]:
        """The identities and the time to take **before** a read."""
        return self._identities(), time.time_ns()

    async def get(self) -> T:
        self._calls += 1
        key, began = self.begin()
        if self._key is not None and key == self._key:
            return self._value  # type: ignore[return-value]
        assert self._read is not None, "a Watched made without read() is used through kept() and keep()"
        value = await trio.to_thread.run_sync(self._read)
        self._reads += 1
        self.keep(value, key, began)
        return value
