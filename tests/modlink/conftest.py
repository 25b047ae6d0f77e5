"""Fixtures for the mod link's tests: a private run directory per test (short,
so socket paths stay under the 100 bytes of claude-envoy
1.19.0 ``hooks/mod-protocol.ts``), a started link, and a raw
HTTP client over its socket."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx
import pytest
import trio

from router.modlink import ModLink
from wire.json import dumps
from tests.support.polling import until
from wire.mod import MOD_INSTANCE_HEADER, MOD_URL_BASE

SESSION = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture
def make_link(env: dict[str, str], nursery: trio.Nursery) -> Callable[..., Awaitable[ModLink]]:
    """Start a link in the test's nursery (cancelled when the test ends)."""

    async def start(session_id: str = SESSION, **options: Any) -> ModLink:
        link = ModLink(session_id, env=env, **options)
        await nursery.start(link.run)
        return link

    return start


@pytest.fixture
async def link(make_link: Callable[..., Awaitable[ModLink]]) -> ModLink:
    return await make_link(hold=0.3)


class Client:
    """A raw HTTP client on the link's socket, as a mod would talk."""

    def __init__(self, http: httpx.AsyncClient, instance: str | None) -> None:
        self.http = http
        self.instance = instance

    def _headers(self, instance: str | None) -> dict[str, str]:
        name = self.instance if instance == "" else instance
        return {} if name is None else {MOD_INSTANCE_HEADER: name}

    async def post(self, route: str, body: Any = None, *, raw: bytes | None = None, instance: str | None = "") -> httpx.Response:
        content = raw if raw is not None else (b"" if body is None else dumps(body).encode())
        return await self.http.post(route, content=content, headers=self._headers(instance))

    async def get(self, route: str) -> httpx.Response:
        return await self.http.get(route)


@contextlib.asynccontextmanager
async def _open_client(path: str, instance: str | None = "mod-a") -> AsyncIterator[Client]:
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=path),
        base_url=MOD_URL_BASE,
        timeout=httpx.Timeout(30.0, read=120.0),
    ) as http:
        yield Client(http, instance)


@pytest.fixture
def open_client() -> Callable[..., Any]:
    """``async with open_client(path, instance="mod-a") as client``."""
    return _open_client


@pytest.fixture
def wait_until() -> Callable[[Callable[[], bool]], Awaitable[None]]:
    return until
