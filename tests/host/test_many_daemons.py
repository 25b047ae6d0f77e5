"""One host, a daemon per session: each session's endpoint is in
its record, each link dials its own, and one session's dead daemon never
delays another's. Real daemons (ours and the reference), real sockets."""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from router.host import DaemonEndpoint, Store
from tests.host.conftest import start_host
from tests.support.daemons import spawn_daemon


def dead_url() -> str:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"ws://127.0.0.1:{port}"


async def test_each_session_dials_its_own_daemon_and_a_dead_one_delays_no_other(
    kind: str, tmp_path: Path
) -> None:
    async with spawn_daemon(kind, token="token-a", runtime_id="runtime-a") as a, \
            spawn_daemon(kind, token="token-b", runtime_id="runtime-b") as b:
        with Store(tmp_path / "host.db") as store:
            async with trio.open_nursery() as nursery:
                host = await start_host(nursery, store, None)  # no default endpoint: each names its own
                await host.sessions.create("dead", endpoint=DaemonEndpoint(dead_url(), "x"))
                await host.sessions.create("a", endpoint=DaemonEndpoint(a.url, a.token))
                await host.sessions.create("b", endpoint=DaemonEndpoint(b.url, b.token))
                # The dead one first: its link is backing off while the others run.
                await host.session("dead").submit("anyone?", operation_id="d1")
                with trio.fail_after(60):
                    for round in (1, 2):
                        for name in ("a", "b"):
                            result, _ = await host.session(name).prompt(f"{name}{round}", operation_id=f"{name}{round}")
                            assert (result.status, result.text) == ("done", f"echo: {name}{round} (turn {round})")
                assert host.session("a").link.runtime_id == "runtime-a"
                assert host.session("b").link.runtime_id == "runtime-b"
                dead = host.session("dead").link
                assert dead.state in ("connecting", "backoff") and dead.connections == 0
                assert dead.last_error is not None and dead.last_error.code == "daemon-unreachable"
                assert (await host.session("dead").pending())[0]["status"] == "queued"
                record = await store.call(store.sessions.require, "a")
                assert (record.daemon.url, record.daemon.token) == (a.url, "token-a")
                await host.aclose()


async def test_a_session_without_an_endpoint_uses_the_default_and_an_old_store_opens(tmp_path: Path) -> None:
    """Sessions of a store from before schema v7 name no endpoint: they
    keep the host's default (one daemon), as before."""
    import sqlite3

    from router.host.store import MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for step in MIGRATIONS[:6]:
        step(db)
    db.execute("PRAGMA user_version = 6")
    db.execute("INSERT INTO sessions (id, ordinal, created_at, updated_at) VALUES ('old', 1, 0, 0)")
    db.commit()
    db.close()
    async with spawn_daemon("ours") as daemon:
        with Store(path) as store:
            assert store.schema_version() == SCHEMA_VERSION >= 7  # migrated to the current schema
            record = store.sessions.require("old")
            assert record.daemon.url is None and record.daemon.state is None
            async with trio.open_nursery() as nursery:
                host = await start_host(nursery, store, DaemonEndpoint(daemon.url, daemon.token))
                with trio.fail_after(60):
                    result, _ = await host.session("old").prompt("still here", operation_id="o1")
                assert result.text == "echo: still here (turn 1)"
                await host.aclose()
