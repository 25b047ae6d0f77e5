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
"""

from __future__ import annotations

from typing import Any, Callable, Final

from quart import Blueprint, Response, request

from router.errors import Refusal
from router.remote.gate import COOKIE, REMOTE_STATUS
from wire.json import JsonError, dumps, loads

__all__ = ["make_blueprint"]

#: The device cookie's life: 400 days, the longest Chromium keeps a cookie
#: (RFC 6265bis "cookie lifetime limits"); the credential itself never ends
#: until revoked, and the phone's next pairing makes a new one.
COOKIE_MAX_AGE: Final = 400 * 24 * 3600


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status=status, content_type="application/json")




def _gate() -> Any:
    return request.scope.get("router.gate")


def _local_only() -> None:
    gate = _gate()
    if gate is not None and gate.remote:
        raise Refusal("local-only", "pairing and managing devices is done on the router's machine (`router pair`, "
                      "`router devices`, or the page at 127.0.0.1)")


async def _body(fields: dict[str, type]) -> dict[str, Any]:
    raw = await request.get_data(cache=False)
    try:
        body = loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, JsonError, RecursionError):
        raise Refusal("bad-body", "the body is not JSON text") from None
    if type(body) is not dict or set(body) - set(fields) or any(type(body[k]) is not t for k, t in fields.items()
                                                                  if k in body):
        raise Refusal("bad-body", f"the body is an object with {', '.join(fields) or 'no fields'}")
    return body


def make_blueprint(reach: Callable[[], Any]) -> Blueprint:
    """The routes over ``reach()``: the :class:`~router.remote.reach.Reach`
    in force, or None."""
    routes = Blueprint("remote", __name__)

    def the_reach() -> Any:
        found = reach()
        if found is None:
            raise Refusal("no-remote", "this router does not serve other devices; start `router serve` with "
                          "--listen HOST:PORT (or --behind-proxy) to pair one")
        return found

    @routes.get("/pair")
    async def pair_page() -> Response:
        from router.remote.page import PAIR_PAGE

        the_reach()
        return Response(PAIR_PAGE, content_type="text/html; charset=utf-8", headers={
            "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
        })

    @routes.get("/pair/ca.pem")
    async def ca() -> Response:
        certificates = the_reach().certificates
        pem = None if certificates is None else certificates.ca_pem()
        if pem is None:
            raise Refusal("no-own-ca", "this router serves a certificate of yours, not one of its own CA's: there "
                          "is nothing to install")
        return Response(pem, content_type="application/x-x509-ca-cert", headers={
            "Content-Disposition": 'attachment; filename="router-ca.pem"', "X-Content-Type-Options": "nosniff"})

    @routes.post("/pair")
    async def pair() -> Response:
        found = the_reach()
        body = await _body({"code": str})
        try:
            device, secret = await found.redeem(body.get("code"), request.headers.get("user-agent", ""))
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

    @routes.post("/pairings")
    async def pairings() -> Response:
        _local_only()
        found = the_reach()
        await _body({})
        return _json(found.pairing(), 201)

    @routes.get("/devices")
    async def devices() -> Response:
        _local_only()
        return _json({"devices": [each.to_json() for each in await the_reach().devices()]})

    @routes.patch("/devices/<name>")
    async def rename(name: str) -> Response:
        found = the_reach()
        gate = _gate()
        if gate is not None and gate.remote and (gate.device is None or gate.device.name != name):
            raise Refusal("local-only", "a device may rename only itself; rename others on the router's machine")
        body = await _body({"name": str})
        if "name" not in body:
            raise Refusal("bad-body", "PATCH /devices/<name> takes {name}")
        return _json({"device": (await found.rename(name, body["name"])).to_json()})

    @routes.post("/devices/<name>/revoke")
    async def revoke(name: str) -> Response:
        _local_only()
        found = the_reach()
        await _body({})
        return _json({"device": (await found.revoke(name)).to_json()})

    return routes
