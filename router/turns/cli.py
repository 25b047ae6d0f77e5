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


def _post(command: str, server: str, url: str, body: Any, *, timeout: float,
          headers: dict[str, str] | None = None) -> tuple[int, Any] | None:
    """POST ``body`` as JSON to ``url`` of the router at ``server``: the
    status and the JSON answer, or None once stderr says why there is none
    (the caller exits 2). A timeout raises ``httpx.TimeoutException``."""
    import httpx

    try:
        response = httpx.post(url, content=json.dumps(body).encode(),
                              headers={"content-type": "application/json", **(headers or {})}, timeout=timeout)
    except httpx.TimeoutException:
        raise
    except (httpx.TransportError, httpx.InvalidURL, ValueError) as exc:
        print(f"router {command}: cannot-connect: {server}: {exc}; is `router serve` running?", file=sys.stderr)
        return None
    try:
        return response.status_code, response.json()
    except ValueError:
        print(f"router {command}: {url} answered {response.status_code} with no JSON; is it a router?",
              file=sys.stderr)
        return None


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
        answered = _post("send", args.url, url, body, timeout=args.timeout, headers={"x-router-channel": "cli"})
    except httpx.TimeoutException:
        _print({
            "error": "timeout",
            "message": f"no answer within {args.timeout:g} s; send again with --event-id {event_id} "
            "(the same id is written once)",
            "eventId": event_id,
        })
        return 1
    if answered is None:
        return 2
    status, answer = answered
    _print(answer)
    if status == 200 and type(answer) is dict:
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
        answered = _post("resume", args.url, url, {}, timeout=args.timeout)
    except httpx.TimeoutException:
        print(f"router resume: timeout: {args.url} did not answer within {args.timeout:g} s", file=sys.stderr)
        return 2
    if answered is None:
        return 2
    status, answer = answered
    _print(answer)
    return 0 if status == 200 else 1
