"""httpx clients for plain HTTP: to a router's Unix socket, or to a daemon on
loopback, where no TLS is ever spoken.

httpx builds an SSL context for every transport it makes, and its default
one loads every certificate authority of ``certifi``: 20 ms on an idle
machine and up to 94 ms on a loaded one, measured per transport, for a
connection that never uses it. The board asks every local router on each
survey with a new transport, and every CLI command makes one, so that cost
was most of ``GET /sessions`` on a board of three routers (a py-spy profile
of ``bench/board_scale.py``: 36 % of the answering router's samples).

Here the transports share one context that trusts nothing: made once, in
well under a millisecond, and refusing any certificate should a TLS
handshake ever start, which is the right answer for a connection meant to
be plain. A client that may speak TLS (a URL from the settings) keeps
httpx's default.
"""

from __future__ import annotations

import ssl
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = ["plain_context", "unix_transport"]


@cache
def plain_context() -> ssl.SSLContext:
    """The context of connections that never speak TLS: verification on,
    no authority trusted."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def unix_transport(path: str) -> httpx.AsyncHTTPTransport:
    """A transport to the Unix socket at ``path`` (plain HTTP)."""
    import httpx

    return httpx.AsyncHTTPTransport(uds=path, verify=plain_context())
