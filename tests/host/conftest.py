"""Fixtures for the host's tests: a store, a daemon of each kind, a host."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
import trio

from router.host.host import Host, HostSettings
from router.host.link import DaemonEndpoint
from router.host.store import Store
from tests.support.daemons import KINDS, Daemon, spawn_daemon

#: Reconnect quickly: the fault tests drop links on purpose, many times.
FAST = dict(reconnect_base=0.02, reconnect_cap=0.25)


def ours_missing() -> str | None:
    """Why our daemon cannot run yet, or None when it can."""
    try:
        importlib.import_module("router.daemon.cli")
    except Exception as error:  # noqa: BLE001 - any import failure is a skip reason
        return f"our daemon (router.daemon.cli) does not import yet: {error!r}"
    return None


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "ours":
        reason = ours_missing()
        if reason is not None:
            pytest.skip(reason)
    return request.param


@pytest.fixture
async def daemon(kind: str) -> AsyncIterator[Daemon]:
    async with spawn_daemon(kind) as running:  # type: ignore[arg-type]
        yield running


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "host.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    with Store(store_path) as opened:
        yield opened


def endpoint_of(daemon: Daemon, url: str | None = None) -> DaemonEndpoint:
    return DaemonEndpoint(url or daemon.url, daemon.token)


async def start_host(
    nursery: trio.Nursery, store: Store, endpoint: DaemonEndpoint, **settings: object
) -> Host:
    host = Host(store, endpoint, HostSettings(**{**FAST, **settings}))  # type: ignore[arg-type]
    await nursery.start(host.run)
    return host


@pytest.fixture(autouse=True)
def no_host_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A link logs ERROR only for a bug or a store failure in a connection
    (it survives them, so a test would not notice): fail the test on one."""
    yield
    errors = [
        record
        for record in caplog.get_records("call")
        if record.levelno >= logging.ERROR and record.name.startswith(("router.host", "router.daemon"))
    ]
    assert not errors, [record.getMessage() for record in errors]
