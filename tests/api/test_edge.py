"""The API's edge against a hostile peer, over real sockets: connections
that end (``Connection: close``, HTTP/1.0, an idle keep-alive), a cap on
connections, upgrades refused (docs/turns.md, "Connections").

Each test starts its own :class:`ApiServer` (small limits) on the ``api``
fixture's router, and speaks raw HTTP/1.x to it, so nothing between the test
and the server (a client library's pool) decides when a socket closes.
"""

from __future__ import annotations

import json
import logging
import os
from functools import partial
from typing import AsyncIterator

import pytest
import trio

from router._hypercorn import ConnectionLimits
from router.api.server import ApiServer
from tests.api.conftest import TOKEN, Api
from tests.support.polling import until

#: The bound on every wait for the server to act (a guard, not a timing).
PATIENCE = 20.0


async def start(api: Api, nursery: trio.Nursery, **limits: object) -> ApiServer:
    server = ApiServer(api.router, api.server.layer, port=0, token=TOKEN, limits=ConnectionLimits(**limits))
    await nursery.start(server.run)
    return server


def request(server: ApiServer, path: str = "/healthz", *, version: str = "1.1", close: bool = False,
            headers: dict[str, str] | None = None) -> bytes:
    headers = {"Host": f"127.0.0.1:{server.port}", **(headers or {})}
    lines = [f"GET {path} HTTP/{version}"] + [f"{name}: {value}" for name, value in headers.items()]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def connect(server: ApiServer) -> trio.SocketStream:
    assert server.port is not None
    return await trio.open_tcp_stream("127.0.0.1", server.port)


async def read_to_eof(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes (bounded by PATIENCE:
    a server that never closes fails here)."""
    data = b""
    with trio.fail_after(PATIENCE):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def read_response(stream: trio.SocketStream) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length (the connection stays open)."""
    data = b""
    with trio.fail_after(PATIENCE):
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            assert chunk, f"closed before a response: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status, headers = parse_head(head)
        while len(body) < int(headers["content-length"]):
            chunk = await stream.receive_some(65536)
            assert chunk
            body += chunk
    return status, headers, body


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    first, *rest = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in rest:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(first.split()[1]), headers


def split(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status, headers = parse_head(head)
    return status, headers, body


@pytest.fixture
async def edge(api: Api, nursery: trio.Nursery) -> AsyncIterator[ApiServer]:
    yield await start(api, nursery, idle_timeout=0.5, max_connections=4)


# --------------------------------------------------------------------------- closing


async def test_connection_close_closes_the_socket_after_the_response(edge: ApiServer) -> None:
    stream = await connect(edge)
    await stream.send_all(request(edge, close=True))
    status, headers, body = split(await read_to_eof(stream))
    assert (status, json.loads(body)) == (200, {"ok": True})
    await until(lambda: edge.connections.open == 0)


async def test_http_1_0_closes_the_socket_after_the_response(edge: ApiServer) -> None:
    stream = await connect(edge)
    await stream.send_all(request(edge, version="1.0"))
    status, _, body = split(await read_to_eof(stream))
    assert (status, json.loads(body)) == (200, {"ok": True})


async def test_a_refusal_at_the_door_closes_the_socket(edge: ApiServer) -> None:
    stream = await connect(edge)
    await stream.send_all(request(edge, "/sessions"))  # no token
    status, headers, body = split(await read_to_eof(stream))
    assert status == 401 and json.loads(body)["error"] == "no-token" and headers["connection"] == "close"


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(edge: ApiServer) -> None:
    stream = await connect(edge)
    for _ in range(2):  # kept alive between requests
        await stream.send_all(request(edge))
        status, headers, body = await read_response(stream)
        assert status == 200 and "connection" not in headers
    assert await read_to_eof(stream) == b""  # then closed by the server, idle


async def test_a_connection_that_never_asks_is_closed_after_the_idle_timeout(edge: ApiServer) -> None:
    stream = await connect(edge)
    await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
    assert await read_to_eof(stream) == b""


async def test_a_peer_that_closes_an_idle_connection_frees_it_at_once(api: Api, nursery: trio.Nursery) -> None:
    server = await start(api, nursery, idle_timeout=3600.0, max_connections=4)
    stream = await connect(server)
    await stream.send_all(request(server))
    assert (await read_response(stream))[0] == 200
    await stream.aclose()
    with trio.fail_after(PATIENCE):  # well before the idle timeout
        await until(lambda: server.connections.open == 0)


# --------------------------------------------------------------------------- the cap


def server_sockets(port: int) -> int:
    """How many of this process's descriptors are accepted sockets of the
    server on ``port`` (their local port is the server's; not listening)."""
    inodes = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            if local_port == port and fields[3] != "0A" and fields[9] in inodes:  # 0A: LISTEN
                count += 1
    return count


async def test_connections_past_the_cap_are_refused_and_idle_ones_closed(edge: ApiServer) -> None:
    assert edge.port is not None
    cap = edge.connections.limits.max_connections
    idle = [await connect(edge) for _ in range(cap)]
    await until(lambda: edge.connections.open == cap)
    past = [await connect(edge) for _ in range(3)]
    for stream in past:
        await stream.send_all(request(edge))
        status, headers, body = split(await read_to_eof(stream))
        refusal = json.loads(body)
        assert status == 503 and refusal["error"] == "too-many-connections" and refusal["message"]
        assert headers["connection"] == "close"
        await stream.aclose()
    # The refused ones closed: the server holds the idle ones, no more.
    with trio.fail_after(PATIENCE):
        await until(lambda: server_sockets(edge.port) <= cap)  # type: ignore[arg-type]
    assert edge.connections.statistics().refused == 3
    for stream in idle:  # never asked: the idle timeout closes each
        assert await read_to_eof(stream) == b""
    await until(lambda: edge.connections.open == 0)
    stream = await connect(edge)
    await stream.send_all(request(edge, close=True))
    status, _, body = split(await read_to_eof(stream))
    assert (status, json.loads(body)) == (200, {"ok": True})
    await until(lambda: server_sockets(edge.port) == 0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- upgrades


WEBSOCKET = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


@pytest.mark.parametrize("path", ["/healthz", "/sessions", "/sessions/x/live", "/nope"])
async def test_a_websocket_upgrade_is_refused_quietly(edge: ApiServer, caplog: pytest.LogCaptureFixture,
                                                      path: str) -> None:
    caplog.set_level(logging.DEBUG)
    stream = await connect(edge)
    await stream.send_all(request(edge, path, headers={**WEBSOCKET, "Host": "evil.example"}))
    status, headers, body = split(await read_to_eof(stream))
    refusal = json.loads(body)
    assert status == 400 and refusal["error"] == "bad-upgrade" and refusal["message"]
    assert [record for record in caplog.records if record.levelno > logging.INFO] == []


async def test_an_h2c_upgrade_is_declined_and_served_in_http_1_1(edge: ApiServer) -> None:
    stream = await connect(edge)
    await stream.send_all(request(edge, close=True, headers={
        "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA", "Connection": "Upgrade, HTTP2-Settings"}))
    data = await read_to_eof(stream)
    assert data.startswith(b"HTTP/1.1 200 ") and b"101" not in data.split(b"\r\n")[0]


async def test_an_http_2_preface_is_not_served(edge: ApiServer) -> None:
    stream = await connect(edge)
    await stream.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    data = await read_to_eof(stream)
    assert not data or data.startswith(b"HTTP/1.1 4")
