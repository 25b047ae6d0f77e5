"""The door every TCP request of the API passes: proxy headers, ``Host``,
``Origin``, and a paired device's credential.

Theory of operation
-------------------

:class:`Gate` wraps the API's ASGI app once per listener (``loopback``: the
``127.0.0.1`` port; ``remote``: a ``--listen`` address); a router with
neither ``--listen`` nor ``--behind-proxy`` has it on its loopback port
too, over :class:`LoopbackOrigins`, for the ``Origin`` check. For each HTTP
request, decided before the app sees it:

1. **Proxied or not.** With ``--behind-proxy``, a request from a loopback
   peer that carries ``X-Forwarded-Host`` or ``X-Forwarded-For`` came
   through the local tunnel or proxy: its forwarded host, scheme
   (``X-Forwarded-Proto``, default ``https``) and base path
   (``X-Forwarded-Prefix``, as the ASGI ``root_path``) are taken. Forwarded
   headers from any other peer, or without ``--behind-proxy``, are ignored.
   A loopback request whose ``Host`` is the proxy's URL's (a proxy that
   passes the phone's ``Host`` on and adds nothing) is proxied too.
   A proxied request and a request on a ``--listen`` address are *remote*.
2. **Host.** A remote request must name a listen address (or, proxied, the
   proxy's origin) in ``Host``: ``bad-host``, 421, else (DNS rebinding). A
   loopback request is left to the app's own ``Host`` check.
3. **Origin.** A request whose ``Origin`` is present and is not one of the
   router's own origins (:meth:`router.remote.reach.Reach.origins`, plus a
   proxied request's own) is refused ``bad-origin``, 403, whatever its method
   or credential: a page on another site can neither send, answer, nor open
   a stream. A state-changing request (not ``GET``/``HEAD``) that carries
   a device cookie and no ``Origin`` is refused ``no-origin``, 403 (a
   browser always sends ``Origin`` on those; a client that sends none uses a
   bearer token).
4. **Credential** (remote only). ``Authorization: Bearer SECRET`` or the
   ``router-device`` cookie must be a live device's (``bad-credential``,
   401, for one that is not: unknown or revoked); with neither, only the open
   routes answer (the page's shell, ``/healthz``, the pairing page and its
   routes), the rest ``no-credential``, 401. On an open route a stale
   credential counts as none (a revoked phone loads the page's shell and
   pairs again), and the cookie needs no ``Origin`` there (nothing of the
   device's is used). The loopback API token is not a remote credential.
5. The app then runs with ``scope["router.gate"]`` (what was decided: the app
   skips its own ``Host`` and token checks for a request the gate passed as
   remote) and ``scope["router.credential"]`` (``device:<id>``, the key the
   connection caps count by), inside a cancel scope kept in the
   :class:`~router.remote.devices.StreamBook` under the device: revoking the
   device cancels it, which ends an open live stream at once.

Refusals are ``{"error": code, "message": sentence}`` with ``Connection:
close``, as the app's own.
"""

from __future__ import annotations

import ipaddress
import logging
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING, Any, Callable, Final

import attrs
import trio

from router.errors import Refusal
from wire.json import dumps

if TYPE_CHECKING:
    from router.remote.reach import Reach

__all__ = ["GateStatistics", "COOKIE", "Gate", "GateInfo", "LoopbackOrigins", "OPEN_PATHS", "REMOTE_STATUS"]

log = logging.getLogger("router.remote")

#: The device cookie's name.
COOKIE: Final = "router-device"
#: What answers a remote request without a credential: nothing of the
#: person's is in them (the page's shell, the pairing page and its routes).
OPEN_PATHS: Final = frozenset({"/", "/healthz", "/pair", "/pair/ca.pem"})
#: Methods that change nothing (RFC 9110 section 9.2.1, "safe").
SAFE: Final = frozenset({"GET", "HEAD", "OPTIONS"})

#: Refusal code -> HTTP status, for the API's one table
#: (:data:`router.api.responses.STATUS`).
REMOTE_STATUS: Final = {
    "bad-origin": 403, "no-origin": 403, "no-credential": 401, "bad-credential": 401,
    "bad-host": 421, "no-remote": 404, "no-own-ca": 404, "unknown-device": 404, "bad-body": 400, "bad-device-name": 400,
    "device-name-taken": 409, "local-only": 403, "bad-pairing-code": 403, "pairing-code-used": 410,
    "pairing-code-expired": 410, "pairing-locked": 429, "no-remote-address": 409,
}


@attrs.frozen(kw_only=True)
class GateInfo:
    """What the gate decided about a request (``scope["router.gate"]``)."""

    remote: bool
    origin: str | None = None
    device: Any = None
    #: How the device's credential came: ``cookie`` or ``bearer``.
    via: str | None = None


class LoopbackOrigins:
    """What the gate asks of a router that serves its loopback port only
    (no ``--listen``, no ``--behind-proxy``): its own origins, so the
    ``Origin`` check holds there too. Nothing is remote, so nothing else is
    asked."""

    behind_proxy = False

    def __init__(self, port: Callable[[], int | None]) -> None:
        self._port = port

    def origins(self) -> frozenset[str]:
        port = self._port()
        return frozenset() if port is None else frozenset({f"http://127.0.0.1:{port}", f"http://localhost:{port}"})

    def listen_hosts(self) -> set[str]:
        return set()

    def public_host(self) -> str | None:
        return None


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _first(value: str | None) -> str | None:
    return None if value is None else (value.split(",")[0].strip() or None)


@attrs.frozen
class GateStatistics:
    """A :class:`Gate`'s listener, and the requests it refused, by code."""

    listener: str
    refused: dict[str, int]


class Gate:
    """See the module docstring. ``Gate(app, reach, listener="remote")``
    is an ASGI app."""

    def __init__(self, app: Any, reach: Reach, *, listener: str, open_paths: Callable[[], frozenset[str]]) -> None:
        self.app, self.reach, self.listener, self.open_paths = app, reach, listener, open_paths
        self.refused: dict[str, int] = {}

    def statistics(self) -> GateStatistics:
        return GateStatistics(listener=self.listener, refused=dict(self.refused))
    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            scope, info = await self._decide(scope)
        except Refusal as refused:
            self.refused[refused.code] = self.refused.get(refused.code, 0) + 1
            # Never the query, nor a credential: the method, path and code.
            log.info("refused %s %s on the %s listener: %s", scope.get("method"), scope.get("path"), self.listener,
                     refused.code)
            await _refuse(send, refused)
            return
        if info is None or info.device is None:
            await self.app(scope, receive, send)
            return
        await self._as_device(info.device, scope, receive, send)

    async def _as_device(self, device: Any, scope: dict, receive: Any, send: Any) -> None:
        streams = self.reach.streams
        with trio.CancelScope() as cancel:
            if not streams.open(device.id, cancel):  # revoked here since it authenticated
                await _refuse(send, Refusal("bad-credential", "this device was revoked; pair it again with "
                                            "`router pair`"))
                return
            try:
                await self.app(scope, receive, send)
            finally:
                streams.close(device.id, cancel)

    def _proxied(self, scope: dict) -> bool:
        client = scope.get("client") or ("", 0)
        return self.reach.behind_proxy and _is_loopback(client[0]) and (
            (_header(scope, b"x-forwarded-host") or _header(scope, b"x-forwarded-for")) is not None
            or (_header(scope, b"host") or "").lower() == self.reach.public_host())

    async def _decide(self, scope: dict) -> tuple[dict, GateInfo | None]:
        proxied = self._proxied(scope)
        remote = self.listener == "remote" or proxied
        own = self.reach.origins()
        if proxied:
            scope, here = _forwarded(scope)
            own = own | {here}
        elif remote:
            host = (_header(scope, b"host") or "").lower()
            if host not in self.reach.listen_hosts():
                raise Refusal("bad-host", f"this address answers requests for {' or '.join(sorted(self.reach.listen_hosts()))} "
                              f"only, not {host!r}")
        origin = _header(scope, b"origin")
        if origin is not None and origin.lower() not in own:
            raise Refusal("bad-origin", f"a page at {origin} may not use this router; only the router's own "
                          "page may (its address, or the proxy's)")
        if not remote:
            return scope, None
        return await self._credential(scope, origin)

    async def _credential(self, scope: dict, origin: str | None) -> tuple[dict, GateInfo]:
        """The device the request's credential names. On an open route a
        missing or stale credential is no credential (a revoked phone still
        loads the page's shell and pairs again); elsewhere it is refused."""
        method = scope.get("method", "GET")
        bearer = _bearer(_header(scope, b"authorization"))
        cookie = _cookie(_header(scope, b"cookie"))
        route = scope.get("path", "")[len(scope.get("root_path", "")):] or "/"
        is_open = route in self.open_paths()  # POST /pair too: the pairing itself
        anonymous = GateInfo(remote=True, origin=origin)
        device = None if bearer is None and cookie is None else \
            await self.reach.authenticate(bearer if bearer is not None else cookie)  # type: ignore[arg-type]
        if device is None:
            if is_open:
                return {**scope, "router.gate": anonymous}, anonymous
            if bearer is None and cookie is None:
                raise Refusal("no-credential", "this router answers paired devices only; pair this device with "
                              "`router pair` on the router's machine and open the URL it shows")
            raise Refusal("bad-credential", "this device's credential is not valid (revoked, or never paired); "
                          "pair it again with `router pair`")
        via = "bearer" if bearer is not None else "cookie"
        if via == "cookie" and origin is None and method not in SAFE and not is_open:
            raise Refusal("no-origin", f"{method} with a device cookie must carry Origin (a browser sends it); "
                          "a client without one sends Authorization: Bearer")
        info = GateInfo(remote=True, origin=origin, device=device, via=via)
        return {**scope, "router.gate": info, "router.credential": device.credential}, info


def _forwarded(scope: dict) -> tuple[dict, str]:
    """A proxied request's scope as the phone made it (scheme, base path),
    and its origin."""
    host = _first(_header(scope, b"x-forwarded-host")) or _header(scope, b"host") or ""
    scheme = (_first(_header(scope, b"x-forwarded-proto")) or "https").lower()
    prefix = (_first(_header(scope, b"x-forwarded-prefix")) or "").rstrip("/")
    if prefix and not prefix.startswith("/"):
        prefix = ""
    path = scope.get("path", "")
    if prefix and not (path == prefix or path.startswith(prefix + "/")):
        path = prefix + path  # a proxy that stripped its prefix: ASGI paths include root_path
    scope = {**scope, "scheme": scheme, "root_path": prefix, "path": path,
             "raw_path": path.encode("utf-8", "surrogateescape")}
    return scope, f"{scheme}://{host.lower()}"


def _bearer(value: str | None) -> str | None:
    scheme, _, given = (value or "").strip().partition(" ")
    return given.strip() or None if scheme.lower() == "bearer" else None


def _cookie(value: str | None) -> str | None:
    if not value:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(value)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return None if morsel is None else (morsel.value or None)


async def _refuse(send: Any, refused: Refusal) -> None:
    body = dumps(refused.to_json()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (b"connection", b"close")]
    if REMOTE_STATUS[refused.code] == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": REMOTE_STATUS[refused.code], "headers": headers})
    await send({"type": "http.response.body", "body": body})
