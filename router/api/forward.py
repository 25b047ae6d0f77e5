"""A request for a session another local router holds, forwarded to it.

A send, an abort, a resume, a cancel-park, an ask's answer, a read of the
messages or the live view for a session another local router holds goes to
that router over its private socket (:class:`router.board.service.LocalBoard`;
a live view is relayed as it streams, ``Last-Event-ID`` passed on;
``?router=NAME`` names the router when several hold a session of that id).
A request that was itself forwarded (:data:`FORWARDED_HEADER`) is served
where it lands.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import quote

from quart import Response, request

from router.api.context import current
from router.api.dispatch import CHANNEL_HEADER
from router.api.responses import json_response, status_of
from router.board.service import FORWARDED_HEADER
from router.errors import Refusal
from wire.json import dumps

__all__ = ["SSE_HEADERS", "elsewhere"]

#: The headers of every server-sent events response.
SSE_HEADERS: dict[str, str] = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def elsewhere(session: str, route: str, body: Mapping[str, Any] | None = None, *,
                    stream: bool = False) -> Response | None:
    """The holder's answer when another local router holds ``session``
    (``POST`` with ``body``, else ``GET``; ``stream`` for a live view);
    None to serve it here."""
    board = current().board
    if board is None or request.headers.get(FORWARDED_HEADER):
        return None
    path = f"/sessions/{quote(session, safe='')}/{route}"
    try:
        reached = await board.holder(session, named=request.args.get("router") or None)
        if reached is None:
            return None
        headers = {key: request.headers[key] for key in (CHANNEL_HEADER, "last-event-id") if key in request.headers}
        if stream:
            status, kind, chunks = await board.forward_stream(reached, path, headers)
            response = Response(chunks, status=status, content_type=kind, headers=SSE_HEADERS)
            response.timeout = None
            return response
        if body is None:
            status, content = await board.forward(reached, "GET", path, b"", headers)
        else:
            headers["content-type"] = "application/json"
            status, content = await board.forward(reached, "POST", path, dumps(dict(body)).encode(), headers)
    except Refusal as refused:
        extra = {"eventId": body["eventId"]} if body is not None and "eventId" in body else {}
        return json_response({**refused.to_json(), **extra}, status_of(refused.code))
    return Response(content, status=status, content_type="application/json")
