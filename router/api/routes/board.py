"""``GET /board/live``: the board of every local router's sessions, as
server-sent events (:func:`router.api.events.board_events`). The page keeps
it open: when it ends, the requesting device's presence ends with it
(:func:`router.notify.routes.gone_when_closed`)."""

from __future__ import annotations

from quart import Blueprint, Response, current_app, request

from router.api.context import current
from router.api.events import board_events
from router.api.guards import credential
from router.api.streams import stream_response
from router.errors import Refusal
from router.notify.routes import gone_when_closed

__all__ = ["blueprint"]

blueprint = Blueprint("board", __name__)


@blueprint.get("/board/live")
async def board_live() -> Response:
    api = current()
    if api.board is None:
        raise Refusal("not-found", "this router serves no board")
    slot = api.streams.take(credential())
    # The board's one survey task runs in the app's nursery (Quart-Trio's,
    # from its lifespan), started by the first viewer of any request.
    body = board_events(api.board, request.headers.get("last-event-id"), current_app.nursery,
                        keepalive=api.config.live_keepalive)
    return stream_response(gone_when_closed(body), slot)
