"""A small, seeded HTTP/1.1 fuzzer: malformed requests at a real socket.

:func:`hostile_request` draws one case from a ``random.Random``: a request
line (methods, targets and versions good and bad), headers (``Content-Length``
wrong, negative, huge, repeated, against ``Transfer-Encoding``; bad names,
folds, NUL bytes, heads too long), a body (shorter or longer than declared,
broken chunks, JSON nested 1,000 deep, random bytes), sometimes a second
request or garbage after it, and an ending (close at once, half-close, read
the answer first, or close part-way through the bytes, which are sent in
pieces). :func:`run_case` plays one case on a fresh connection;
:func:`storm` plays many, several at a time, so the races between a
connection's reader and its writer are met.

The invariant a server must keep (as h11's own fuzz harness states it for
h11): whatever the bytes, it answers or closes that connection, and it goes
on serving the next one. The fault campaign and the tests use the same
generator; the tests pin the inputs that once killed a server.
"""

from __future__ import annotations

import random
from typing import Awaitable, Callable

import attrs
import trio

#: What a test dials: a fresh stream to the server under test.
Dial = Callable[[], Awaitable[trio.abc.Stream]]

_METHODS = [b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PRI", b"CONNECT", b"G\x00T", b"get", b"", b"P O S T"]
_TARGETS = [
    b"/healthz", b"/events", b"/results", b"/requests", b"/", b"*", b"/healthz?x=1", b"/%zz", b"/\xff\xfe",
    b"http://claude-envoy/healthz", b"//", b"/" + b"a" * 9000, b"/events#f", b"/sessions/x",
]  # fmt: skip
_VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.1x", b"", b"http/1.1", b"HTTP/1.1 HTTP/1.1"]
_BODIES = [
    b"", b"{}", b'{"events":[]}', b'{"results":[]}', b"not json", b"\xff\xfe\x00", b"[" * 1000 + b"]" * 1000,
    b'{"events":[' + b"[" * 400 + b"]" * 400 + b"]}", b"{" * 300, b'{"events":[{"kind":"novel"}]}',
]  # fmt: skip


@attrs.frozen
class Case:
    """One hostile exchange: the bytes, how they are cut into sends, and how
    the connection ends (``close``, ``half-close``, ``read``, ``abort-mid``)."""

    data: bytes
    cuts: tuple[int, ...]
    ending: str

    def pieces(self) -> list[bytes]:
        edges = [0, *self.cuts, len(self.data)]
        return [self.data[a:b] for a, b in zip(edges, edges[1:]) if b > a]


def _content_length(r: random.Random, body: bytes) -> list[bytes]:
    real = len(body)
    choices = [
        str(real).encode(), str(real + r.randint(1, 5)).encode(), str(max(real - 1, 0)).encode(), b"-1", b"-0",
        b"abc", b"1,2", b"1e3", b" 2 ", b"0x10", str(10**30).encode(), b"", b"+5",
    ]  # fmt: skip
    picked = [b"Content-Length: " + r.choice(choices)]
    if r.random() < 0.1:
        picked.append(b"Content-Length: " + r.choice(choices))
    return picked


def _headers(r: random.Random, body: bytes) -> list[bytes]:
    out: list[bytes] = []
    if r.random() < 0.85:
        out.append(b"Host: " + r.choice([b"claude-envoy", b"127.0.0.1", b"", b"a b", b"x" * 300, b"\xff"]))
    if r.random() < 0.7:
        out += _content_length(r, body)
    if r.random() < 0.2:
        out.append(b"Transfer-Encoding: " + r.choice([b"chunked", b"gzip", b"chunked, identity", b"identity", b"xchunked"]))
    if r.random() < 0.4:
        out.append(b"Connection: " + r.choice([b"close", b"keep-alive", b"upgrade", b"close, upgrade", b""]))
    if r.random() < 0.1:
        out.append(b"Upgrade: " + r.choice([b"websocket", b"h2c", b"nonsense"]))
    if r.random() < 0.1:
        out.append(b"Expect: 100-continue")
    if r.random() < 0.2:
        out.append(b"x-claude-envoy-instance: " + r.choice([b"mod-a", b"", b"\x00", b"b" * 5000]))
    if r.random() < 0.15:
        out.append(
            r.choice(
                [b"NoColon", b" Folded: yes", b"Bad Name: x", b"X: a\x00b", b"X:" + b"y" * 70000, b":empty", b"\tX: tab"]
            )
        )
    r.shuffle(out)
    return out


def _chunked(r: random.Random, body: bytes) -> bytes:
    good = f"{len(body):x}".encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    return r.choice([good, good[:-2], b"zz\r\n" + body, b"-1\r\n\r\n", b"fffffffffffffffff\r\n", good + b"trailing"])


def hostile_request(r: random.Random) -> Case:
    """One case, drawn from ``r``."""
    if r.random() < 0.05:
        data = r.randbytes(r.randint(0, 2000))
    else:
        body = r.choice(_BODIES) if r.random() < 0.8 else r.randbytes(r.randint(0, 3000))
        line = b" ".join([r.choice(_METHODS), r.choice(_TARGETS), r.choice(_VERSIONS)])
        headers = _headers(r, body)
        if any(h.startswith(b"Transfer-Encoding: chunked") for h in headers) and r.random() < 0.7:
            body = _chunked(r, body)
        elif r.random() < 0.3:
            body = body[: r.randint(0, len(body))]  # shorter than declared
        terminator = r.choice([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"])
        data = line + terminator + terminator.join(headers) + (terminator if headers else b"") + terminator + body
        if r.random() < 0.3:
            # A second request, or garbage, after the first: "bytes after a
            # Connection: close request" is the one that once killed servers.
            data += r.choice([b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"x", r.randbytes(50), b"\r\n\r\n"])
    cuts = tuple(sorted(r.sample(range(1, len(data)), min(r.randint(0, 3), max(len(data) - 1, 0))))) if data else ()
    ending = r.choice(["close", "close", "half-close", "read", "abort-mid"])
    return Case(data=data, cuts=cuts, ending=ending)


#: Cases that once ended a server (found by this fuzzer; Hypercorn 0.18,
#: h11 0.16,
#: https://github.com/pgjones/hypercorn/issues/203): the head is complete, so the app
#: answers at once while the reader meets the bad rest.
KILLERS: list[Case] = [
    Case(data=b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nA", cuts=(), ending="close"),
    Case(data=b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nA", cuts=(), ending="half-close"),
    Case(data=b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n", cuts=(), ending="close"),
    Case(data=b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nxx", cuts=(), ending="read"),
    Case(data=b"POST /events HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{}", cuts=(), ending="close"),
    Case(data=b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", cuts=(), ending="close"),
    Case(data=b"POST /requests HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{}", cuts=(), ending="half-close"),
]


async def run_case(dial: Dial, case: Case, *, read_for: float = 0.2) -> None:
    """Play ``case`` on a fresh connection. Whatever the server does (answers,
    closes, resets) is fine here; the caller checks the server afterwards.
    ``read_for`` bounds how long an ending that reads waits for bytes (a
    bound on the test's own time, never an assertion)."""
    try:
        stream = await dial()
    except OSError:
        raise
    try:
        pieces = case.pieces()
        for index, piece in enumerate(pieces):
            if case.ending == "abort-mid" and index == len(pieces) - 1 and index > 0:
                break
            await stream.send_all(piece)
            await trio.lowlevel.checkpoint()
        if case.ending == "half-close" and hasattr(stream, "send_eof"):
            await stream.send_eof()
        if case.ending in ("read", "half-close"):
            with trio.move_on_after(read_for):
                while await stream.receive_some(65536):
                    pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the server closed on us: allowed
    finally:
        await stream.aclose()


async def storm(dial: Dial, seed: int, count: int, *, concurrency: int = 8) -> None:
    """Play ``count`` cases drawn from ``seed``, ``concurrency`` at a time."""
    r = random.Random(seed)
    cases = [hostile_request(r) for _ in range(count)]
    limiter = trio.CapacityLimiter(concurrency)

    async def one(case: Case) -> None:
        async with limiter:
            await run_case(dial, case)

    async with trio.open_nursery() as nursery:
        for case in cases:
            nursery.start_soon(one, case)
