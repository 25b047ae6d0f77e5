"""Load test of ``router serve``: prints a table and writes a plot.

    .venv/bin/python bench/serve_load.py --senders 1,20 --sessions 20 --duration 20
                                         [--history N [--compare]] [--plot serve_load.png]
                                         [--against CHECKOUT] [--floor] [--py-spy PATH] [--hops]
                                         [--store URL | --postgres durable|throwaway] [--routers N]

It starts a real ``router serve --port 0`` (its own process, the in-process
echo daemon) on a fresh data directory, reads the API's URL from the first
line the command prints (``listening on http://127.0.0.1:PORT/`` and, when
the API takes a bearer token, ``...?token=TOKEN``: the token is then sent as
``Authorization: Bearer``), creates ``--sessions`` container sessions and,
for each load level in ``--senders``, runs that many senders for
``--duration`` seconds. A sender posts one delivery at a time
(``POST /sessions/<s>/messages``, a new event id each) on its own
keep-alive connection and waits for the reply before the next; sender ``i``
writes to session ``i mod sessions``. Every reply must be ``200`` with
``status: delivered`` (anything else is counted as an error and printed).

``--history N`` first loads N turns (deliveries, through the same API, many
senders at once, not timed) so that the rate on a directory with a long
history can be compared with a fresh one: run it twice, or pass
``--compare`` to run a fresh directory and one with ``--history`` turns in
the same invocation, alternating level by level.

``--against CHECKOUT`` runs every level against another checkout's router
too (alternating: a before/after in one run); ``--floor`` adds ``GET
/healthz`` at each level, after the level's deliveries (the HTTP stack's
own cost), and prints per directory and level the medians over a level's
repeats (``--senders 1,20,1,20``) of the server's CPU per delivery and of
the p50, each divided by the floor's; ``--py-spy PATH`` runs
the server under ``py-spy record --gil`` (collapsed stacks to PATH, and
with ``--against`` the other checkout's to ``PATH.dir1.0``);
``--hops`` counts the server's worker-thread hops (every
``trio.to_thread.run_sync``, by the four calling functions outside trio),
printed per reply and by call site for each directory once its server has
stopped (a ``sitecustomize`` on the server's path wraps the function; the
counts include the start-up and the session creation).

``--store URL`` runs every router on that record (``router serve --store
URL``: a SQLite data directory or ``postgresql://…``; every directory's
routers share it). ``--postgres durable`` starts a private PostgreSQL 15
cluster with the server's defaults (fsync, synchronous_commit and
full_page_writes on: each commit on disk) and gives each directory a fresh
database of it; ``--postgres throwaway`` the same with the three off (the
tests' settings). With a cluster of its own the table adds the database's
CPU per reply (the postmaster and its backends, from ``/proc``).
``--routers N`` runs N routers per directory, on the one record when it is
PostgreSQL (on SQLite each has a data directory of its own: a SQLite file
serves one router); sender ``i`` posts to router ``i mod N``, each router
to sessions of its own (``r<k>-load-<j>``), and the rate is their sum.

The client is a minimal HTTP/1.1 client on Trio sockets in this process, so
its own cost per request stays small next to the server's (the table
prints the client's CPU per request, and the server's, from ``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trio

REPO = Path(__file__).resolve().parent.parent
#: ``--py-spy PATH``: the server runs under ``py-spy record`` (collapsed stacks).
PROFILE: str | None = None
#: ``--hops``: the server counts its worker-thread hops (see HOP_COUNTER).
HOPS = False
#: The ``sitecustomize`` that ``--hops`` puts on the server's path: it wraps
#: ``trio.to_thread.run_sync`` and writes the counts, by call site, to
#: ``$SERVE_LOAD_HOPS`` when the server exits.
HOP_COUNTER = """
import atexit, collections, json, os, sys
import trio
_real = trio.to_thread.run_sync
_counts = collections.Counter()
async def _counted(fn, *args, **kwargs):
    frame, names = sys._getframe(1), []
    while frame is not None and len(names) < 4:
        if "/trio/" not in frame.f_code.co_filename and "router/store/worker" not in frame.f_code.co_filename:
            names.append(frame.f_code.co_qualname)
        frame = frame.f_back
    _counts[" < ".join(names)] += 1
    return await _real(fn, *args, **kwargs)
trio.to_thread.run_sync = _counted
@atexit.register
def _dump():
    with open(os.environ["SERVE_LOAD_HOPS"], "w") as out:
        json.dump(dict(_counts), out)
"""
#: ``--calls``: the server counts the Python functions it calls (and the C
#: functions called from Python) while a level runs (see CALL_COUNTER): a
#: measure of work the machine's load does not stretch.
CALLS = False
#: ``--calls-by``: ``package`` or ``task``.
CALLS_BY = "package"
#: The ``sitecustomize`` that ``--calls`` puts on the server's path: a
#: profile function on every thread counts ``call`` and ``c_call`` events
#: while counting is on, by where the function called lives (a package, or
#: ``router/<part>``) or, with ``--calls-by task``, by the Trio task it runs
#: in (its coroutine's function; every worker thread as one); SIGUSR1 zeroes the counts and turns counting on,
#: SIGUSR2 turns it off and writes the counts (JSON) to ``$SERVE_LOAD_CALLS``.
CALL_COUNTER = """
import collections, json, os, signal, sys, threading
_state = [False]
_by = collections.Counter()
def _where(frame, event, arg):
    if event == "call":
        name = frame.f_code.co_filename.replace(os.sep, "/")
    else:
        name = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__ or "?"
        return name.split(".")[0] if not name.startswith(("router.", "wire.")) else "/".join(name.split(".")[:2])
    for root in ("/router/", "/wire/"):
        if root in name and "site-packages" not in name:
            parts = name[name.rfind(root) + 1:].split("/")
            return "/".join(parts[:2]).removesuffix(".py")
    if "site-packages/" in name:
        return name.split("site-packages/", 1)[1].split("/")[0].removesuffix(".py")
    return name.rsplit("/", 1)[-1].removesuffix(".py")
def _task(frame, event, arg):
    while frame is not None:
        back = frame.f_back
        if back is None:
            return "worker threads"
        if back.f_code.co_name == "unrolled_run":
            if "site-packages/trio/" in frame.f_code.co_filename:
                return "trio's scheduler"
            return frame.f_code.co_qualname
        frame = back
    return "?"
_key = _task if os.environ.get("SERVE_LOAD_CALLS_BY") == "task" else _where
def _count(frame, event, arg):
    if _state[0] and (event == "call" or event == "c_call"):
        _by[_key(frame, event, arg)] += 1
def _on(signum, frame):
    _by.clear()
    _state[0] = True
def _off(signum, frame):
    _state[0] = False
    path = os.environ["SERVE_LOAD_CALLS"]
    with open(path + ".tmp", "w") as out:
        json.dump(dict(_by), out)
    os.replace(path + ".tmp", path)
signal.signal(signal.SIGUSR1, _on)
signal.signal(signal.SIGUSR2, _off)
sys.setprofile(_count)
threading.setprofile(_count)
"""
#: The first line ``router serve`` prints once it listens: its page's URL
#: (with the token), or ``listening on URL`` in older checkouts.
LISTENING = re.compile(r"(?:listening on )?(http://[^\s]+)")
PAGE = re.compile(r"(http://[^\s/]+/\?token=[^\s]+)$")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A ``router serve`` process on a fresh (or given) data directory."""

    def __init__(self, data_dir: Path, extra: list[str], repo: Path = REPO) -> None:
        self.repo = repo
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.token: str | None = None

    def start(self) -> None:
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.data_dir / "config"), "XDG_RUNTIME_DIR": str(self.data_dir / "run")}
        (self.data_dir / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
        prefix = [] if not PROFILE else [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw",
                                         "--rate", "200", "--gil", "-o", self.profile, "--"]
        path = str(self.repo)
        if HOPS or CALLS:
            site = self.data_dir / "counters"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text((HOP_COUNTER if HOPS else "") + (CALL_COUNTER if CALLS else ""))
            path = f"{site}{os.pathsep}{path}"
            env["SERVE_LOAD_HOPS"] = str(self.hops_file)
            env["SERVE_LOAD_CALLS"] = str(self.calls_file)
            env["SERVE_LOAD_CALLS_BY"] = CALLS_BY
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "router", "serve", "--port", "0", "--data-dir", str(self.data_dir / "data"),
             "--settings", str(self.data_dir / "settings"), *self.extra],
            cwd=self.repo, env={**env, "PYTHONPATH": path}, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        while line and (line.startswith("py-spy>") or not line.strip()):  # py-spy's own lines come first
            line = self.proc.stdout.readline()
        # The first line is the page's URL with the token (``http://…/?token=…``);
        # an older router printed ``listening on URL`` first.
        found = PAGE.match(line.strip()) or LISTENING.search(line)
        if found is None:
            self.stop()
            raise SystemExit(f"router serve did not start: {line!r}")
        url = urlsplit(found.group(1))
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.token = (parse_qs(url.query).get("token") or [None])[0]

    @property
    def profile(self) -> str:
        """``--py-spy PATH``: where this server's stacks go: PATH for the
        first directory's first router, ``PATH.dir<N>.<K>`` for the others
        (``--against``: ``PATH.dir1.0`` is the other checkout's)."""
        assert PROFILE is not None
        name = f"{self.data_dir.parent.name}.{self.data_dir.name}"
        return PROFILE if name == "dir0.0" else f"{PROFILE}.{name}"

    def cpu(self) -> float:
        assert self.proc is not None
        return _cpu_seconds(self._server_pid())

    @property
    def calls_file(self) -> Path:
        return self.data_dir / "calls.txt"

    def count_calls(self, on: bool) -> None:
        """``--calls``: start counting (zeroed), or stop and write the count."""
        if on:
            self.calls_file.unlink(missing_ok=True)
        os.kill(self._server_pid(), signal.SIGUSR1 if on else signal.SIGUSR2)

    async def calls(self) -> dict[str, int]:
        """The counts written by ``count_calls(False)``, by where the
        function lives (waits for them)."""
        with trio.fail_after(30):
            while not self.calls_file.exists():
                await trio.sleep(0.01)
        return json.loads(self.calls_file.read_text())

    @property
    def hops_file(self) -> Path:
        return self.data_dir / "hops.json"

    def hops(self) -> dict[str, int]:
        """The hop counts by call site (``--hops``; after :meth:`stop`)."""
        try:
            return json.loads(self.hops_file.read_text())
        except (OSError, ValueError):
            return {}

    def _server_pid(self) -> int:
        assert self.proc is not None
        if PROFILE:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            if children:
                return int(children[0])
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self._server_pid(), signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Client:
    """One keep-alive HTTP/1.1 connection (the requests this bench makes:
    JSON bodies with ``Content-Length``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.stream: trio.SocketStream | None = None
        self.buffer = b""

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if self.stream is None:
            self.stream = await trio.open_tcp_stream(self.server.host, self.server.port)
        data = b"" if body is None else json.dumps(body).encode()
        auth = "" if self.server.token is None else f"Authorization: Bearer {self.server.token}\r\n"
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.server.host}:{self.server.port}\r\n{auth}"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        await self.stream.send_all(head.encode() + data)
        while b"\r\n\r\n" not in self.buffer:
            await self._more()
        raw_head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = raw_head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        if "content-length" in headers:
            length = int(headers["content-length"])
            while len(self.buffer) < length:
                await self._more()
            payload, self.buffer = self.buffer[:length], self.buffer[length:]
        else:  # chunked
            payload = await self._chunked()
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return status, json.loads(payload) if payload else None

    async def _chunked(self) -> bytes:
        out = b""
        while True:
            while b"\r\n" not in self.buffer:
                await self._more()
            size_line, self.buffer = self.buffer.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(self.buffer) < size + 2:
                await self._more()
            out, self.buffer = out + self.buffer[:size], self.buffer[size + 2:]
            if size == 0:
                return out

    async def _more(self) -> None:
        assert self.stream is not None
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None
            self.buffer = b""


async def create_sessions(server: Server, count: int, prefix: str = "") -> list[str]:
    client = Client(server)
    names = []
    for index in range(count):
        status, body = await client.request("POST", "/sessions", {"id": f"{prefix}load-{index}"})
        if status not in (200, 201):
            raise SystemExit(f"POST /sessions answered {status}: {body}")
        names.append(body["id"])
    await client.aclose()
    return names


class Fleet:
    """The routers of one directory (``--routers``), and the database they
    share when this run started its own cluster (None otherwise)."""

    def __init__(self, servers: list[Server], cluster: Any = None) -> None:
        self.servers = servers
        self.cluster = cluster
        self.sessions: list[list[str]] = []

    async def create_sessions(self, count: int) -> None:
        for k, server in enumerate(self.servers):
            self.sessions.append(await create_sessions(server, count, f"r{k}-" if len(self.servers) > 1 else ""))

    def route(self, index: int) -> tuple[Server, str]:
        """Sender ``index``'s router and session."""
        k = index % len(self.servers)
        own = self.sessions[k]
        return self.servers[k], own[(index // len(self.servers)) % len(own)]

    def cpu(self) -> float:
        return sum(server.cpu() for server in self.servers)

    def db_cpu(self) -> float | None:
        return None if self.cluster is None else self.cluster.cpu_seconds()

    def db_transactions(self) -> int | None:
        return None if self.cluster is None else sum(self.cluster.statements())

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


class Level:
    def __init__(self, senders: int) -> None:
        self.senders = senders
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.seconds = 0.0
        self.server_cpu = 0.0
        self.client_cpu = 0.0
        #: The database's CPU and transactions over the level (None: not measured).
        self.db_cpu: float | None = None
        self.db_transactions: int | None = None
        #: ``--calls``: the server's function calls over the level (None: not counted).
        self.calls: int | None = None
        self.calls_by: dict[str, int] = {}

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


async def run_level(fleet: Fleet, senders: int, duration: float, floor: bool = False) -> Level:
    """``senders`` senders for ``duration`` seconds; with ``floor``, each
    asks ``GET /healthz`` instead (the HTTP stack alone: no delivery)."""
    level = Level(senders)
    routes = [fleet.route(index) for index in range(senders)]
    clients = [Client(server) for server, _ in routes]
    # Warm each connection (and each session's first turn) outside the window.
    async with trio.open_nursery() as nursery:
        for index, client in enumerate(clients):
            nursery.start_soon(client.request, "POST", f"/sessions/{routes[index][1]}/messages", {"text": "warm up"})
    await trio.sleep(1.5 if fleet.cluster is not None else 0)  # the server's statistics catch up (1 s)
    stop = trio.current_time() + duration

    async def sender(index: int, client: Client) -> None:
        path = f"/sessions/{routes[index][1]}/messages"
        while trio.current_time() < stop:
            started = time.perf_counter()
            if floor:
                status, body = await client.request("GET", "/healthz")
            else:
                status, body = await client.request("POST", path, {"text": "a message of ordinary length",
                                                                   "eventId": uuid.uuid4().hex})
            elapsed = time.perf_counter() - started
            if status == 200 and isinstance(body, dict) and (floor or body.get("status") == "delivered"):
                level.latencies.append(elapsed)
            else:
                level.errors.append(f"{status} {body}")

    xacts0 = fleet.db_transactions()
    if CALLS:
        for server in fleet.servers:
            server.count_calls(True)
    cpu0, db0, mine0, wall0 = fleet.cpu(), fleet.db_cpu(), time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index, client in enumerate(clients):
            nursery.start_soon(sender, index, client)
    level.seconds = time.perf_counter() - wall0
    level.server_cpu, level.client_cpu = fleet.cpu() - cpu0, time.process_time() - mine0
    if CALLS:
        for server in fleet.servers:
            server.count_calls(False)
        level.calls_by = {}
        for server in fleet.servers:
            for where, count in (await server.calls()).items():
                level.calls_by[where] = level.calls_by.get(where, 0) + count
        level.calls = sum(level.calls_by.values())
    db1 = fleet.db_cpu()
    level.db_cpu = None if db0 is None or db1 is None else db1 - db0
    if xacts0 is not None:
        await trio.sleep(1.5)
        level.db_transactions = (fleet.db_transactions() or 0) - xacts0
    for client in clients:
        await client.aclose()
    return level


async def load_history(fleet: Fleet, turns: int) -> None:
    """``turns`` deliveries spread over the sessions, as fast as they go."""
    left = [turns]
    routes = [fleet.route(index) for index in range(min(sum(map(len, fleet.sessions)) * 2, 40))]
    clients = [Client(server) for server, _ in routes]

    step = max(1, turns // 10)  # a progress line every tenth: the loading rate should stay flat too
    mark = [time.perf_counter(), fleet.cpu()]

    async def sender(index: int, client: Client) -> None:
        path = f"/sessions/{routes[index][1]}/messages"
        while left[0] > 0:
            left[0] -= 1
            done = turns - left[0]  # this turn's number, taken when it is sent (each sender its own)
            status, body = await client.request("POST", path, {"text": "history", "eventId": uuid.uuid4().hex})
            if status != 200:
                raise SystemExit(f"history: {status} {body}")
            if done % step == 0:
                now, cpu = time.perf_counter(), fleet.cpu()
                print(f"history: {done:,} turns, the last {step:,} at {step / (now - mark[0]):,.0f}/s,"
                      f" server CPU {(cpu - mark[1]) / step * 1e6:,.0f} µs/turn", flush=True)
                mark[:] = [now, cpu]

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index, client in enumerate(clients):
            nursery.start_soon(sender, index, client)
    print(f"history: {turns:,} turns loaded in {time.perf_counter() - started:.1f} s", flush=True)


def _row(name: str, level: Level) -> list[str]:
    ms = [value * 1000 for value in level.latencies] or [float("nan")]
    count = max(1, len(level.latencies))
    db = "-" if level.db_cpu is None else f"{level.db_cpu / count * 1e6:,.0f}"
    xacts = "-" if level.db_transactions is None else f"{level.db_transactions / count:,.1f}"
    return [
        name, str(level.senders), f"{len(level.latencies):,}", f"{level.rate:,.0f}",
        f"{statistics.median(ms):.2f}", f"{_percentile(ms, 0.9):.2f}", f"{_percentile(ms, 0.99):.2f}",
        f"{level.server_cpu / count * 1e6:,.0f}", db, xacts, f"{level.client_cpu / count * 1e6:,.0f}",
        str(len(level.errors)), "-" if level.calls is None else f"{level.calls / count:,.0f}",
    ]


def print_table(rows: list[list[str]]) -> None:
    header = ["directory", "senders", "replies", "per s", "p50 ms", "p90 ms", "p99 ms",
              "server CPU µs/req", "db CPU µs/req", "db xacts/req", "client CPU µs/req", "errors", "calls/req"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).rjust(width) if i else str(cell).ljust(width)
                        for i, (cell, width) in enumerate(zip(line, widths))))


def _median_of(levels: list[Level], measure: Any) -> float:
    return statistics.median(measure(level) for level in levels)


def _cpu_per_reply(level: Level) -> float:
    return level.server_cpu / max(1, len(level.latencies))


def _p50(level: Level) -> float:
    return statistics.median(level.latencies) if level.latencies else float("nan")


def _calls_per_reply(level: Level) -> float:
    return float("nan") if level.calls is None else level.calls / max(1, len(level.latencies))


def print_floor_ratios(results: dict[str, list[Level]], floors: list[Level]) -> None:
    """``--floor``: per directory and number of senders, the medians over
    the repeats of a level (``--senders 1,20,1,20``: two each) of the
    server's CPU per delivery, of the p50 and (``--calls``) of the
    function calls per delivery, each against the floor's (``GET /healthz``
    on the first directory's server, at the same level, in the same
    alternation); with ``--against``, the median of each repeat's CPU per
    delivery against the other checkout's in the same repeat (paired:
    the load of that moment cancels)."""
    names = list(results)
    header = ["directory", "senders", "runs", "server CPU µs/delivery", "÷ floor's", "p50 ms", "÷ floor's",
              "calls/delivery", "÷ floor's", "CPU ÷ the other's, paired"]
    rows = []
    for name, levels in results.items():
        for senders in dict.fromkeys(level.senders for level in levels):
            mine = [level for level in levels if level.senders == senders]
            floor = [level for level in floors if level.senders == senders]
            cpu, floor_cpu = _median_of(mine, _cpu_per_reply), _median_of(floor, _cpu_per_reply)
            p50, floor_p50 = _median_of(mine, _p50), _median_of(floor, _p50)
            calls, floor_calls = _median_of(mine, _calls_per_reply), _median_of(floor, _calls_per_reply)
            paired = "-"
            if len(names) == 2:
                other = [level for level in results[names[1 - names.index(name)]] if level.senders == senders]
                paired = f"{statistics.median(_cpu_per_reply(a) / _cpu_per_reply(b) for a, b in zip(mine, other)):.2f}"
            rows.append([name, str(senders), str(len(mine)), f"{cpu * 1e6:,.0f}", f"{cpu / floor_cpu:.1f}×",
                         f"{p50 * 1000:.2f}", f"{p50 / floor_p50:.1f}×",
                         "-" if calls != calls else f"{calls:,.0f}",
                         "-" if calls != calls else f"{calls / floor_calls:.1f}×", paired])
    print("medians against the floor (GET /healthz), per level:")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).rjust(width) if i else str(cell).ljust(width)
                        for i, (cell, width) in enumerate(zip(line, widths))))


def plot(results: dict[str, list[Level]], path: Path) -> None:
    """The rates and latencies as a PNG; a one-line note instead when
    matplotlib (the ``bench`` extra) is not installed: the table is the result."""
    try:
        import matplotlib
    except ImportError:
        print(f"(no plot: matplotlib is not installed; `pip install -e '.[bench]'` draws {path})")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rate_axis, latency_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, levels in results.items():
        senders = [level.senders for level in levels]
        rate_axis.plot(senders, [level.rate for level in levels], marker="o", label=name)
        for fraction, style in ((0.5, "-"), (0.9, "--"), (0.99, ":")):
            latency_axis.plot(
                [level.rate for level in levels],
                [_percentile([v * 1000 for v in level.latencies] or [0.0], fraction) for level in levels],
                style, marker="o", label=f"{name} p{int(fraction * 100)}",
            )
    rate_axis.set(xlabel="concurrent senders", ylabel="deliveries / s", title="throughput")
    latency_axis.set(xlabel="deliveries / s (load)", ylabel="latency, ms", yscale="log",
                     title="latency against load")
    for axis in (rate_axis, latency_axis):
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


async def main(args: argparse.Namespace) -> None:
    levels = [int(part) for part in args.senders.split(",")]
    names = ["fresh"] if not args.history else ([f"after {args.history:,} turns"] if not args.compare
                                                 else ["fresh", f"after {args.history:,} turns"])
    if args.against:  # the same levels against another checkout, alternating
        names += [f"{name} ({Path(args.against).name})" for name in names]
    cluster = _cluster(args.postgres)
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        servers: dict[str, Fleet] = {}
        try:
            for index, name in enumerate(names):
                repo = Path(args.against).resolve() if name.endswith(")") else REPO
                servers[name] = fleet = _start_fleet(args, cluster, Path(tmp) / f"dir{index}", repo)
                await fleet.create_sessions(args.sessions)
                if not name.startswith("fresh"):
                    await load_history(fleet, args.history)
            print(f"store: {_describe(args)}; {args.routers} router(s) per directory", flush=True)
            results: dict[str, list[Level]] = {name: [] for name in names}
            floors: list[Level] = []
            rows = []
            for senders in levels:
                for name in names:  # alternating, so both meet the same noise
                    level = await run_level(servers[name], senders, args.duration)
                    results[name].append(level)
                    rows.append(_row(name, level))
                    for error in level.errors[:3]:
                        print(f"  error ({name}, {senders} senders): {error}", file=sys.stderr)
                if args.floor:  # the floor at each level too, in the same alternation
                    floors.append(await run_level(servers[names[0]], senders, args.duration, floor=True))
                    rows.append(_row(f"{names[0]}: GET /healthz", floors[-1]))
            print_table(rows)
            if floors:
                print_floor_ratios(results, floors)
            if len(names) == 2 and args.against:
                for ours, theirs in zip(results[names[0]], results[names[1]]):
                    print(f"{ours.senders} senders: rate this tree / {names[1]} = {ours.rate / theirs.rate:.2f}")
            elif len(names) == 2:
                for fresh, old in zip(results[names[0]], results[names[1]]):
                    print(f"{fresh.senders} senders: rate {names[1]} / fresh = {old.rate / fresh.rate:.2f}")
            if args.plot:
                plot(results, Path(args.plot))
            if args.calls:
                print_calls(results, floors)
            if args.hops:
                report_hops(servers, results)
        finally:
            for fleet in servers.values():
                fleet.stop()
            if cluster is not None:
                cluster.stop()


def print_calls(results: dict[str, list[Level]], floors: list[Level]) -> None:
    """``--calls``: per directory and number of senders, the function calls
    per reply by where the function lives, or (``--calls-by task``) by the
    task calling it (those above 1 % of a column), summed over the level's
    repeats; the floor's too."""
    columns: dict[str, tuple[dict[str, int], int]] = {}
    for name, levels in [*results.items(), ("GET /healthz", floors)]:
        for level in levels:
            key = f"{name}, {level.senders}"
            by, replies = columns.get(key, ({}, 0))
            for where, count in level.calls_by.items():
                by[where] = by.get(where, 0) + count
            columns[key] = (by, replies + len(level.latencies))
    places = {where for by, replies in columns.values() for where, count in by.items()
              if count > 0.01 * sum(by.values())}
    totals = {where: sum(by.get(where, 0) / max(1, replies) for by, replies in columns.values()) for where in places}
    print(f"calls per reply, by {'the task calling' if CALLS_BY == 'task' else 'where the function lives'}:")
    header = ["where", *columns]
    rows = [[where, *(f"{by.get(where, 0) / max(1, replies):,.0f}" for by, replies in columns.values())]
            for where in sorted(places, key=lambda where: -totals[where])]
    rows.append(["all", *(f"{sum(by.values()) / max(1, replies):,.0f}" for by, replies in columns.values())])
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).rjust(width) if i else str(cell).ljust(width)
                        for i, (cell, width) in enumerate(zip(line, widths))))


def report_hops(servers: dict[str, Fleet], results: dict[str, list[Level]]) -> None:
    """``--hops``: stop each directory's routers (they write their counts as
    they exit) and print the counts."""
    for name, fleet in servers.items():
        fleet.stop()
        print_hops(name, fleet, sum(len(level.latencies) for level in results[name]))


def print_hops(name: str, fleet: Fleet, replies: int) -> None:
    """``--hops``: the directory's worker-thread hops per reply, and by call
    site (those above 0.05 per reply)."""
    counts: dict[str, int] = {}
    for server in fleet.servers:
        for site, count in server.hops().items():
            counts[site] = counts.get(site, 0) + count
    total = sum(counts.values())
    if not replies or not total:
        print(f"hops ({name}): not counted (no replies, or the server wrote no counts)")
        return
    print(f"hops ({name}): {total / replies:.2f} per reply ({total:,} hops, {replies:,} replies)")
    for site, count in sorted(counts.items(), key=lambda item: -item[1]):
        if count / replies >= 0.05:
            print(f"  {count / replies:5.2f}  {site}")


def _start_fleet(args: argparse.Namespace, cluster: Any, root: Path, repo: Path) -> Fleet:
    """``--routers`` routers on one record: ``--store``, a fresh database
    of ``cluster``, or (neither) a SQLite data directory each."""
    store = args.store if cluster is None else cluster.create_database()
    fleet = Fleet([], cluster)
    extra = [*args.serve_arg, *(["--store", store] if store else [])]
    for k in range(args.routers):
        (root / str(k)).mkdir(parents=True)
        fleet.servers.append(Server(root / str(k), extra, repo))
        fleet.servers[-1].start()
    return fleet


def _cluster(kind: str | None) -> Any:
    """A private PostgreSQL cluster for ``--postgres`` (None without it)."""
    if kind is None:
        return None
    sys.path.insert(0, str(REPO))
    from tests.support.postgres import Cluster, missing

    reason = missing()
    if reason is not None:
        raise SystemExit(f"--postgres: {reason}")
    return Cluster(durable=kind == "durable").start()


def _describe(args: argparse.Namespace) -> str:
    if args.postgres == "durable":
        return "a private PostgreSQL 15 cluster, its defaults (fsync, synchronous_commit, full_page_writes on)"
    if args.postgres == "throwaway":
        return "a private PostgreSQL 15 cluster, fsync, synchronous_commit and full_page_writes off"
    if args.store is None:
        return "SQLite, a data directory per router"
    from router.store.db import redact

    return redact(args.store)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--senders", default="1,5,20", help="load levels: concurrent senders, comma-separated")
    parser.add_argument("--sessions", type=int, default=20, help="container sessions the senders spread over")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per load level")
    parser.add_argument("--history", type=int, default=0, help="turns to load before measuring")
    parser.add_argument("--compare", action="store_true", help="with --history: also a fresh directory, alternating")
    parser.add_argument("--plot", default="serve_load.png", help="the PNG to write ('' for none)")
    parser.add_argument("--floor", action="store_true",
                        help="also GET /healthz at each level: the HTTP stack's own cost, no delivery")
    parser.add_argument("--against", metavar="CHECKOUT", help="also measure another checkout's router, alternating")
    parser.add_argument("--py-spy", metavar="PATH", help="profile the server with py-spy (collapsed stacks to PATH)")
    parser.add_argument("--hops", action="store_true", help="count the server's worker-thread hops, per reply")
    parser.add_argument("--calls", action="store_true",
                        help="count the server's function calls per reply while each level runs (slows it)")
    parser.add_argument("--calls-by", choices=["package", "task"], default="package",
                        help="--calls: by the package of the function called, or by the Trio task calling it")
    parser.add_argument("--serve-arg", action="append", default=[], help="an extra argument for router serve")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="URL", help="router serve --store URL for every router (default: each "
                       "its own SQLite data directory)")
    where.add_argument("--postgres", choices=["durable", "throwaway"],
                       help="a private PostgreSQL cluster (its defaults, or fsync etc. off), a database per directory")
    parser.add_argument("--routers", type=int, default=1, help="routers per directory, sharing its record")
    args = parser.parse_args(argv)
    if args.routers < 1:
        parser.error("--routers is at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    PROFILE = arguments.py_spy
    HOPS = arguments.hops
    CALLS = arguments.calls
    CALLS_BY = arguments.calls_by
    trio.run(main, arguments)
