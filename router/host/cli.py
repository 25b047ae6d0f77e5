"""``router prompt`` and ``router transcript``: the host from a shell.

``router prompt --daemon URL --token T --store PATH [--session S]
[--when-busy steer|followUp] [--id KEY] TEXT`` (the daemon's token from
``$ROUTER_DAEMON_TOKEN`` or ``--token-file FILE`` instead of ``--token``,
which every local user can read in ``/proc``) submits ``TEXT`` through a
host on the store at ``PATH`` (created if missing), waits for it to settle
and prints ``{"status": "done", "text": ...}`` (exit 0) or ``{"status":
"unanswered", "reason": ...}`` (exit 1). A usage or connection error prints
``router prompt: <code>: <message>`` on stderr and exits 2; the operation
stays in the store, and running the same command with the same ``--id``
picks it up where it was (the key makes the submission idempotent).

``--store`` takes a data directory (its ``host.sqlite``, as ``router
serve --data-dir`` keeps it) or a store file.

``router transcript --store PATH [--session S]`` prints the session's
transcript since its last reset as one JSON array (exit 2 when the store or
the session does not exist). It reads while a host runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import trio

from router._peerlog import guard_handlers
from router.host.host import ROOT_SESSION, Host, HostSettings
from router.host.link import DaemonEndpoint, EndpointError, LinkError
from router.host.reconcile import LOST_POLICIES
from router.host.store import Refused, Store
from wire.json import dumps

#: ``router prompt``'s default for ``--connect-timeout``: seconds without a
#: connection to the daemon before it gives up with exit status 2. Three
#: times the reference's 10 s connect deadline, so one slow start is waited
#: out.
PROMPT_CONNECT_TIMEOUT = 30.0


def configure_prompt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--daemon", required=True, metavar="URL", help="the daemon, ws://host:port")
    parser.add_argument("--token", help="the daemon's CF_HARNESS_TOKEN; every local user can read a command line: "
                        "prefer $ROUTER_DAEMON_TOKEN or --token-file")
    parser.add_argument("--token-file", metavar="FILE", help="a 0600 file holding the daemon's token")
    parser.add_argument("--store", required=True, metavar="PATH", help="a data directory (its host.sqlite) or the "
                        "host's SQLite store file")
    parser.add_argument("--session", default=ROOT_SESSION, help="the session (created if missing)")
    parser.add_argument(
        "--when-busy",
        choices=("followUp", "steer"),
        default="followUp",
        help="queue behind a running turn (followUp) or join it (steer)",
    )
    parser.add_argument(
        "--id",
        dest="operation_id",
        metavar="KEY",
        help="idempotency key: the same key is the same operation (default: a new one)",
    )
    parser.add_argument(
        "--on-container-lost",
        choices=LOST_POLICIES,
        default="fail",
        help="what a turn lost with its container does: settle container_lost, run again, or run again "
        "when the adapter declares it safe (if-declared)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=PROMPT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up after this long without a connection (default {PROMPT_CONNECT_TIMEOUT:g})",
    )
    parser.add_argument("text", metavar="TEXT")


def _quiet_logs() -> None:
    # stderr carries one line per failure; the links' own log lines (a
    # reconnect, a refusal) only with ROUTER_LOG_LEVEL=INFO or DEBUG.
    logging.basicConfig(
        level=os.environ.get("ROUTER_LOG_LEVEL", "CRITICAL").upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    guard_handlers()  # a daemon's text cut, repeats rate-limited


def store_file(path: str) -> str:
    """``--store``'s file: a data directory (what ``router serve --data-dir``
    and ``--store`` take) means its ``host.sqlite``; anything else is the
    file itself."""
    from pathlib import Path

    from router.record import HOST_FILE

    return str(Path(path) / HOST_FILE) if os.path.isdir(path) else path


def _error(command: str, code: str, message: str) -> int:
    print(f"router {command}: {code}: {message}", file=sys.stderr)
    return 2


def run_prompt(args: argparse.Namespace) -> int:
    from router.errors import Refusal
    from router.tokens import DAEMON_TOKEN_VARIABLE, secret_from

    _quiet_logs()
    try:
        token = secret_from(flag=args.token, file=args.token_file, env=os.environ, variable=DAEMON_TOKEN_VARIABLE)
    except Refusal as refused:
        return _error("prompt", refused.code, refused.message)
    if token is None:
        return _error("prompt", "no-daemon-token", f"give the daemon's token: ${DAEMON_TOKEN_VARIABLE} or "
                      "--token-file FILE (or --token)")
    try:
        endpoint = DaemonEndpoint(args.daemon, token)
    except EndpointError as error:
        return _error("prompt", error.code, error.message)
    try:
        store = Store(store_file(args.store))
    except Refused as error:
        return _error("prompt", error.code, error.message)
    with store:
        return trio.run(_prompt, args, endpoint, store)


async def _prompt(args: argparse.Namespace, endpoint: DaemonEndpoint, store: Store) -> int:
    settings = HostSettings(
        give_up_after=args.connect_timeout,
        wake_open=False,
        on_container_lost=args.on_container_lost,
    )
    host = Host(store, endpoint, settings)
    outcome: dict | None = None
    status = 2
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        try:
            session = await host.sessions.create(args.session)
            receipt = await session.submit(
                args.text, operation_id=args.operation_id, when_busy=args.when_busy
            )
            result = await session.wait(receipt.operation_id)
        except (Refused, LinkError) as error:
            status = _error("prompt", error.code, error.message)
        else:
            if result.status == "done":
                outcome, status = {"status": "done", "text": result.text}, 0
            else:
                outcome, status = {"status": "unanswered", "reason": result.reason}, 1
        finally:
            host.close()
    if outcome is not None:
        print(dumps(outcome), flush=True)
    return status


def configure_transcript(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", required=True, metavar="PATH", help="a data directory (as `router serve "
                        "--data-dir` takes) or the host's SQLite store file in one")
    parser.add_argument("--session", default=ROOT_SESSION, help="the session")


def run_transcript(args: argparse.Namespace) -> int:
    try:
        with Store(store_file(args.store), exclusive=False, create=False) as store:
            messages = store.messages.all(args.session)
    except Refused as error:
        return _error("transcript", error.code, error.message)
    print(dumps(messages), flush=True)
    return 0
