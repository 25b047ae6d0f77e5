"""Container daemon load benchmark: prints a table.

    .venv/bin/python bench/daemon.py [--ops 20000] [--sessions 16] [--repeat 3]
                                     [--profile PATH] [--transports]

Each daemon runs as its own process on loopback, the way a host meets it;
the client is the same for every row (trio-websocket, in this process). A
client pipelines ``--ops`` echo prompts (``whenBusy: followUp``) and reads
until every one has settled, acking every 32 frames as the host does:

1. **one session**: all operations on one session;
2. **many sessions**: the same number spread over ``--sessions`` sessions,
   driven at once.

Rows: our daemon (``router daemon --adapter echo``), the reference daemon
(npm ``agents@0.32.0`` on Node, its echo adapter), and the **ceiling**: a
trio-websocket echo server with no protocol that answers each message with
five (an echo operation makes five frames), through the same client.
Figures are operations/s and frames/s, best of ``--repeat``; the ratio is
ours over the reference.

``--transports`` adds the measurement behind the transport choice: the same
no-protocol echo behind (a) trio-websocket's own server, (b) our transport's
front (the shared h11 loop, then our WebSocket), and (c) Hypercorn with a
raw ASGI app.

``--against CHECKOUT`` adds a row: our daemon as another checkout of the
repository has it (an export of main, say), measured in the same
alternation, for before/after figures from one run.

``--instructions OPS`` instead counts the instructions per operation of our
daemon (and each ``--against`` row) under valgrind's callgrind, one session
and then 16: a figure that machine noise does not move, for before/after.

``--profile PATH`` runs our daemon under cProfile for the one-session row,
writes the stats to PATH and prints the top functions.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import attrs  # noqa: E402
import trio  # noqa: E402
from trio_websocket import open_websocket_url  # noqa: E402

TOKEN = "bench-token"
#: Frames an echo operation makes: start, text-delta, message, persist, settle.
FRAMES_PER_OP = 5
#: The host acks every 32 frames (docs/host.md, "Reconcile, deliver, apply").
ACK_EVERY = 32


# --------------------------------------------------------------------------- servers


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@asynccontextmanager
async def server(command: list[str], env: dict[str, str] | None = None) -> AsyncIterator[tuple[int, int]]:
    """Run a server process until the block ends; yields its port, read
    from the first line it prints (``...:PORT`` or ``listening PORT``), and
    its pid."""
    import re

    environment = {
        **os.environ,
        "CF_HARNESS_TOKEN": TOKEN,
        "CF_HARNESS_RUNTIME_ID": "bench",
        "CF_HARNESS_PORT": "0",
        "PYTHONPATH": str(REPO),
        **(env or {}),
    }
    process = await trio.lowlevel.open_process(command, env=environment, stdout=subprocess.PIPE)
    try:
        data = b""
        with trio.fail_after(600 if command[0] == "valgrind" else 60):  # valgrind starts Python slowly
            while b"\n" not in data:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    raise RuntimeError(f"{command[:3]} ended before it listened")
                data += chunk
        found = re.search(rb"(?:listening |:)(\d+)\b", data.split(b"\n")[0])
        assert found, data
        yield int(found.group(1)), process.pid
    finally:
        with trio.CancelScope(shield=True):
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.stdout.aclose()


def ours_command(profile: str | None = None) -> list[str]:
    if profile:
        # cProfile on CPU time, not wall time: on a shared machine a wall
        # clock charges a function for the time the process was not running.
        code = (
            "import cProfile, sys, time; from router.cli import main; "
            "p = cProfile.Profile(time.process_time); p.enable(); "
            "status = main(['daemon', '--adapter', 'echo', '--host', '127.0.0.1']); "
            f"p.disable(); p.dump_stats({profile!r}); sys.exit(status)"
        )
        return [sys.executable, "-c", code]
    return [sys.executable, "-m", "router", "daemon", "--adapter", "echo", "--host", "127.0.0.1"]


def against_command(checkout: str) -> list[str]:
    """Our daemon as another checkout (``--against``) has it: that tree's
    ``router`` first on the path."""
    code = (
        f"import sys; sys.path.insert(0, {checkout!r}); from router.cli import main; "
        "sys.exit(main(['daemon', '--adapter', 'echo', '--host', '127.0.0.1']))"
    )
    return [sys.executable, "-c", code]


def reference_command() -> list[str]:
    from tests.support.npm import AGENTS_SPEC, node_binary, npm_package

    return [node_binary(), str(REPO / "tests/support/refdaemon.mjs"), str(npm_package(AGENTS_SPEC))]


def raw_command(kind: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--serve-raw", kind]


# --------------------------------------------------------------------------- client


def _headers() -> list[tuple[bytes, bytes]]:
    return [(b"x-cf-harness-token", TOKEN.encode())]


async def _ready(ws) -> None:
    """hello, open, replay, caught-up: the host's start."""
    await ws.get_message()
    await ws.send_message('{"type":"open","generation":1,"settings":{},"restore":[]}')
    await ws.send_message('{"type":"replay","after":0}')
    while '"caught-up"' not in await ws.get_message():
        pass


class _Acker:
    """Acks from a task of their own, so the read loop never waits on a
    send (a peer that stops reading while it writes would otherwise
    deadlock both). Only the newest seq matters: acks are cumulative."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.latest: str | None = None
        self.wakeup = trio.Event()

    def ack(self, seq: str) -> None:
        self.latest = seq
        self.wakeup.set()

    async def run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup = trio.Event()
            await self.ws.send_message('{"type":"ack","seq":%s}' % self.latest)


async def _pipeline(ws, session: str, ops: int) -> int:
    """Send ``ops`` prompts while reading frames until all settle; ack
    every 32 frames. Returns the frames read."""
    prompts = [
        '{"type":"prompt","operationId":"%s-%d","input":"hello %d","whenBusy":"followUp"}' % (session, i, i)
        for i in range(ops)
    ]

    async def send() -> None:
        for text in prompts:
            await ws.send_message(text)

    frames = settled = 0
    acker = _Acker(ws)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        nursery.start_soon(acker.run)
        while settled < ops:
            text = await ws.get_message()
            if text.startswith('{"type":"frame"'):
                frames += 1
                if '"kind":"settle"' in text:
                    settled += 1
                if frames % ACK_EVERY == 0:
                    acker.ack(text[22 : text.index(",", 22)])
        nursery.cancel_scope.cancel()
    return frames


async def _raw_pipeline(ws, ops: int) -> int:
    """The ceiling's client: the same sends and acks, five answers each."""
    prompt = '{"type":"prompt","operationId":"op-%d","input":"hello","whenBusy":"followUp"}'

    async def send() -> None:
        for i in range(ops):
            await ws.send_message(prompt % i)

    frames = 0
    acker = _Acker(ws)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        nursery.start_soon(acker.run)
        while frames < ops * FRAMES_PER_OP:
            await ws.get_message()
            frames += 1
            if frames % ACK_EVERY == 0:
                acker.ack(str(frames))
        nursery.cancel_scope.cancel()
    return frames


async def run_load(port: int, ops: int, sessions: int, raw: bool, tag: str) -> tuple[float, int]:
    """Connect ``sessions`` sockets, get each ready, then drive them all at
    once; returns (seconds, frames)."""
    per = [ops // sessions + (1 if i < ops % sessions else 0) for i in range(sessions)]
    frames = 0
    go = trio.Event()
    ready = 0
    all_ready = trio.Event()
    start = end = 0.0

    async def one(index: int) -> None:
        nonlocal frames, ready
        name = f"{tag}-{index}"
        url = f"ws://127.0.0.1:{port}/sessions/{name}"
        async with open_websocket_url(url, extra_headers=_headers(), max_message_size=2**26) as ws:
            if not raw:
                await _ready(ws)
            ready += 1
            if ready == sessions:
                all_ready.set()
            await go.wait()
            got = await (_raw_pipeline(ws, per[index]) if raw else _pipeline(ws, name, per[index]))
            frames += got  # not ``frames += await ...``: that reads frames before the await

    async with trio.open_nursery() as nursery:
        for index in range(sessions):
            nursery.start_soon(one, index)
        await all_ready.wait()
        start = time.perf_counter()
        go.set()
    end = time.perf_counter()
    return end - start, frames


@attrs.frozen
class Result:
    ops_per_s: float
    frames_per_s: float
    #: The server process's CPU time per operation (user + system).
    cpu_us_per_op: float
    #: This (client) process's CPU time per operation.
    client_us_per_op: float


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure_all(
    rows: list[tuple[str, list[str]]], *, ops: int, sessions: int, repeat: int
) -> dict[str, Result]:
    """Every server at once, idle but for the one being measured; the runs
    take turns (A, B, C, A, B, C...) so that each server meets the same
    spells of machine noise. Best of ``repeat`` per server; the CPU figures
    are that best run's."""
    best = {name: Result(0.0, 0.0, 0.0, 0.0) for name, _ in rows}
    async with AsyncExitStack() as stack:
        ports = {}
        for name, command in rows:
            ports[name] = await stack.enter_async_context(server(command))
        for name, _ in rows:  # warm-up: imports, JIT (Node), first-session paths
            await run_load(ports[name][0], min(ops, 500), 1, _is_raw(name), "warm")
        for run in range(repeat):
            for name, _ in rows:
                port, pid = ports[name]
                cpu, client = cpu_seconds(pid), _client_cpu()
                try:
                    seconds, frames = await run_load(port, ops, sessions, _is_raw(name), f"r{run}-s{sessions}")
                except BaseException:
                    print(f"the run against {name!r} ({sessions} sessions) failed:", file=sys.stderr)
                    raise
                cpu, client = cpu_seconds(pid) - cpu, _client_cpu() - client
                assert frames == ops * FRAMES_PER_OP, (name, frames, ops)
                if ops / seconds > best[name].ops_per_s:
                    best[name] = Result(ops / seconds, frames / seconds, cpu / ops * 1e6, client / ops * 1e6)
    return best


def _is_raw(name: str) -> bool:
    return name.startswith(("ceiling", "raw"))


# --------------------------------------------------------------------------- the core alone


def core_alone(ops: int) -> tuple[float, float]:
    """The sans-IO session core by itself, in this process: per echo
    operation, parse the prompt, handle it, the adapter's three calls (two
    events, one persist), settle, and an ack every 32 frames. Returns (µs per
    operation, of which µs in ``wire.json.dumps``)."""
    from router.daemon.core import SessionCore, StartTurn
    from wire import json as wire_json
    from wire.container import AdapterInfo, Done

    def run(count: int) -> float:
        core = SessionCore("s", runtime_id="r", adapter=AdapterInfo(id="echo", version="1", capabilities=("steer",)))
        conn = object()
        core.attach(conn)
        for text in ('{"type":"replay","after":0}', '{"type":"open","generation":1,"settings":{},"restore":[]}'):
            message, _ = core.receive(conn, text)
            core.handle(conn, message)
        core.opened(1, object(), can_steer=True)
        texts = ['{"type":"prompt","operationId":"op-%d","input":"hello %d","whenBusy":"followUp"}' % (i, i) for i in range(count)]
        start = time.perf_counter()
        for i, text in enumerate(texts):
            message, _ = core.receive(conn, text)
            (turn,) = [e.turn for e in core.handle(conn, message) if type(e) is StartTurn]
            answer = f"echo: hello {i} (turn {i + 1})"
            mid = f"op-{i}:assistant"
            core.emit({"type": "text-delta", "messageId": mid, "delta": answer})
            core.emit({"type": "message", "message": {"id": mid, "role": "assistant", "parts": [{"type": "text", "text": answer}], "operationId": f"op-{i}", "createdAt": 1795997349994}})
            core.persist([{"turn": i + 1, "text": f"hello {i}"}])
            core.turn_finished(turn, Done(text=answer))
            if core.seq % ACK_EVERY < FRAMES_PER_OP:
                message, _ = core.receive(conn, '{"type":"ack","seq":%d}' % core.seq)
                core.handle(conn, message)
        return (time.perf_counter() - start) / count * 1e6

    whole = min(run(ops) for _ in range(3))
    spent = 0.0
    real = wire_json.dumps

    def timed(value):
        nonlocal spent
        start = time.perf_counter()
        try:
            return real(value)
        finally:
            spent += time.perf_counter() - start

    import router.daemon.core as core_module

    core_module.dumps = timed
    try:
        run(ops)
    finally:
        core_module.dumps = real
    return whole, spent / ops * 1e6


# --------------------------------------------------------------------------- raw servers


async def _raw_echo(ws) -> None:
    from trio_websocket import ConnectionClosed

    from router._websocket import WebSocketClosed

    try:
        if hasattr(ws, "get_message"):  # trio-websocket
            while True:
                message = await ws.get_message()
                for _ in range(FRAMES_PER_OP):
                    await ws.send_message(message)
        while True:  # ours (router/_websocket.py): one read's messages, their answers in one write
            await ws.send_messages([message for message in await ws.receive() for _ in range(FRAMES_PER_OP)])
    except (ConnectionClosed, WebSocketClosed):
        pass


async def serve_raw(kind: str) -> None:
    """A no-protocol echo server: five answers per message."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            if kind == "trio-websocket":
                from trio_websocket import serve_websocket

                async def handler(request) -> None:
                    await _raw_echo(await request.accept())

                server_ = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
                port = server_.port
            elif kind == "front":
                # Our transport's front (the shared h11 loop, then our
                # WebSocket), with an echo in place of the daemon.
                from router.daemon import transport

                class EchoFront(transport.DaemonServer):
                    async def _serve_session(self, nursery, ws, session):
                        await _raw_echo(ws)

                from router.daemon.adapters.echo import adapter
                from router.daemon.runner import Daemon

                listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
                front = EchoFront(Daemon(adapter, "raw"), TOKEN)
                await nursery.start(front.run, listeners)
                port = front.ports[0]
            elif kind == "hypercorn":
                from hypercorn.config import Config
                from hypercorn.trio import serve

                async def app(scope, receive, send) -> None:
                    if scope["type"] == "lifespan":
                        while True:
                            event = await receive()
                            await send({"type": event["type"] + ".complete"})
                            if event["type"] == "lifespan.shutdown":
                                return
                    if scope["type"] != "websocket":
                        return
                    await receive()
                    await send({"type": "websocket.accept"})
                    while True:
                        event = await receive()
                        if event["type"] != "websocket.receive":
                            return
                        for _ in range(FRAMES_PER_OP):
                            await send({"type": "websocket.send", "text": event["text"]})

                import socket

                probe = socket.socket()
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
                probe.close()
                config = Config()
                config.bind = [f"127.0.0.1:{port}"]
                config.websocket_ping_interval = None
                config.keep_alive_timeout = 3600
                config.websocket_max_message_size = 64 * 1024 * 1024
                await nursery.start(partial_serve(serve, app, config))
            else:
                raise SystemExit(f"unknown raw server {kind!r}")
            print(f"listening {port}", flush=True)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


def partial_serve(serve, app, config):
    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await serve(app, config, task_status=task_status)

    return run


# --------------------------------------------------------------------------- instructions


async def instructions(name: str, command: list[str], ops: int, out: str) -> dict[str, float]:
    """Instructions per operation of one daemon under valgrind's callgrind,
    one session and then 16: repeatable where CPU time on a shared machine
    is not. Counting starts after a warm-up (``callgrind_control -z``) and
    each load ends with a dump; returns {"1": per op, "16": per op}."""
    import glob
    import re

    # callgrind_control reaches the process through vgdb's FIFOs. The daemon
    # runs ``ldconfig -p`` once (ctypes.util.find_library), and an untraced
    # child removed the parent's FIFOs before its exec, so every count read
    # 0: the child is traced (its count, a file of its own, is not read).
    prefix = ["valgrind", "--tool=callgrind", "--vgdb=yes", "--trace-children=yes", f"--callgrind-out-file={out}.%p"]
    result = {}
    async with server(prefix + command) as (port, pid):
        await run_load(port, 200, 1, False, "warm")
        await run_load(port, 200, 16, False, "warm16")
        for sessions in (1, 16):
            await trio.run_process(["callgrind_control", "-z", str(pid)], capture_stdout=True)
            await run_load(port, ops, sessions, False, f"count{sessions}")
            await trio.run_process(["callgrind_control", "-d", f"sessions-{sessions}", str(pid)], capture_stdout=True)
        for path in glob.glob(f"{out}.{pid}.*"):
            text = Path(path).read_text()
            trigger = re.search(r"^desc: Trigger: .*sessions-(\d+)", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if trigger and total:
                result[trigger.group(1)] = int(total.group(1)) / ops
    print(f"{name}: {result.get('1', 0):,.0f} instructions/op on one session, {result.get('16', 0):,.0f} on 16", flush=True)
    return result


# --------------------------------------------------------------------------- main


def _row(name: str, one: Result, many: Result) -> str:
    return (
        f"| {name} | {one.ops_per_s:,.0f} | {one.frames_per_s:,.0f} | {one.cpu_us_per_op:,.0f} | {one.client_us_per_op:,.0f} "
        f"| {many.ops_per_s:,.0f} | {many.frames_per_s:,.0f} | {many.cpu_us_per_op:,.0f} | {many.client_us_per_op:,.0f} |"
    )


async def main(args: argparse.Namespace) -> None:
    ops, sessions, repeat = args.ops, args.sessions, args.repeat
    rows = [("ours", ours_command()), ("reference", reference_command()), ("ceiling (raw trio-websocket)", raw_command("trio-websocket"))]
    if args.transports:
        rows += [("raw: our front (h11 + our WebSocket)", raw_command("front")), ("raw: hypercorn ASGI", raw_command("hypercorn"))]
    for checkout in reversed(args.against):
        rows.insert(1, (f"ours @ {Path(checkout).name}", against_command(str(Path(checkout).resolve()))))
    if args.only:
        rows = [row for row in rows if row[0] in args.only]
    if args.instructions:
        with tempfile.TemporaryDirectory(prefix="daemon-callgrind-") as directory:
            for name, command in rows:
                if not _is_raw(name) and name != "reference":
                    await instructions(name, command, args.instructions, f"{directory}/callgrind")
        return
    one = await measure_all(rows, ops=ops, sessions=1, repeat=repeat)
    many = await measure_all(rows, ops=ops, sessions=sessions, repeat=repeat)
    print(f"\n{ops:,} echo operations pipelined; best of {repeat}, runs alternating between servers;")
    print(f"many = {sessions} sessions at once; CPU = the server process's user + system time per operation;")
    print("client = this process's CPU time per operation\n")
    print(f"| server | ops/s, 1 session | frames/s | CPU µs/op | client µs/op | ops/s, {sessions} sessions | frames/s | CPU µs/op | client µs/op |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in rows:
        print(_row(name, one[name], many[name]))
    core, in_dumps = core_alone(ops)
    print(f"\nthe sans-IO core alone, same operations, no sockets: {core:.0f} µs/op, of which {in_dumps:.0f} µs in wire.json.dumps")
    if "ours" in one and "reference" in one:
        print(
            f"\nours / reference, throughput: {one['ours'].ops_per_s / one['reference'].ops_per_s:.2f}x on one session, "
            f"{many['ours'].ops_per_s / many['reference'].ops_per_s:.2f}x on {sessions} sessions"
        )
        print(
            f"reference / ours, CPU per op: {one['reference'].cpu_us_per_op / one['ours'].cpu_us_per_op:.2f}x on one session, "
            f"{many['reference'].cpu_us_per_op / many['ours'].cpu_us_per_op:.2f}x on {sessions} sessions"
        )
    if args.profile:
        async with server(ours_command(args.profile)) as (port, _):
            await run_load(port, min(ops, 500), 1, False, "warm")
            await run_load(port, ops, 1, False, "profile")
        stats = pstats.Stats(args.profile)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(50)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", metavar="PATH")
    parser.add_argument("--transports", action="store_true")
    parser.add_argument("--only", nargs="*", help="measure only these rows (by name)")
    parser.add_argument("--instructions", type=int, metavar="OPS", help="instead: instructions per operation of our daemon(s) under callgrind, OPS operations")
    parser.add_argument("--against", metavar="CHECKOUT", action="append", default=[], help="add our daemon as another checkout has it (a row, alternating)")
    parser.add_argument("--serve-raw", metavar="KIND", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_raw:
        trio.run(serve_raw, args.serve_raw)
    else:
        trio.run(main, args)
