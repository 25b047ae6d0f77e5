"""The API's door and its answers to what went wrong: the checks every
request passes before its route, and the app's error handlers.

The door (:func:`door`), in this order: the ``Host`` header names the
loopback address and port the server listens on (``bad-host``, 421: a
DNS-rebinding page cannot read or write through it); on the TCP port every
route but :data:`OPEN_ROUTES` takes ``Authorization: Bearer TOKEN``
(``no-token`` / ``bad-token``, 401; :mod:`router.board.access`); every
``POST`` is ``Content-Type: application/json`` (``bad-content-type``, 415:
a cross-site form cannot post without a CORS preflight, which this server
never grants). A refusal at the door is answered with ``Connection:
close``: its body was never read, and the connection is not reused.

Error handling: :func:`install` registers ONE handler for
:class:`~router.errors.Refusal` (its code's status from
:data:`router.api.responses.STATUS`), one for Werkzeug's HTTP errors (made
refusals: ``not-found``, ``method-not-allowed``, ``too-large``), and one for
everything else (a bug: logged, answered 500 ``internal``; the server goes
on).
"""

from __future__ import annotations

import logging
from typing import Final

from quart import Response, g, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from router.api.context import current
from router.api.responses import refusal_response
from router.board.access import check_bearer
from router.api.shell import OPEN_ROUTES as SHELL_ROUTES
from router.errors import Refusal

__all__ = ["MAX_BODY_BYTES", "OPEN_ROUTES", "credential", "door", "install"]

log = logging.getLogger("router.api")

#: The largest request body (ours: a message of ``MAX_TEXT_CHARS`` with room).
MAX_BODY_BYTES: Final = 1024 * 1024
#: The routes the TCP port serves without a token: they hold no data.
OPEN_ROUTES: Final = frozenset({"/healthz"}) | SHELL_ROUTES  # the page and its shell: router/api/shell.py
#: Where the door marks a request it refused (its body unread).
_AT_THE_DOOR: Final = "router_refused_at_the_door"
#: The credential id of a request that passed the door with the API's token,
#: and of one on the private socket (no token: its 0700 directory is the check).
TOKEN_CREDENTIAL: Final = "token"
LOCAL_CREDENTIAL: Final = "local-socket"


def credential() -> str:
    """The id of the credential this request came in with (what per-credential
    caps are counted by): never the secret itself. A paired device's is
    ``device:<id>``, set by the remote gate (:mod:`router.remote.gate`)."""
    device = request.scope.get("router.credential")
    if isinstance(device, str):
        return device
    return TOKEN_CREDENTIAL if current().token is not None else LOCAL_CREDENTIAL


def door() -> Refusal | None:
    """The door's refusal of this request, or None to let it in. A request
    the remote gate passed (:mod:`router.remote.gate`: a ``--listen``
    address or a local proxy) had its ``Host`` and credential checked
    there; only its content type is checked here."""
    api = current()
    gate = request.scope.get("router.gate")
    if gate is not None and gate.remote:
        return _content_type()
    host = request.headers.get("host", "")
    if host not in api.allowed_hosts():
        return Refusal(
            "bad-host",
            f"this server answers requests for {' or '.join(sorted(api.allowed_hosts()))} only, not {host!r}",
        )
    if api.token is not None and not (request.method in ("GET", "HEAD") and request.path in OPEN_ROUTES):
        refused = check_bearer(request.headers, api.token)
        if refused is not None:
            return refused
    return _content_type()


def _content_type() -> Refusal | None:
    if request.method in ("POST", "PATCH"):
        mimetype = (request.mimetype or "").lower()
        if mimetype != "application/json":
            return Refusal("bad-content-type",
                           f"{request.method} takes Content-Type: application/json, not {mimetype or 'none'!r}")
    return None


async def _guard() -> None:
    refused = door()
    if refused is not None:
        setattr(g, _AT_THE_DOOR, True)
        raise refused


async def _refused(exc: Refusal) -> Response:
    response = refusal_response(exc)
    if exc.code in ("no-token", "bad-token"):
        response.headers["WWW-Authenticate"] = "Bearer"
    if getattr(g, _AT_THE_DOOR, False):
        # Refused before its body was read: the connection is not reused
        # (a keep-alive connection with an unread body in it was seen to
        # hang the next request on it).
        response.headers["Connection"] = "close"
    return response


async def _http_error(exc: HTTPException) -> Response:
    code = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}.get(exc.code or 0, "bad-body")
    text = {
        404: f"{request.path} is not a route of the router's API (the routes: docs/turns.md, \"The HTTP API\")",
        405: f"{request.method} is not allowed on {request.path}",
        413: f"the body is larger than {MAX_BODY_BYTES} bytes",
    }.get(exc.code or 0, exc.description or "the request was refused")
    response = refusal_response(Refusal(code, text))
    response.status_code = exc.code or 400
    return response


async def _crashed(exc: Exception) -> Response:
    log.exception("API route %s failed", request.path, exc_info=exc)
    return refusal_response(
        Refusal("internal", "the router failed on this request; it was logged, and the router goes on"))


def install(app: QuartTrio) -> None:
    """The door and the error handlers, on ``app``."""
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.before_request(_guard)
    app.register_error_handler(Refusal, _refused)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _crashed)
