"""``router daemon``: the container daemon, the side of the container protocol
that runs inside the container.

It reads the three variables the host starts the container with
(``CF_HARNESS_TOKEN``, ``CF_HARNESS_RUNTIME_ID``, ``CF_HARNESS_PORT``; port 0
picks a free one), removes the token from the environment before any adapter
code is imported or run, listens on ``--host`` (127.0.0.1 by default:
only this machine reaches it; a container's daemon is told ``--host
0.0.0.0`` by the image, so a port published on the host's loopback reaches
it; the reference listens on every interface), prints one line once it
accepts connections::

    router daemon: echo on 127.0.0.1:8080 (runtime RUNTIME_ID)

and serves until SIGTERM or SIGINT, which close every WebSocket with 1001 and
every adapter session, then exit 0.

``--adapter`` is ``echo`` (built in), ``claude-code`` or ``codex`` (the CLI
adapters), ``replay`` (recorded Claude Code turns played back:
``router.daemon.adapters.replay``), ``acp`` (an ACP agent: the command after ``--``, as in
``router daemon --adapter acp -- COMMAND ARGS…``) or ``acp:NAME`` (the agent
``options.harness.acp.agents.NAME`` of ``plugins.json``; docs/acp.md), or ``package.module:attribute`` for an adapter of your own: an
object with ``info`` (a ``wire.container.AdapterInfo``) and ``open(context)``
(see ``router.daemon.adapter``), or a callable taking no arguments that
returns one. Exit status 2: the environment or the adapter is wrong, or the
port cannot be bound; the message says which.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import traceback
from typing import Any, Final, Mapping

import attrs
import trio

from router._peerlog import guard_handlers
from router.errors import Refusal
from wire.container import CONTAINER_ENV, AdapterInfo

__all__ = ["ADAPTERS", "AdapterLoadError", "DaemonConfig", "DaemonConfigError", "configure", "load_adapter", "read_env", "run"]

#: Built-in adapter names and where each lives.
ADAPTERS: Final = {
    "echo": "router.daemon.adapters.echo:adapter",
    "claude-code": "router.daemon.adapters.claude_code:adapter",
    "codex": "router.daemon.adapters.codex:adapter",
    # Recorded Claude Code turns played back (bench/stream_load.py, tests).
    "replay": "router.daemon.adapters.replay:adapter",
}


class DaemonConfigError(Refusal):
    """The environment does not say how to run: ``missing-env`` or
    ``bad-env``, and a sentence saying what to set."""


class AdapterLoadError(Refusal):
    """``--adapter`` names nothing usable. ``code`` is ``adapter-not-found``
    (no such module or attribute) or ``adapter-import-failed`` (the module
    exists and raised while it was imported) or ``bad-adapter``."""


@attrs.frozen
class DaemonConfig:
    token: str = attrs.field(repr=False)
    runtime_id: str
    port: int
    #: The read end of the pipe whose closing means the router is gone
    #: (the process launcher's; :func:`watch_lifeline`).
    lifeline: int | None = None


def read_env(environ: Mapping[str, str]) -> DaemonConfig:
    """The daemon's settings from the environment, or
    :class:`DaemonConfigError` naming the variable that is missing or wrong."""
    names = (CONTAINER_ENV.token, CONTAINER_ENV.runtime_id, CONTAINER_ENV.port)
    missing = [name for name in names if not environ.get(name)]
    if missing:
        which = " and ".join(missing)
        verb = "is" if len(missing) == 1 else "are"
        raise DaemonConfigError(
            "missing-env",
            f"{which} {verb} not set; the host starts the container with "
            f"{', '.join(names)} (set {CONTAINER_ENV.port}=0 to pick a free port)"
        )
    raw_port = environ[CONTAINER_ENV.port]
    try:
        port = int(raw_port, 10)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise DaemonConfigError(
            "bad-env",
            f"{CONTAINER_ENV.port}={raw_port!r} is not a port number (0 to 65535; 0 picks a free port)",
        )
    return DaemonConfig(
        token=environ[CONTAINER_ENV.token], runtime_id=environ[CONTAINER_ENV.runtime_id], port=port
    )


def _is_adapter(value: Any) -> bool:
    return hasattr(value, "info") and callable(getattr(value, "open", None))


def load_adapter(spec: str) -> Any:
    """The adapter ``spec`` names: a built-in name or ``module:attribute``.

    Tells "not found" (no such module, or no such attribute) from "crashed
    on import" (the module raised, or a module *it* imports is missing), as
    hypercorn's ``load_application`` does.
    """
    target = ADAPTERS.get(spec, spec)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise AdapterLoadError(
            "bad-adapter",
            f"--adapter {spec!r} is not one of {', '.join(ADAPTERS)} and not MODULE:ATTRIBUTE "
            "(for example mypackage.agents:adapter)",
        )
    builtin = spec in ADAPTERS
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            if builtin:
                raise AdapterLoadError(
                    "adapter-not-found",
                    f"the {spec} adapter is not in this build (module {module_name} does not exist); "
                    f"use --adapter echo, or MODULE:ATTRIBUTE",
                ) from None
            raise AdapterLoadError(
                "adapter-not-found",
                f"no module named {exc.name!r} (from --adapter {spec!r}); check the name and that its "
                "package is installed or on PYTHONPATH",
            ) from None
        raise AdapterLoadError(
            "adapter-import-failed",
            f"module {module_name!r} was found but failed to import: {exc}\n{traceback.format_exc()}",
        ) from exc
    except Exception as exc:
        raise AdapterLoadError(
            "adapter-import-failed",
            f"module {module_name!r} crashed on import: {type(exc).__name__}: {exc}\n{traceback.format_exc()}",
        ) from exc
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AdapterLoadError(
                "adapter-not-found", f"module {module_name!r} has no attribute {attribute!r} (from --adapter {spec!r})"
            ) from None
    if isinstance(value, type) or (not _is_adapter(value) and callable(value)):
        try:
            value = value()
        except Exception as exc:
            raise AdapterLoadError(
                "adapter-import-failed", f"{target}() raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            ) from exc
    if not _is_adapter(value):
        raise AdapterLoadError(
            "bad-adapter", f"{target} is a {type(value).__name__}, not an adapter (it needs .info and .open(context))"
        )
    if not isinstance(value.info, AdapterInfo):
        raise AdapterLoadError(
            "bad-adapter", f"{target}.info is a {type(value.info).__name__}, not a wire.container.AdapterInfo"
        )
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--adapter",
        default="echo",
        metavar="echo|claude-code|codex|replay|acp|acp:NAME|MODULE:ATTR",
        help="the agent to run (default: echo); acp runs the ACP agent given after --",
    )
    parser.add_argument("agent", nargs=argparse.REMAINDER, help="-- COMMAND ARGS…: the ACP agent (--adapter acp)")
    parser.add_argument(
        "--host", default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every IPv4 interface, "
        "as in a container whose port is published)"
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="stderr log level (default: WARNING)",
    )


#: Where the daemon, executed again without the token in its environment,
#: finds it: the number of the read end of a pipe holding it (ours, internal;
#: only a file descriptor's number, never the secret).
TOKEN_FD_ENV: Final = "ROUTER_DAEMON_TOKEN_FD"
#: The read end of a pipe the process launcher holds the other end of: at
#: its end-of-file (the router is gone, however it ended) the daemon stops.
LIFELINE_ENV: Final = "ROUTER_DAEMON_LIFELINE_FD"
#: The longest token handed over through the pipe (a pipe holds 64 KiB
#: before a write blocks; the write happens before anything reads).
MAX_PIPED_TOKEN: Final = 60_000


def hide_token(environ: Mapping[str, str]) -> None:
    """Execute this same command again, once, with ``CF_HARNESS_TOKEN``
    removed from the environment and handed over through a pipe instead.

    Removing it from ``os.environ`` is not enough: Linux shows a process's
    environment *as it was executed* in ``/proc/<pid>/environ``, readable by
    everything of the same user, so an adapter and every process it starts
    could read the token in its parent's (the daemon's) file. A process
    executed without it has it nowhere in ``/proc``. The pid stays (a
    launcher watching it, or PID 1 in a container, is not disturbed).

    Returns only when it cannot execute (then the caller goes on with the
    token popped from ``os.environ``, as before)."""
    token = environ.get(CONTAINER_ENV.token, "")
    if not token or len(token.encode()) > MAX_PIPED_TOKEN:
        return
    if "daemon" not in sys.orig_argv[1:]:
        return  # not the `router daemon` command line (run() called from other code): never replace that process
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, token.encode())
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    child_env = {name: value for name, value in environ.items() if name != CONTAINER_ENV.token}
    child_env[TOKEN_FD_ENV] = str(read_end)
    argv = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv, child_env)
    except OSError as exc:
        os.close(read_end)
        print(f"router daemon: cannot execute itself again without the token ({exc}); "
              "it stays in /proc/<pid>/environ", file=sys.stderr)


def take_piped_token(environ: dict[str, str]) -> None:
    """In the daemon executed by :func:`hide_token`: read the token from
    the pipe, close it, and put the token in ``environ`` (a copy, never
    ``os.environ``) for :func:`read_env`."""
    raw = os.environ.pop(TOKEN_FD_ENV, None)
    environ.pop(TOKEN_FD_ENV, None)
    if raw is None:
        return
    chunks = []
    try:
        fd = int(raw) if raw.isdigit() else -1
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        os.close(fd)
        environ[CONTAINER_ENV.token] = b"".join(chunks).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise DaemonConfigError(
            "bad-env", f"{TOKEN_FD_ENV}={raw!r} names no readable pipe holding the token ({exc}); it is set by "
            f"router daemon itself: start it with {CONTAINER_ENV.token} instead"
        ) from None


def run(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    try:
        take_piped_token(environ)
        config = read_env(environ)
    except DaemonConfigError as exc:
        print(f"router daemon: {exc}", file=sys.stderr)
        return 2
    if CONTAINER_ENV.token in os.environ:
        hide_token(os.environ)  # returns only if it could not execute again
    config = attrs.evolve(config, lifeline=take_lifeline())
    # Before any adapter code is imported or run: adapters (and the agents
    # they start) must not see the secret.
    os.environ.pop(CONTAINER_ENV.token, None)
    try:
        if args.adapter == "acp" or args.adapter.startswith("acp:"):
            from router.daemon.adapters.acp import from_cli

            adapter = from_cli(args.adapter, list(args.agent or ()), dict(os.environ))
        else:
            adapter = load_adapter(args.adapter)
    except Refusal as exc:
        print(f"router daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        stream=sys.stderr, level=str(args.log_level).upper(), format="router daemon: %(levelname)s %(name)s: %(message)s"
    )
    guard_handlers()  # an adapter's or agent's text cut, repeats rate-limited
    try:
        return trio.run(serve, adapter, config, args.host)
    except OSError as exc:
        print(f"router daemon: cannot-listen: {args.host}:{config.port}: {exc}", file=sys.stderr)
        return 2


async def serve(adapter: Any, config: DaemonConfig, host: str) -> int:
    """Serve until SIGTERM or SIGINT, then close cleanly; returns 0."""
    from router.daemon.runner import Daemon
    from router.daemon.transport import DaemonServer

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        listeners = await trio.open_tcp_listeners(config.port, host=host)
        server = DaemonServer(Daemon(adapter, config.runtime_id), config.token)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run, listeners)
            shown = f"[{host}]" if ":" in host else host
            print(
                f"router daemon: {adapter.info.id} on {shown}:{server.ports[0]} (runtime {config.runtime_id})",
                flush=True,
            )
            async with trio.open_nursery() as waiting:

                async def on_signal() -> None:
                    async for _ in signals:
                        break
                    waiting.cancel_scope.cancel()

                waiting.start_soon(on_signal)
                if config.lifeline is not None:
                    waiting.start_soon(watch_lifeline, config.lifeline, waiting.cancel_scope)
            await server.aclose()
    return 0


async def watch_lifeline(fd: int, stop: trio.CancelScope) -> None:
    """Wait until the router that started this daemon is gone (the pipe's
    other end closed: end-of-file), then stop as on SIGTERM."""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            if os.read(fd, 4096):
                continue  # nothing is ever written; read past it
        except BlockingIOError:
            continue
        break
    os.close(fd)
    logging.getLogger(__name__).warning("the router that started this daemon is gone; stopping")
    stop.cancel()


def take_lifeline() -> int | None:
    """The lifeline the process launcher handed over (its read end's
    number), made non-blocking and not inherited by anything this daemon
    starts; None without one. The variable is removed."""
    raw = os.environ.pop(LIFELINE_ENV, None)
    if raw is None or not raw.isdigit():
        return None
    fd = int(raw)
    try:
        os.set_inheritable(fd, False)
        os.set_blocking(fd, False)
    except OSError:
        return None
    return fd
