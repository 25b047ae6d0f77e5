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
adapters), or ``package.module:attribute`` for an adapter of your own: an
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

from router.errors import Refusal
from wire.container import CONTAINER_ENV, AdapterInfo

__all__ = ["ADAPTERS", "AdapterLoadError", "DaemonConfig", "DaemonConfigError", "configure", "load_adapter", "read_env", "run"]

#: Built-in adapter names and where each lives.
ADAPTERS: Final = {
    "echo": "router.daemon.adapters.echo:adapter",
    "claude-code": "router.daemon.adapters.claude_code:adapter",
    "codex": "router.daemon.adapters.codex:adapter",
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
        metavar="echo|claude-code|codex|MODULE:ATTR",
        help="the agent to run (default: echo)",
    )
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


def run(args: argparse.Namespace) -> int:
    try:
        config = read_env(os.environ)
    except DaemonConfigError as exc:
        print(f"router daemon: {exc}", file=sys.stderr)
        return 2
    # Before any adapter code is imported or run: adapters (and the agents
    # they start) must not see the secret.
    os.environ.pop(CONTAINER_ENV.token, None)
    try:
        adapter = load_adapter(args.adapter)
    except AdapterLoadError as exc:
        print(f"router daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        stream=sys.stderr, level=str(args.log_level).upper(), format="router daemon: %(levelname)s %(name)s: %(message)s"
    )
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
            async for _ in signals:
                break
            await server.aclose()
    return 0
