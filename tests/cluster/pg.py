"""A private, throwaway PostgreSQL 15 cluster for the cluster tests.

Debian's server binaries (``/usr/lib/postgresql/15/bin``; ``apt-get install
postgresql`` where missing), never the packaged cluster on 5432: ``initdb``
into a fresh folder, ``postgres`` on a free loopback port with its Unix
socket in that folder, trust authentication (reachable only from this
machine), and the durability settings off (a test cluster: nothing in it
outlives the run). As root the server runs as the ``postgres`` user through
``setpriv --pdeathsig INT``, so it is a direct child and stops by itself if
the test process dies.

``Postgres.database(name)`` creates a database and returns its URL.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import attrs
import pytest

BIN = Path("/usr/lib/postgresql/15/bin")
#: Connections: three routers each with a worker pool and a LISTEN
#: connection, and the tests' own (the default, 100, is short).
MAX_CONNECTIONS = 300


@attrs.define
class Postgres:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(2)  # SIGINT: the fast shutdown
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start() -> Postgres:
    if not (BIN / "postgres").exists():
        pytest.fail(f"PostgreSQL 15 is not installed ({BIN}): apt-get install -y postgresql")
    folder = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
    root = os.geteuid() == 0
    as_postgres: list[str] = []
    if root:
        shutil.chown(folder, "postgres", "postgres")
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig", "INT", "--"]
    subprocess.run([*as_postgres, str(BIN / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres",
                    "-E", "UTF8", "--locale=C", "--no-sync"], check=True, capture_output=True)
    port = _free_port()
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen(
        [*as_postgres, str(BIN / "postgres"), "-D", str(folder / "data"), "-c", "listen_addresses=127.0.0.1",
         "-p", str(port), "-k", str(folder), "-c", "fsync=off", "-c", "synchronous_commit=off",
         "-c", "full_page_writes=off", "-c", f"max_connections={MAX_CONNECTIONS}"],
        stdout=log, stderr=log,
    )
    server = Postgres(folder=folder, port=port, process=process)
    deadline = time.monotonic() + 30
    while subprocess.run([str(BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode != 0:
        if process.poll() is not None or time.monotonic() > deadline:
            text = (folder / "server.log").read_text(errors="replace")
            server.stop()
            pytest.fail(f"PostgreSQL did not start: {text}")
        time.sleep(0.05)
    return server


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    server = start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres: Postgres, request: pytest.FixtureRequest) -> str:
    """A fresh database for one test."""
    name = "t_" + "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:50].lower()
    return postgres.database(name)
