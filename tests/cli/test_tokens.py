"""Tokens stay off command lines and out of files another local user can
read (router.tokens, docs/cli.md "Tokens").

The routers run the documented way: ``router serve --daemon URL`` with
``$ROUTER_DAEMON_TOKEN`` and its stdout redirected to a file under umask
022; ``router send --url`` with ``$ROUTER_TOKEN`` while it waits for a
slow reply; ``router prompt --token-file``; the container daemon with
``$CF_HARNESS_TOKEN``. Then a second local user, made here, reads every
``/proc/*/cmdline`` and tries the token files and the page's URL file.
Everything lives under a directory every user may enter, so only the
files' own modes keep the second user out."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from tests.api.processes import REPO, ROUTER, environment, read_lines, stop
from tests.support.daemons import spawn_daemon
from tests.support.polling import until
from tests.support.served import page_url_file, served_page

OTHER = "router-test-other"
DAEMON_TOKEN = "daemon-secret-3f9a2c7e51"

#: Run as the other user: every /proc/*/cmdline it can read, and what each
#: named file gave (its text, or the error's name).
READER = r"""
import json, os, sys
lines = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines[pid] = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            pass
files = {}
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            files[path] = f.read()
    except OSError as exc:
        files[path] = type(exc).__name__
print(json.dumps({"cmdlines": lines, "files": files}))
"""


def other_user() -> int:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test makes a second local user with useradd")
    if shutil.which("useradd") is None:
        pytest.skip("no useradd on this machine")
    try:
        return pwd.getpwnam(OTHER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER], check=True)
        return pwd.getpwnam(OTHER).pw_uid


def as_other(uid: int, *paths: Path) -> dict:
    done = subprocess.run(["/usr/bin/python3", "-c", READER, *map(str, paths)], user=uid, group=uid,
                          extra_groups=[], capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout)


@pytest.fixture
def shared_dir():
    """A directory every user may enter (a pytest tmp_path is root's own,
    0700, which would hide the files whatever their modes)."""
    path = Path(tempfile.mkdtemp(prefix="router-tokens-", dir="/tmp"))
    path.chmod(0o755)
    old = os.umask(0o022)
    try:
        yield path
    finally:
        os.umask(old)
        shutil.rmtree(path, ignore_errors=True)


async def test_no_other_user_reads_a_token(shared_dir: Path) -> None:
    uid = other_user()
    settings, data = shared_dir / "settings", shared_dir / "data"
    out_file = shared_dir / "serve.out"  # stdout redirected under umask 022: 0644
    token_file = shared_dir / "daemon-token"
    token_file.write_text(DAEMON_TOKEN + "\n")
    token_file.chmod(0o600)
    async with spawn_daemon("ours", token=DAEMON_TOKEN) as daemon:
        with open(out_file, "wb") as out, open(shared_dir / "serve.err", "wb") as err:
            serve = await trio.lowlevel.open_process(
                [*ROUTER, "serve", "--port", "0", "--data-dir", str(data), "--settings", str(settings),
                 "--daemon", daemon.url],
                stdout=out, stderr=err, env=environment({"ROUTER_DAEMON_TOKEN": DAEMON_TOKEN}), cwd=REPO)
        processes = [serve]
        try:
            with trio.fail_after(60):
                await until(lambda: out_file.read_text().count("\n") >= 2, step=0.05)
            first = out_file.read_text().splitlines()[0]
            found = served_page(first, settings)
            assert found is not None and first == f"{found.url}/", first  # no token on a redirected stdout
            api_token = found.token
            # A send that waits for a slow reply, a prompt that waits: both hold their tokens while running.
            send = await trio.lowlevel.open_process(
                [*ROUTER, "send", "root", "slow 20000 waiting", "--url", found.url],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=environment({"ROUTER_TOKEN": api_token}), cwd=REPO)
            prompt = await trio.lowlevel.open_process(
                [*ROUTER, "prompt", "--daemon", daemon.url, "--token-file", str(token_file), "--store",
                 str(shared_dir / "prompt.db"), "--session", "other", "slow 20000 waiting"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment(), cwd=REPO)
            processes += [send, prompt]
            seen = await trio.to_thread.run_sync(
                as_other, uid, settings / "api-token", page_url_file(settings), token_file, out_file,
                *(Path(f"/proc/{p.pid}/environ") for p in processes))
            ours = {str(p.pid) for p in [*processes, daemon.process]}
            assert ours <= set(seen["cmdlines"]), "the other user sees our processes' command lines"
            for pid, line in seen["cmdlines"].items():
                for secret in (api_token, DAEMON_TOKEN):
                    assert secret not in line, f"a token on the command line of {pid}: {line}"
            files = seen["files"]
            assert files[str(settings / "api-token")] == "PermissionError"
            assert files[str(page_url_file(settings))] == "PermissionError"
            assert files[str(token_file)] == "PermissionError"
            assert api_token not in files[str(out_file)] and files[str(out_file)].startswith(found.url)
            for p in processes:
                assert files[f"/proc/{p.pid}/environ"] == "PermissionError"
            assert all(p.returncode is None for p in processes)  # they were running while read
        finally:
            for p in processes:
                await stop(p)


async def test_a_token_file_must_be_private(tmp_path: Path) -> None:
    """``--token-file`` takes a 0600 file of this user's; anything wider is
    refused with a code, exit 2."""
    loose = tmp_path / "token"
    loose.write_text("a-token-a-token-a-token\n")
    loose.chmod(0o644)
    done = await trio.run_process([*ROUTER, "send", "root", "hi", "--url", "http://127.0.0.1:1", "--token-file",
                                   str(loose)], capture_stdout=True, capture_stderr=True, check=False,
                                  env=environment(), cwd=REPO)
    assert done.returncode == 2 and b"token-file-unsafe" in done.stderr and b"chmod 600" in done.stderr
    both = await trio.run_process([*ROUTER, "send", "root", "hi", "--url", "http://127.0.0.1:1", "--token-file",
                                   str(loose), "--token", "x" * 20], capture_stdout=True, capture_stderr=True,
                                  check=False, env=environment(), cwd=REPO)
    assert both.returncode == 2 and b"token-twice" in both.stderr


async def test_serve_token_is_a_deprecated_alias(tmp_path: Path) -> None:
    """``router serve --token`` still names the daemon's token, with one
    line of warning; ``--daemon`` without any token is refused."""
    none = await trio.run_process([*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--settings",
                                   str(tmp_path / "s"), "--daemon", "ws://127.0.0.1:1"], capture_stdout=True,
                                  capture_stderr=True, check=False, env=environment(), cwd=REPO)
    assert none.returncode == 2 and none.stderr.startswith(b"router serve: no-daemon-token: ")
    old = await trio.run_process([*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--settings",
                                  str(tmp_path / "s"), "--daemon", "ws://127.0.0.1:1", "--token", "t"],
                                 capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO)
    lines = old.stderr.decode().splitlines()
    assert old.returncode == 2 and "--token is deprecated" in lines[0] and "daemon-check-failed" in lines[-1]


async def test_a_launched_daemon_gets_its_token_by_environment_only(shared_dir: Path) -> None:
    """``router serve --launcher process``: the ``router daemon`` it starts
    for a session holds its token in ``CF_HARNESS_TOKEN`` (read here, as
    root), and no command line on the machine carries it."""
    uid = other_user()
    settings = shared_dir / "settings"
    with open(shared_dir / "serve.out", "wb") as out, open(shared_dir / "serve.err", "wb") as err:
        serve = await trio.lowlevel.open_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(shared_dir / "data"), "--settings", str(settings),
             "--launcher", "process"], stdout=out, stderr=err, env=environment(), cwd=REPO)
    processes = [serve]
    try:
        with trio.fail_after(60):
            await until(lambda: (shared_dir / "serve.out").read_text().count("\n") >= 2, step=0.05)
        found = served_page((shared_dir / "serve.out").read_text().splitlines()[0], settings)
        assert found is not None
        env = environment({"ROUTER_TOKEN": found.token})
        launched = await trio.run_process([*ROUTER, "launch", "s1", "--url", found.url], env=env, cwd=REPO,
                                          capture_stdout=True, capture_stderr=True, check=False)
        assert launched.returncode == 0, launched.stderr
        send = await trio.lowlevel.open_process([*ROUTER, "send", "s1", "slow 20000 waiting", "--url", found.url],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                                cwd=REPO)
        processes.append(send)

        def daemon_token() -> str | None:
            for pid in os.listdir("/proc"):
                try:
                    line = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    if b"daemon" in line and any(b"router" in part for part in line):
                        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                            if item.startswith(b"CF_HARNESS_TOKEN="):
                                value = item.split(b"=", 1)[1].decode()
                                if os.getppid() != int(pid) and str(serve.pid) in _parents(pid):
                                    return value
                except (OSError, ValueError):
                    continue
            return None

        with trio.fail_after(60):
            await until(lambda: daemon_token() is not None, step=0.05)
        secret = daemon_token()
        assert secret
        seen = await trio.to_thread.run_sync(as_other, uid)
        for pid, line in seen["cmdlines"].items():
            assert secret not in line and found.token not in line, f"a token on the command line of {pid}: {line}"
    finally:
        for p in processes:
            await stop(p)


def _parents(pid: str) -> list[str]:
    """The chain of parent pids of ``pid``."""
    chain = []
    while pid not in ("0", "1"):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        pid = fields[1]
        chain.append(pid)
    return chain


async def test_a_terminal_gets_the_url_with_its_token(tmp_path: Path) -> None:
    """On a terminal (a pseudo-terminal here) the first line is the page's
    URL with the token, the same as the 0600 ``page-url`` file holds."""
    import pty

    main, child = pty.openpty()
    settings = tmp_path / "settings"
    try:
        with open(tmp_path / "serve.err", "wb") as err:
            serve = await trio.lowlevel.open_process(
                [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--settings", str(settings)],
                stdout=child, stderr=err, env=environment(), cwd=REPO)
        os.close(child)
        child = -1
        try:
            received = b""
            with trio.fail_after(60):
                while received.count(b"\n") < 2:
                    received += await trio.to_thread.run_sync(os.read, main, 4096)
            first = received.decode().splitlines()[0].strip()
            assert first == page_url_file(settings).read_text().strip() and "?token=" in first
        finally:
            await stop(serve)
    finally:
        os.close(main)
        if child >= 0:
            os.close(child)
