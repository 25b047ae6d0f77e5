"""Fixtures for the tests on a real Docker engine: the project image, a
label per test (everything carrying it is removed afterwards), the ``docker``
launcher module, and contexts for it."""

from __future__ import annotations

import importlib.util
import secrets
from pathlib import Path
from typing import Any

import pytest
import trio

from router.host import DaemonEndpoint, Host, HostSettings, Store
from tests.support.docker import REPO, TEST_LABEL, docker_image, docker_label  # noqa: F401 - fixtures

#: Where the fixture adapters are mounted inside a container.
FIXTURES_TARGET = "/opt/fixtures"
FIXTURES_SOURCE = Path(__file__).resolve().parent / "adapters"
#: Reconnect quickly: these tests kill daemons on purpose.
FAST = dict(reconnect_base=0.02, reconnect_cap=0.25)


def load_docker_launcher() -> Any:
    """The ``docker`` launcher module, through the plug-in loader once it
    knows the ``launcher`` kind, else imported by path as the loader does."""
    from router.plugins.kinds import KINDS

    if "launcher" in KINDS:
        from router.plugins.loader import import_module

        loaded = import_module("launcher", "docker")
        assert not hasattr(loaded, "code"), loaded
        return loaded.module  # type: ignore[union-attr]
    path = REPO / "router" / "plugins" / "launcher" / "docker" / "__init__.py"
    spec = importlib.util.spec_from_file_location("_router_test_launcher_docker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def launcher() -> Any:
    return load_docker_launcher()


def launch_context(label: str, image: str, *, session: str = "root", harness: str = "echo",
                   options: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                   fixtures: bool = False) -> dict[str, Any]:
    """A fresh context (new runtime id and token) for one start."""
    options = {"image": image, **(options or {})}
    env = dict(env or {})
    if fixtures:
        mount = {"source": str(FIXTURES_SOURCE), "target": FIXTURES_TARGET, "readonly": True}
        options["mounts"] = [*options.get("mounts", []), mount]
        env["PYTHONPATH"] = FIXTURES_TARGET
    return {
        "session": session,
        "runtime": f"r-{secrets.token_hex(8)}",
        "token": secrets.token_hex(16),
        "harness": harness,
        "env": env,
        "labels": {TEST_LABEL: label, "router.session": session},
        "options": options,
        "workspace": f"router-ws-{label}-{session}",
    }


def renewed(context: dict[str, Any]) -> dict[str, Any]:
    """The same session's context for a replacement: a new runtime and token."""
    return {**context, "runtime": f"r-{secrets.token_hex(8)}", "token": secrets.token_hex(16)}


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
