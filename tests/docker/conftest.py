"""Fixtures for the tests on a real Docker engine: the project image, a
label per test (everything carrying it is removed afterwards), the ``docker``
launcher module, and contexts for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from router.host import DaemonEndpoint, Host, HostSettings, Store
from tests.support.docker import docker_image, docker_label  # noqa: F401 - fixtures
from tests.support.docker import launch_context as support_launch_context
from tests.support.docker import load_docker_launcher, renewed  # noqa: F401 - re-exported for the tests

#: Where the fixture adapters are mounted inside a container.
FIXTURES_TARGET = "/opt/fixtures"
FIXTURES_SOURCE = Path(__file__).resolve().parent / "adapters"
#: Reconnect quickly: these tests kill daemons on purpose.
FAST = dict(reconnect_base=0.02, reconnect_cap=0.25)


@pytest.fixture(scope="session")
def launcher() -> Any:
    return load_docker_launcher()


def launch_context(label: str, image: str, *, fixtures: bool = False, **given: Any) -> dict[str, Any]:
    """:func:`tests.support.docker.launch_context`; ``fixtures`` mounts this
    directory's fixture adapters into the container (``--adapter
    docker_fixture_adapters:ATTR``)."""
    context = support_launch_context(label, image, **given)
    if fixtures:
        mount = {"source": str(FIXTURES_SOURCE), "target": FIXTURES_TARGET, "readonly": True}
        context["options"]["mounts"] = [*context["options"].get("mounts", []), mount]
        context["env"]["PYTHONPATH"] = FIXTURES_TARGET
    return context


def endpoint(started: dict[str, Any], context: dict[str, Any]) -> DaemonEndpoint:
    assert "code" not in started, started
    return DaemonEndpoint(started["url"], context["token"])


async def start_host(nursery: trio.Nursery, store: Store, target: DaemonEndpoint) -> Host:
    host = Host(store, target, HostSettings(**FAST))  # type: ignore[arg-type]
    await nursery.start(host.run)
    return host


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Store(tmp_path / "host.db") as opened:
        yield opened
