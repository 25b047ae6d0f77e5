"""The pairing and device routes, as a Blueprint on the API app.

=====================================  ===================================================
``GET /pair``                          the pairing page a phone opens (``/pair#CODE``): its
                                       script posts the code; a link to the router's CA
``GET /pair/ca.pem``                   the router's own CA certificate (404 ``no-own-ca``
                                       when the person's certificate is served)
``POST /pair {code}``                  a device for the code: ``{device, token}`` and the
                                       ``router-device`` cookie (HttpOnly, Secure,
                                       SameSite=Strict)
``POST /pairings {}``                  a new code: ``{url, code, expiresAt, qrSvg}`` (201);
                                       this machine only (the loopback token, the Unix socket)
``GET /devices``                       ``{devices: [...]}``; this machine only
``PATCH /devices/<name> {name}``       rename; this machine, or the device itself
``POST /devices/<name>/revoke {}``     ``{device}``; this machine only
=====================================  ===================================================

"This machine only": the request did not come through the gate as remote
(:mod:`router.remote.gate`): the loopback port with the API token, or the
router's private Unix socket. A paired device cannot make more devices nor
revoke others (``local-only``, 403).

Without ``--listen`` or ``--behind-proxy`` there is nothing to pair with:
every route answers ``no-remote`` (404).

The routes are module-level on one Blueprint (:data:`blueprint`), as the
API's are; :func:`install_routes` registers it on an app and tells the app
how to find its :class:`~router.remote.reach.Reach` (``app.extensions``
under :data:`KEY`), the only thing these routes read of the app. A body is
structured by a converter on the wires' ``Builder`` into a frozen class
(strict leaves, no unknown key, an optional key absent or of its type; an
empty body is ``{}``); a bad one is ``bad-body`` (400) naming the route's
shape and the failing key (``POST /pair takes {code?}: code: expected a
string, got a number``).
"""

from __future__ import annotations

from typing import Any, Callable, Final, TypeVar

import attrs
import cattrs
from quart import Blueprint, Response, current_app, request

from router._body import json_object
from router.errors import Refusal
from router.plugins.models import refusal_from
from router.remote.gate import COOKIE, REMOTE_STATUS
from wire._convert import Builder
from wire.json import dumps

__all__ = ["KEY", "NoFields", "PairBody", "RenameBody", "blueprint", "install_routes", "read_body"]

T = TypeVar("T")

#: The device cookie's life: 400 days, the longest Chromium keeps a cookie
#: (RFC 6265bis "cookie lifetime limits"); the credential itself never ends
#: until revoked, and the phone's next pairing makes a new one.
COOKIE_MAX_AGE: Final = 400 * 24 * 3600
#: The key in ``app.extensions`` of how the app finds its router's reach: a
#: callable answering the :class:`~router.remote.reach.Reach` in force, or
#: None (:func:`install_routes` sets it).
KEY: Final = "router.remote"

blueprint = Blueprint("remote", __name__)


def install_routes(app: Any, reach: Callable[[], Any]) -> None:
    """Register the routes on ``app``, over ``reach()``: the
    :class:`~router.remote.reach.Reach` in force, or None."""
    app.extensions[KEY] = reach
    app.register_blueprint(blueprint)


# --------------------------------------------------------------------------- bodies


class RemoteBodyError(ValueError):
    """A body's key of the wrong type."""


@attrs.frozen(kw_only=True)
class PairBody:
    """``POST /pair``: a missing code is refused as a wrong one."""

    code: str | None = None


@attrs.frozen(kw_only=True)
class RenameBody:
    """``PATCH /devices/<name>``."""

    name: str


@attrs.frozen(kw_only=True)
class NoFields:
    """``POST /pairings`` and ``POST /devices/<name>/revoke``: ``{}`` or nothing."""


#: Each body, with how a refusal names its shape.
SHAPES: Final = {PairBody: "{code?}", RenameBody: "{name}", NoFields: "{}"}


def _make_converter() -> cattrs.Converter:
    builder = Builder(RemoteBodyError, tags={}, detailed=True)
    builder.conv.forbid_extra_keys = True
    builder.classes(*SHAPES)
    return builder.conv


_converter: Final = _make_converter()


def read_body(raw: bytes, cls: type[T], route: str) -> T:
    """``raw`` (nothing but white space is ``{}``) as a ``cls``; raises
    ``bad-body`` naming ``route``'s shape and what is wrong, and nothing else."""
    shape = f"{route} takes {SHAPES[cls]}"
    value = json_object(raw, what=shape, empty=True)
    try:
        return _converter.structure(value, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        raise refusal_from(exc, what=shape, code="bad-body") from None


async def _body(cls: type[T], route: str) -> T:
    return read_body(await request.get_data(cache=False), cls, route)


# --------------------------------------------------------------------------- what a route reads


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status=status, content_type="application/json")


def _gate() -> Any:
    return request.scope.get("router.gate")


def _local_only() -> None:
    gate = _gate()
    if gate is not None and gate.remote:
        raise Refusal("local-only", "pairing and managing devices is done on the router's machine (`router pair`, "
                      "`router devices`, or the page at 127.0.0.1)")


def _reach() -> Any:
    """The reach of the app serving this request, or ``no-remote``."""
    found = current_app.extensions[KEY]()
    if found is None:
        raise Refusal("no-remote", "this router does not serve other devices; start `router serve` with "
                      "--listen HOST:PORT (or --behind-proxy) to pair one")
    return found


# --------------------------------------------------------------------------- routes


@blueprint.get("/pair")
async def pair_page() -> Response:
    from router.remote.page import PAIR_PAGE

    _reach()
    return Response(PAIR_PAGE, content_type="text/html; charset=utf-8", headers={
        "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                   "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
    })


@blueprint.get("/pair/ca.pem")
async def ca() -> Response:
    certificates = _reach().certificates
    pem = None if certificates is None else certificates.ca_pem()
    if pem is None:
        raise Refusal("no-own-ca", "this router serves a certificate of yours, not one of its own CA's: there "
                      "is nothing to install")
    return Response(pem, content_type="application/x-x509-ca-cert", headers={
        "Content-Disposition": 'attachment; filename="router-ca.pem"', "X-Content-Type-Options": "nosniff"})


@blueprint.post("/pair")
async def pair() -> Response:
    found = _reach()
    body = await _body(PairBody, "POST /pair")
    try:
        device, secret = await found.redeem(body.code, request.headers.get("user-agent", ""))
    except Refusal as refused:
        if refused.code != "pairing-locked":
            raise
        response = _json(refused.to_json(), REMOTE_STATUS[refused.code])
        response.headers["Retry-After"] = str(refused.data.get("retryAfter", 60))
        return response
    response = _json({"device": device.to_json(), "token": secret}, 201)
    gate = _gate()
    secure = request.scope.get("scheme") == "https" or (gate is not None and gate.remote)
    response.set_cookie(COOKIE, secret, max_age=COOKIE_MAX_AGE, path=(request.root_path or "") + "/",
                        httponly=True, secure=secure, samesite="Strict")
    response.headers["Cache-Control"] = "no-store"
    return response


@blueprint.post("/pairings")
async def pairings() -> Response:
    _local_only()
    found = _reach()
    await _body(NoFields, "POST /pairings")
    return _json(found.pairing(), 201)


@blueprint.get("/devices")
async def devices() -> Response:
    _local_only()
    return _json({"devices": [each.to_json() for each in await _reach().devices()]})


@blueprint.patch("/devices/<name>")
async def rename(name: str) -> Response:
    found = _reach()
    gate = _gate()
    if gate is not None and gate.remote and (gate.device is None or gate.device.name != name):
        raise Refusal("local-only", "a device may rename only itself; rename others on the router's machine")
    body = await _body(RenameBody, "PATCH /devices/<name>")
    return _json({"device": (await found.rename(name, body.name)).to_json()})


@blueprint.post("/devices/<name>/revoke")
async def revoke(name: str) -> Response:
    _local_only()
    found = _reach()
    await _body(NoFields, "POST /devices/<name>/revoke")
    return _json({"device": (await found.revoke(name)).to_json()})
