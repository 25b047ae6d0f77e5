"""``router store copy --from DIR --to postgresql://… [--replace]``: copy a
SQLite data directory (``host.sqlite``, ``turns.sqlite``, ``usage.jsonl``)
into a PostgreSQL database, for ``router serve --store postgresql://…``
(:mod:`router.record.copy` has the rules). Stop the router on DIR first.

Output: one line per table, ``TABLE: N rows``, then ``copied DIR into
URL`` (the URL without its password). Exit 0 when copied; 2 on a usage
error or a refusal (``store-not-empty``, ``store-busy``, ``bad-store``,
``bad-store-url`` ...), printed as ``router store: CODE: sentence``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from router.errors import Refusal


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    copy = actions.add_parser("copy", help="copy a SQLite data directory into a PostgreSQL database")
    copy.add_argument("--from", dest="source", required=True, metavar="DIR",
                      help="the SQLite data directory (a router's --data-dir / --store DIR)")
    copy.add_argument("--to", dest="target", required=True, metavar="URL", help="postgresql://user@host:port/db")
    copy.add_argument("--replace", action="store_true",
                      help="replace what the target holds (without it a target that holds a record is refused)")


def run(args: argparse.Namespace) -> int:
    from router.record import copy_record
    from router.store import parse_target

    try:
        target = parse_target(args.target)
        counts = copy_record(Path(args.source), target, replace=args.replace)
    except Refusal as refused:
        print(f"router store: {refused.code}: {refused.message}", file=sys.stderr)
        return 2
    for table, count in counts.items():
        print(f"{table}: {count} rows")
    print(f"copied {args.source} into {target}")
    return 0
