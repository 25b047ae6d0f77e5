"""The host's memory against a daemon sending big messages, as processes:
``python -m tests.host.memory_probe MODE MiB [CONNECTIONS]`` runs a host
(this process) against a fake daemon (a child process, so its own copies
of the message are not counted) and prints one JSON line: the host's
``VmHWM`` (peak) and ``VmRSS`` in MiB before, and after, and after the
first two connections.

- ``over``: the daemon sends a text of MiB on every connection (over the
  64 MiB limit: refused with 1009 as it arrives; the link redials);
- ``frame``: one turn whose answer is a ``message`` event of MiB (under the
  limit: applied and stored).

Used by ``tests/host/test_hostile_daemon.py`` and for docs/host.md's
figures."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[2]


def status(name: str) -> int:
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(name):
                return int(line.split()[1]) // 1024
    raise LookupError(name)


async def daemon(mode: str, size: int) -> None:
    from tests.host.fake_daemon import FakeConnection, FakeDaemon

    async def script(connection: FakeConnection) -> None:
        await connection.greet()
        if mode == "over":
            await connection.send_text("x" * size)
        else:
            prompt = await connection.receive_type("prompt")
            op = prompt["operationId"]
            await connection.send({"type": "frame", "seq": 1, "frame": {"kind": "start", "operationId": op}})
            message = {"id": "big", "role": "assistant", "parts": [{"type": "text", "text": "x" * size}]}
            event = {"kind": "event", "operationId": op, "event": {"type": "message", "message": message}}
            await connection.send_text(json.dumps({"type": "frame", "seq": 2, "frame": event}))
            del message, event
            settle = {"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": "ok"}}
            await connection.send({"type": "frame", "seq": 3, "frame": settle})
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        fake = await nursery.start(FakeDaemon(script).run)
        print(fake.url, flush=True)


async def host(mode: str, size_mib: int, connections: int) -> dict:
    from router.host.host import Host, HostSettings
    from router.host.link import DaemonEndpoint
    from router.host.store import Store

    child = subprocess.Popen([sys.executable, "-m", "tests.host.memory_probe", "daemon", mode, str(size_mib)],
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "host.db") as store:
            async with trio.open_nursery() as nursery:
                host = Host(store, DaemonEndpoint(url, "t"), HostSettings(reconnect_base=0.02, reconnect_cap=0.1))
                await nursery.start(host.run)
                figures = {"mode": mode, "MiB": size_mib, "before_rss": status("VmRSS"), "before_hwm": status("VmHWM")}
                session = host.session()
                if mode == "frame":
                    result, _ = await session.prompt("x")
                    figures["status"] = result.status
                else:
                    await session.submit("x")
                    link = session.link
                    while link is None or link.statistics().connections < 2:
                        await trio.sleep(0.01)
                        link = session.link
                    figures["second_rss"] = status("VmRSS")
                    while link.statistics().connections < connections:
                        await trio.sleep(0.01)
                    figures["connections"] = link.statistics().connections
                figures["after_rss"], figures["after_hwm"] = status("VmRSS"), status("VmHWM")
                nursery.cancel_scope.cancel()
        return figures
    finally:
        child.kill()
        child.wait()


def main(argv: list[str]) -> None:
    if argv[0] == "daemon":
        trio.run(daemon, argv[1], int(argv[2]) << 20)
        return
    connections = int(argv[2]) if len(argv) > 2 else 1
    print(json.dumps(trio.run(host, argv[0], int(argv[1]), connections)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
