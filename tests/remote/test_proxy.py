"""The gate in-process, on real loopback sockets: ``--behind-proxy``
(forwarded headers trusted from loopback peers, a base path), the loopback
page's Origin check, a code that expired, the local-only routes."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import pytest
import trio

from router.api.server import ApiServer
from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import Host, HostSettings, Store
from router.plugins.layer import PluginLayer
from router.plugins.settings import SettingsDir
from router.plugins.usage import MemoryRecords
from router.remote import DeviceStore, Reach, ReachConfig
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.turns.conftest import FAST, start_daemon

TOKEN = "test-token-0123456789abcdef"
AUTH = {"authorization": f"Bearer {TOKEN}"}
PUBLIC = "https://box.tail1234.ts.net/router"
PROXIED = {"x-forwarded-host": "box.tail1234.ts.net", "x-forwarded-proto": "https", "x-forwarded-prefix": "/router",
           "x-forwarded-for": "100.64.0.7"}


@asynccontextmanager
async def _serving(tmp_path: Path, env: dict[str, str], reach: Reach | None) -> AsyncIterator[httpx.AsyncClient]:
    """The API on a loopback port (``reach``'s gate in front when given)."""
    opened: list[Any] = []
    try:
        async with trio.open_nursery() as nursery:
            endpoint, _ = await start_daemon(nursery, echo_adapter)
            store = Store(tmp_path / "host.db")
            opened.append(store)
            host = Host(store, endpoint, HostSettings(**FAST))  # type: ignore[arg-type]
            await nursery.start(host.run)
            log = DeliveryLog(tmp_path / "turns.db")
            opened.append(log)
            registry = SessionRegistry()
            await nursery.start(registry.run)
            router = TurnRouter(deliveries=log, registry=registry, host=host, env=env)
            layer = PluginLayer(settings=SettingsDir(tmp_path / "settings"), records=MemoryRecords())
            if reach is not None:
                await nursery.start(reach.run)
            server = ApiServer(router, layer, port=0, token=TOKEN, reach=reach)
            url = await nursery.start(server.run)
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                yield client
            nursery.cancel_scope.cancel()
    finally:
        for each in opened:
            each.close()


@pytest.fixture
async def proxied(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[tuple[httpx.AsyncClient, Reach]]:
    reach = Reach(ReachConfig(behind_proxy=True, public_url=PUBLIC), settings_dir=tmp_path / "settings",
                  devices=DeviceStore.open(None, tmp_path))
    async with _serving(tmp_path, env, reach) as client:
        yield client, reach


async def test_without_reach_the_loopback_port_checks_origin_too(tmp_path: Path, env: dict[str, str]) -> None:
    async with _serving(tmp_path, env, None) as client:
        foreign = await client.post("/sessions", json={}, headers={**AUTH, "origin": "https://evil.example"})
        assert (foreign.status_code, foreign.json()["error"]) == (403, "bad-origin")
        stream = await client.get("/board/live", headers={**AUTH, "origin": "https://evil.example"})
        assert stream.json()["error"] == "bad-origin"
        ours = await client.post("/sessions", json={"id": "o1"}, headers={**AUTH, "origin": str(client.base_url).rstrip("/")})
        assert ours.status_code == 201
        assert (await client.post("/sessions", json={"id": "o2"}, headers=AUTH)).status_code == 201  # no Origin: a CLI
        assert (await client.get("/pair")).json()["error"] in ("no-token", "no-remote")


async def test_behind_a_proxy(proxied: tuple[httpx.AsyncClient, Reach]) -> None:
    client, reach = proxied
    # Pairing is made locally (the loopback token), never through the proxy.
    through_proxy = await client.post("/pairings", json={}, headers={**AUTH, **PROXIED})
    assert through_proxy.status_code == 401  # the loopback token is no remote credential
    made = await client.post("/pairings", json={}, headers=AUTH)
    assert made.status_code == 201
    url = made.json()["url"]
    assert url.startswith(f"{PUBLIC}/pair#") and "<svg" in made.json()["qrSvg"]
    code = url.split("#", 1)[1]
    assert (await client.get("/sessions", headers=PROXIED)).json()["error"] == "no-credential"
    paired = await client.post("/pair", json={"code": code}, headers={**PROXIED, "origin": "https://box.tail1234.ts.net"})
    assert paired.status_code == 201
    cookie = paired.headers["set-cookie"]
    assert "Path=/router/" in cookie and "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    token = paired.json()["token"]
    bearer = {"authorization": f"Bearer {token}"}
    assert (await client.get("/sessions", headers={**PROXIED, **bearer})).status_code == 200
    evil = await client.get("/sessions", headers={**PROXIED, **bearer, "origin": "https://evil.example"})
    assert (evil.status_code, evil.json()["error"]) == (403, "bad-origin")
    own = await client.post("/sessions", json={"id": "p1"},
                            headers={**PROXIED, "cookie": f"router-device={token}", "origin": "https://box.tail1234.ts.net"})
    assert own.status_code == 201
    # A device may not pair others or revoke, but may rename itself.
    assert (await client.get("/devices", headers={**PROXIED, **bearer})).json()["error"] == "local-only"
    name = paired.json()["device"]["name"]
    renamed = await client.patch(f"/devices/{name}", json={"name": "my phone"}, headers={**PROXIED, **bearer})
    assert renamed.json()["device"]["name"] == "my phone"
    listed = await client.get("/devices", headers=AUTH)
    assert [each["name"] for each in listed.json()["devices"]] == ["my phone"]
    revoked = await client.post("/devices/my phone/revoke", json={}, headers=AUTH)
    assert revoked.json()["device"]["revoked"] is True
    assert (await client.get("/sessions", headers={**PROXIED, **bearer})).json()["error"] == "bad-credential"


async def test_the_loopback_page_checks_origin_and_codes_expire(proxied: tuple[httpx.AsyncClient, Reach]) -> None:
    client, reach = proxied
    other = await client.post("/sessions", json={}, headers={**AUTH, "origin": "https://evil.example"})
    assert (other.status_code, other.json()["error"]) == (403, "bad-origin")
    port = reach.loopback_port
    ours = await client.post("/sessions", json={"id": "l1"}, headers={**AUTH, "origin": f"http://127.0.0.1:{port}"})
    assert ours.status_code == 201
    code = (await client.post("/pairings", json={}, headers=AUTH)).json()["code"]
    started = reach.clock()
    reach.clock = lambda: started + 301.0
    late = await client.post("/pair", json={"code": code}, headers=PROXIED)
    assert (late.status_code, late.json()["error"]) == (410, "pairing-code-expired")


async def test_forwarded_headers_from_a_proxy_are_not_trusted_without_behind_proxy(tmp_path: Path) -> None:
    from router.remote.gate import Gate

    reach = Reach(ReachConfig(), settings_dir=tmp_path, devices=DeviceStore.open(None, tmp_path))
    seen: list[dict] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        seen.append(scope)

    gate = Gate(app, reach, listener="loopback", open_paths=lambda: frozenset())
    scope = {"type": "http", "method": "GET", "path": "/sessions", "client": ("127.0.0.1", 5000),
             "headers": [(b"x-forwarded-host", b"box"), (b"x-forwarded-prefix", b"/p")]}
    await gate(scope, None, None)
    assert "router.gate" not in seen[0] and seen[0].get("root_path", "") == ""
    reach.store.close()


async def test_a_proxy_that_only_passes_the_host_on(proxied: tuple[httpx.AsyncClient, Reach]) -> None:
    client, reach = proxied
    code = (await client.post("/pairings", json={}, headers=AUTH)).json()["code"]
    host = {"host": "box.tail1234.ts.net"}
    assert (await client.get("/sessions", headers=host)).json()["error"] == "no-credential"
    paired = await client.post("/pair", json={"code": code}, headers=host)
    assert paired.status_code == 201 and "Path=/;" in paired.headers["set-cookie"]


async def test_a_revoked_phone_still_gets_the_shell_and_pairs_again(proxied: tuple[httpx.AsyncClient, Reach]) -> None:
    client, reach = proxied
    origin = {"origin": "https://box.tail1234.ts.net"}
    code = (await client.post("/pairings", json={}, headers=AUTH)).json()["code"]
    first = await client.post("/pair", json={"code": code}, headers={**PROXIED, **origin})
    stale = {"cookie": f"router-device={first.json()['token']}"}
    await client.post(f"/devices/{first.json()['device']['name']}/revoke", json={}, headers=AUTH)
    assert (await client.get("/sessions", headers={**PROXIED, **stale})).json()["error"] == "bad-credential"
    assert (await client.get("/healthz", headers={**PROXIED, **stale})).status_code == 200
    again = (await client.post("/pairings", json={}, headers=AUTH)).json()["code"]
    paired = await client.post("/pair", json={"code": again}, headers={**PROXIED, **stale, **origin})
    assert paired.status_code == 201
    fresh = {"cookie": f"router-device={paired.json()['token']}"}
    assert (await client.get("/sessions", headers={**PROXIED, **fresh})).status_code == 200
