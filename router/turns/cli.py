"""``router send SESSION TEXT``: send a message to a session of a running
``router serve`` and print the answer as JSON. (``router resume SESSION``,
below, lets a session a limit stopped take messages again.)

It posts to ``--url`` (default ``http://127.0.0.1:8765``) through the
``cli`` channel, under an event id it mints itself (or ``--event-id``), so a
send that went unanswered can be sent again with the same id and is written
once. By default it waits for a container session's reply and prints it in
``reply``; ``--no-wait`` answers once the message is in the session.

Exit status: 0 when the message was delivered (and, when waited for, the
reply is ``done``); 1 when it was refused, went unanswered, was dropped by
the session, or its reply is ``unanswered``; 2 on a usage or connection
error (nothing printed on stdout then); 3 when the ``cli`` channel is
switched off (the seed's ``CLI_OFF_EXIT``; the message names the recovery
command).
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any
from urllib.parse import quote

__all__ = ["configure", "configure_resume", "run", "run_resume"]

DEFAULT_URL = "http://127.0.0.1:8765"
#: ``router.plugins.channels.CLI_OFF_EXIT``, not imported: this command
#: loads nothing of the server side.
CLI_OFF_EXIT = 3


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session's id (see GET /sessions)")
    parser.add_argument("text", help="the message ('-' reads it from stdin)")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the running router serve (default {DEFAULT_URL})")
    parser.add_argument("--event-id", help="the delivery's event id (default: a new one); resend with the same id")
    parser.add_argument("--card", action="store_true", help="send it as a card, not as your own words")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for a container session's reply")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait in all (default 300)")


def _print(body: Any) -> None:
    print(json.dumps(body, ensure_ascii=False), flush=True)


def run(args: argparse.Namespace) -> int:
    import httpx

    text = sys.stdin.read() if args.text == "-" else args.text
    event_id = args.event_id or str(uuid.uuid4())
    if args.timeout <= 0:
        print("router send: --timeout must be positive", file=sys.stderr)
        return 2
    body: dict[str, Any] = {"text": text, "eventId": event_id, "wait": not args.no_wait}
    if args.card:
        body["kind"] = "card"
    url = f"{args.url.rstrip('/')}/sessions/{quote(args.session, safe='')}/messages"
    try:
        response = httpx.post(
            url,
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-router-channel": "cli"},
            timeout=args.timeout,
        )
    except httpx.TimeoutException:
        _print({
            "error": "timeout",
            "message": f"no answer within {args.timeout:g} s; send again with --event-id {event_id} "
            "(the same id is written once)",
            "eventId": event_id,
        })
        return 1
    except (httpx.TransportError, httpx.InvalidURL, ValueError) as exc:
        print(f"router send: cannot-connect: {args.url}: {exc}; is `router serve` running?", file=sys.stderr)
        return 2
    try:
        answer = response.json()
    except ValueError:
        print(f"router send: {url} answered {response.status_code} with no JSON; is it a router?", file=sys.stderr)
        return 2
    _print(answer)
    if response.status_code == 200 and type(answer) is dict:
        reply = answer.get("reply")
        if answer.get("status") != "delivered":
            return 1
        return 0 if reply is None or reply.get("status") == "done" else 1
    if type(answer) is dict and answer.get("error") == "channel-off":
        return CLI_OFF_EXIT
    return 1


# --------------------------------------------------------------------------- router resume


def configure_resume(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the stopped session's id")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the running router serve (default {DEFAULT_URL})")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")


def run_resume(args: argparse.Namespace) -> int:
    """``router resume SESSION``: ``POST /sessions/<id>/resume``; print the
    answer as JSON. Exit 0: resumed, or it was not stopped
    (``resumed: false``); 1: refused (the limit is still reached:
    ``limit-reached``; ``unknown-session`` ...); 2: a usage or connection
    error."""
    import httpx

    if args.timeout <= 0:
        print("router resume: --timeout must be positive", file=sys.stderr)
        return 2
    url = f"{args.url.rstrip('/')}/sessions/{quote(args.session, safe='')}/resume"
    try:
        response = httpx.post(url, content=b"{}", headers={"content-type": "application/json"},
                              timeout=args.timeout)
    except (httpx.TransportError, httpx.InvalidURL, ValueError) as exc:
        print(f"router resume: cannot-connect: {args.url}: {exc}; is `router serve` running?", file=sys.stderr)
        return 2
    try:
        answer = response.json()
    except ValueError:
        print(f"router resume: {url} answered {response.status_code} with no JSON; is it a router?", file=sys.stderr)
        return 2
    _print(answer)
    return 0 if response.status_code == 200 else 1
