"""The account limits every router of this user on this machine shares.

Claude Code starts one ``router mcp`` per session, each with its own data
directory, so the sessions of one account live in many routers. When one
learns its account's limit it writes it here (:func:`record`); every router
reads the file when a session of its opens, when it lists its sessions and
before each delivery (:func:`read`), and parks its own sessions of that
account. The file is ``account-limits.json`` beside the shared turn records
(``usage.jsonl``): ``{account: {"resetsAt": epoch ms, "limitKind", "source",
"at"}}``, the latest reset of each account winning.

Blocking file I/O: call these in a worker thread. A write takes an
exclusive ``flock`` on the file's lock file, reads, merges and renames a
complete new file into place, so a reader never sees half a file and two
writers never lose each other's account. A file that does not parse reads
as empty (the next write replaces it).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["read", "record"]


def read(path: Path) -> dict[str, dict[str, Any]]:
    """Every account's latest limit, as written (``{}`` when none)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if type(value) is not dict:
        return {}
    return {
        account: limit for account, limit in value.items()
        if type(limit) is dict and type(limit.get("resetsAt")) is int
    }


def record(path: Path, account: str, *, resets_at: int, limit_kind: str, source: str, at: int) -> None:
    """Keep the account's limit (a later reset than the one kept wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        limits = read(path)
        kept = limits.get(account)
        if kept is not None and kept["resetsAt"] >= resets_at:
            return
        limits[account] = {"resetsAt": resets_at, "limitKind": limit_kind, "source": source, "at": at}
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(limits, sort_keys=True))
        os.replace(temporary, path)
