"""``router send SESSION TEXT``: send a message to any session ``router
sessions`` lists and print the answer as JSON. (``router resume SESSION``,
below, lets a session a limit stopped take messages again.)

With no ``--url`` it finds the router that holds SESSION among this user's
routers (:func:`router.board.client.holder`: every router's private Unix
socket is asked) and posts over that socket; ``--router NAME`` names the
router instead (needed when several hold a session of that id, as every
router holds its own ``root``). ``--url`` posts to a router's TCP API
instead. Either way the post goes through the ``cli`` channel, under an
event id it mints itself (or ``--event-id``), so a send that went unanswered
can be sent again with the same id and is written once. By default it waits
for a container session's reply and prints it in ``reply``; ``--no-wait``
answers once the message is in the session. The answer is printed as one
JSON line (``--json`` asks for exactly that; it is the only form today).

Exit status: 0 when the message was delivered (and, when waited for, the
reply is ``done``); 1 when it was refused (``unknown-session``: no router
holds it; ``ambiguous-session``: several do, name one with ``--router``;
the router's own refusals), went unanswered, was dropped by the session, or
its reply is ``unanswered``; 2 on a usage or connection error, when no
router of this user runs (``no-router``) or ``--router`` names none
(``unknown-router``) (nothing printed on stdout then); 3 when the ``cli``
channel is switched off (the seed's ``CLI_OFF_EXIT``; the message names the
recovery command).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from functools import partial
from typing import Any
from urllib.parse import quote

__all__ = ["configure", "configure_resume", "run", "run_resume"]

DEFAULT_URL = "http://127.0.0.1:8765"
#: ``router.plugins.channels.CLI_OFF_EXIT``, not imported: this command
#: loads nothing of the server side.
CLI_OFF_EXIT = 3


def _add_reach(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help=f"a router's TCP API ({DEFAULT_URL} for `router serve`'s default port); "
                        "default: the router that holds SESSION, over its private socket")
    parser.add_argument("--router", metavar="NAME", help="the router to use, by the name `router sessions` shows")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session's id (see `router sessions`)")
    parser.add_argument("text", help="the message ('-' reads it from stdin)")
    _add_reach(parser)
    parser.add_argument("--json", action="store_true", help="print the answer as JSON (the only form today)")
    parser.add_argument("--event-id", help="the delivery's event id (default: a new one); resend with the same id")
    parser.add_argument("--card", action="store_true", help="send it as a card, not as your own words")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for a container session's reply")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait in all (default 300)")


def _print(body: Any) -> None:
    print(json.dumps(body, ensure_ascii=False), flush=True)


def _target(command: str, args: argparse.Namespace) -> tuple[str, str, str | None] | int:
    """Where to post: ``(who, base URL, socket or None)``; or the exit
    status once it said why there is nowhere (see the module docstring)."""
    if args.url is not None:
        if args.router is not None:
            print(f"router {command}: give --url or --router, not both", file=sys.stderr)
            return 2
        return args.url, args.url.rstrip("/"), None
    import trio

    from router.board.client import BASE_URL, NO_ROUTER, holder
    from router.errors import Refusal

    try:
        found, board = trio.run(partial(holder, os.environ, args.session, router=args.router))
    except Refusal as refused:
        if refused.code in NO_ROUTER:
            print(f"router {command}: {refused}", file=sys.stderr)
            return 2
        _print({"error": refused.code, "message": refused.message})
        return 1
    for skipped in board.skipped:
        print(f"router {command}: left out {skipped.name}: {skipped.refusal}", file=sys.stderr)
    return f"router {found.name} ({found.socket})", BASE_URL, found.socket


def _post(command: str, server: str, url: str, body: Any, *, timeout: float,
          headers: dict[str, str] | None = None, socket: str | None = None) -> tuple[int, Any] | None:
    """POST ``body`` as JSON to ``url`` of the router at ``server`` (over the
    Unix ``socket`` when given): the status and the JSON answer, or None once
    stderr says why there is none (the caller exits 2). A timeout raises
    ``httpx.TimeoutException``."""
    import httpx

    try:
        with httpx.Client(transport=None if socket is None else httpx.HTTPTransport(uds=socket),
                          timeout=timeout) as client:
            response = client.post(url, content=json.dumps(body).encode(),
                                   headers={"content-type": "application/json", **(headers or {})})
    except httpx.TimeoutException:
        raise
    except (httpx.TransportError, httpx.InvalidURL, ValueError) as exc:
        hint = "it may have just stopped" if socket is not None else "is `router serve` running?"
        print(f"router {command}: cannot-connect: {server}: {exc}; {hint}", file=sys.stderr)
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
    target = _target("send", args)
    if isinstance(target, int):
        return target
    server, base, socket = target
    url = f"{base}/sessions/{quote(args.session, safe='')}/messages"
    try:
        answered = _post("send", server, url, body, timeout=args.timeout, headers={"x-router-channel": "cli"},
                         socket=socket)
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
    _add_reach(parser)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")


def run_resume(args: argparse.Namespace) -> int:
    """``router resume SESSION``: ``POST /sessions/<id>/resume``; print the
    answer as JSON; the router is found as ``router send`` finds it. Exit
    0: resumed, or it was not stopped (``resumed: false``); 1: refused (the
    limit is still reached: ``limit-reached``; ``unknown-session`` ...); 2:
    a usage or connection error (``no-router`` ...)."""
    import httpx

    if args.timeout <= 0:
        print("router resume: --timeout must be positive", file=sys.stderr)
        return 2
    target = _target("resume", args)
    if isinstance(target, int):
        return target
    server, base, socket = target
    url = f"{base}/sessions/{quote(args.session, safe='')}/resume"
    try:
        answered = _post("resume", server, url, {}, timeout=args.timeout, socket=socket)
    except httpx.TimeoutException:
        print(f"router resume: timeout: {server} did not answer within {args.timeout:g} s", file=sys.stderr)
        return 2
    if answered is None:
        return 2
    status, answer = answered
    _print(answer)
    return 0 if status == 200 else 1
