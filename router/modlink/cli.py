"""``router modlink --session-id ID``: serve one session's mod link from a shell.

The first line on stdout is the socket path; then one JSON line per event the
mod posts (the event as it crossed the wire; an event of a kind this version
does not know is printed as it came). Logs go to stderr. SIGINT and SIGTERM
stop the server, which removes the socket, and the command exits 0.

Exit status: 0 after a signal; 1 when the link is refused (the directory is
not private, a live server holds the path, nothing could be bound); 2 when
the environment names no socket path for the session.

Try it with::

    router modlink --session-id demo &
    curl --unix-socket "$(...first line...)" http://claude-envoy/healthz
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

import trio

from router.modlink.errors import ModLinkRefused, ModSubscriberOverflow
from router.modlink.server import ModLink
from wire.json import dumps
from wire.mod import MOD_POLL_HOLD_MS, converter

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--session-id", required=True, help="the Claude Code session id the socket is named for")
    parser.add_argument(
        "--hold-ms",
        type=int,
        default=MOD_POLL_HOLD_MS,
        help=f"how long a poll is held while nothing is queued (default {MOD_POLL_HOLD_MS},"
        " as in claude-envoy 1.19.0 hooks/mod-protocol.ts)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level on stderr")


def _print(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # a reader that went away does not stop the link
        pass


def _write_stdout(data: bytes) -> None:
    """Write all of ``data`` to fd 1, in a worker thread: a pipe whose reader
    stopped reading blocks here, not the Trio loop serving the link. The raw
    fd, not ``sys.stdout``: an abandoned write then holds no buffer lock the
    interpreter's exit would wait on."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(sys.stdout.fileno(), view) :]
    except BrokenPipeError:  # a reader that went away does not stop the link
        pass


async def _relay_line(line: str) -> None:
    # Abandoned on cancel: a signal stops the command even while a write is
    # stuck; meanwhile the subscriber's bound sheds or cuts off what piles up.
    await trio.to_thread.run_sync(_write_stdout, (line + "\n").encode(), abandon_on_cancel=True)


async def _serve(args: argparse.Namespace) -> int:
    try:
        link = ModLink(args.session_id, hold=args.hold_ms / 1000)
    except ModLinkRefused as exc:
        print(f"router modlink: {exc}", file=sys.stderr)
        return 2
    refused: list[BaseException] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:
                path = await nursery.start(link.run)
                _print(path)

                async def relay() -> None:
                    while True:
                        try:
                            with link.events(capacity=4096) as events:
                                async for event in events:
                                    await _relay_line(dumps(converter.unstructure(event)))
                            return
                        except ModSubscriberOverflow as exc:
                            logging.getLogger("router.modlink").warning("events lost: %s", exc)

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        logging.getLogger("router.modlink").info("signal %d: stopping", signum)
                        nursery.cancel_scope.cancel(reason="signal")
                        return

                nursery.start_soon(relay, name="modlink-relay")
                nursery.start_soon(stop_on_signal, name="modlink-signals")
        except* ModLinkRefused as group:
            refused.extend(group.exceptions)
    for exc in refused:
        print(f"router modlink: {exc}", file=sys.stderr)
    return 1 if refused else 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    return trio.run(_serve, args)
