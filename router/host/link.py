"""The host's link to a daemon: health wait, dial, ``hello``, backoff.

The object side of one session socket, as the reference's ``DaemonLink``
(npm ``agents@0.32.0``, ``dist/harness/container/index.js``): wait until the
daemon answers ``GET /healthz``, dial ``/sessions/<url-encoded id>`` with the
token header, and read its ``hello``. Failures are typed
(:class:`LinkError`, a :class:`~router.errors.Refusal`), each with a
kebab-case code, a message, and whether trying again can help
(``retry``): a daemon that is not there yet is worth
another try after a backoff; a daemon that refuses the token or speaks
another protocol is not, and the caller stops rather than loop.

Every deadline is a cancel scope around the work: :data:`CONNECT_TIMEOUT`
for TCP and the upgrade, :data:`HELLO_TIMEOUT` for the greeting,
:data:`HEALTH_CHECK_TIMEOUT` per health request inside a
:data:`HEALTH_WAIT` overall wait.
"""

from __future__ import annotations

import logging
import math
import random
import ssl
from typing import TYPE_CHECKING, Awaitable, Callable, Final
from urllib.parse import quote, urlsplit

import attrs
import trio

from router.errors import Refusal

if TYPE_CHECKING:
    from router._websocket import WebSocket, WebSocketClosed
    from wire.container import Hello

# The WebSocket (wsproto) and the container wire (its converter) are
# imported where a link first dials, not with this module: a router that
# drives no container session (a Claude Code session's ``router mcp``)
# imports this module for :class:`DaemonEndpoint` and the errors alone.

log = logging.getLogger(__name__)

#: Seconds to open TCP and finish the WebSocket upgrade. The reference's
#: ``CONNECT_TIMEOUT_MS`` (10 s).
CONNECT_TIMEOUT: Final = 10.0
#: Seconds from the upgrade to ``hello``. The reference's ``HELLO_TIMEOUT_MS``.
HELLO_TIMEOUT: Final = 10.0
#: Seconds one health request may take. The reference's ``HEALTH_TIMEOUT_MS``.
HEALTH_CHECK_TIMEOUT: Final = 2.0
#: Seconds a health wait keeps trying: the reference's ``ADOPT_TIMEOUT_MS``,
#: how long a container that already runs may take to answer.
HEALTH_WAIT: Final = 10.0
#: The health wait's first pause and its cap, doubling in between (the
#: reference's ``waitHealthy``: 250 ms to 2 s).
HEALTH_BACKOFF_FIRST: Final = 0.25
HEALTH_BACKOFF_CAP: Final = 2.0
#: Reconnect backoff: first step and cap, in seconds. The reference's
#: ``retryBaseMs`` (1 s) and its backoff cap (30 s).
RECONNECT_BASE: Final = 1.0
RECONNECT_CAP: Final = 30.0
#: Largest message accepted from the daemon: the reference runtime's own
#: limit on a WebSocket message (64 MiB); a persisted entry larger than
#: ``MAX_CHUNK_CHARS`` travels alone, so 1 MiB (trio-websocket's default)
#: is not enough.
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024


# --------------------------------------------------------------------------- errors

class LinkError(Refusal):
    """The link failed: ``code``, ``message``, and whether trying again can
    help (``retry``, a class attribute: the kinds below)."""

    retry: bool = True


class LinkUnreachable(LinkError):
    """The daemon did not answer, or not in time. Worth another try."""


class LinkDropped(LinkError):
    """A live link closed. Worth another try."""


class LinkRefused(LinkError):
    """The daemon refused the token (close 4003). Trying again cannot help."""

    retry = False


class ProtocolMismatch(LinkError):
    """The daemon speaks another protocol version. Trying again cannot help."""

    retry = False


class EndpointError(Refusal):
    """The daemon URL cannot be used (``bad-daemon-url``)."""


# --------------------------------------------------------------------------- endpoint

@attrs.frozen
class DaemonEndpoint:
    """Where a daemon listens, and the token it was started with.

    ``url`` is ``ws://host:port`` (or ``wss://``, ``http://``, ``https://``;
    the scheme only says whether TLS is used), optionally with a path prefix
    that ``/healthz`` and ``/sessions/…`` are appended to."""

    url: str
    token: str = attrs.field(repr=False)
    host: str = attrs.field(init=False)
    port: int = attrs.field(init=False)
    tls: bool = attrs.field(init=False)
    prefix: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("ws", "wss", "http", "https"):
            raise EndpointError(
                "bad-daemon-url",
                f"the daemon URL {self.url!r} must start with ws://, wss://, http:// or https://",
            )
        if not parts.hostname:
            raise EndpointError("bad-daemon-url", f"the daemon URL {self.url!r} names no host")
        tls = parts.scheme in ("wss", "https")
        try:
            port = parts.port or (443 if tls else 80)
        except ValueError:
            raise EndpointError("bad-daemon-url", f"the daemon URL {self.url!r} has a bad port") from None
        object.__setattr__(self, "host", parts.hostname)
        object.__setattr__(self, "port", port)
        object.__setattr__(self, "tls", tls)
        object.__setattr__(self, "prefix", parts.path.rstrip("/"))

    def session_path(self, session: str) -> str:
        from wire.container import CONTAINER_SESSION_PATH

        return f"{self.prefix}{CONTAINER_SESSION_PATH}{quote(session, safe='')}"

    @property
    def health_path(self) -> str:
        from wire.container import CONTAINER_HEALTH_PATH

        return f"{self.prefix}{CONTAINER_HEALTH_PATH}"

    @property
    def authority(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


# --------------------------------------------------------------------------- health

async def _open_stream(endpoint: DaemonEndpoint) -> trio.abc.Stream:
    if endpoint.tls:
        return await trio.open_ssl_over_tcp_stream(
            endpoint.host, endpoint.port, ssl_context=ssl.create_default_context(),
            https_compatible=True,
        )
    return await trio.open_tcp_stream(endpoint.host, endpoint.port)


async def check_health(endpoint: DaemonEndpoint) -> None:
    """One ``GET /healthz``; returns when it answers 2xx, else raises
    :class:`LinkUnreachable`. At most :data:`HEALTH_CHECK_TIMEOUT`."""
    with trio.move_on_after(HEALTH_CHECK_TIMEOUT) as scope:
        try:
            stream = await _open_stream(endpoint)
        except OSError as error:
            raise LinkUnreachable(
                "daemon-unreachable", f"no daemon answers at {endpoint.url}: {error.strerror or error}"
            ) from None
        async with stream:
            request = (
                f"GET {endpoint.health_path} HTTP/1.1\r\nHost: {endpoint.authority}\r\n"
                "Connection: close\r\n\r\n"
            )
            head = b""
            try:
                await stream.send_all(request.encode())
                while b"\r\n" not in head and len(head) < 4096:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    head += chunk
            except (trio.BrokenResourceError, OSError) as error:
                raise LinkUnreachable(
                    "daemon-unreachable", f"the daemon at {endpoint.url} dropped the health check: {error}"
                ) from None
        status = head.split(b"\r\n", 1)[0].split(b" ")
        if len(status) >= 2 and status[0].startswith(b"HTTP/") and status[1][:1] == b"2":
            return
        raise LinkUnreachable(
            "daemon-unhealthy",
            f"the daemon at {endpoint.url} answered its health check with "
            f"{head[:40].decode('latin-1')!r}",
        )
    assert scope.cancelled_caught
    raise LinkUnreachable(
        "health-timeout", f"the daemon at {endpoint.url} took over {HEALTH_CHECK_TIMEOUT:g} s to answer"
    )


async def wait_healthy(
    endpoint: DaemonEndpoint,
    *,
    timeout: float = HEALTH_WAIT,
    check: Callable[[DaemonEndpoint], Awaitable[None]] = check_health,
    failed: Callable[[LinkUnreachable], None] | None = None,
) -> None:
    """Repeat ``check`` (one ``GET /healthz``) with pauses of 250 ms doubling
    to 2 s (the reference's ``waitHealthy``) until it answers, for up to
    ``timeout`` seconds, a cancel scope around the whole wait; then raise
    the last failure. Each failed check is also handed to ``failed``, so a
    caller whose own deadline cuts the wait short knows why."""
    last: LinkUnreachable | None = None
    delay = HEALTH_BACKOFF_FIRST
    with trio.move_on_after(timeout):
        while True:
            try:
                await check(endpoint)
                return
            except LinkUnreachable as error:
                last = error
                if failed is not None:
                    failed(error)
            await trio.sleep(delay)
            delay = min(delay * 2, HEALTH_BACKOFF_CAP)
    raise last or LinkUnreachable(
        "health-timeout", f"the daemon at {endpoint.url} did not answer its health check within {timeout:g} s"
    )


# --------------------------------------------------------------------------- dial and hello

@attrs.define(eq=False)
class SessionSocket:
    """An open session socket: the WebSocket (:mod:`router._websocket`,
    no task of its own) and the TCP (or TLS) stream under it."""

    ws: WebSocket
    stream: trio.abc.Stream

    async def close(self, *, timeout: float = 1.0) -> None:
        """Close: the close handshake (1000) within ``timeout`` seconds when
        the caller is not being cancelled; when it is (the host is stopping),
        at once. Either way the stream is closed when this returns."""
        if trio.current_effective_deadline() != -math.inf:
            with trio.CancelScope(shield=True):
                await self.ws.aclose(timeout=timeout)
        await trio.aclose_forcefully(self.stream)


async def dial(
    endpoint: DaemonEndpoint,
    session: str,
    *,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> SessionSocket:
    """Open the session's socket (the upgrade done, nothing read after it).

    Resource handling: the caller owns the socket and closes it; on failure
    nothing is left open. Error handling: every failure to reach the daemon
    is :class:`LinkUnreachable`."""
    from router._websocket import HandshakeFailed, WebSocket
    from wire.container import CONTAINER_TOKEN_HEADER

    stream: trio.abc.Stream | None = None
    try:
        with trio.fail_after(connect_timeout):
            stream = await _open_stream(endpoint)
            ws = await WebSocket.connect(
                stream,
                endpoint.authority,
                endpoint.session_path(session),
                extra_headers=[(CONTAINER_TOKEN_HEADER.encode(), endpoint.token.encode())],
                max_message_size=MAX_MESSAGE_SIZE,
            )
            return SessionSocket(ws, stream)
    except BaseException as error:
        if stream is not None:
            await trio.aclose_forcefully(stream)
        if isinstance(error, trio.TooSlowError):
            raise LinkUnreachable(
                "connect-timeout",
                f"the daemon at {endpoint.url} did not accept the session socket within "
                f"{connect_timeout:g} s",
            ) from None
        if isinstance(error, (OSError, HandshakeFailed, trio.BrokenResourceError)):
            raise LinkUnreachable(
                "daemon-unreachable", f"could not open the session socket at {endpoint.url}: {error}"
            ) from None
        raise


def closed_error(error: WebSocketClosed, endpoint: DaemonEndpoint) -> LinkError:
    """The :class:`LinkError` for a closed session socket, naming the side
    that closed it (the daemon, the host, or the network)."""
    from wire.container import CLOSE_REPLACED, CLOSE_UNAUTHORIZED

    code = error.code
    if code == CLOSE_UNAUTHORIZED:
        return LinkRefused(
            "unauthorized",
            f"the daemon at {endpoint.url} refused the token (close {CLOSE_UNAUTHORIZED}); "
            "give the host the CF_HARNESS_TOKEN the daemon was started with",
        )
    if code == CLOSE_REPLACED:
        return LinkDropped(
            "link-replaced",
            f"another connection for this session replaced ours (close {CLOSE_REPLACED}); "
            "is a second host driving the same session?",
        )
    if error.side == "ours":
        return LinkDropped(
            "link-dropped", f"the host closed the session socket to {endpoint.url} ({code}: {error.reason})"
        )
    if error.side == "network":
        return LinkDropped(
            "link-dropped", f"the connection to the daemon at {endpoint.url} was lost ({code}: {error.reason})"
        )
    return LinkDropped("link-dropped", f"the daemon at {endpoint.url} closed the session socket ({code})")


async def read_hello(
    ws: WebSocket, endpoint: DaemonEndpoint, *, timeout: float = HELLO_TIMEOUT
) -> Hello:
    """The daemon's ``hello``. Messages before it are ignored (as the
    reference's link does); those after it that came in the same read are
    put back for the connection's reader. Raises :class:`ProtocolMismatch` for a protocol
    other than :data:`CONTAINER_PROTOCOL_VERSION`, :class:`LinkRefused` for a
    4003 close, :class:`LinkUnreachable` when nothing comes in time."""
    from router._websocket import WebSocketClosed
    from wire.container import CONTAINER_PROTOCOL_VERSION

    try:
        with trio.fail_after(timeout):
            message = await _hello(ws)
    except trio.TooSlowError:
        raise LinkUnreachable(
            "no-hello", f"the daemon at {endpoint.url} sent no hello within {timeout:g} s"
        ) from None
    except WebSocketClosed as error:
        failure = closed_error(error, endpoint)
        if isinstance(failure, LinkDropped):
            raise LinkUnreachable(failure.code, failure.message + ", before hello") from None
        raise failure from None
    if message.protocol != CONTAINER_PROTOCOL_VERSION:
        raise ProtocolMismatch(
            "protocol-mismatch",
            f"the daemon at {endpoint.url} speaks container protocol {message.protocol}, this "
            f"host {CONTAINER_PROTOCOL_VERSION}; run a daemon and host of the same release",
        )
    return message


async def _hello(ws: WebSocket) -> Hello:
    from wire.container import Hello, parse_daemon_message

    while True:
        messages = await ws.receive()
        for index, raw in enumerate(messages):
            text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
            message = parse_daemon_message(text)
            if type(message) is Hello:
                ws.unread(messages[index + 1:])
                return message
            log.debug("ignoring %r before hello", text[:80])


async def probe(endpoint: DaemonEndpoint, session: str) -> Hello:
    """Check a daemon as a host starts (``router serve --daemon``): one
    health check, then a session socket for ``session`` with the token, and
    its ``hello`` (protocol checked), then the socket closed. Raises the
    :class:`LinkError` that says what is wrong: ``daemon-unreachable``,
    ``unauthorized``, ``protocol-mismatch``, ``no-hello`` ...

    The daemon keeps an empty session ``session`` in memory after it (it
    opens none until told to); name one nobody uses."""
    await check_health(endpoint)
    sock = await dial(endpoint, session)
    try:
        return await read_hello(sock.ws, endpoint)
    finally:
        await sock.close()


# --------------------------------------------------------------------------- backoff

#: The jitter's source for every :class:`Backoff` not given its own: one
#: Mersenne Twister per process, not one per session (its state is 2.5 KiB,
#: which was the largest single item of an idle session's heap).
#: The jitter needs no independence between sessions, only spread.
SHARED_RNG: Final = random.Random()


@attrs.define
class Backoff:
    """Capped exponential backoff with jitter: the ``n``-th pause is drawn
    from ``[d/2, d]`` with ``d = min(cap, base * 2**n)``, so a crowd of
    sessions that lost one daemon does not redial in lockstep, and no pause
    is shorter than half its step. ``rng`` is :data:`SHARED_RNG` unless one
    is given (a test seeds its own)."""

    base: float = RECONNECT_BASE
    cap: float = RECONNECT_CAP
    attempt: int = 0
    rng: random.Random = attrs.field(default=SHARED_RNG, repr=False)

    def next(self) -> float:
        step = min(self.cap, self.base * (2 ** min(self.attempt, 32)))
        self.attempt += 1
        return step / 2 + self.rng.uniform(0, step / 2)

    def reset(self) -> None:
        self.attempt = 0
