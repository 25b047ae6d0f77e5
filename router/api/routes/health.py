"""``GET /healthz``: open on the TCP port without a token (it holds no
data). The page at ``/`` and its shell are :mod:`router.api.shell`'s."""

from __future__ import annotations

from quart import Blueprint, Response

from router.api.responses import json_response

__all__ = ["blueprint"]

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
async def healthz() -> Response:
    return json_response({"ok": True})
