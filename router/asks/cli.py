"""``router asks [--json]`` and ``router answer ASK allow|deny``: the
permission asks waiting on you, across every router of yours on this
machine, and your answer to one.

Both ask every router's private socket (:func:`router.board.client.survey`
finds them, as ``router sessions`` does): ``GET /asks`` on each, and for an
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
from functools import partial
from typing import Any

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


async def _asks_of(path: str, timeout: float, every: bool) -> list[dict[str, Any]]:
    import httpx
    import trio

    from router.board.client import BASE_URL, CLI_CHANNEL, read_answer

    with trio.fail_after(timeout):
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=path), base_url=BASE_URL,
                                     headers=CLI_CHANNEL, timeout=None) as client:
            response = await client.get("/asks", params={"all": "1"} if every else {})
    body = read_answer(os.path.basename(path), "/asks", response.status_code, response.content)
    return [ask for ask in body.get("asks", []) if type(ask) is dict] if type(body) is dict else []


async def _survey(timeout: float, every: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Every waiting ask (``every``: kept ones too) with the router holding it,
    and the routers left out."""
    import httpx
    import trio

    from router.board.client import survey
    from router.errors import Refusal

    board = await survey(os.environ, timeout=timeout)
    found: list[dict[str, Any]] = []
    left_out = [f"{skipped.name}: {skipped.refusal}" for skipped in board.skipped]
    for reached in board.reached:
        try:
            found += [{**ask, "router": reached.info} for ask in await _asks_of(reached.socket, timeout, every)]
        except (Refusal, httpx.HTTPError, trio.TooSlowError) as exc:
            left_out.append(f"{reached.name}: {exc}")
    return found, left_out


def run_asks(args: argparse.Namespace) -> int:
    import trio

    found, left_out = trio.run(partial(_survey, args.timeout))
    for each in left_out:
        print(f"router asks: left out {each}", file=sys.stderr)
    if args.json:
        print(json.dumps(found, ensure_ascii=False), flush=True)
        return 1 if left_out else 0
    for ask in found:
        since = dt.datetime.fromtimestamp(ask["since"], dt.timezone.utc).strftime("%H:%M:%S")
        print(f"{ask['id']}  {ask['session']}  since {since}  {ask['summary']}", flush=True)
    return 1 if left_out else 0


async def _answer(ask_id: str, decision: str, timeout: float) -> tuple[int, dict[str, Any]]:
    import httpx
    import trio

    from router.board.client import BASE_URL, CLI_CHANNEL

    # Kept ones too: a second answer is refused by the router that holds it.
    found, _ = await _survey(timeout, every=True)
    holders = [ask["router"]["socket"] for ask in found if ask.get("id") == ask_id]
    if not holders:
        return 2, {"error": "unknown-ask", "message": f"no router of yours has an ask {ask_id!r}; "
                   "`router asks` lists the waiting ones"}
    with trio.fail_after(timeout):
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=holders[0]), base_url=BASE_URL,
                                     headers=CLI_CHANNEL, timeout=None) as client:
            response = await client.post(f"/asks/{ask_id}", json={"decision": decision, "by": "cli"})
    return (0 if response.status_code == 200 else 1), response.json()


def run_answer(args: argparse.Namespace) -> int:
    import trio

    status, body = trio.run(partial(_answer, args.ask, args.decision, args.timeout))
    if status == 0:
        ask = body["ask"]
        print(f"{ask['id']}: {ask['decision']} ({ask['summary']})", flush=True)
    else:
        print(f"router answer: {body.get('error')}: {body.get('message')}", file=sys.stderr)
    return status
