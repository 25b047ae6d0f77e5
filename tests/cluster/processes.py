"""A cluster of ``router serve`` processes on one PostgreSQL database and
one ``router daemon --adapter echo``, for the process tests and
``bench/cluster.py``: start, deliver, read the board, check the record."""

from __future__ import annotations

import json
import re
import subprocess
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import trio

from tests.api.processes import REPO, ROUTER, environment, page_url, read_lines, stop

#: The lease's life in the tests (seconds): short, so a takeover is quick;
#: long enough that a loaded machine renews in time.
LEASE_TTL = 6.0
TOKEN = "cluster-daemon-token"


@attrs.define
class Member:
    """One ``router serve`` of the cluster."""

    name: str
    process: trio.Process
    url: str
    token: str
    stderr: Path
    folder: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def client(self, timeout: float = 60) -> Any:
        import httpx

        return httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout)

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


async def start_member(folder: Path, name: str, store: str, daemon_url: str | None, *,
                       lease_ttl: float = LEASE_TTL, env: dict[str, str] | None = None) -> Member:
    """``router serve`` named ``name`` over ``store``: on the daemon at
    ``daemon_url``, or with None on its own in-process daemon (the default
    cluster mode)."""
    folder.mkdir(parents=True, exist_ok=True)
    stderr = folder / "serve.stderr"
    with open(stderr, "wb") as err:
        process = await trio.lowlevel.open_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(folder / "data"), "--settings",
             str(folder / "settings"), "--store", store,
             *(["--daemon", daemon_url] if daemon_url is not None else []), "--log-level", "info"],
            stdout=subprocess.PIPE, stderr=err, cwd=REPO,
            env=environment({"ROUTER_CLUSTER_LEASE_TTL": str(lease_ttl), "ROUTER_DAEMON_TOKEN": TOKEN, **(env or {})}),
        )
    assert process.stdout is not None
    with trio.fail_after(90):
        lines = await read_lines(process.stdout, 2)
    found = page_url(lines[0], folder / "settings") if lines else None
    if found is None:
        await stop(process)
        raise AssertionError(f"router serve {name} did not start: {lines} {stderr.read_text()}")
    return Member(name=name, process=process, url=found[0], token=found[1], stderr=stderr, folder=folder)


@asynccontextmanager
async def cluster(tmp: Path, store: str, routers: int = 3, *, lease_ttl: float = LEASE_TTL,
                  env: dict[str, str] | None = None) -> AsyncIterator[tuple[list[Member], str]]:
    """``routers`` routers over ``store`` and one echo daemon (yielded with
    the daemon's URL), each with ``env`` added; every process stopped at
    the end."""
    from tests.support.daemons import spawn_daemon

    async with AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(spawn_daemon("ours", token=TOKEN, runtime_id="cluster-daemon"))
        members: list[Member] = []
        try:
            for i in range(routers):
                members.append(await start_member(tmp / f"r{i}", f"r{i}", store, daemon.url, lease_ttl=lease_ttl,
                                                  env=env))
            yield members, daemon.url
        except BaseException:
            _report(store, members)
            raise
        finally:
            with trio.CancelScope(shield=True):
                for member in members:
                    if member.process.returncode is None:
                        member.process.send_signal(18)  # SIGCONT, in case a test left it stopped
                    await stop(member.process)


def _report(store: str, members: list[Member]) -> None:
    """What a failed test's reader needs (printed: pytest shows it with the
    failure): who waits on which lock in the database, and each router's
    log's end."""
    import psycopg

    try:
        with psycopg.connect(store, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pid, application_name, state, wait_event_type, wait_event, "
                "pg_blocking_pids(pid), now() - xact_start, left(query, 160) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
        print("database sessions:", *rows, sep="\n  ")
    except Exception as exc:  # the report must never hide the failure
        print(f"database sessions: unreadable ({exc})")
    for member in members:
        print(f"--- {member.name} (pid {member.process.pid}, returncode {member.process.returncode}): log's end")
        print(member.log()[-6000:])


def make_sessions(store: str, ids: list[str]) -> None:
    """Container sessions in the shared record (each enters the cluster
    free: the fence trigger makes its lease row)."""
    from router.host import Store

    with Store(store, exclusive=False) as record:
        for each in ids:
            record.sessions.create(each)


async def deliver(member: Member, client: Any, session: str, event_id: str, text: str) -> tuple[int, Any]:
    """``POST /sessions/<id>/messages`` with ``wait``: the status and body."""
    response = await client.post(f"/sessions/{session}/messages",
                                 json={"text": text, "eventId": event_id, "wait": True})
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return response.status_code, body


async def board(member: Member) -> list[dict[str, Any]]:
    async with member.client() as client:
        response = await client.get("/sessions")
        response.raise_for_status()
        body = response.json()
    return body["sessions"] if isinstance(body, dict) else body


def holder_of(entry: dict[str, Any]) -> str | None:
    router = entry.get("router")
    return router.get("cluster") if isinstance(router, dict) else None


_TURN = re.compile(r"echo: (.*) \(turn (\d+)\)")


def record_check(store: str, sessions: list[str]) -> dict[str, Any]:
    """What the shared record holds: per session its operations (id →
    status) and the echo's turn numbers, in transcript order."""
    from router.host import Store

    out: dict[str, Any] = {}
    with Store(store, exclusive=False) as record:
        for session in sessions:
            operations = {op.id: op.status for op in record.operations.all(session=session)}
            turns = []
            for message in record.messages.all(session):
                if message.get("role") != "assistant":
                    continue
                found = _TURN.search(json.dumps(message))
                if found is not None:
                    turns.append(int(found.group(2)))
            out[session] = {"operations": operations, "turns": turns}
    return out
