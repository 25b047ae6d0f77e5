"""The SQLite files the router keeps are opened the same way: one process at
a time (a file lock), one connection, WAL.

The host's store (``host.sqlite``) and the delivery record
(``turns.sqlite``) take the lock (:func:`lock_file`) and hand it to their
worker (:class:`router.store.worker.Worker`), which drops it on close; every
file, the paired devices' (``devices.sqlite``) too, is opened by
:func:`connect_wal`.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from typing import Literal


def lock_file(path: str | os.PathLike[str]) -> int | None:
    """Open ``path`` (created with mode 0600 when missing) and take a
    non-blocking exclusive ``flock`` on it, held until the returned
    descriptor is closed. None when another process holds it; an
    ``OSError`` opening the file passes through."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release_lock(fd: int | None) -> None:
    """Drop a lock :func:`lock_file` took (closing its descriptor drops the
    ``flock``); None is nothing to drop."""
    if fd is not None:
        os.close(fd)


def connect_wal(
    path: str | os.PathLike[str], *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
) -> sqlite3.Connection:
    """One connection to ``path`` in WAL mode, usable from the worker thread
    the caller serialises its calls on, transactions begun by hand. A file
    that is not a database raises ``sqlite3.DatabaseError`` here."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
    except BaseException:
        db.close()
        raise
    return db
