"""``GET /board/live``: the board of every local router's sessions, as
server-sent events (:func:`router.api.events.board_events`)."""

from __future__ import annotations

from quart import Blueprint, Response, request

from router.api.context import current
from router.api.events import board_events
from router.api.forward import SSE_HEADERS
from router.errors import Refusal

__all__ = ["blueprint"]

blueprint = Blueprint("board", __name__)


@blueprint.get("/board/live")
async def board_live() -> Response:
    board = current().board
    if board is None:
        raise Refusal("not-found", "this router serves no board")
    response = Response(board_events(board, request.headers.get("last-event-id")),
                        content_type="text/event-stream", headers=SSE_HEADERS)
    response.timeout = None
    return response
