"""The fault campaign's second local user (docs/reliability.md): a user
made with ``useradd`` (tests/cli/test_tokens.py's), run with a dropped uid,
tries a live ``router serve`` while a good client sends through it.

What it tries, each one fault: the router's private socket (its directory
under ``$XDG_RUNTIME_DIR``, 0700), the API token's file and the page URL's
file (0600), the API without a token (``GET /sessions``, a message
``POST``), every ``/proc/*/cmdline`` for the token, and the router's
``/proc/<pid>/environ``. Everything lives under a directory every user may
enter, made under umask 022, so only the files' own modes keep the user
out. Root only (``useradd`` and a uid change); skipped with the reason
otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import trio

from tests.support.campaign import FaultRow, _api_client, judge
from tests.support.campaign_hostile import GoodClient

#: Run as the other user: each attempt's outcome as a word (what it got,
#: or the error's name). argv: token file, URL file, socket, port, pid.
ATTEMPTS = r"""
import http.client, json, os, socket, sys
token_file, url_file, sock, port, pid = sys.argv[1:6]
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = type(exc).__name__
def read(path):
    with open(path) as f:
        return "read " + str(len(f.read())) + " characters"
def connect_socket():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sock)
    s.close()
    return "connected"
def api(method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    return "HTTP %d" % status
def cmdlines():
    lines = []
    for each in os.listdir("/proc"):
        if each.isdigit():
            try:
                with open("/proc/%s/cmdline" % each, "rb") as f:
                    lines.append(f.read().replace(b"\0", b" ").decode("utf-8", "replace"))
            except OSError:
                pass
    return lines
attempt("the API token's file (0600)", lambda: read(token_file))
attempt("the page URL's file (0600)", lambda: read(url_file))
attempt("the router's private socket", connect_socket)
attempt("GET /sessions without a token", lambda: api("GET", "/sessions"))
attempt("POST a message without a token", lambda: api("POST", "/sessions/root/messages", '{"text": "x"}'))
attempt("the router's /proc/<pid>/environ", lambda: read("/proc/%s/environ" % pid))
out["cmdlines"] = cmdlines()
print(json.dumps(out))
"""

#: What each attempt must get: the word, or the words it may be.
REFUSED = ("PermissionError", "HTTP 401", "HTTP 403")


def _as_other(uid: int, *args: str) -> dict:
    done = subprocess.run(["/usr/bin/python3", "-c", ATTEMPTS, *args], user=uid, group=uid, extra_groups=[],
                          capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root: it makes a second local user with useradd"
    if shutil.which("useradd") is None or not Path("/usr/bin/python3").exists():
        return "no useradd or no /usr/bin/python3 on this machine"
    return None


async def _rounds(row: FaultRow, target: int, uid: int, args: tuple[str, ...], token: str) -> dict[str, set[str]]:
    """Rounds of attempts until ``target`` were made: each attempt's outcomes."""
    outcomes: dict[str, set[str]] = {}
    while row.faults < target or not outcomes:
        seen = await trio.to_thread.run_sync(_as_other, uid, *args)
        lines = seen.pop("cmdlines")
        seen["a token on any /proc/*/cmdline"] = (
            "found" if any(token in line for line in lines) else f"none in {len(lines)}")
        for name, outcome in seen.items():
            row.faults += 1
            outcomes.setdefault(name, set()).add(outcome)
    return outcomes


async def phase_second_user(target: int, seed: int, work: Path) -> FaultRow:
    """Rounds of the module docstring's attempts (``target`` attempts in
    all, at least one round) against one ``router serve``; each attempt's
    outcome is a case, every round's compared with the first's."""
    from router.host.store import Store
    from tests.api.processes import serve
    from tests.cli.test_tokens import other_user
    from tests.support.served import page_url_file

    row = FaultRow("second local user: router serve")
    why = _why_not()
    if why is not None:
        row.notes.append(f"skipped: {why}")
        return row
    row.exits, row.stopped = 0, 0
    uid = other_user()
    shared = Path(tempfile.mkdtemp(prefix="router-user-", dir="/tmp"))
    shared.chmod(0o755)
    runtime = shared / "xdg"
    runtime.mkdir(mode=0o700)
    old = os.umask(0o022)
    try:
        async with serve(shared, env={"XDG_RUNTIME_DIR": str(runtime)}) as served:
            port = served.url.rsplit(":", 1)[1]
            sockets = [str(p) for p in runtime.rglob("*") if p.is_socket()]
            args = (str(shared / "settings" / "api-token"), str(page_url_file(shared / "settings")),
                    sockets[0] if sockets else str(runtime / "router" / "missing.sock"), port, str(served.process.pid))
            async with _api_client(served.page) as client:
                good = GoodClient(client, "root", row)
                stop = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(good.run, stop)
                    outcomes = await _rounds(row, target, uid, args, served.token)
                    stop.set()
            if served.process.returncode is not None:
                row.exits += 1
            if not sockets:
                row.notes.append("the router's socket was not found under $XDG_RUNTIME_DIR")
        for name, got in outcomes.items():
            refused = all(o in REFUSED or o.startswith("none in") for o in got)
            row.case(f"second user: {name}", ", ".join(sorted(got)) + ("" if refused else " (NOT REFUSED)"))
            row.wrong += not refused
        with Store(shared / "data" / "host.sqlite", exclusive=False) as store:
            judge(row, store, "root", good.expected)
    finally:
        os.umask(old)
        shutil.rmtree(shared, ignore_errors=True)
    return row
