"""Live streams under load: sessions replaying recorded Claude Code turns,
a live viewer on each, beside a bare client of the same daemon. Prints a table.

    .venv/bin/python bench/stream_load.py --sessions 10,100 --duration 20
                                          [--modes pace,full] [--turns 3] [--pace 1]
                                          [--against CHECKOUT] [--profile PATH]

For each number of sessions it starts one ``router daemon --adapter replay``
(a real process, this tree's: the replay adapter plays the committed
recording, ``tests/fixtures/replay/claude-code.jsonl``, the real Claude Code
binary against the fake Messages API) and, for each mode:

- **bare**: a bare container-protocol client (WebSocket, ``hello``, ``open``,
  ``replay``, then prompts; acks every 32 frames) on ``N`` sessions of that
  daemon, reading their frames directly: the baseline;
- **router**: a fresh ``router serve --port 0 --daemon ws://…`` (a real
  process, on a fresh data directory; ``--against CHECKOUT``: that
  checkout's router too, after ours) with ``N`` container sessions on the
  same daemon, each with a live viewer over the stream the page reads
  (``GET /sessions/<id>/live``, server-sent events, the API's token) and a
  sender (``POST /sessions/<id>/messages``, one keep-alive connection).
  Each viewer holds a connection: when a viewer and a sender per session
  would pass the API's 256 connections on one listener, the bench raises
  the cap for the run (``router serve --max-connections``); a checkout
  without that flag keeps 256, its senders share 8 connections, and more
  than about 240 sessions do not fit it.

Every session, bare or routed, runs a closed loop for ``--duration``
seconds: send ``replay T pace P stamped`` (``T`` = ``--turns``, every recorded
turn once), read until that operation ended (the ``settle`` frame; the
view's ``turn-end``), send the next. ``pace`` mode plays the turns at
``--pace`` times their recorded pace (1: as recorded; what a person watching
a working agent sees); ``full`` at full speed (no waits: what the stack can
carry). One warm-up operation per session (unstamped) comes first, outside
the window.

How an event is matched: the replay adapter stamps every event a viewer
reads (``text-delta``, ``reasoning-delta``, ``message``) with
``[replay:SEQ:NS]`` in its text (``router.daemon.adapters.replay``): ``SEQ``
the session's count, ``NS`` ``time.monotonic_ns()`` when the daemon emitted
it. A reader takes ``time.monotonic_ns()`` when the bytes holding the stamp
arrive (Linux's ``CLOCK_MONOTONIC`` is one clock for every process on the
machine): the difference is the emit-to-viewer latency. Per session, a
number seen again is ``doubled``, one below the highest seen ``reordered``,
and every number the operations sent should have made (``T`` turns' stamps
times the operations) and that never came is ``lost``. A view that ends
early (``lagged``, ``closed``, an error) is printed.

The table: sessions, mode, reader, events read, events/s (read in the
window / the window's length: from the first send to the last operation's
end), p50/p90/p99 latency (ms), router CPU per event (µs: the router
process's user + system time from ``/proc/PID/stat`` over the window /
events), the daemon's CPU per event, this process's (the readers') CPU per
event, lost / reordered / doubled, and the rate as a ratio of the bare
client's in the same run. ``--profile PATH`` runs our router under
``cProfile`` (its stats to ``PATH.<sessions>-<mode>``; py-spy cannot read
processes on the machine this was written on).
Everything is on this machine's loopback; the readers share one process,
so their CPU is printed too: a row whose reader CPU per event nears the
budget of a core measured the client.
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
from urllib.parse import quote

import attrs
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trio_websocket import open_websocket_url  # noqa: E402

from router.daemon.adapters.replay import STAMP, Recording, ReplayAdapter  # noqa: E402

#: The stamp, as bytes, in a frame's or an event's text.
STAMP_BYTES = re.compile(STAMP.pattern.encode())
TURN_END = re.compile(rb'"type":"turn-end"')
SETTLE = '"kind":"settle"'
#: Frames between two acks of the bare client (bench/daemon.py's client's).
ACK_EVERY = 32
#: Connections the API takes on one listener by default (router/_hypercorn.py
#: ``ConnectionLimits.max_connections``, ``router serve --max-connections``),
#: the room left above a viewer and a sender per session when the bench
#: raises it, and the senders' shared connections when a checkout cannot
#: raise it and a viewer and a sender per session would pass it.
MAX_CONNECTIONS = 256
CONNECTIONS_ROOM = 64
SHARED_SENDERS = 8
#: The first line ``router serve`` prints: the page's URL with the token.
PAGE = re.compile(r"(http://[^\s/]+)/\?token=(\S+)")
#: ``--profile``: ``router`` run under cProfile with the main thread's CPU
#: time as its clock (wall time would count the waits of a shared machine).
PROFILED = (
    "import cProfile, runpy, sys, time\n"
    "path = sys.argv.pop(1); sys.argv[0] = 'router'\n"
    "profile = cProfile.Profile(time.thread_time)\n"
    "try:\n    profile.runcall(runpy.run_module, 'router', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "finally:\n    profile.dump_stats(path)\n"
)
#: Seconds an operation may take to end after the window before its
#: session's stamps are counted lost.
GRACE = 60.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def stamps_per_operation(turns: int) -> int:
    """The stamps one ``replay TURNS pace 0 stamped`` operation makes, from
    the adapter itself on the committed recording."""
    from router.daemon.adapter import AdapterContext, AdapterTurn
    from wire.container import ContainerSettings

    async def count() -> int:
        context = AdapterContext(session="count", settings=ContainerSettings(), restore=(),
                                 emit=lambda event: None, persist=lambda entries: None, log=lambda *a: None)
        session = await ReplayAdapter(Recording.load(_recording()), pace=0).open(context)
        await session.run(AdapterTurn(operation_id="count", input=f"replay {turns} pace 0 stamped"))
        return session.stamped

    return trio.run(count)


def _recording() -> Path:
    from router.daemon.adapters.replay import DEFAULT_RECORDING, RECORDING_ENV

    return Path(os.environ.get(RECORDING_ENV) or DEFAULT_RECORDING)


# --------------------------------------------------------------------------- processes


class DaemonProcess:
    """One ``router daemon --adapter replay`` of this tree."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        env = {**os.environ, "CF_HARNESS_TOKEN": self.token, "CF_HARNESS_RUNTIME_ID": f"bench-{uuid.uuid4().hex[:8]}",
               "CF_HARNESS_PORT": "0", "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "router", "daemon", "--adapter", "replay"],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r":(\d+) \(runtime ", line)
        if found is None:
            self.stop()
            raise SystemExit(f"router daemon did not start: {line!r}")
        self.port = int(found.group(1))

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def cpu(self) -> float:
        assert self.proc is not None
        return _cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        _stop(self.proc)


class RouterProcess:
    """One ``router serve`` of a checkout on a fresh directory, on ``daemon``."""

    def __init__(self, repo: Path, root: Path, daemon: DaemonProcess, sessions: int, profile: str | None,
                 viewers: int = 1) -> None:
        self.repo, self.root, self.daemon, self.sessions, self.profile = repo, root, daemon, sessions, profile
        #: Live streams: ``viewers`` per session.
        self.streams = sessions * viewers
        self.proc: subprocess.Popen[str] | None = None
        self.host, self.port, self.token = "127.0.0.1", 0, ""
        #: The API's connection cap this run: raised to fit a viewer and a
        #: sender per session where the checkout has ``--max-connections``.
        self.max_connections = MAX_CONNECTIONS
        if self.streams + sessions + CONNECTIONS_ROOM > MAX_CONNECTIONS and "--max-connections" in (
                repo / "router" / "serve.py").read_text():
            self.max_connections = self.streams + sessions + CONNECTIONS_ROOM

    def settings(self) -> None:
        """``plugins.json`` and ``routes.json``: new sessions on the
        ``container`` harness, the daemon named by ``--daemon``."""
        settings = self.root / "settings"
        settings.mkdir(parents=True)
        plugins = {
            "plugins": {"harness": ["echo", "container"], "usage-source": ["frames"],
                        "limit-check": ["token-limit", "daily-quota"], "search-source": "harness-builtin",
                        "channel": ["cli", "webui"], "launcher": "in-process"},
            "options": {"harness": {"container": {"url": f"http://127.0.0.1:{self.daemon.port}",
                                                  "token": self.daemon.token}}},
        }
        routes = {"models": {"echo": {"provider": "echo"}, "replay": {"provider": "replay"}},
                  "instances": {"default": {"harness": "container", "model": "replay", "thinking": "off"}}}
        for name, document in (("plugins.json", plugins), ("routes.json", routes)):
            path = settings / name
            path.write_text(json.dumps(document))
            path.chmod(0o600)

    def start(self) -> None:
        (self.root / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
        self.settings()
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.root / "config"), "XDG_RUNTIME_DIR": str(self.root / "run"),
               "ROUTER_DAEMON_TOKEN": self.daemon.token, "PYTHONPATH": str(self.repo)}
        # cProfile on the main thread's CPU time (py-spy cannot read this
        # machine's processes: "Failed to find python version from target process").
        profile = [] if not self.profile else ["-c", PROFILED, self.profile]
        # A viewer per session, all on the API's one token: the cap on one
        # credential's live streams (32 by default) is raised to fit them.
        streams = ["--max-streams", str(self.streams + 8)] if self.streams + 8 > 32 else []
        if self.max_connections != MAX_CONNECTIONS:
            streams += ["--max-connections", str(self.max_connections)]
        self.proc = subprocess.Popen(
            [sys.executable, *(profile or ["-m", "router"]), "serve", "--port", "0", "--data-dir", str(self.root / "data"),
             "--settings", str(self.root / "settings"), "--daemon", self.daemon.url, *streams],
            cwd=self.repo, env=env, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = PAGE.search(line)
        if found is None:
            self.stop()
            raise SystemExit(f"router serve ({self.repo}) did not start: {line!r}")
        address, self.token = found.group(1).removeprefix("http://"), found.group(2)
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        return _cpu_seconds(self.pid())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid(), signal.SIGTERM)
        _stop(self.proc)


def _stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- reading stamps


@attrs.define
class Tally:
    """One session's stamps as a reader saw them."""

    highest: int = 0
    seen: set[int] = attrs.Factory(set)
    doubled: int = 0
    reordered: int = 0
    latencies: list[float] = attrs.Factory(list)
    #: Operations sent (each should make ``per_operation`` stamps).
    sent: int = 0
    #: Operations seen to end.
    ended: int = 0
    ended_event: trio.Event = attrs.Factory(trio.Event)
    #: Why the view ended early, if it did.
    broken: str | None = None
    #: Count only from here (the warm-up is not stamped; nothing to skip).
    counting: bool = False

    def read(self, data: bytes, now_ns: int) -> None:
        for found in STAMP_BYTES.finditer(data):
            seq = int(found.group(1))
            if seq in self.seen:
                self.doubled += 1
                continue
            if seq < self.highest:
                self.reordered += 1
            self.seen.add(seq)
            self.highest = max(self.highest, seq)
            if self.counting:
                self.latencies.append((now_ns - int(found.group(2))) / 1e6)

    def operation_ended(self) -> None:
        self.ended += 1
        self.ended_event.set()
        self.ended_event = trio.Event()

    async def wait_ended(self, count: int) -> None:
        while self.ended < count and self.broken is None:
            await self.ended_event.wait()


class HttpClient:
    """One keep-alive HTTP/1.1 connection for the sender's posts."""

    def __init__(self, router: RouterProcess) -> None:
        self.router = router
        self.stream: trio.SocketStream | None = None
        self.buffer = b""

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body``; once more on a new connection when the server
        had closed an idle one (its keep-alive timeout: a send's ``eventId``
        makes the second a resend, never a second message)."""
        try:
            return await self._post(path, body)
        except (ConnectionError, trio.BrokenResourceError):
            await self.aclose()
            return await self._post(path, body)

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.stream is None:
            self.stream = await trio.open_tcp_stream(self.router.host, self.router.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.router.host}:{self.router.port}\r\n"
                f"Authorization: Bearer {self.router.token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        await self.stream.send_all(head + body)
        while b"\r\n\r\n" not in self.buffer:
            await self._more()
        raw, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            await self._more()
        payload, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), payload

    async def _more(self) -> None:
        assert self.stream is not None
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("the router closed the connection")
        self.buffer += chunk

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
        self.stream, self.buffer = None, b""


async def viewer(router: RouterProcess, session: str, tally: Tally, ready: trio.Event) -> None:
    """``GET /sessions/<id>/live`` as the page reads it; stamps and turn
    ends counted as the bytes arrive, until cancelled."""
    stream = await trio.open_tcp_stream(router.host, router.port)
    async with stream:
        await stream.send_all((f"GET /sessions/{quote(session, safe='')}/live HTTP/1.1\r\n"
                               f"Host: {router.host}:{router.port}\r\nAuthorization: Bearer {router.token}\r\n"
                               "Accept: text/event-stream\r\n\r\n").encode())
        buffer = b""
        head_done = False
        while True:
            chunk = await stream.receive_some(65536)
            now = time.monotonic_ns()
            if not chunk:
                tally.broken = tally.broken or "the router closed the live stream"
                tally.ended_event.set()
                return
            buffer += chunk
            if not head_done:
                if b"\r\n\r\n" not in buffer:
                    continue
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                if not head.startswith(b"HTTP/1.1 200"):
                    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
                    tally.broken = f"GET live answered {status}"
                    tally.ended_event.set()
                    return
                head_done = True
                ready.set()
            end = buffer.rfind(b"\n\n")
            if end < 0:
                continue
            complete, buffer = buffer[: end + 2], buffer[end + 2 :]
            tally.read(complete, now)
            for _ in TURN_END.finditer(complete):
                tally.operation_ended()
            if b"event: lagged" in complete or b"event: closed" in complete or b"event: error" in complete:
                tally.broken = complete[complete.find(b"event: "):][:200].decode(errors="replace")
                tally.ended_event.set()
                return


# --------------------------------------------------------------------------- one phase


@attrs.define
class Phase:
    label: str
    sessions: int
    mode: str
    tallies: list[Tally] = attrs.Factory(list)
    seconds: float = 0.0
    router_cpu: float | None = None
    daemon_cpu: float = 0.0
    client_cpu: float = 0.0
    per_operation: int = 0
    #: Live viewers per session (the router's phases).
    viewers: int = 1

    @property
    def events(self) -> int:
        return sum(len(t.latencies) for t in self.tallies)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def lost(self) -> int:
        return sum(max(0, t.sent * self.per_operation - len(t.seen)) for t in self.tallies)

    def broken(self) -> list[str]:
        return [t.broken for t in self.tallies if t.broken]


def _prompt(args: argparse.Namespace, mode: str) -> str:
    pace = args.pace if mode == "pace" else 0
    return f"replay {args.turns} pace {pace:g} stamped"


async def _loop(tally: Tally, send: Any, stop_at: float) -> None:
    """The closed loop: send, wait for the operation's end, again."""
    while trio.current_time() < stop_at and tally.broken is None:
        tally.sent += 1
        await send()
        await tally.wait_ended(tally.sent + 1)  # + the warm-up


async def run_bare(daemon: DaemonProcess, phase: Phase, args: argparse.Namespace) -> None:
    tag = uuid.uuid4().hex[:6]
    ready: list[int] = []
    go = trio.Event()
    window: list[float] = []
    prompt = _prompt(args, phase.mode)

    async def one(index: int) -> None:
        tally = Tally()
        phase.tallies.append(tally)
        headers = [(b"x-cf-harness-token", daemon.token.encode())]
        url = f"{daemon.url}/sessions/bare-{tag}-{index}"
        async with open_websocket_url(url, extra_headers=headers, max_message_size=1 << 26) as ws:
            await ws.get_message()  # hello
            await ws.send_message('{"type":"open","generation":1,"settings":{},"restore":[]}')
            await ws.send_message('{"type":"replay","after":0}')
            while '"caught-up"' not in await ws.get_message():
                pass
            frames = 0
            operations = 0

            async def read() -> None:
                nonlocal frames
                while True:
                    text = await ws.get_message()
                    now = time.monotonic_ns()
                    if not text.startswith('{"type":"frame"'):
                        continue
                    frames += 1
                    tally.read(text.encode(), now)
                    if SETTLE in text:
                        tally.operation_ended()
                    if frames % ACK_EVERY == 0 or SETTLE in text:
                        await ws.send_message('{"type":"ack","seq":%s}' % text[22 : text.index(",", 22)])

            async def send(text: str = prompt) -> None:
                nonlocal operations
                operations += 1
                await ws.send_message('{"type":"prompt","operationId":"op-%d","input":"%s","whenBusy":"followUp"}'
                                      % (operations, text))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await send("replay 1 pace 0")  # the warm-up
                await tally.wait_ended(1)
                ready.append(index)
                await go.wait()
                tally.counting = True
                await _loop(tally, send, window[0])
                nursery.cancel_scope.cancel()

    await _measure(phase, ready, go, window, args, one, cpu=None, daemon=daemon)


async def run_router(router: RouterProcess, daemon: DaemonProcess, phase: Phase, args: argparse.Namespace) -> None:
    tag = uuid.uuid4().hex[:6]
    ready: list[int] = []
    go = trio.Event()
    window: list[float] = []
    prompt = _prompt(args, phase.mode)
    setup = HttpClient(router)
    names = []
    for index in range(phase.sessions):
        name = f"view-{tag}-{index}"
        status, body = await setup.post("/sessions", b'{"id":"%s"}' % name.encode())
        if status not in (200, 201):
            raise SystemExit(f"POST /sessions answered {status}: {body[:300]!r}")
        names.append(name)
    await setup.aclose()

    # A sender's connection per session while the viewers' and senders'
    # connections fit under the API's cap on one listener (raised for the
    # run where the checkout can, router serve --max-connections); past
    # it, the senders share SHARED_SENDERS connections.
    pool: trio.MemorySendChannel[HttpClient] | None = None
    take: trio.MemoryReceiveChannel[HttpClient] | None = None
    if router.streams + phase.sessions + 8 > router.max_connections:
        pool, take = trio.open_memory_channel[HttpClient](SHARED_SENDERS)
        for _ in range(SHARED_SENDERS):
            pool.send_nowait(HttpClient(router))

    async def one(index: int) -> None:
        tally = Tally()
        phase.tallies.append(tally)
        own = HttpClient(router)
        path = f"/sessions/{quote(names[index], safe='')}/messages"

        async def send(text: str = prompt) -> None:
            body = ('{"text":"%s","eventId":"%s"}' % (text, uuid.uuid4().hex)).encode()
            client = own if take is None else await take.receive()
            try:
                status, answer = await client.post(path, body)
            finally:
                if pool is not None:
                    pool.send_nowait(client)
            if status != 200:
                tally.broken = f"POST messages answered {status}: {answer[:200]!r}"
                tally.ended_event.set()

        # --viewers: more viewers of the session, each counted on its own;
        # the first one's turn ends drive the loop.
        others = [Tally() for _ in range(phase.viewers - 1)]
        phase.tallies.extend(others)
        async with trio.open_nursery() as nursery:
            for each in [tally, *others]:
                watching = trio.Event()
                nursery.start_soon(viewer, router, names[index], each, watching)
                await watching.wait()
            await send("replay 1 pace 0")  # the warm-up (and the session's link to the daemon)
            for each in [tally, *others]:
                await each.wait_ended(1)
            ready.append(index)
            await go.wait()
            for each in [tally, *others]:
                each.counting = True
            await _loop(tally, send, window[0])
            for each in others:
                each.sent = tally.sent
                await each.wait_ended(tally.sent + 1)
            nursery.cancel_scope.cancel()
        await own.aclose()

    await _measure(phase, ready, go, window, args, one, cpu=router, daemon=daemon)


async def _measure(phase: Phase, ready: list[int], go: trio.Event, window: list[float], args: argparse.Namespace,
                   one: Any, *, cpu: RouterProcess | None, daemon: DaemonProcess) -> None:
    async with trio.open_nursery() as nursery:
        for index in range(phase.sessions):
            nursery.start_soon(one, index)
        with trio.fail_after(120 + 2 * phase.sessions):  # every session linked and warmed up
            while len(ready) < phase.sessions:
                await trio.sleep(0.05)
        window.append(trio.current_time() + args.duration)
        router0 = cpu.cpu() if cpu is not None else 0.0
        daemon0, mine0, wall0 = daemon.cpu(), time.process_time(), time.perf_counter()
        go.set()
        nursery.cancel_scope.deadline = window[0] + GRACE
    phase.seconds = time.perf_counter() - wall0
    phase.router_cpu = None if cpu is None else cpu.cpu() - router0
    phase.daemon_cpu, phase.client_cpu = daemon.cpu() - daemon0, time.process_time() - mine0


# --------------------------------------------------------------------------- the table


def _row(phase: Phase, bare: Phase | None) -> list[str]:
    events = max(1, phase.events)
    latencies = [value for t in phase.tallies for value in t.latencies]
    router = "-" if phase.router_cpu is None else f"{phase.router_cpu / events * 1e6:,.0f}"
    # Per viewer of a session, as the bare client has one reader a session.
    ratio = "-" if bare is None or phase is bare or not bare.rate else f"{phase.rate / phase.viewers / bare.rate:.2f}"
    return [
        str(phase.sessions), phase.mode, phase.label, f"{phase.events:,}", f"{phase.rate:,.0f}",
        f"{_percentile(latencies, 0.5):.1f}", f"{_percentile(latencies, 0.9):.1f}",
        f"{_percentile(latencies, 0.99):.1f}", router, f"{phase.daemon_cpu / events * 1e6:,.0f}",
        f"{phase.client_cpu / events * 1e6:,.0f}", str(phase.lost()),
        str(sum(t.reordered for t in phase.tallies)), str(sum(t.doubled for t in phase.tallies)), ratio,
    ]


HEADER = ["sessions", "mode", "reader", "events", "events/s", "p50 ms", "p90 ms", "p99 ms", "router µs/ev",
          "daemon µs/ev", "readers µs/ev", "lost", "reordered", "doubled", "× bare"]


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    for line in [HEADER, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.rjust(width) if i not in (1, 2) else cell.ljust(width)
                        for i, (cell, width) in enumerate(zip(line, widths))), flush=True)


async def main(args: argparse.Namespace) -> int:
    per_operation = args.per_operation
    trees = [("router", REPO)] + ([(f"router ({Path(args.against).name})", Path(args.against).resolve())]
                                  if args.against else [])
    rows: list[list[str]] = []
    failed = False
    print(f"one operation: replay {args.turns} recorded turns, {per_operation} stamped events; "
          f"{args.duration:g} s per phase; cores: {os.cpu_count()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="stream-load-") as tmp:
        for sessions in args.sessions:
            daemon = DaemonProcess()
            daemon.start()
            try:
                for mode in args.modes:
                    bare = Phase("bare client", sessions, mode, per_operation=per_operation)
                    await run_bare(daemon, bare, args)
                    phases = [bare]
                    for label, repo in trees:
                        profile = f"{args.profile}.{sessions}-{mode}" if args.profile and repo == REPO else None
                        router = RouterProcess(repo, Path(tmp) / uuid.uuid4().hex[:8], daemon, sessions, profile,
                                               args.viewers)
                        router.start()
                        try:
                            phase = Phase(label, sessions, mode, per_operation=per_operation, viewers=args.viewers)
                            await run_router(router, daemon, phase, args)
                            phases.append(phase)
                        finally:
                            router.stop()
                    for phase in phases:
                        rows.append(_row(phase, bare))
                        print("  ".join(rows[-1]), flush=True)  # progress; the table follows at the end
                        for why in sorted(set(phase.broken()))[:3]:
                            print(f"  {phase.label}, {sessions} sessions, {mode}: {why}", file=sys.stderr)
                        failed |= bool(phase.broken())
            finally:
                daemon.stop()
    print_table(rows)
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="10,100", help="numbers of sessions, comma-separated (e.g. 10,100,300)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds each phase's window lasts")
    parser.add_argument("--modes", default="pace,full", help="pace (the recorded pace), full (full speed), or both")
    parser.add_argument("--turns", type=int, default=3, help="recorded turns one operation plays")
    parser.add_argument("--pace", type=float, default=1.0, help="pace mode's factor (1: as recorded)")
    parser.add_argument("--against", metavar="CHECKOUT", help="also measure another checkout's router (after ours)")
    parser.add_argument("--viewers", type=int, default=1, help="live viewers per session (each counted; "
                        "events/s and router µs/ev over every viewer's reads, × bare per viewer)")
    parser.add_argument("--profile", metavar="PATH", help="profile our router with cProfile (pstats to PATH.<n>-<mode>)")
    args = parser.parse_args(argv)
    args.sessions = [int(part) for part in args.sessions.split(",")]
    args.modes = [part for part in args.modes.split(",") if part]
    if any(mode not in ("pace", "full") for mode in args.modes):
        parser.error("--modes takes pace and full")
    if args.turns < 1 or args.pace <= 0 or any(n < 1 for n in args.sessions):
        parser.error("--turns, --pace and --sessions are positive")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    arguments.per_operation = stamps_per_operation(arguments.turns)
    sys.exit(trio.run(main, arguments))
