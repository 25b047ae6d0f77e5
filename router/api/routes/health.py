"""``GET /healthz`` and ``GET /``: the two routes that hold no data (open on
the TCP port without a token)."""

from __future__ import annotations

from quart import Blueprint, Response

from router.api.page import PAGE
from router.api.responses import json_response

__all__ = ["blueprint"]

blueprint = Blueprint("health", __name__)

#: The page's policy: nothing from outside; its own inline script and style.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
}


@blueprint.get("/healthz")
async def healthz() -> Response:
    return json_response({"ok": True})


@blueprint.get("/")
async def page() -> Response:
    return Response(PAGE, content_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)
