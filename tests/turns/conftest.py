"""Fixtures for the user-turn router's tests: an in-process daemon on a real
loopback socket, a host over it, a delivery record, a registry and the
router, all in the test's nursery; a private run directory for mod links."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import attrs
import pytest
import trio

from router.daemon.adapters.echo import adapter as echo_adapter
from router.daemon import Daemon, DaemonServer
from router.host import DaemonEndpoint, Host, HostSettings, Store
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.support.polling import until  # noqa: F401  (re-exported for the tests here)

#: Reconnect quickly, as the host's own tests do.
FAST = dict(reconnect_base=0.02, reconnect_cap=0.25)


async def start_daemon(
    nursery: trio.Nursery, adapter: Any, token: str = "turns-token"
) -> tuple[DaemonEndpoint, Daemon]:
    """An in-process daemon with ``adapter`` on a loopback port."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    daemon = Daemon(adapter, f"rt-{uuid.uuid4().hex[:8]}")
    server = DaemonServer(daemon, token)
    await nursery.start(server.run, listeners)
    return DaemonEndpoint(f"ws://127.0.0.1:{server.ports[0]}", token), daemon


def daemon_knows(daemon: Daemon, session: str, operation_id: str) -> bool:
    runner = daemon.sessions.get(session)
    return runner is not None and any(op["operationId"] == operation_id for op in runner.core.operations())


@attrs.define
class Rig:
    router: TurnRouter
    host: Host | None
    registry: SessionRegistry
    deliveries: DeliveryLog
    store: Store | None
    daemon: Daemon | None


@pytest.fixture
async def make_rig(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    """``await make_rig(adapter=...)``: the whole router, in a nursery of
    this fixture's (cancelled after the test, before the stores close).
    ``adapter=None`` runs no daemon and no host."""
    opened: list[Any] = []
    try:
        async with trio.open_nursery() as nursery:

            async def make(adapter: Any = echo_adapter, *, name: str = "rig", **options: Any) -> Rig:
                store = None
                host = None
                daemon = None
                if adapter is not None:
                    endpoint, daemon = await start_daemon(nursery, adapter)
                    store = Store(tmp_path / f"{name}-host.db")
                    opened.append(store)
                    host = Host(store, endpoint, HostSettings(**FAST))  # type: ignore[arg-type]
                    await nursery.start(host.run)
                log = DeliveryLog(tmp_path / f"{name}-turns.db")
                opened.append(log)
                registry = SessionRegistry()
                await nursery.start(registry.run)
                router = TurnRouter(deliveries=log, registry=registry, host=host, env=env, **options)
                return Rig(router=router, host=host, registry=registry, deliveries=log, store=store, daemon=daemon)

            yield make
            nursery.cancel_scope.cancel()
    finally:
        for each in opened:
            each.close()
