"""``router notifications [--json]``: the recent notification events of every
router of yours on this machine, each with every destination's receipt
(``sent``, ``suppressed``, ``failed``, ``pending``, with why), and the
configuration errors that stop a destination (a bad apprise URL, a bad
settings file, a notifier the loader refused, a destination's last failure).

It asks each router's private socket (:func:`router.board.client.survey`
finds them): ``GET /notifications`` and ``GET /notifications/settings``.
A router that sends no notifications (``router mcp``) is left out quietly.

Exit status: 0; 1 when a router was left out, or when a configuration
error is shown (so a script notices).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from functools import partial
from typing import Any, Mapping

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    from router.board.client import ANSWER_TIMEOUT

    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"notifications": [...], "errors": [...]}')
    parser.add_argument("--session", help="only this session's notifications")
    parser.add_argument("--limit", type=int, default=20, help="how many of the newest, per router (1 to 500)")
    parser.add_argument("--timeout", type=float, default=ANSWER_TIMEOUT, help="seconds each router has to answer")


async def _survey(env: Mapping[str, str], *, session: str | None, limit: int,
                  timeout: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    import httpx
    import trio

    from router.board.client import BASE_URL, CLI_CHANNEL, survey
    from router.errors import Refusal

    board = await survey(env, timeout=timeout)
    found: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    left_out = [f"{skipped.name}: {skipped.refusal}" for skipped in board.skipped]
    params = {"limit": str(limit), **({"session": session} if session else {})}
    for reached in board.reached:
        try:
            with trio.fail_after(timeout):
                async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=reached.socket),
                                             base_url=BASE_URL, headers=CLI_CHANNEL, timeout=None) as client:
                    listed = await client.get("/notifications", params=params)
                    if listed.status_code == 404 and listed.json().get("error") == "notifications-off":
                        continue
                    view = await client.get("/notifications/settings")
        except (Refusal, httpx.HTTPError, trio.TooSlowError, ValueError) as exc:
            left_out.append(f"{reached.name}: {exc}")
            continue
        if listed.status_code != 200 or view.status_code != 200:
            left_out.append(f"{reached.name}: {listed.status_code} {listed.text[:200]}")
            continue
        found += [{**each, "router": reached.name} for each in listed.json()["notifications"]]
        settings = view.json()
        errors += [{**each, "router": reached.name} for each in settings.get("errors", [])]
        errors += [{"router": reached.name, "notifier": d["notifier"], "destination": d["label"], **d["last_error"]}
                   for d in settings.get("destinations", []) if d.get("last_error")]
    found.sort(key=lambda each: each.get("at", 0), reverse=True)
    return found, errors, left_out


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def run(args: argparse.Namespace) -> int:
    import trio

    if not 1 <= args.limit <= 500:
        print("router notifications: --limit is from 1 to 500", file=sys.stderr)
        return 2
    found, errors, left_out = trio.run(partial(_survey, os.environ, session=args.session, limit=args.limit,
                                               timeout=args.timeout))
    for each in left_out:
        print(f"router notifications: left out {each}", file=sys.stderr)
    if args.json:
        print(json.dumps({"notifications": found, "errors": errors}, ensure_ascii=False), flush=True)
        return 1 if left_out or errors else 0
    _print_text(found, errors)
    return 1 if left_out or errors else 0


def _print_text(found: list[dict], errors: list[dict]) -> None:
    """The survey as lines a person reads: the errors, then each
    notification with its receipts."""
    for error in errors:
        where = error.get("destination") or error.get("notifier") or "settings"
        print(f"error: {where}: {error['error']}: {error['message']}", flush=True)
    if not found:
        print("no notifications yet", flush=True)
    for event in found:
        print(f"{_when(event['at'])}  {event['kind']}  {event['session']}  {event['title']}  ({event['id']})")
        if not event["receipts"]:
            print("    (no destination: no notifier is on, or none has anywhere to send)")
        for receipt in event["receipts"]:
            status = f" {receipt['status']}" if receipt.get("status") is not None else ""
            print(f"    {receipt['destination']}: {receipt['outcome']}{status}: {receipt['detail']}", flush=True)
