"""A private, throwaway PostgreSQL cluster for a test session.

:class:`Cluster` runs Debian's PostgreSQL 15 binaries
(``/usr/lib/postgresql/15/bin``, or ``$ROUTER_POSTGRES_BIN``) on a free
loopback port with its Unix socket in a private temporary folder, ``-A
trust``: reachable only from this machine, no password. As root it runs as
the ``postgres`` user (the server refuses root) through ``setpriv
--pdeathsig INT``, which execs, so the child's PID is the postmaster's, and
the server shuts down by itself if the test process dies; not root, it runs
directly. ``fsync``, ``synchronous_commit`` and ``full_page_writes`` are off:
a throwaway cluster, never one whose figures are published as the cost of a
commit (bench/serve_load.py says which it used).

The pytest fixtures: ``postgres`` (one cluster per session; skipped with
the reason when the binaries are missing, failed instead when
``ROUTER_REQUIRE_POSTGRES=1``) and ``postgres_url`` (a fresh, empty database
per test, made from ``template0``).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

#: Debian's ``postgresql`` package (15 in bookworm).
DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
#: How long the server may take to accept connections (it takes about 0.1 s
#: on these machines; the bound is for a loaded CI box).
START_TIMEOUT = 60.0


#: The settings of a cluster whose data may be lost (tests only).
THROWAWAY = ("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")


def bin_dir() -> Path:
    return Path(os.environ.get("ROUTER_POSTGRES_BIN", DEFAULT_BIN))


def missing() -> str | None:
    """Why no cluster can start here, or None."""
    for name in ("initdb", "postgres", "pg_isready"):
        if not (bin_dir() / name).exists():
            return f"PostgreSQL is not installed ({bin_dir() / name} is missing; apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError as error:
        return f"psycopg does not import: {error}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Cluster:
    """One running cluster (see the module docstring). ``url(db)`` is the
    address of database ``db``; :meth:`create_database` makes a fresh one."""

    def __init__(self, *, max_connections: int = 300, durable: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="router-pg-"))
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)
        self._max_connections = max_connections
        #: PostgreSQL's own defaults (fsync, synchronous_commit and
        #: full_page_writes on: every commit on disk) instead of the
        #: throwaway settings; bench/serve_load.py measures both.
        self.durable = durable

    def _as_server_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig", "INT", "--", *argv]

    def start(self) -> Cluster:
        data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            self._as_server_user([str(bin_dir() / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                                  "-E", "UTF8", "--locale=C", "--no-sync"]),
            check=True, capture_output=True,
        )
        return self._serve()

    def shut_down(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data: ``fast`` (SIGINT: every
        backend ended, a clean checkpoint) or ``immediate`` (SIGQUIT: no
        checkpoint; the next start recovers from the WAL)."""
        assert self.proc is not None
        self.proc.send_signal({"fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode])
        self.proc.wait(timeout=30)

    def restart(self) -> Cluster:
        """Start the server again on its data after :meth:`shut_down`, on the same port."""
        return self._serve()

    def terminate_backends(self, database: str) -> int:
        """``pg_terminate_backend`` every session of ``database``: how many."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as admin:
            rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                                 "AND pid <> pg_backend_pid()", (database,)).fetchall()
        return len(rows)

    def _serve(self) -> Cluster:
        data = self.root / "data"
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            self._as_server_user([
                str(bin_dir() / "postgres"), "-D", str(data), "-c", "listen_addresses=127.0.0.1",
                "-p", str(self.port), "-k", str(self.root), "-c", f"max_connections={self._max_connections}",
                *([] if self.durable else THROWAWAY),
            ]),
            stdout=log, stderr=log,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while subprocess.run([str(bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start: {(self.root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server's processes alive now
        (the postmaster and its backends: what the database costs)."""
        assert self.proc is not None
        total = 0.0
        for pid in [self.proc.pid, *_children(self.proc.pid)]:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a backend that just ended
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def statements(self) -> tuple[int, int]:
        """Transactions committed and rolled back in the whole cluster
        (``pg_stat_database``; the server's statistics lag up to a second)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as admin:
            row = admin.execute("SELECT sum(xact_commit), sum(xact_rollback) FROM pg_stat_database").fetchone()
        return int(row[0]), int(row[1])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT: fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def required() -> bool:
    return os.environ.get("ROUTER_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    reason = missing()
    if reason is not None:
        if required():
            pytest.fail(f"ROUTER_REQUIRE_POSTGRES=1 and {reason}")
        pytest.skip(reason)
    cluster = Cluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres: Cluster) -> str:
    """A fresh, empty database of the session's cluster."""
    return postgres.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where one record lives, on each backend: a SQLite file (a path) or
    a fresh PostgreSQL database (a URL); ``Store`` and ``DeliveryLog`` take
    either."""
    if request.param == "sqlite":
        return str(tmp_path / "record.db")
    return request.getfixturevalue("postgres_url")
