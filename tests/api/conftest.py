"""Fixtures for the API's tests: the whole router (an in-process echo
daemon, the host, the delivery record, the registry, the plug-in layer over
a temporary settings directory) and the API on a real loopback port, with an
httpx client on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import httpx
import pytest
import trio

from router.api.server import ApiServer
from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import Host, HostSettings, Store
from router.plugins.layer import PluginLayer
from router.plugins.settings import SettingsDir
from router.plugins.usage import MemoryRecords
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.turns.conftest import FAST, start_daemon


#: The API's token in these tests, and the header that carries it.
TOKEN = "test-token-0123456789abcdef"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@attrs.define
class Api:
    url: str
    client: httpx.AsyncClient
    router: TurnRouter
    host: Host
    settings: SettingsDir
    server: ApiServer

    async def send(self, session: str, body: Any, **kwargs: Any) -> httpx.Response:
        return await self.client.post(f"/sessions/{session}/messages", json=body, **kwargs)

    def write_plugins(self, plugins: dict[str, Any]) -> None:
        """Write plugins.json by hand (as a person would, no revision check)."""
        self.settings.path.mkdir(parents=True, exist_ok=True)
        (self.settings.path / "plugins.json").write_text(json.dumps({"plugins": plugins, "options": {}}))


@pytest.fixture
async def api(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[Api]:
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
            router = TurnRouter(deliveries=log, registry=registry, host=host, env=env, link_options={"hold": 0.5})
            settings = SettingsDir(tmp_path / "settings")
            layer = PluginLayer(settings=settings, records=MemoryRecords())
            server = ApiServer(router, layer, port=0, token=TOKEN)
            url = await nursery.start(server.run)
            async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(30.0), headers=AUTH) as client:
                yield Api(url=url, client=client, router=router, host=host, settings=settings, server=server)
            nursery.cancel_scope.cancel()
    finally:
        for each in opened:
            each.close()
