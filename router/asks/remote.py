"""The asks of every router of this user on this machine, over their
private sockets (:func:`router.board.client.survey` finds them): listed with
``GET /asks`` and answered with ``POST /asks/<id>`` at the router that holds
the ask. ``router asks`` and ``router answer`` call
:func:`survey_asks_blocking` and :func:`answer_blocking`, on
:mod:`router._client_sync` (no trio, no httpx); the MCP tools call the same
from Trio through a worker thread (:func:`survey_asks`,
:func:`answer_anywhere`)."""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Mapping

from router.board.client import ANSWER_TIMEOUT, CLI_CHANNEL, read_answer, survey_blocking
from router.errors import Refusal

__all__ = ["answer_anywhere", "answer_blocking", "survey_asks", "survey_asks_blocking"]


def _asks_route(every: bool) -> str:
    return "/asks?all=1" if every else "/asks"


def _listed(path: str, status: int, content: bytes) -> list[dict[str, Any]]:
    body = read_answer(os.path.basename(path), "/asks", status, content)
    return [ask for ask in body.get("asks", []) if type(ask) is dict] if type(body) is dict else []


def _unknown_ask(ask_id: str) -> tuple[int, dict[str, Any]]:
    return 1, Refusal("unknown-ask", f"no router of yours has an ask {ask_id!r}; "
                      "`router asks` lists the waiting ones").to_json()


async def survey_asks(
    env: Mapping[str, str], *, timeout: float = ANSWER_TIMEOUT, every: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`survey_asks_blocking` from Trio, in a worker thread (as
    :func:`router.board.client.survey`)."""
    import trio

    return await trio.to_thread.run_sync(partial(survey_asks_blocking, env, timeout=timeout, every=every),
                                         abandon_on_cancel=True)


async def answer_anywhere(env: Mapping[str, str], ask_id: str, decision: str, *, by: str,
                          timeout: float = ANSWER_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """:func:`answer_blocking` from Trio, in a worker thread."""
    import trio

    return await trio.to_thread.run_sync(partial(answer_blocking, env, ask_id, decision, by=by, timeout=timeout),
                                         abandon_on_cancel=True)


def survey_asks_blocking(env: Mapping[str, str], *, timeout: float = ANSWER_TIMEOUT,
                         every: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Every waiting ask (``every``: kept ones too) with the router holding
    it, and the routers left out (each router asked in turn, within
    ``timeout`` seconds)."""
    from router._client_sync import request

    board = survey_blocking(env, timeout=timeout)
    found: list[dict[str, Any]] = []
    left_out = [f"{skipped.name}: {skipped.refusal}" for skipped in board.skipped]
    for reached in board.reached:
        try:
            response = request("GET", _asks_route(every), socket_path=reached.socket, headers=CLI_CHANNEL,
                               timeout=timeout)
            found += [{**ask, "router": reached.info} for ask in _listed(reached.socket, response.status,
                                                                         response.body)]
        except Refusal as exc:
            left_out.append(f"{reached.name}: {exc}")
    return found, left_out


def answer_blocking(env: Mapping[str, str], ask_id: str, decision: str, *, by: str,
                    timeout: float = ANSWER_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """Answer the ask ``ask_id`` at the router that holds it: ``(0, {ask})``,
    ``(1, refusal)`` when that router refused it or no router holds it
    (``unknown-ask``, refused as ``router send`` refuses an
    ``unknown-session``: docs/cli.md). Kept asks count too: a second answer
    is refused by the router that holds it."""
    import json
    from urllib.parse import quote

    from router._client_sync import request

    found, _ = survey_asks_blocking(env, timeout=timeout, every=True)
    holders = [ask["router"]["socket"] for ask in found if ask.get("id") == ask_id]
    if not holders:
        return _unknown_ask(ask_id)
    try:
        response = request("POST", f"/asks/{quote(ask_id, safe='')}", socket_path=holders[0],
                           headers={**CLI_CHANNEL, "content-type": "application/json"},
                           body=json.dumps({"decision": decision, "by": by}).encode(), timeout=timeout)
        return (0 if response.status == 200 else 1), response.json()
    except Refusal as failed:  # the router stopped, hung or answered garbage since the survey
        return 1, Refusal(failed.code, f"{holders[0]}: {failed.message}").to_json()
    except ValueError:
        return 1, Refusal("not-a-router", f"{holders[0]} answered {response.status} with no JSON").to_json()
