"""The mod link's HTTP/1.1 rules, over the shared h11 server loop
(:mod:`router._http11`).

Theory of operation
-------------------

:func:`serve_connection` serves one connection with the shared loop (one
task per connection, every deadline a cancel scope; see
:mod:`router._http11`) under the link's :func:`link_limits` and a guard
(:func:`guarded`) that keeps on the wire what Hypercorn and Quart-Trio did
before the loop replaced them (``docs/bench.md``, "Mod link", third pass:
their two HTTP exchanges per call were most of a call's CPU, and their
tasks and contexts most of a held poll's memory):

- the path as Werkzeug read it from Hypercorn's scope: the target's query
  cut off, an absolute-form target's scheme and authority dropped,
  percent-decoded, leading slashes collapsed to one (``GET healthz`` and
  ``GET //healthz`` are ``/healthz``; ``*`` is ``/*``); the method upper-
  cased; ``HEAD`` answered as ``GET`` without the body, ``OPTIONS`` of a
  route answered 200 with its ``Allow``;
- what Hypercorn refused before any app ran (a request h11 refuses, a
  target that is not ASCII, two ``Host`` headers, ``Upgrade: websocket``)
  is a 400 with no body and ``connection: close``, then the close (any
  other upgrade, ``h2c`` included, is answered in HTTP/1.1, declining it);
- a ``Host`` that Werkzeug could not encode as IDNA is 400 ``bad-host``
  (``router/_hypercorn.py``'s check, the same rule);
- ``Expect: 100-continue`` gets its ``100`` before the body is read.

Bodies: at most :data:`MAX_BODY_BYTES` each, held within the process's
shared body budget (:mod:`router._http11`, "The body budget"; a body that
does not fit is refused 503 ``link-busy``, and the mod sends it again).

Left out on purpose: HTTP/2 (Hypercorn spoke it, prior knowledge and
``h2c``; the mod speaks HTTP/1.1 through Node's ``http``), the ``date`` and
``server`` headers, and Hypercorn's close after 1,000 requests on one
connection.
"""

from __future__ import annotations

import logging
from typing import Final, Sequence
from urllib.parse import unquote

import trio

from router._http11 import (
    BARE_400,
    BODY_BUDGET_BYTES,
    BODY_BUDGET_WAIT,
    SHARED_BODY_BUDGET,
    HttpAnswer,
    BodyBudget,
    Exchange,
    Handler,
    HttpLimits,
    PeerGone,
    refusal,
)
from router._http11 import serve_connection as _serve

__all__ = [
    "BODY_BUDGET_BYTES",
    "BODY_BUDGET_WAIT",
    "BODY_TIMEOUT",
    "HEAD_TIMEOUT",
    "KEEP_ALIVE_TIMEOUT",
    "MAX_BODY_BYTES",
    "SHARED_BODY_BUDGET",
    "HttpAnswer",
    "BodyBudget",
    "Exchange",
    "PeerGone",
    "link_limits",
    "refusal",
    "request_path",
    "serve_connection",
]

#: The largest body a post may have. claude-envoy 1.19.0 ``hooks/mod-protocol.ts`` sets none; a row with a picture
#: in it is the biggest thing the mod posts, and Claude Code caps a picture
#: well below this (our choice).
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
#: Largest request head: Hypercorn's ``h11_max_incomplete_size`` default
#: (16 KiB), which the link ran with.
MAX_HEAD_BYTES: Final = 16 * 1024
#: Time an idle connection waits for the first byte of its next request:
#: Hypercorn's ``keep_alive_timeout`` default (5 s), which the link ran with.
KEEP_ALIVE_TIMEOUT: Final = 5.0
#: Time for a request head to arrive in full once it began. Node's
#: ``http.Server`` ``headersTimeout`` default (60 s); Hypercorn set none.
HEAD_TIMEOUT: Final = 60.0
#: Time for a body to arrive in full once the route reads it: the link's
#: Quart ``BODY_TIMEOUT`` (60 s).
BODY_TIMEOUT: Final = 60.0
#: Connections one link serves at once (ours: the mod keeps one or two, a
#: probe one more; past it the link stops accepting until one ends).
MAX_CONNECTIONS: Final = 256


def link_limits() -> HttpLimits:
    """The link's limits, read from this module's constants when a
    connection begins."""
    return HttpLimits(first_wait=KEEP_ALIVE_TIMEOUT, idle=KEEP_ALIVE_TIMEOUT, head=HEAD_TIMEOUT, body=BODY_TIMEOUT,
                  max_head=MAX_HEAD_BYTES, max_body=MAX_BODY_BYTES, connections=MAX_CONNECTIONS)


def request_path(target: bytes) -> str | None:
    """The path a route is matched on, as Werkzeug read it from Hypercorn's
    scope (see the module docstring); None for a target that is not ASCII."""
    if not target.isascii():
        return None
    text = target.decode("ascii").split("?", 1)[0]
    if not text.startswith("/") and "://" in text:
        # Absolute form: drop the scheme and the authority.
        rest = text.split("://", 1)[1]
        slash = rest.find("/")
        text = rest[slash:] if slash >= 0 else ""
    return "/" + unquote(text).lstrip("/")


def _host_problem(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """``"twice"`` for two ``Host`` headers (Hypercorn's 400), ``"bad"``
    for one Werkzeug cannot encode (lower case, the port apart, IDNA), or
    None."""
    hosts = [value for name, value in headers if name == b"host"]
    if len(hosts) > 1:
        return "twice"
    try:
        (hosts[0] if hosts else b"").decode("latin-1").lower().partition(":")[0].encode("idna")
    except UnicodeError:
        return "bad"
    return None


_BAD_HOST: Final = refusal(400, "bad-host", "the Host header is not a host name")


def _asks_websocket(headers: list[tuple[bytes, bytes]]) -> bool:
    """``Upgrade: websocket``: Hypercorn made a WebSocket of it, which the
    link's app refused, and answered 400. (Any other upgrade, ``h2c``
    included, is answered as a plain request, which declines it.)"""
    return any(name == b"upgrade" and value.strip().lower() == b"websocket" for name, value in headers)


def guarded(route: Handler) -> Handler:
    """``route`` behind the link's checks of the head (see the module
    docstring), with :attr:`Exchange.path` set for it."""

    async def guard(exchange: Exchange) -> HttpAnswer | None:
        path = request_path(exchange.target)
        host = _host_problem(exchange.headers)
        if path is None or host == "twice" or _asks_websocket(exchange.headers):
            return BARE_400
        if host:
            return _BAD_HOST
        exchange.path = path
        return await route(exchange)

    return guard


async def serve_connection(stream: trio.SocketStream, route: Handler, log: logging.Logger,
                           budget: BodyBudget | None = None) -> None:
    """Serve HTTP/1.1 on ``stream`` with ``route`` (behind :func:`guarded`)
    until the peer closes, a request asks to close, or the idle wait ends.
    Closes the stream on every exit. ``budget`` bounds the bodies held at
    once (default: the process's shared budget)."""
    await _serve(stream, guarded(route), log, limits=link_limits(), budget=budget)
