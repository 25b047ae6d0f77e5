"""The asks of every router of this user on this machine, over their
private sockets (:func:`router.board.client.survey` finds them): listed with
``GET /asks`` and answered with ``POST /asks/<id>`` at the router that holds
the ask. ``router asks``, ``router answer`` and the MCP tools use these."""

from __future__ import annotations

import os
from typing import Any, Mapping

import httpx
import trio

from router._httpx import unix_transport
from router.board.client import ANSWER_TIMEOUT, BASE_URL, CLI_CHANNEL, read_answer, survey
from router.errors import Refusal

__all__ = ["answer_anywhere", "survey_asks"]


async def _asks_of(path: str, timeout: float, every: bool) -> list[dict[str, Any]]:
    with trio.fail_after(timeout):
        async with httpx.AsyncClient(transport=unix_transport(path), base_url=BASE_URL,
                                     headers=CLI_CHANNEL, timeout=None) as client:
            response = await client.get("/asks", params={"all": "1"} if every else {})
    body = read_answer(os.path.basename(path), "/asks", response.status_code, response.content)
    return [ask for ask in body.get("asks", []) if type(ask) is dict] if type(body) is dict else []


async def survey_asks(
    env: Mapping[str, str], *, timeout: float = ANSWER_TIMEOUT, every: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every waiting ask (``every``: kept ones too) with the router holding it,
    and the routers left out."""
    board = await survey(env, timeout=timeout)
    found: list[dict[str, Any]] = []
    left_out = [f"{skipped.name}: {skipped.refusal}" for skipped in board.skipped]
    for reached in board.reached:
        try:
            found += [{**ask, "router": reached.info} for ask in await _asks_of(reached.socket, timeout, every)]
        except (Refusal, httpx.HTTPError, trio.TooSlowError) as exc:
            left_out.append(f"{reached.name}: {exc}")
    return found, left_out


async def answer_anywhere(env: Mapping[str, str], ask_id: str, decision: str, *, by: str,
                          timeout: float = ANSWER_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """Answer the ask ``ask_id`` at the router that holds it: ``(0, {ask})``,
    ``(1, refusal)`` when that router refused it or no router holds it
    (``unknown-ask``, refused as ``router send`` refuses an
    ``unknown-session``: docs/cli.md)."""
    # Kept ones too: a second answer is refused by the router that holds it.
    found, _ = await survey_asks(env, timeout=timeout, every=True)
    holders = [ask["router"]["socket"] for ask in found if ask.get("id") == ask_id]
    if not holders:
        return 1, {"error": "unknown-ask", "message": f"no router of yours has an ask {ask_id!r}; "
                   "`router asks` lists the waiting ones"}
    with trio.fail_after(timeout):
        async with httpx.AsyncClient(transport=unix_transport(holders[0]), base_url=BASE_URL,
                                     headers=CLI_CHANNEL, timeout=None) as client:
            response = await client.post(f"/asks/{ask_id}", json={"decision": decision, "by": by})
    return (0 if response.status_code == 200 else 1), response.json()
