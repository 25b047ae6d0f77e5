"""launcher ``process``: one ``router daemon`` subprocess per session.

Each start runs ``python -m router daemon --adapter HARNESS --host
127.0.0.1`` with ``CF_HARNESS_TOKEN``, ``CF_HARNESS_RUNTIME_ID`` and
``CF_HARNESS_PORT=0`` (the daemon picks a free loopback port and prints it
on its first stdout line, so no port is chosen here and none can be taken
by someone else in between), waits for that line and one ``GET /healthz``,
and answers ``{"url": "ws://127.0.0.1:PORT", "container": "<pid>", "state":
"running"}``. The daemon's stderr is the router's. The session's workspace
(``workspace``: an absolute directory, or a name under the
``workspace_root`` option, which ``router serve`` sets to ``<data
dir>/workspaces``) is made and is the daemon's working directory.

It is the lifecycle's fast double of the ``docker`` launcher (a process
dies, is replaced, idles, in milliseconds) and useful on its own: agents on
this machine, each in its own process, with nothing to install.

``router serve`` sets the ``settings_dir`` option; the daemon gets it as
``ROUTER_SETTINGS_DIR``, so ``--adapter acp:NAME`` finds the agents of the
same ``plugins.json`` (docs/acp.md).

Options (``options.launcher.process`` in ``plugins.json``): ``command``, a
list of strings run instead of ``python -m router daemon`` (the adapter and
host arguments are still appended; a test names a command that cannot
start); ``start_timeout``, seconds a start may take (default 30; the
caller's own cancel scope bounds it too).

Refusals (answered, never raised): ``start-failed`` (the command cannot be
run, or exited before it listened, with its exit status), ``unhealthy``
(it printed no address, or its health check failed, in time).

The processes live in this module (by pid): ``wait`` and ``inspect`` of a
pid this module did not start (a router that restarted) answer ``missing``.

**A daemon dies with its router.** Each daemon gets the read end of a pipe
(``ROUTER_DAEMON_LIFELINE_FD``, the descriptor's number) whose write end
only this router holds (close-on-exec: no other child inherits it). When
the router ends, however it ends (SIGKILL included), the kernel closes the
write end, the daemon reads end-of-file and stops as on SIGTERM. (Not
``PR_SET_PDEATHSIG``: it fires when the *thread* that forked the child
ends, and trio starts processes from worker threads that come and go.)

**A restarted router stops what its record names.** ``stop`` of a pid
this module did not start stops it only if it is the daemon the record
names: its ``/proc/<pid>/environ`` holds the record's
``CF_HARNESS_RUNTIME_ID`` and this router's owner id
(``ROUTER_LAUNCHER_OWNER``: another router of a cluster on this machine,
which took the session over, never stops a live router's daemon; a pid
reused by another process is left alone).
It answers what it did: ``{"state": "stopped", "reason"}``, or
``{"state": "missing", "reason"}`` when there was nothing to stop; the
host logs that, not an intention.
"""

import os
import re
import signal
import subprocess
import sys

import httpx
import trio

INTERFACE_VERSION = 1

#: Seconds a start may take by default (ours: a cold ``python -m router
#: daemon`` imports in about a second on a loaded machine).
START_TIMEOUT = 30.0
#: Seconds a stopped daemon has between SIGTERM and SIGKILL (ours; the
#: daemon closes its sockets and adapter sessions at once on SIGTERM).
STOP_GRACE = 5.0
#: The daemon's first stdout line (``router.daemon.cli``): "router daemon:
#: echo on 127.0.0.1:PORT (runtime ID)".
LISTENING = re.compile(rb" on [^ ]*:(\d+) \(runtime ")
#: The environment the daemon reads (``CONTAINER_ENV`` of npm ``agents@0.32.0`` ``protocol.d.ts``).
TOKEN_ENV, RUNTIME_ENV, PORT_ENV = "CF_HARNESS_TOKEN", "CF_HARNESS_RUNTIME_ID", "CF_HARNESS_PORT"

#: The variable naming the router a daemon was started for (its owner id:
#: another router of a cluster on this machine never stops it).
OWNER_ENV = "ROUTER_LAUNCHER_OWNER"
#: The variable naming the daemon's end of its lifeline (``router daemon``
#: reads it: ``router.daemon.cli``).
LIFELINE_ENV = "ROUTER_DAEMON_LIFELINE_FD"

#: pid (as a string) -> the trio.Process this module started.
_PROCESSES = {}
#: pid (as a string) -> the write end of its lifeline (closed when it stops).
_LIFELINES = {}


def _options(context):
    options = context.get("options")
    return options if type(options) is dict else {}


def _command(context):
    options = _options(context)
    command = options.get("command")
    if not (type(command) is list and command and all(type(part) is str for part in command)):
        command = [sys.executable, "-m", "router", "daemon"]
    return [*command, "--adapter", context.get("harness") or "echo", "--host", "127.0.0.1"]


def _env(context):
    env = {key: value for key, value in os.environ.items() if key not in (TOKEN_ENV, RUNTIME_ENV, PORT_ENV)}
    extra = context.get("env")
    if type(extra) is dict:
        env.update({key: value for key, value in extra.items() if type(key) is str and type(value) is str})
    # The router's settings directory (``router serve`` sets the option), so
    # ``--adapter acp:NAME`` reads the agents of the same plugins.json.
    settings_dir = _options(context).get("settings_dir")
    if type(settings_dir) is str and os.path.isabs(settings_dir):
        env["ROUTER_SETTINGS_DIR"] = settings_dir
    env.update({TOKEN_ENV: context["token"], RUNTIME_ENV: context["runtime"], PORT_ENV: "0"})
    owner = _owner(context)
    if owner:
        env[OWNER_ENV] = owner
    return env


def _owner(context):
    """The router this daemon is started for (``labels["router.owner"]``)."""
    labels = context.get("labels")
    owner = labels.get("router.owner") if type(labels) is dict else None
    return owner if type(owner) is str else ""


def _workspace_path(context):
    """The session's workspace directory: ``workspace`` when it is absolute,
    else that name under the ``workspace_root`` option; None without one."""
    workspace, root = context.get("workspace"), _options(context).get("workspace_root")
    if type(workspace) is not str or not workspace:
        return None
    if os.path.isabs(workspace):
        return workspace
    if "/" in workspace or workspace in (".", ".."):
        return None  # a name, not a path out of the root
    if type(root) is str and os.path.isabs(root):
        return os.path.join(root, workspace)
    return None


def _workspace(context):
    worktree = context.get("worktree")
    if type(worktree) is str and os.path.isabs(worktree) and os.path.isdir(worktree):
        return worktree  # `router new`'s git worktree: the daemon works there
    path = _workspace_path(context)
    if path is not None:
        os.makedirs(path, mode=0o700, exist_ok=True)
    return path


async def _first_line(process):
    """The daemon's first stdout line (at most 4 KiB), or b"" at its end."""
    line = b""
    while b"\n" not in line and len(line) < 4096:
        chunk = await process.stdout.receive_some(4096)
        if not chunk:
            break
        line += chunk
    return line.split(b"\n", 1)[0]


async def _healthy(port):
    # Plain HTTP to a daemon on loopback: no TLS, so no CA bundle (httpx's
    # default loads certifi's, 20-94 ms of CPU on the event loop per client).
    async with httpx.AsyncClient(timeout=5.0, verify=False) as client:
        response = await client.get(f"http://127.0.0.1:{port}/healthz")
    return response.status_code == 200


async def _kill(process):
    """SIGKILL and reap, whatever cancels the caller."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.kill()
        await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()
        _cut_lifeline(str(process.pid))


def _cut_lifeline(container):
    keep = _LIFELINES.pop(container, None)
    if keep is not None:
        os.close(keep)


def _runs(pid):
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")


def _is_the_daemon(pid, runtime, owner):
    """Whether ``pid`` is the daemon started with runtime id ``runtime`` for
    router ``owner`` (its environment as it was executed says so)."""
    if not runtime:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            environ = file.read().split(b"\0")
    except OSError:
        return False
    named = [entry for entry in environ if entry.startswith(f"{OWNER_ENV}=".encode())]
    if named and named != [f"{OWNER_ENV}={owner}".encode()]:
        return False  # another router's (one started before owners were named has none)
    return f"{RUNTIME_ENV}={runtime}".encode() in environ


async def _stop_foreign(context, container):
    """Stop a daemon an earlier run of the router started, if the record's
    runtime id names it: SIGTERM, then SIGKILL after :data:`STOP_GRACE`."""
    runtime = context.get("runtime")
    if not container.isdigit() or not _runs(int(container)):
        await trio.lowlevel.checkpoint()
        return {"state": "missing", "reason": f"no process {container} runs"}
    pid = int(container)
    if not _is_the_daemon(pid, runtime, _owner(context)):
        await trio.lowlevel.checkpoint()
        return {"state": "missing",
                "reason": f"process {container} is not this router's daemon of runtime {runtime!r} (another "
                          "router's, or its pid was reused): left alone"}
    with trio.CancelScope(shield=True):
        try:
            os.kill(pid, signal.SIGTERM)
            with trio.move_on_after(STOP_GRACE):
                while _runs(pid):
                    await trio.sleep(0.05)
            if _runs(pid):
                os.kill(pid, signal.SIGKILL)
                while _runs(pid):
                    await trio.sleep(0.05)
                return {"state": "stopped", "reason": f"daemon {container} killed (SIGKILL after {STOP_GRACE:g} s)"}
        except ProcessLookupError:
            pass
    return {"state": "stopped", "reason": f"daemon {container} stopped (SIGTERM)"}


async def start(context):
    timeout = _options(context).get("start_timeout")
    timeout = timeout if type(timeout) in (int, float) and timeout > 0 else START_TIMEOUT
    lifeline, keep = os.pipe()  # both close-on-exec; only the daemon's end is passed
    env = {**_env(context), LIFELINE_ENV: str(lifeline)}
    try:
        process = await trio.lowlevel.open_process(
            _command(context), env=env, cwd=_workspace(context), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, start_new_session=True, pass_fds=(lifeline,),
        )
    except OSError as exc:
        os.close(keep)
        return {"code": "start-failed", "message": f"the daemon could not be run: {exc.strerror or exc}"}
    except BaseException:
        os.close(keep)
        raise
    finally:
        os.close(lifeline)
    _LIFELINES[str(process.pid)] = keep
    try:
        with trio.move_on_after(timeout):
            line = await _first_line(process)
            found = LISTENING.search(line)
            if found is None:
                status = await process.wait() if not line else None
                await _kill(process)
                if status is not None:
                    return {"code": "start-failed",
                            "message": f"the daemon exited with status {status} before it listened"}
                return {"code": "unhealthy", "message": f"the daemon said {line[:200]!r}, not where it listens"}
            port = int(found.group(1))
            if not await _healthy(port):
                await _kill(process)
                return {"code": "unhealthy", "message": f"the daemon on port {port} failed its health check"}
            container = str(process.pid)
            _PROCESSES[container] = process
            return {"url": f"ws://127.0.0.1:{port}", "container": container, "state": "running"}
    except BaseException:
        await _kill(process)
        raise
    await _kill(process)
    return {"code": "unhealthy", "message": f"the daemon did not listen within {timeout:g} s"}


def _outcome(returncode):
    if returncode is None:
        return {"state": "running", "exit_code": None, "reason": "it runs"}
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return {"state": "killed", "exit_code": returncode, "reason": f"the daemon was killed by {name}"}
    return {"state": "exited", "exit_code": returncode, "reason": f"the daemon exited with status {returncode}"}


async def wait(context, container):
    process = _PROCESSES.get(container)
    if process is None:
        await trio.lowlevel.checkpoint()
        return {"state": "missing", "exit_code": None, "reason": f"no daemon process {container} of this router"}
    return _outcome(await process.wait())


async def inspect(context, container):
    await trio.lowlevel.checkpoint()
    process = _PROCESSES.get(container)
    if process is None:
        return {"state": "missing", "exit_code": None, "reason": f"no daemon process {container} of this router"}
    return _outcome(process.returncode)


async def stop(context, container):
    process = _PROCESSES.pop(container, None)
    if process is None:
        return await _stop_foreign(context, container)
    with trio.CancelScope(shield=True):
        ran = process.returncode is None
        if ran:
            process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STOP_GRACE):
            await process.wait()
        await _kill(process)
    if not ran:
        return {"state": "missing", "reason": f"daemon {container} had ended ({_outcome(process.returncode)['reason']})"}
    return {"state": "stopped", "reason": f"daemon {container} stopped"}


async def remove_workspace(context):
    await trio.lowlevel.checkpoint()
    workspace = _workspace_path(context)
    if workspace is not None and os.path.isdir(workspace):
        await trio.to_thread.run_sync(_remove_tree, workspace)


def _remove_tree(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)
