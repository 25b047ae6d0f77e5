"""``router asks [--json]`` and ``router answer ASK allow|deny``: the
permission asks waiting on you, across every router of yours on this
machine, and your answer to one.

Both ask every router's private socket (:func:`router.board.client.survey_blocking`
finds them, as ``router sessions`` does; blocking requests, no trio): ``GET /asks`` on each, and for an
answer ``POST /asks/<id>`` on the one that lists the ask. The first answer
wins: a second, or one after the ask's deadline (Claude Code's own prompt has
it then), is refused with its code (``ask-answered``, ``ask-expired``).

Exit status: 0 on success; 1 when an answer was refused or a router was
left out of the list; 2 on a usage error or when no router lists the ask.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys

__all__ = ["configure_answer", "configure_asks", "run_answer", "run_asks"]


def configure_asks(parser: argparse.ArgumentParser) -> None:
    from router.board.client import ANSWER_TIMEOUT

    parser.add_argument("--json", action="store_true", help="print one JSON list of objects")
    parser.add_argument("--timeout", type=float, default=ANSWER_TIMEOUT, help="seconds each router has to answer")


def configure_answer(parser: argparse.ArgumentParser) -> None:
    from router.board.client import ANSWER_TIMEOUT

    parser.add_argument("ask", help="the ask's id, as `router asks` lists it")
    parser.add_argument("decision", choices=("allow", "deny"))
    parser.add_argument("--timeout", type=float, default=ANSWER_TIMEOUT, help="seconds each router has to answer")


def run_asks(args: argparse.Namespace) -> int:
    from router.asks.remote import survey_asks_blocking

    found, left_out = survey_asks_blocking(os.environ, timeout=args.timeout)
    for each in left_out:
        print(f"router asks: left out {each}", file=sys.stderr)
    if args.json:
        print(json.dumps(found, ensure_ascii=False), flush=True)
        return 1 if left_out else 0
    if not found:
        print("no asks are waiting on you", flush=True)
    for ask in found:
        since = dt.datetime.fromtimestamp(ask["since"], dt.timezone.utc).strftime("%H:%M:%S")
        print(f"{ask['id']}  {ask['session']}  since {since}  {ask['summary']}", flush=True)
    return 1 if left_out else 0


def run_answer(args: argparse.Namespace) -> int:
    from router.asks.remote import answer_blocking

    status, body = answer_blocking(os.environ, args.ask, args.decision, by="cli", timeout=args.timeout)
    if status == 0:
        ask = body["ask"]
        print(f"{ask['id']}: {ask['decision']} ({ask['summary']})", flush=True)
    else:
        print(f"router answer: {body.get('error')}: {body.get('message')}", file=sys.stderr)
    return status
