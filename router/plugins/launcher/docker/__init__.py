"""launcher ``docker``: one container of the project's image per session.

``start`` runs the image (``router daemon`` is its entry point) with the
adapter the route's harness names (``--adapter``), the session's token,
runtime id and port in ``CF_HARNESS_TOKEN``, ``CF_HARNESS_RUNTIME_ID`` and
``CF_HARNESS_PORT``, the session's workspace volume at ``/workspace`` (and
``HOME=/workspace/home``, so an agent's own state survives a replacement
container), and every label of ``context["labels"]`` on the container and
the volume; a session ``router new`` made (``context["worktree"]``, an
absolute host path) has that git worktree bind-mounted at ``/workspace``
instead and its volume at ``/home/router`` (its HOME). It answers once ``GET /healthz`` on the daemon answers 200.
Everything goes through the ``docker`` command-line client (no SDK).

Options (``plugins.json``, ``options.launcher.docker``)::

    {"image":   "router:latest",   # the image to run
     "network": "bridge",          # or "host"
     "mounts":  [{"source": "/abs/host/path", "target": "/opt/x", "readonly": true}],
     "memory":  "512m",            # --memory (and --memory-swap, no swap); null: no limit
     "docker":  "/usr/bin/docker", # the client; default: the first that answers
     "health_timeout": 60,         # seconds until a silent daemon is `unhealthy`
     "stop_timeout": 10}           # seconds `docker stop` waits before SIGKILL

Networks: ``bridge`` publishes the daemon's port on 127.0.0.1 only
(``-p 127.0.0.1::8080``, the port read back with ``docker port``); ``host``
shares the host's network (a container then reaches services on the host's
loopback, such as a local API) and the daemon listens on 127.0.0.1 on a free
port this module picks. Only 127.0.0.1 is ever dialled, never a container's
bridge address.

Secrets stay out of the process table: the token and ``context["env"]``
reach ``docker create`` as ``-e NAME`` with the value in the client's own
environment (except names the client itself reads: ``DOCKER_*``, ``PATH``,
``HOME``, which go on the command line).

Refusals (returned, never raised): ``docker-unavailable`` (no client works
or no engine answers), ``image-missing`` (the image is not on this engine;
nothing is pulled), ``start-failed`` (docker refused to run it, or the
daemon exited before it was healthy; docker's words and the log's tail in
the message), ``unhealthy`` (no 200 from ``/healthz`` within
``health_timeout``), ``bad-launch`` (an option or an environment name is
malformed), ``workspace-in-use`` (``remove_workspace`` while a container
still mounts it). ``wait``, ``inspect``, ``stop`` and ``remove_workspace``
answer ``docker-unavailable`` when no engine can be asked.

Resource handling: ``docker create`` (shielded from cancellation, and
bounded, so the engine never finishes a creation after the removal looked),
then ``docker start``; the container is named after the runtime id, so a
start cancelled at any other await removes it by name before the
cancellation goes on; a refused start removes it too. ``stop``
removes the container and keeps the workspace; ``remove_workspace`` drops
the volume.

``wait`` returns when the container is no longer running (``docker wait``),
then reads its state: ``oom-killed`` (``State.OOMKilled``), ``killed`` (exit
137, SIGKILL: ``docker kill``, or a kill from outside), ``exited`` (any other
exit, ``docker stop`` included), ``missing`` (no such container).
"""

import json
import os
import re
import shutil
import socket
import subprocess

import httpx
import trio

from router.errors import Refusal

INTERFACE_VERSION = 1

#: The daemon's port inside the container in bridge mode (the image's
#: ``CF_HARNESS_PORT`` default; the Dockerfile's EXPOSE).
CONTAINER_PORT = 8080
#: The container protocol's health path (npm agents@0.32.0 protocol.d.ts:
#: CONTAINER_HEALTH_PATH).
HEALTH_PATH = "/healthz"
#: Where the session's workspace volume is mounted, and HOME inside it.
WORKSPACE = "/workspace"
HOME = "/workspace/home"
#: HOME (the volume) when a git worktree is bind-mounted at /workspace.
WORKTREE_HOME = "/home/router"
#: The environment names of the container protocol (npm agents@0.32.0 protocol.d.ts).
TOKEN_ENV, RUNTIME_ENV, PORT_ENV = "CF_HARNESS_TOKEN", "CF_HARNESS_RUNTIME_ID", "CF_HARNESS_PORT"

DEFAULT_IMAGE = "router:latest"
DEFAULT_HEALTH_TIMEOUT = 60.0
DEFAULT_STOP_TIMEOUT = 10
#: A daemon answers /healthz 0.25-0.5 s after `docker run` (observed with
#: dockerd 20.10): poll a few times in that window.
HEALTH_POLL_INTERVAL = 0.05
#: How long a cancelled or refused start may spend removing its container.
CLEANUP_TIMEOUT = 30.0
#: The exit status of a process ended by SIGKILL (128 + 9).
SIGKILL_STATUS = 137
#: Where the docker client usually lives, after whatever PATH finds first.
CLIENT_CANDIDATES = ("/usr/local/bin/docker", "/usr/bin/docker")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLIENT_OWN_ENV = re.compile(r"DOCKER_.*|PATH|HOME")
_SIZE = re.compile(r"[0-9]+[bkmg]?", re.IGNORECASE)

#: The client chosen so far, per configured path and engine address (probing
#: costs a process).
_clients = {}


# -- the client ------------------------------------------------------------------


async def _docker(client, *args, env=None, check=True):
    """Run ``client args``; answers (returncode, stdout, stderr) as text.

    With ``check``, a non-zero exit raises :class:`Refusal` (``start-failed``)
    with docker's words. Cancelling kills the client process.
    """
    done = await trio.run_process(
        [client, *args], capture_stdout=True, capture_stderr=True, check=False, env=env,
        stdin=subprocess.DEVNULL,
    )
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    if check and done.returncode != 0:
        raise Refusal("start-failed", f"`docker {args[0]}` failed: {_tail(err or out)}")
    return done.returncode, out, err


def _answer(refused):
    """A refusal as the launcher protocol's answer: ``{"code", "message"}``
    (docs/plugins.md), not the HTTP edge's spelling."""
    return {"code": refused.code, "message": refused.message}


def _tail(text, lines=8):
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:]) or "no output"


async def _client(options):
    """The docker client to use: ``options.docker``, else the first of PATH's
    and the usual places whose ``docker version`` reaches the engine (a
    client newer than the engine negotiates the API version down)."""
    configured = options.get("docker")
    if configured is not None and (type(configured) is not str or not configured):
        raise Refusal("bad-launch", "options.docker must be the path of a docker client")
    # The engine a client reaches depends on these too.
    key = (configured, os.environ.get("DOCKER_HOST"), os.environ.get("DOCKER_CONTEXT"), os.environ.get("PATH"))
    if key in _clients:
        return _clients[key]
    candidates = [configured] if configured else [shutil.which("docker"), *CLIENT_CANDIDATES]
    reasons = []
    for candidate in dict.fromkeys(c for c in candidates if c):
        if not os.access(candidate, os.X_OK):
            if configured:
                reasons.append(f"{candidate}: not an executable file")
            continue
        reason = await _reaches_engine(candidate)
        if reason is None:
            _clients[key] = candidate
            return candidate
        reasons.append(f"{candidate}: {reason}")
    raise Refusal("docker-unavailable",
                   "no docker client reaches an engine: " + ("; ".join(reasons) or "no docker client found"))


async def _reaches_engine(candidate):
    """None when the client's ``docker version`` reaches the engine, else why not."""
    try:
        code, out, err = await _docker(candidate, "version", "--format", "{{.Server.APIVersion}}", check=False)
    except OSError as exc:
        return str(exc)
    if code == 0 and out.strip():
        return None
    return _tail(err or out, 2)


# -- start -------------------------------------------------------------------------


def _options(context):
    options = context.get("options")
    return options if type(options) is dict else {}


def _container_name(context):
    # Unique per start (a runtime id is fresh each time), and known before
    # `docker create` returns, so a cancelled start can be removed by name.
    runtime = re.sub(r"[^a-zA-Z0-9_.-]", "-", str(context["runtime"]))
    return f"router-{runtime}"[:128]


def _label_args(labels):
    args = []
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    return args


def _free_loopback_port():
    # For --network host: the daemon binds it a moment later (a port taken
    # in between fails the start with docker's words, never silently).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _mount_args(mounts):
    if mounts is None:
        return []
    if type(mounts) is not list:
        raise Refusal("bad-launch", "options.mounts must be a list of {source, target, readonly}")
    args = []
    for mount in mounts:
        ok = (type(mount) is dict and type(mount.get("source")) is str and os.path.isabs(mount["source"])
              and type(mount.get("target")) is str and mount["target"].startswith("/")
              and "," not in mount["source"] + mount["target"])
        if not ok:
            raise Refusal("bad-launch", f"options.mounts entry {mount!r} needs absolute source and target paths")
        spec = f"type=bind,source={mount['source']},target={mount['target']}"
        args += ["--mount", spec + (",readonly" if mount.get("readonly", True) else "")]
    return args


def _memory_args(memory):
    if memory is None:
        return []
    if type(memory) is not str or not _SIZE.fullmatch(memory):
        raise Refusal("bad-launch", f"options.memory {memory!r} is not a size such as \"512m\"")
    # --memory-swap equal to --memory: no swap, so the limit is what OOM sees.
    return ["--memory", memory, "--memory-swap", memory]


def _env_args(context, client_env):
    """``-e`` arguments for the daemon's environment; secret values go into
    ``client_env`` (the client process's environment), not on the command line."""
    extra = context.get("env") or {}
    if type(extra) is not dict:
        raise Refusal("bad-launch", "the launch environment must be a mapping of names to strings")
    args = []
    for name, value in extra.items():
        if type(name) is not str or not _ENV_NAME.fullmatch(name) or type(value) is not str:
            raise Refusal("bad-launch", f"environment entry {name!r} is not NAME=string")
        if _CLIENT_OWN_ENV.fullmatch(name):
            args += ["-e", f"{name}={value}"]
        else:
            client_env[name] = value
            args += ["-e", name]
    return args


def _checked_run_options(context, options):
    """The network, the image and the worktree to run with, each checked."""
    network = options.get("network", "bridge")
    if network not in ("bridge", "host"):
        raise Refusal("bad-launch", f"options.network {network!r} is not \"bridge\" or \"host\"")
    image = options.get("image", DEFAULT_IMAGE)
    if type(image) is not str or not image:
        raise Refusal("bad-launch", "options.image must name an image")
    worktree = context.get("worktree")
    if worktree is not None and (type(worktree) is not str or not os.path.isabs(worktree) or "," in worktree):
        raise Refusal("bad-launch", f"the worktree {worktree!r} is not an absolute path docker can mount")
    return network, image, worktree


def _run_args(context, options, name):
    """The ``docker create`` argument list and the client's environment; and
    the port the daemon listens on in host mode (None in bridge mode)."""
    network, image, worktree = _checked_run_options(context, options)
    harness = context.get("harness") or "echo"
    workspace = context["workspace"]
    # A session `router new` made has its git worktree at /workspace (a bind
    # mount) and its volume as HOME (the agent's own state, off the worktree).
    home = WORKTREE_HOME if worktree else HOME
    volume_target = WORKTREE_HOME if worktree else WORKSPACE
    bind = ["--mount", f"type=bind,source={worktree},target={WORKSPACE}"] if worktree else []
    client_env = dict(os.environ)
    client_env[TOKEN_ENV] = context["token"]
    client_env[RUNTIME_ENV] = context["runtime"]
    host_port = _free_loopback_port() if network == "host" else None
    args = ["create", "--pull", "never", "--name", name, *_label_args(context.get("labels") or {}),
            "-e", TOKEN_ENV, "-e", RUNTIME_ENV,
            "-e", f"{PORT_ENV}={host_port or CONTAINER_PORT}", "-e", f"HOME={home}",
            *_env_args(context, client_env),
            "--mount", f"type=volume,source={workspace},target={volume_target}", *bind,
            *_mount_args(options.get("mounts")), *_memory_args(options.get("memory"))]
    if network == "host":
        args += ["--network", "host", image, "--adapter", harness, "--host", "127.0.0.1"]
    else:
        args += ["-p", f"127.0.0.1::{CONTAINER_PORT}", image, "--adapter", harness]
    return args, client_env, host_port


async def _published_port(client, container):
    _, out, _ = await _docker(client, "port", container, f"{CONTAINER_PORT}/tcp")
    for line in out.split():
        host, _, port = line.rpartition(":")
        if host == "127.0.0.1" and port.isdigit():
            return int(port)
    raise Refusal("start-failed", f"docker published no 127.0.0.1 port for {CONTAINER_PORT}: {out.strip()!r}")


async def _healthy(url):
    """Returns once ``GET url`` answers 200 (a published port accepts and
    then drops connections until the daemon inside listens)."""
    # Plain HTTP to a daemon on loopback: no TLS, so no CA bundle (httpx's
    # default loads certifi's, 20-94 ms of CPU on the event loop per client).
    async with httpx.AsyncClient(timeout=5.0, verify=False) as http:
        while True:
            try:
                if (await http.get(url)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await trio.sleep(HEALTH_POLL_INTERVAL)


async def _await_health(client, container, port, timeout):
    """Healthy, or a refusal: the container exited first (``docker wait``
    returned), or ``timeout`` passed."""
    outcome = {}

    async def health(cancel):
        await _healthy(f"http://127.0.0.1:{port}{HEALTH_PATH}")
        outcome["healthy"] = True
        cancel.cancel()

    async def death(cancel):
        _, out, _ = await _docker(client, "wait", container, check=False)
        outcome["exit"] = out.strip()
        cancel.cancel()

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(health, nursery.cancel_scope)
            nursery.start_soon(death, nursery.cancel_scope)
    if outcome.get("healthy"):
        return
    if "exit" in outcome:
        raise await _exited(client, container, outcome["exit"])
    log = await _log_tail(client, container)
    raise Refusal("unhealthy", f"the daemon did not answer {HEALTH_PATH} within {timeout:g} s: {log}")


async def _log_tail(client, container):
    _, logs_out, logs_err = await _docker(client, "logs", "--tail", "20", container, check=False)
    return _tail(logs_err + logs_out)


async def _exited(client, container, status):
    """The refusal for a daemon that exited before it was healthy: its own
    last words (the log's tail), not docker's."""
    log = await _log_tail(client, container)
    return Refusal("start-failed", f"the daemon exited (status {status or '?'}) before it was healthy: {log}")


async def _port_or_exit(client, container):
    """The published port; or, when the container already exited (a daemon
    that fails at once can be gone before ``docker port`` asks, which then
    answers with docker's words about a port), why it exited."""
    try:
        return await _published_port(client, container)
    except Refusal:
        found = await _inspect_json(client, container)
        state = (found or {}).get("State") or {}
        if found is not None and not state.get("Running"):
            _, out, _ = await _docker(client, "wait", container, check=False)  # settled: returns at once
            raise await _exited(client, container, out.strip() or str(state.get("ExitCode", ""))) from None
        raise


async def _remove_quietly(client, name):
    with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
        scope.shield = True
        await _docker(client, "rm", "-f", name, check=False)


def _health_timeout(options):
    value = options.get("health_timeout", DEFAULT_HEALTH_TIMEOUT)
    if type(value) not in (int, float) or not value > 0:
        raise Refusal("bad-launch", "options.health_timeout must be a positive number of seconds")
    return float(value)


async def start(context):
    options = _options(context)
    try:
        client = await _client(options)
        args, client_env, host_port = _run_args(context, options, _container_name(context))
        timeout = _health_timeout(options)
        image = _image_of(args)
        code, out, err = await _docker(client, "image", "inspect", "--format", "{{.Id}}", image, check=False)
        if code != 0 and "no such" in (err + out).lower():
            raise Refusal("image-missing", f"the image {image} is not on this docker engine (nothing is pulled: "
                                           "build it from the repository's Dockerfile, docs/containers.md)")
        if code != 0:
            raise Refusal("docker-unavailable", f"the engine did not answer for the image {image}: {_tail(err or out)}")
        await _docker(client, "volume", "create", *_label_args(context.get("labels") or {}), context["workspace"])
    except Refusal as refused:
        return _answer(refused)
    return await _run(client, context, args, client_env, host_port, timeout)


def _image_of(args):
    # The image is the first argument after the options, just before --adapter.
    return args[args.index("--adapter") - 1]


async def _create(client, args, client_env):
    """``docker create``, shielded from cancellation (bounded): a client
    killed mid-request could leave the engine to finish creating a
    container after our removal had looked for it. Once it returns, the
    container exists and has an id, and ``_run`` removes it on any exit."""
    with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
        scope.shield = True
        _, out, _ = await _docker(client, *args, env=client_env)
        return out.strip()
    raise Refusal("start-failed", f"`docker create` did not answer within {CLEANUP_TIMEOUT:g} s")


async def _run(client, context, args, client_env, host_port, timeout):
    name = _container_name(context)
    done = False
    try:
        container = await _create(client, args, client_env)
        await _docker(client, "start", container)
        port = host_port or await _port_or_exit(client, container)
        await _await_health(client, container, port, timeout)
        done = True
        return {"url": f"ws://127.0.0.1:{port}", "container": container, "state": "running"}
    except Refusal as refused:
        return _answer(refused)
    finally:
        if not done:  # refused, failed or cancelled: leave nothing behind
            await _remove_quietly(client, name)


# -- wait, inspect, stop --------------------------------------------------------------


async def _inspect_json(client, container):
    code, out, _ = await _docker(client, "container", "inspect", container, check=False)
    if code != 0:
        return None
    try:
        [found] = json.loads(out)
    except ValueError:
        return None
    return found if type(found) is dict else None


def _ended(state, exit_code):
    """The ``state`` and ``reason`` of a container that is not running."""
    if state.get("OOMKilled"):
        return "oom-killed", f"the container ran out of memory and was killed (exit {exit_code})"
    if exit_code == SIGKILL_STATUS:
        return "killed", f"the container was killed (exit {exit_code}, SIGKILL)"
    error = state.get("Error") or ""
    return "exited", f"the container exited with status {exit_code}" + (f": {error}" if error else "")


def _url_of(found):
    """The daemon's loopback URL, from the container's own record."""
    ports = ((found.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{CONTAINER_PORT}/tcp") or []
    for binding in ports:
        if binding.get("HostIp") == "127.0.0.1" and str(binding.get("HostPort", "")).isdigit():
            return f"ws://127.0.0.1:{binding['HostPort']}"
    if (found.get("HostConfig") or {}).get("NetworkMode") == "host":
        for item in (found.get("Config") or {}).get("Env") or []:
            name, _, value = item.partition("=")
            if name == PORT_ENV and value.isdigit():
                return f"ws://127.0.0.1:{value}"
    return None


def _describe(found, container):
    if found is None:
        return {"state": "missing", "exit_code": None, "container": container,
                "reason": f"no container {container} on this engine"}
    state = found.get("State") or {}
    answer = {"container": found.get("Id", container), "labels": (found.get("Config") or {}).get("Labels") or {},
              "started_at": state.get("StartedAt"), "url": _url_of(found)}
    if state.get("Running") or state.get("Restarting"):
        return {**answer, "state": "running", "exit_code": None, "reason": "the container is running"}
    exit_code = state.get("ExitCode")
    kind, reason = _ended(state, exit_code)
    return {**answer, "state": kind, "exit_code": exit_code, "reason": reason}


async def inspect(context, container):
    try:
        client = await _client(_options(context))
    except Refusal as refused:
        return _answer(refused)
    return _describe(await _inspect_json(client, container), container)


async def wait(context, container):
    try:
        client = await _client(_options(context))
    except Refusal as refused:
        return _answer(refused)
    code, out, err = await _docker(client, "wait", container, check=False)
    found = await _inspect_json(client, container)
    if found is not None:
        answer = _describe(found, container)
    elif code == 0 and out.strip().lstrip("-").isdigit():
        # Removed as soon as it ended: the status `docker wait` printed is all there is.
        kind, reason = _ended({}, int(out.strip()))
        answer = {"state": kind, "exit_code": int(out.strip()), "reason": reason}
    else:
        answer = _describe(None, container)
    return {key: answer.get(key) for key in ("state", "exit_code", "reason")}


async def stop(context, container):
    options = _options(context)
    try:
        client = await _client(options)
    except Refusal as refused:
        return _answer(refused)
    grace = options.get("stop_timeout", DEFAULT_STOP_TIMEOUT)
    grace = grace if type(grace) is int and grace >= 0 else DEFAULT_STOP_TIMEOUT
    # SIGTERM: the daemon closes its WebSockets with 1001 and exits 0.
    await _docker(client, "stop", "--time", str(grace), container, check=False)
    await _docker(client, "rm", "-f", container, check=False)
    return None


async def remove_workspace(context):
    try:
        client = await _client(_options(context))
    except Refusal as refused:
        return _answer(refused)
    code, out, err = await _docker(client, "volume", "rm", context["workspace"], check=False)
    if code == 0 or "no such volume" in (err + out).lower():
        return None
    if "in use" in (err + out).lower():
        return {"code": "workspace-in-use", "message": f"the workspace {context['workspace']} is still mounted: {_tail(err or out)}"}
    return {"code": "docker-unavailable", "message": f"the workspace {context['workspace']} could not be removed: {_tail(err or out)}"}
