"""A container session that outlives its container, as real processes
(``router serve`` is the main job; this shows the durability underneath it).

1. Start ``router daemon --adapter echo`` as its own process (a "container").
2. Send it three prompts through the host (``router prompt``), which keeps the
   durable record in a SQLite store.
3. Kill the daemon with SIGKILL, as a container dies, and start a new one with
   a new runtime id on the same port.
4. Send one more prompt: the host restores the session into the new daemon,
   and the echo adapter's turn count (which counts the restored entries)
   carries on from 3 to 4.
5. Print the transcript from the store (``router transcript``).

Everything runs from this checkout's ``router`` command; nothing is left
behind but the temporary directory, which is removed.

    .venv/bin/python scripts/main_job.py
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROUTER = [sys.executable, "-m", "router"]
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_daemon(port: int, token: str, runtime_id: str) -> subprocess.Popen:
    env = {**os.environ, "CF_HARNESS_TOKEN": token, "CF_HARNESS_RUNTIME_ID": runtime_id, "CF_HARNESS_PORT": str(port)}
    daemon = subprocess.Popen(
        [*ROUTER, "daemon", "--adapter", "echo", "--host", "127.0.0.1"],
        env=env, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    line = daemon.stdout.readline().strip()
    if not line:
        raise SystemExit(f"the daemon did not start (exit {daemon.wait()})")
    print(f"  daemon {runtime_id}: {line}")
    return daemon


def prompt(url: str, token: str, store: Path, text: str) -> dict:
    done = subprocess.run(
        [*ROUTER, "prompt", "--daemon", url, "--store", str(store), "--session", "demo", text],
        capture_output=True, text=True, cwd=REPO,
        env={**os.environ, "ROUTER_DAEMON_TOKEN": token},  # never on the command line: /proc shows it to every user
    )
    if done.returncode == 2:
        raise SystemExit(f"router prompt failed: {done.stderr.strip()}")
    result = json.loads(done.stdout)
    print(f"  > {text!r:<28} {json.dumps(result, ensure_ascii=False)}")
    return result


def main() -> int:
    token = secrets.token_hex(16)
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="router-main-job-") as work:
        store = Path(work) / "host.sqlite"
        print(f"store: {store}\n\n1. a daemon, three prompts through the host")
        daemon = start_daemon(port, token, "runtime-1")
        try:
            for text in ("hello", "how are you?", "third time"):
                prompt(url, token, store, text)
            print("\n2. the container dies (SIGKILL) and a new one starts")
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            daemon = start_daemon(port, token, "runtime-2")
            print("\n3. the session goes on in the new container")
            last = prompt(url, token, store, "still there?")
            resumed = last.get("status") == "done" and "(turn 4)" in last.get("text", "")
            print(f"\n   turn count carried over from the restored entries: {'yes' if resumed else 'NO'}")
            print("\n4. the transcript, from the host's store")
            transcript = subprocess.run(
                [*ROUTER, "transcript", "--store", str(store), "--session", "demo"],
                capture_output=True, text=True, check=True, cwd=REPO,
            )
            for message in json.loads(transcript.stdout):
                text = " ".join(part.get("text", "") for part in message.get("parts", []))
                print(f"   {message.get('role', '?'):>9}: {text}")
            return 0 if resumed else 1
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
