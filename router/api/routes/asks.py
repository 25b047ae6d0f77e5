"""Permission asks (:mod:`router.asks`).

``GET /asks``: ``{"asks": [ask, ...]}`` waiting on a person, oldest first
(``?all=1``: the answered and expired ones kept too). ``POST /asks/<id>``
``{"decision": "allow" | "deny", "by"?}``: the ask as answered, or a
refusal (404 ``unknown-ask``, 409 ``ask-answered`` / ``ask-expired``, 400
``bad-decision``). ``POST /sessions/<id>/asks/<ask>``: the same, for an ask
of that session, forwarded to the router that holds it.
"""

from __future__ import annotations

from urllib.parse import quote

from quart import Blueprint, Response, request

from router import asks
from router.api.bodies import AskAnswerBody, converter, read_body
from router.api.context import current
from router.api.dispatch import CHANNEL_HEADER
from router.api.forward import elsewhere
from router.api.responses import json_response

__all__ = ["blueprint"]

blueprint = Blueprint("asks", __name__)


@blueprint.get("/asks")
async def list_asks() -> Response:
    every = request.args.get("all", "") not in ("", "0")
    return json_response({"asks": asks.list_asks(current().router.registry.sessions(), every=every)})


async def _body() -> AskAnswerBody:
    return read_body(await request.get_data(cache=False), AskAnswerBody, "POST /asks/<id>")


def _answered_here(ask: str, body: AskAnswerBody) -> Response:
    by = body.by or request.headers.get(CHANNEL_HEADER, "http").strip() or "http"
    return json_response({"ask": asks.answer_ask(current().router.registry.sessions(), ask, body.decision, by=by)})


@blueprint.post("/asks/<ask>")
async def answer_ask(ask: str) -> Response:
    return _answered_here(ask, await _body())


@blueprint.post("/sessions/<path:session>/asks/<ask>")
async def answer_session_ask(session: str, ask: str) -> Response:
    """An ask of ``session`` answered through any router of the board
    (forwarded to the router that holds the session, as a send is)."""
    body = await _body()
    forwarded = await elsewhere(session, f"asks/{quote(ask, safe='')}", converter.unstructure(body))
    if forwarded is not None:
        return forwarded
    return _answered_here(ask, body)
