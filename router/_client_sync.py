"""A blocking HTTP/1.1 client for one request to a router: the command line's.

Theory of operation
-------------------

A command such as ``router sessions`` makes a few small requests to the
routers of this machine and exits. Doing that through trio and httpx costs
more than the requests: importing them is most of such a command's time
(``docs/bench.md``, "The command line and ``router mcp``"). This module
needs only the standard library's ``socket`` and ``h11`` (a dependency
already, about a millisecond to import), so a command that uses it loads
neither trio nor httpx.

:func:`request` makes one exchange on a connection of its own: it connects
(a router's private Unix socket, or ``http://`` / ``https://`` TCP), writes
the request with ``Connection: close``, reads the answer and closes. The
bytes are h11's, in and out, through :class:`ClientExchange`, the sans-IO half: it
gives the request's bytes, is fed what the socket reads (``b""`` once the
peer closed) and gives the :class:`ClientResponse` once the answer ended. It
raises nothing but a :class:`~router.errors.Refusal`, whatever the peer
sends: a head that is cut short or garbage, a head over :data:`MAX_HEAD`
bytes, a body shorter than its ``Content-Length``, a body over the
caller's ``max_body``.

Deadlines: one per request, ``timeout`` seconds for all of it (connect,
write, every read), as a socket timeout set to what is left of it before
each blocking call; so a peer that trickles bytes cannot hold a command
past it.

Error handling: every failure is a :class:`~router.errors.Refusal` with one
of three codes a caller branches on and rewords for its own command:
``cannot-connect`` (the connect failed, or the connection broke: its
``errno`` in ``data`` when there is one), ``no-answer`` (the deadline
passed) and ``bad-answer`` (what came back is not an HTTP answer, or is too
large). The refusals a router answers with (``{"error", "message", ...}``,
any status) are a :class:`ClientResponse` like any other: :func:`refusal_of`
reads one.

Resource handling: the socket is closed before :func:`request` returns or
raises, a ``KeyboardInterrupt`` included.

The TCP path sends the ``Authorization`` header a caller gives (``Bearer
TOKEN``, as the router's API takes it); ``https`` verifies the peer
against ``certifi``'s authorities when it is installed (what httpx trusts
by default), else the system's.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Final, Mapping

import h11

from router.errors import Refusal

__all__ = ["MAX_BODY", "MAX_HEAD", "ClientExchange", "ClientResponse", "refusal_of", "request"]

#: The largest answer head read (h11's own default, 16 KiB: a router's
#: heads are a few hundred bytes).
MAX_HEAD: Final = 16 * 1024
#: The largest answer body read by default (ours: a board of thousands of
#: sessions is a few MB).
MAX_BODY: Final = 64 * 1024 * 1024
#: The bytes asked of the socket per read.
READ_SIZE: Final = 65536
#: The ``Host`` a router's Unix socket is named by (``router.board.paths.LOCAL_HOST``).
UNIX_HOST: Final = "localhost"


class ClientResponse:
    """An answer: its status, headers (lower-case names) and whole body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"ClientResponse(status={self.status}, body={len(self.body)} bytes)"

    def header(self, name: str) -> str | None:
        """The first header of that (lower-case) name, or None."""
        return next((value for key, value in self.headers if key == name), None)

    def json(self) -> Any:
        """The body as JSON; raises ``ValueError`` (``json.JSONDecodeError``
        or ``UnicodeDecodeError``) when it is not."""
        import json

        return json.loads(self.body)


def refusal_of(response: ClientResponse) -> Refusal | None:
    """The router's refusal a response carries (``{"error": code,
    "message": sentence, ...data}``, any status), or None when its body is
    not one."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return None
    return Refusal.from_json(body)


class ClientExchange:
    """One request and its answer, without I/O (see the module docstring):
    :attr:`request_bytes` to write, :meth:`feed` what is read."""

    def __init__(self, method: str, target: str, *, host: str, headers: Mapping[str, str] | None = None,
                 body: bytes | None = None, max_body: int = MAX_BODY) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self._max_body = max_body
        self._status: int | None = None
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._ended = False
        head = [("host", host), ("connection", "close"), *(headers or {}).items()]
        if body is not None:
            head.append(("content-length", str(len(body))))
        try:
            out = self._h11.send(h11.Request(method=method, target=target, headers=head)) or b""
            if body:
                out += self._h11.send(h11.Data(data=body)) or b""
            out += self._h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise Refusal("bad-request", f"cannot send {method} {target!r}: {exc}") from None
        self.request_bytes: bytes = out

    def __repr__(self) -> str:
        return f"ClientExchange(status={self._status}, body={self._size} bytes, ended={self._ended})"

    def feed(self, data: bytes) -> ClientResponse | None:
        """What the socket read (``b""``: the peer closed); the response
        once it ended, else None (read more). Raises a
        :class:`~router.errors.Refusal` ``bad-answer`` when the bytes are no
        HTTP answer, or the peer closed before the answer ended."""
        if self._ended:
            raise Refusal("bad-answer", "the peer closed before its answer ended")
        if not data:
            self._ended = True
        try:
            self._h11.receive_data(data)
            while True:
                event = self._h11.next_event()
                if event is h11.NEED_DATA:
                    if self._ended:
                        raise Refusal("bad-answer", "the peer closed before its answer ended")
                    return None
                if isinstance(event, h11.Response):
                    self._status = event.status_code
                    self._headers = [(name.decode("latin-1"), value.decode("latin-1"))
                                     for name, value in event.headers]
                elif isinstance(event, h11.Data):
                    self._size += len(event.data)
                    if self._size > self._max_body:
                        raise Refusal("bad-answer", f"the answer's body is over {self._max_body} bytes")
                    self._body.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    assert self._status is not None
                    self._ended = True
                    return ClientResponse(self._status, self._headers, b"".join(self._body))
                elif isinstance(event, h11.ConnectionClosed):
                    raise Refusal("bad-answer", "the peer closed before its answer ended")
                # h11.InformationalResponse (1xx): the answer follows it.
        except h11.RemoteProtocolError as exc:
            self._ended = True
            raise Refusal("bad-answer", f"no valid HTTP answer: {exc}") from None


def _endpoint(socket_path: str | None, base_url: str | None) -> tuple[Any, str, str, bool]:
    """(address, Host header, path prefix, TLS) of a Unix socket or a base URL."""
    if socket_path is not None:
        return socket_path, UNIX_HOST, "", False
    from urllib.parse import urlsplit

    assert base_url is not None
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        raise Refusal("bad-url", f"{base_url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refusal("bad-url", f"{base_url!r} is not an http:// or https:// URL")
    tls = parts.scheme == "https"
    port = port or (443 if tls else 80)
    return (parts.hostname, port), parts.netloc.rpartition("@")[2], parts.path.rstrip("/"), tls


def _tls(sock: socket.socket, host: str) -> socket.socket:
    import ssl

    try:
        import certifi

        context = ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        context = ssl.create_default_context()
    return context.wrap_socket(sock, server_hostname=host)


def request(method: str, target: str, *, socket_path: str | None = None, base_url: str | None = None,
            headers: Mapping[str, str] | None = None, body: bytes | None = None, timeout: float,
            max_body: int = MAX_BODY) -> ClientResponse:
    """One exchange with the router at the Unix socket ``socket_path`` or at
    ``base_url`` (``http://host:port``, a path prefix kept): ``method
    target`` (the path and query, already quoted), within ``timeout``
    seconds in all. Returns the :class:`ClientResponse` whatever its status;
    raises a :class:`~router.errors.Refusal` (``cannot-connect``,
    ``no-answer``, ``bad-answer``, ``bad-url``, ``bad-request``) when
    there is none (see the module docstring)."""
    if (socket_path is None) == (base_url is None):
        raise ValueError("give socket_path or base_url, one of them")
    address, host, prefix, tls = _endpoint(socket_path, base_url)
    exchange = ClientExchange(method, prefix + target, host=host, headers=headers, body=body, max_body=max_body)
    deadline = time.monotonic() + timeout

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    sock: socket.socket | None = None
    try:
        if socket_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(left())
            sock.connect(address)
        else:
            sock = socket.create_connection(address, timeout=left())
            if tls:
                sock = _tls(sock, address[0])
        sock.settimeout(left())
        sock.sendall(exchange.request_bytes)
        while True:
            sock.settimeout(left())
            response = exchange.feed(sock.recv(READ_SIZE))
            if response is not None:
                return response
    except TimeoutError:
        raise Refusal("no-answer", f"no answer within {timeout:g} s") from None
    except OSError as exc:
        errno = getattr(exc, "errno", None)
        raise Refusal("cannot-connect", str(exc) or type(exc).__name__, **({"errno": errno} if errno else {})) from None
    finally:
        if sock is not None:
            sock.close()
