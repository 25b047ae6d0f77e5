"""Hostile HTTP at the mod link's socket, and at the API's kind of server
(Hypercorn on TCP): no request ends the server, nothing escapes a
connection, and a good client is served after the storm.

The inputs in ``KILLERS`` ended ``router modlink`` (and ``router serve``)
before ``router/_hypercorn.py`` closed Hypercorn's send race
(https://github.com/pgjones/hypercorn/issues/203): an h11 ``RemoteProtocolError``, then
``trio.BusyResourceError``, escaped into ``ModLink.run`` and the socket was
removed.
"""

from __future__ import annotations

import logging
import os
import socket
from functools import partial
from typing import Any

import httpx
import pytest
import trio
from quart import request
from quart_trio import QuartTrio

from router._hypercorn import serve_on_socket
from router.modlink import ModLink
from tests.api.conftest import Api, api  # noqa: F401 - the API's own fixture: the router behind the real ApiServer
from tests.modlink.hostile_http import KILLERS, Case, hostile_request, run_case, storm
from wire.mod import MOD_CAPABILITY_ASKS, MOD_HEALTH_MARKER, MOD_URL_BASE

#: Cases per storm: thousands in CI; the campaign sets more.
STORM_CASES = int(os.environ.get("ROUTER_FUZZ_CASES", "2000"))


def unix_dial(path: str) -> Any:
    return partial(trio.open_unix_socket, path)


async def healthy(link: ModLink) -> None:
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=link.path), base_url=MOD_URL_BASE) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], [r.getMessage() for r in bad]


@pytest.mark.parametrize("case", KILLERS, ids=lambda case: case.data[:40].decode("latin-1"))
async def test_a_killing_input_no_longer_ends_the_mod_link(link: ModLink, case: Case, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    # A race: repeat it, several at once, as the fuzzer found it.
    async with trio.open_nursery() as nursery:
        for _ in range(60):
            nursery.start_soon(run_case, unix_dial(link.path), case)
    await healthy(link)
    assert link.statistics().serving
    assert os.path.exists(link.path)
    no_tracebacks(caplog)


async def test_a_storm_of_malformed_requests_leaves_the_mod_link_serving(
    link: ModLink, open_client: Any, caplog: Any
) -> None:
    caplog.set_level(logging.INFO)
    with link.events() as events:
        await storm(unix_dial(link.path), seed=12, count=STORM_CASES)
        await healthy(link)
        # A good client after the storm: its events arrive, its call is answered.
        async with open_client(link.path) as client:
            response = await client.post("/events", {"events": [{"kind": "turn-start", "turnId": "after"}]})
            assert response.status_code == 200
        seen = []
        async for event in events:
            seen.append(event)
            if getattr(event, "turn_id", None) == "after":
                break
    assert link.statistics().serving
    no_tracebacks(caplog)


def test_the_generator_is_seeded_and_varied() -> None:
    import random

    first = [hostile_request(random.Random(7)) for _ in range(3)]
    again = [hostile_request(random.Random(7)) for _ in range(3)]
    assert first == again
    r = random.Random(1)
    cases = [hostile_request(r) for _ in range(500)]
    assert len({case.data for case in cases}) > 450
    assert {case.ending for case in cases} == {"close", "half-close", "read", "abort-mid"}


# --------------------------------------------------------------------------- the API's kind of server


def _app() -> QuartTrio:
    """The API's shape, small: a GET and a POST that reads its body."""
    app = QuartTrio("hostile")

    @app.get("/healthz")
    async def health() -> Any:
        return {"ok": True}

    @app.post("/sessions/<session>/messages")
    async def post(session: str) -> Any:
        body = await request.get_data()
        return {"session": session, "bytes": len(body)}

    return app


@pytest.fixture
async def tcp_server(nursery: trio.Nursery) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    await nursery.start(partial(serve_on_socket, _app(), sock, logger="tests.hostile.http"))
    return sock.getsockname()[1]


async def test_the_api_server_survives_the_killers_and_a_storm(tcp_server: int, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    dial = partial(trio.open_tcp_stream, "127.0.0.1", tcp_server)
    async with trio.open_nursery() as nursery:
        for case in KILLERS:
            for _ in range(30):
                nursery.start_soon(run_case, dial, case)
    await storm(dial, seed=203, count=STORM_CASES // 2)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{tcp_server}") as http:
        assert (await http.get("/healthz")).json() == {"ok": True}
        assert (await http.post("/sessions/s/messages", content=b"abc")).json() == {"session": "s", "bytes": 3}
    no_tracebacks(caplog)


async def test_a_connection_that_fails_is_logged_and_the_server_goes_on(
    tcp_server: int, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Containment, the second depth: whatever escapes one connection (here
    a failure planted in Hypercorn's connection) ends that connection only."""
    import hypercorn.trio.tcp_server as tcp

    calls = {"n": 0}
    original = tcp.TCPServer._read_data

    async def failing(self: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("planted")
        await original(self)

    monkeypatch.setattr(tcp.TCPServer, "_read_data", failing)
    caplog.set_level(logging.INFO)
    stream = await trio.open_tcp_stream("127.0.0.1", tcp_server)
    await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await stream.receive_some(100) == b""  # that connection closed
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{tcp_server}") as http:
        assert (await http.get("/healthz")).json() == {"ok": True}
    failed = [r for r in caplog.records if "an HTTP connection failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


async def test_the_real_api_server_survives_the_killers_and_a_storm(api: Api, caplog: Any) -> None:
    """``router serve``'s API as it runs (the whole router behind it)."""
    caplog.set_level(logging.INFO)
    assert api.server.port is not None
    dial = partial(trio.open_tcp_stream, "127.0.0.1", api.server.port)
    async with trio.open_nursery() as nursery:
        for case in KILLERS:
            for _ in range(30):
                nursery.start_soon(run_case, dial, case)
    await storm(dial, seed=8765, count=STORM_CASES // 2)
    assert (await api.client.get("/healthz")).json() == {"ok": True}
    listed = (await api.client.get("/sessions")).json()
    assert {"id": "root", "kind": "container", "busy": False, "state": "idle"} in listed["sessions"]
    no_tracebacks(caplog)
