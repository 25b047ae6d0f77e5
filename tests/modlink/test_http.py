"""The mod link's own HTTP server (``router/modlink/http.py``) at its edges:
paths read as the Hypercorn + Quart server read them, keep-alive and
pipelining, a poll whose client goes away, bodies past the limit, slow
bodies and idle connections, a failure of ours, and hostile heads."""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import router.modlink.http as http
from router.modlink import ModLink
from router.modlink.core import LinkCore
from router.modlink.http import MAX_BODY_BYTES, request_path

HOST = b"Host: claude-envoy\r\n"
POLL = b"POST /requests HTTP/1.1\r\n" + HOST + b"x-claude-envoy-mod: mod-a\r\nContent-Length: 0\r\n\r\n"
HEALTH = b"GET /healthz HTTP/1.1\r\n" + HOST + b"\r\n"


async def read_answer(stream: trio.abc.Stream, buffer: bytearray) -> tuple[int, dict[bytes, bytes], bytes]:
    """One response off ``stream`` (``buffer`` keeps what follows it):
    status, headers (lower-case names), body (by its content-length)."""
    while b"\r\n\r\n" not in buffer:
        data = await stream.receive_some(65536)
        assert data, f"closed before an answer: {bytes(buffer)!r}"
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(b":") for line in lines)}
    length = int(headers.get(b"content-length", b"0"))
    while len(rest) < length:
        data = await stream.receive_some(65536)
        assert data
        rest += data
    buffer[:] = rest[length:]
    return int(status_line.split()[1]), headers, rest[:length]


async def at_eof(stream: trio.abc.Stream) -> bool:
    try:
        return await stream.receive_some(100) == b""
    except trio.BrokenResourceError:
        return True


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    ("target", "path"),
    [
        (b"/healthz", "/healthz"),
        (b"/healthz?x=1", "/healthz"),
        (b"/heal%74hz", "/healthz"),
        (b"//healthz", "/healthz"),
        (b"/%2Fhealthz", "/healthz"),
        (b"healthz", "/healthz"),
        (b"*", "/*"),
        (b"http://claude-envoy/healthz", "/healthz"),
        (b"http://claude-envoy", "/"),
        (b"/healthz/", "/healthz/"),
        (b"/healthz#f", "/healthz#f"),
        (b"/a//b", "/a//b"),
        (b"/%zz", "/%zz"),
        (b"/%ff", "/\ufffd"),
        (b"/\xff", None),
    ],
)
def test_paths_are_read_as_werkzeug_read_them(target: bytes, path: str | None) -> None:
    # Each pair is what the Hypercorn + Quart link answered (its 404
    # sentence names the path it read; the 200s matched /healthz).
    assert request_path(target) == path


@given(st.binary(max_size=200))
def test_any_target_reads_as_a_path_or_none(target: bytes) -> None:
    path = request_path(target)
    assert path is None or (path.startswith("/") and not path.startswith("//"))


# --------------------------------------------------------------------------- one connection


async def test_keep_alive_serves_many_requests_on_one_connection(link: ModLink) -> None:
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    async with stream:
        for _ in range(5):
            await stream.send_all(HEALTH)
            status, headers, body = await read_answer(stream, buffer)
            assert status == 200 and b"claude-envoy-mod" in body
            assert headers.get(b"connection") is None
        # Pipelined: three at once, three answers in order.
        await stream.send_all(HEALTH + b"GET /nope HTTP/1.1\r\n" + HOST + b"\r\n" + HEALTH)
        assert [(await read_answer(stream, buffer))[0] for _ in range(3)] == [200, 404, 200]


async def test_a_poll_whose_client_goes_away_ends_at_once_and_takes_no_work(
    make_link: Any, wait_until: Any
) -> None:
    link: ModLink = await make_link(hold=3600)
    stream = await trio.open_unix_socket(link.path)
    await stream.send_all(POLL)
    await wait_until(lambda: link.statistics().polls_waiting == 1)
    await stream.aclose()
    # Long before its hour-long hold ends, the poll is gone...
    with trio.fail_after(60):
        await wait_until(lambda: link.statistics().polls_waiting == 0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: link.call("session.model", deadline=60))
        await wait_until(lambda: link.statistics().core.pending == 1)
        # ...and a call queued after it waits for the next poll, untaken.
        assert link.statistics().core.queued == 1
        nursery.cancel_scope.cancel()
    assert link.polls_with_work == 0 and link.polls_expired == 0 and link.polls_unwritten == 0


async def test_a_request_pipelined_behind_a_held_poll_is_answered_after_it(make_link: Any, wait_until: Any) -> None:
    link: ModLink = await make_link(hold=0.3)
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    async with stream:
        await stream.send_all(POLL)
        await wait_until(lambda: link.statistics().polls_waiting == 1)
        await stream.send_all(HEALTH)  # while the poll is held
        status, _, body = await read_answer(stream, buffer)
        assert (status, body) == (200, b'{"requests":[]}')
        status, _, body = await read_answer(stream, buffer)
        assert status == 200 and b"claude-envoy-mod" in body
    assert link.polls_expired == 1


async def test_a_half_closed_poll_ends_as_a_closed_one(make_link: Any, wait_until: Any) -> None:
    """Hypercorn took the peer's EOF as a disconnect (the handler was
    cancelled); so does this server: no answer, no work taken."""
    link: ModLink = await make_link(hold=3600)
    stream = await trio.open_unix_socket(link.path)
    async with stream:
        await stream.send_all(POLL)
        await wait_until(lambda: link.statistics().polls_waiting == 1)
        await stream.send_eof()
        with trio.fail_after(60):  # not the hour of the hold
            assert await at_eof(stream)
    assert link.statistics().polls_waiting == 0


# --------------------------------------------------------------------------- bodies and deadlines


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(link: ModLink) -> None:
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    async with stream:
        await stream.send_all(
            b"POST /events HTTP/1.1\r\n" + HOST + b"Content-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
        )
        status, _, body = await read_answer(stream, buffer)
        assert status == 413 and b'"too-large"' in body
        # The body is beyond the limit, so it is not drained past it: the
        # connection closes once the limit's worth was read (or at once).
        await stream.send_all(b"x" * 65536)
    assert link.statistics().serving


async def test_a_chunked_body_over_the_limit_is_refused_and_the_connection_goes_on(link: ModLink) -> None:
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    chunk = b"x" * (1024 * 1024)
    async with stream:
        await stream.send_all(b"POST /events HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n")

        async def send_body() -> None:
            for _ in range(MAX_BODY_BYTES // len(chunk) + 1):
                await stream.send_all(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            await stream.send_all(b"0\r\n\r\n")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_body)
            status, _, body = await read_answer(stream, buffer)
        assert status == 413 and b'"too-large"' in body
        # The rest was drained: the same connection takes the next request.
        await stream.send_all(HEALTH)
        assert (await read_answer(stream, buffer))[0] == 200


async def test_a_body_slower_than_its_deadline_is_answered_408(link: ModLink, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "BODY_TIMEOUT", 0.2)
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    async with stream:
        await stream.send_all(b"POST /events HTTP/1.1\r\n" + HOST + b"Content-Length: 10\r\n\r\n{")
        status, _, body = await read_answer(stream, buffer)
    assert status == 408 and b'"bad-request"' in body


async def test_an_idle_connection_is_closed_after_the_keep_alive_wait(
    link: ModLink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "KEEP_ALIVE_TIMEOUT", 0.2)
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    async with stream:
        await stream.send_all(HEALTH)
        assert (await read_answer(stream, buffer))[0] == 200
        assert await at_eof(stream)


async def test_a_failure_of_ours_is_a_500_and_the_link_goes_on(
    link: ModLink, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def planted(self: LinkCore, events: Any) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(LinkCore, "accept_events", planted)
    stream = await trio.open_unix_socket(link.path)
    buffer = bytearray()
    with caplog.at_level(logging.ERROR, logger="router.modlink"):
        async with stream:
            await stream.send_all(b"POST /events HTTP/1.1\r\n" + HOST + b"Content-Length: 13\r\n\r\n{\"events\":[]}")
            status, _, body = await read_answer(stream, buffer)
            assert status == 500 and b'"internal"' in body
            await stream.send_all(HEALTH)  # the same connection goes on
            assert (await read_answer(stream, buffer))[0] == 200
    assert any(record.exc_info for record in caplog.records)


# --------------------------------------------------------------------------- hostile heads

_names = st.sampled_from(
    [b"host", b"Host", b"content-length", b"transfer-encoding", b"connection", b"expect", b"upgrade",
     b"x-claude-envoy-mod", b"x", b"bad name", b"", b"a" * 300]
)  # fmt: skip
_values = st.one_of(
    st.sampled_from([b"claude-envoy", b"0", b"5", b"-1", b"chunked", b"close", b"100-continue", b"websocket", b"h2c", b""]),
    st.binary(max_size=40),
)
_heads = st.builds(
    lambda method, target, version, headers, body: (
        method + b" " + target + b" " + version + b"\r\n"
        + b"".join(name + b": " + value + b"\r\n" for name, value in headers) + b"\r\n" + body
    ),
    st.sampled_from([b"GET", b"POST", b"HEAD", b"OPTIONS", b"PUT", b"CONNECT", b"get", b"G T", b""]),
    st.one_of(st.sampled_from([b"/healthz", b"/events", b"/results", b"/requests", b"*", b"/x?y"]), st.binary(max_size=30)),
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b""]),
    st.lists(st.tuples(_names, _values), max_size=6),
    st.binary(max_size=60),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=_heads, close=st.booleans())
def test_a_hostile_head_is_answered_or_closed_and_the_link_serves_on(head: bytes, close: bool) -> None:
    async def scenario(runtime: str) -> None:
        link = ModLink("hostile", env={"XDG_RUNTIME_DIR": runtime}, hold=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(link.run)
            stream = await trio.open_unix_socket(link.path)
            async with stream:
                await stream.send_all(head)
                if close:
                    await stream.send_eof()
                out = b""
                with trio.move_on_after(1.0):  # a head still incomplete waits (keep-alive): not an error
                    while data := await stream.receive_some(65536):
                        out += data
            if out:
                assert out.startswith(b"HTTP/1.1 "), out[:80]
                status = int(out.split()[1])
                assert status in (100, 200, 400, 404, 405, 409, 413), out[:200]
            stream = await trio.open_unix_socket(link.path)
            async with stream:
                await stream.send_all(HEALTH)
                assert (await read_answer(stream, bytearray()))[0] == 200
            nursery.cancel_scope.cancel()

    with tempfile.TemporaryDirectory(prefix="mlh-", dir="/tmp") as runtime:
        os.chmod(runtime, 0o700)
        trio.run(scenario, runtime)
