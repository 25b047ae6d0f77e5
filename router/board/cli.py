"""``router sessions [--json]``: every session of every router of this user
on this machine.

It asks every router's private socket at once (:func:`router.board.client.survey_blocking`:
no trio, no httpx, so the command starts fast),
each under ``--timeout`` seconds, and prints one line per session (its id,
kind, state, harness, model, last activity, the router that holds it and
its working directory; ``no sessions: …`` when there is none), or with
``--json`` one JSON list of objects: each session as its router lists it
(``id``, ``kind``, ``state``, ``busy``, ``harness``, ``lastActivity`` and
what else the router knows: ``model``, ``cwd``, ``connected``, ``parent``,
``stopped``) plus ``router``, who holds it (``{name, command, pid, socket,
dataDir, url?, cwd?}``).

A router that does not answer in time, or answers with a refusal (its
``cli`` channel is off ...), is named on stderr and left out; a dead
router's socket (connect refused) is removed without a word.

Exit status: 0 when every router answered (no router at all is an empty
list); 1 when one or more were left out (the list is partial); 2 on a usage
error, or when the local directory is not a private directory of this
user's (``unsafe-directory``: nothing in it is asked).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    from router.board.client import ANSWER_TIMEOUT

    parser.add_argument("--json", action="store_true", help="print one JSON list of objects")
    parser.add_argument("--timeout", type=float, default=ANSWER_TIMEOUT,
                        help=f"seconds each router has to answer (default {ANSWER_TIMEOUT:g})")


def run(args: argparse.Namespace) -> int:
    from router.board.client import survey_blocking
    from router.errors import Refusal

    if args.timeout <= 0:
        print("router sessions: --timeout must be positive", file=sys.stderr)
        return 2
    try:
        board = survey_blocking(os.environ, timeout=args.timeout)
    except Refusal as refused:
        print(f"router sessions: {refused}", file=sys.stderr)
        return 2
    for skipped in board.skipped:
        print(f"router sessions: left out {skipped.name}: {skipped.refusal}", file=sys.stderr)
    sessions = board.sessions()
    if args.json:
        print(json.dumps(sessions, ensure_ascii=False), flush=True)
    else:
        if sessions or board.reached or board.skipped:
            _table(sessions)
        if not board.reached and not board.skipped:
            print(f"router sessions: no router of yours is running (none in {board.directory})", file=sys.stderr)
    return 1 if board.skipped else 0


def ago(stamp: Any, now: float) -> str:
    """``lastActivity`` (ms since the epoch) as a person reads it: ``12s
    ago``, ``5m ago``, ``3h ago``, ``2d ago``; ``-`` when unknown."""
    if type(stamp) not in (int, float) or stamp <= 0:
        return "-"
    seconds = max(0, int(now - stamp / 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _table(sessions: list[dict[str, Any]]) -> None:
    import time

    if not sessions:
        print("no sessions: start one with `router launch`, or a Claude Code session with the plug-in", flush=True)
        return
    now = time.time()
    rows = [("SESSION", "KIND", "STATE", "HARNESS", "MODEL", "ACTIVE", "ROUTER", "DIRECTORY")]
    rows += [(str(s.get("id")), str(s.get("kind")), str(s.get("state")), str(s.get("harness") or "-"),
              str(s.get("model") or "-"), ago(s.get("lastActivity"), now), str((s.get("router") or {}).get("name")),
              str(s.get("cwd") or "-")) for s in sessions]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1], flush=True)
