"""What a person feels of the command line: wall time of the everyday
commands and the memory of each Claude Code session's ``router mcp``.
Prints a table.

    .venv/bin/python bench/cli.py [--runs 20] [--sessions 10]
    .venv/bin/python bench/cli.py --against /tmp/router-main     # before/after, one run

1. Wall time, ``--runs`` runs each, interleaved (one run of every command,
   then the next round, so a load that comes and goes on the machine falls
   on all of them alike): median and p90, and the median's ratio to the
   baseline measured in the same run, ``python -c pass`` (a bare interpreter
   start). Beside it the floors: what the three commands load to ask a
   router with a blocking request (argparse, json, socket and h11:
   ``router._client_sync``), and, for the async design they left,
   ``python -c "import trio"`` and trio with an httpx client on a Unix
   socket's transport (httpx loads httpcore, h11 and h2 when its first
   client is made): ``router mcp`` still runs on those.

   - ``router sessions``, ``router asks``: against one running ``router
     serve`` (its echo ``root`` session; no ask waiting);
   - ``router send root TEXT``: a delivery to that echo session, waited for
     to its reply (a fresh event id each run);
   - ``router mcp``: from the process's start to its answer to
     ``initialize``.

2. Memory of ``router mcp`` (``VmRSS`` and ``VmHWM`` of ``/proc/PID/status``)
   after ``initialize``, ``tools/list`` and one tool call (``list_sessions``),
   with 1 and with ``--sessions`` servers running on the machine at once
   (each as Claude Code starts it: its own data directory, its own socket in
   the one local directory), median and max over the servers. Beside it the
   floors: the resident memory of an interpreter that has only imported
   trio; trio and the MCP SDK's server (``mcp.server.stdio``,
   ``mcp.server.lowlevel``); and those with Quart-Trio and Hypercorn (the
   API each router serves on its private socket).

``--against CHECKOUT`` runs every command of this tree and of ``CHECKOUT``
(an export of another revision: ``git worktree add /tmp/router-main main``;
its ``router`` and ``wire`` are imported instead of this tree's), each
against its own ``router serve``, in the same rounds.

Every command runs as ``python -m router`` from the tree measured (what the
console script runs, without the installer's wrapper), on a temporary data,
settings and local directory of its own, on this machine's loopback and Unix
sockets only. Never a test: timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent.parent


def _env(tree: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTER_") and k != "CLAUDE_CODE_SESSION_ID"}
    run = tmp / "run"
    run.mkdir(mode=0o700, parents=True, exist_ok=True)
    env.update(PYTHONPATH=str(tree), XDG_RUNTIME_DIR=str(run), ROUTER_DATA_DIR=str(tmp / "data"),
               ROUTER_SETTINGS_DIR=str(tmp / "settings"))
    return env


class Tree:
    """One checkout measured: its ``router serve`` and its commands."""

    def __init__(self, label: str, tree: Path, tmp: Path) -> None:
        self.label, self.tree, self.tmp = label, tree, tmp
        self.env = _env(tree, tmp)
        self.serve: subprocess.Popen[bytes] | None = None

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "router", *args]

    def start(self) -> None:
        self.serve = subprocess.Popen(self.command("serve", "--port", "0", "--log-level", "warning"),
                                      stdout=subprocess.PIPE, stderr=open(self.tmp / "serve.stderr", "wb"),
                                      env=self.env, cwd=self.tree)
        assert self.serve.stdout is not None
        deadline = time.monotonic() + 120
        lines = 0
        while lines < 2 and time.monotonic() < deadline:
            if not self.serve.stdout.readline():
                break
            lines += 1
        while time.monotonic() < deadline:  # the socket answers: sessions lists root
            done = subprocess.run(self.command("sessions", "--json"), capture_output=True, env=self.env,
                                  cwd=self.tree, check=False)
            if done.returncode == 0 and b'"root"' in done.stdout:
                return
            time.sleep(0.2)
        raise SystemExit(f"{self.label}: router serve did not start: {(self.tmp / 'serve.stderr').read_text()}")

    def stop(self) -> None:
        if self.serve is not None and self.serve.poll() is None:
            self.serve.terminate()
            try:
                self.serve.wait(20)
            except subprocess.TimeoutExpired:
                self.serve.kill()
                self.serve.wait()

    def timed(self, what: str, run: int) -> tuple[float, float]:
        if what == "router mcp":
            process = Mcp(self, f"t{run}")
            try:
                return process.first_answer, process.first_answer_cpu
            finally:
                process.close()
        args = {"router sessions": ("sessions",), "router asks": ("asks",),
                "router send": ("send", "root", f"hello {run}")}[what]
        return _wall(self.command(*args), self.env, self.tree)


def _wall(argv: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``argv``; CPU is the process's own
    user + system time (``wait4``), which a loaded machine does not stretch."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(process.pid, 0)
        took = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} exited {process.returncode}: {err.read().decode(errors='replace')}")
    return took, usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    """User + system seconds a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Mcp:
    """One ``router mcp`` process spoken to over its stdio."""

    def __init__(self, tree: Tree, name: str) -> None:
        data = tree.tmp / "mcp" / name
        started = time.perf_counter()
        self.process = subprocess.Popen(tree.command("mcp", "--data-dir", str(data), "--log-level", "warning"),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=open(tree.tmp / f"mcp-{name}.stderr", "wb"), env=tree.env,
                                        cwd=tree.tree)
        self.next_id = 0
        self.buffer = b""
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "0"}})
        self.first_answer = time.perf_counter() - started
        self.first_answer_cpu = _cpu_of(self.process.pid)
        self.notify("notifications/initialized")

    def notify(self, method: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.process.stdin.flush()

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + 120
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("id") == self.next_id:
                    if "error" in answer:
                        raise SystemExit(f"router mcp refused {method}: {answer['error']}")
                    return answer["result"]
            if time.monotonic() > deadline:
                raise SystemExit(f"router mcp did not answer {method}")
            ready, _, _ = select.select([self.process.stdout], [], [], 1)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise SystemExit(f"router mcp ended ({self.process.wait()}) before answering {method}")
                self.buffer += chunk

    def exercise(self) -> None:
        self.call("tools/list")
        self.call("tools/call", {"name": "list_sessions", "arguments": {}})

    def memory(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in KiB."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _floor(argv: Sequence[str]) -> tuple[float, float]:
    return _wall(argv, {**os.environ}, HERE)


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def _memory(tree: Tree, count: int) -> tuple[float, float, float]:
    """Median VmRSS, max VmRSS, max VmHWM (MiB) of ``count`` servers at once."""
    servers = [Mcp(tree, f"m{count}-{index}") for index in range(count)]
    try:
        for server in servers:
            server.exercise()
        seen = [server.memory() for server in servers]
    finally:
        for server in servers:
            server.close()
    rss = [kib / 1024 for kib, _ in seen]
    return statistics.median(rss), max(rss), max(hwm for _, hwm in seen) / 1024


COMMANDS = ("router sessions", "router send", "router asks", "router mcp")
#: What ``router sessions``, ``send`` and ``asks`` cannot avoid loading: the
#: argument parser, JSON and ``router._client_sync``'s socket and h11.
BLOCKING_FLOOR = "import argparse, json, socket, h11"
CLIENT_FLOOR = "import trio, httpx; httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds='x'))"
#: What ``router mcp``'s memory cannot go below while it imports these.
MEMORY_FLOORS = {
    "python -c pass": "pass",
    "import trio": "import trio",
    "trio + the MCP SDK's server": "import trio, mcp.server.stdio, mcp.server.lowlevel",
    "... + Quart-Trio, Hypercorn": "import trio, mcp.server.stdio, mcp.server.lowlevel, quart_trio, hypercorn.trio",
}
_RSS = "import re; print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"


def _rss_floor(code: str) -> float:
    done = subprocess.run([sys.executable, "-c", f"{code}\n{_RSS}"], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=10, help="router mcp servers at once for the memory row")
    parser.add_argument("--against", type=Path, default=None, help="another checkout, measured in the same rounds")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="router-bench-cli-"))
    trees = [Tree("this tree", HERE, root / "this")]
    if args.against is not None:
        trees.append(Tree(f"against {args.against.name}", args.against.resolve(), root / "against"))
    floors = {"python -c pass": [sys.executable, "-c", "pass"],
              "a blocking client's imports": [sys.executable, "-c", BLOCKING_FLOOR],
              'python -c "import trio"': [sys.executable, "-c", "import trio"],
              "trio + an httpx client": [sys.executable, "-c", CLIENT_FLOOR]}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for tree in trees:
            tree.tmp.mkdir(parents=True, exist_ok=True)
            tree.start()
        for run in range(args.runs):
            for name, argv in floors.items():
                times.setdefault(("", name), []).append(_floor(argv))
            for tree in trees:
                for what in COMMANDS:
                    times.setdefault((tree.label, what), []).append(tree.timed(what, run))
        memory = {(tree.label, count): _memory(tree, count) for tree in trees for count in (1, args.sessions)}
        floors_rss = {name: _rss_floor(code) for name, code in MEMORY_FLOORS.items()}
    finally:
        for tree in trees:
            tree.stop()
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(wall for wall, _ in times[("", "python -c pass")])
    base_cpu = statistics.median(cpu for _, cpu in times[("", "python -c pass")])
    print(f"{args.runs} runs each, interleaved (ms; ratio: median / python -c pass's median in the same run; "
          "CPU: the process's user + system time)\n")
    print(f"| {'tree':<22} | {'command':<30} | {'wall median':>11} | {'wall p90':>8} | {'ratio':>6} | "
          f"{'CPU median':>10} | {'CPU ratio':>9} |")
    print(f"|{'-' * 24}|{'-' * 32}|{'-' * 13}|{'-' * 10}|{'-' * 8}|{'-' * 12}|{'-' * 11}|")
    for (label, what), values in times.items():
        median, p90 = _stats([wall for wall, _ in values])
        cpu = statistics.median(cpu for _, cpu in values)
        print(f"| {label or 'baseline / floor':<22} | {what:<30} | {median * 1000:11.0f} | {p90 * 1000:8.0f} | "
              f"{median / base:5.1f}x | {cpu * 1000:10.0f} | {cpu / base_cpu:8.1f}x |")
    print("\nrouter mcp memory after initialize, tools/list and one tool call (MiB)\n")
    print(f"| {'tree':<22} | {'servers at once':>15} | {'VmRSS median':>12} | {'VmRSS max':>9} | {'VmHWM max':>9} |")
    print(f"|{'-' * 24}|{'-' * 17}|{'-' * 14}|{'-' * 11}|{'-' * 11}|")
    for (label, count), (median, top, hwm) in memory.items():
        print(f"| {label:<22} | {count:>15} | {median:12.1f} | {top:9.1f} | {hwm:9.1f} |")
    print("\nresident memory of an interpreter after these imports alone (MiB)\n")
    for name, rss in floors_rss.items():
        print(f"| {name:<32} | {rss:6.1f} |")


if __name__ == "__main__":
    main()
