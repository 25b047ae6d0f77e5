"""The ``router`` command.

Each subcommand lives in the module that owns its feature and is imported only
when it runs, so ``router --help`` stays fast and a broken feature cannot stop
another from starting. A subcommand module provides two functions:

``configure(parser: argparse.ArgumentParser) -> None``
    adds the subcommand's arguments (and sub-subcommands, if any);
``run(args: argparse.Namespace) -> int``
    does the work and returns the process exit status.

Exit status 2 is reserved for usage errors, as argparse uses it. SIGINT
ends a command with 130 (128 + SIGINT, what a shell reports) and one line
on stderr, ``router NAME: interrupted``, never a traceback; ``router
modlink`` and ``router daemon`` keep their fixed behaviour (docs/cli.md,
"Fixed names": a clean close, exit 0). docs/cli.md lists every command's refusals.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Final, Sequence

#: The exit status after SIGINT (128 + 2, as a shell reports it).
INTERRUPTED: Final = 130

#: name -> (module, one-line help). The order is the order ``--help`` lists.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": (
        "router.serve",
        "run the router: the store, a launcher for container sessions, the HTTP API and the page",
    ),
    "daemon": (
        "router.daemon.cli",
        "serve the container daemon protocol (the side inside a container)",
    ),
    "prompt": (
        "router.host.cli",
        "submit a prompt to a container session through the host and wait",
    ),
    "transcript": (
        "router.host.cli",
        "print a container session's transcript from the host's store",
    ),
    "modlink": (
        "router.modlink.cli",
        "serve the mod link of one Claude Code session on its Unix socket",
    ),
    "plugins": (
        "router.plugins.cli",
        "show or change which plug-in modules are switched on",
    ),
    "limits": (
        "router.plugins.cli",
        "report every configured limit and what it has counted",
    ),
    "routes": (
        "router.plugins.cli",
        "show or set the harness routes of instances",
    ),
    "service": (
        "router.service",
        "run `router serve` as a user service: install, uninstall, status (systemd --user, launchd)",
    ),
    "sessions": (
        "router.board.cli",
        "list every session of every router of yours on this machine, with its kind and state",
    ),
    "send": (
        "router.turns.cli",
        "send a message to any session `router sessions` lists and print the answer",
    ),
    "abort": (
        "router.turns.cli",
        "stop a session's running turn (or one operation), at the router that holds it",
    ),
    "launch": (
        "router.turns.cli",
        "create a container session through the launcher of your `router serve`",
    ),
    "resume": (
        "router.turns.cli",
        "let a session a limit stopped take messages again, or resume a parked one now",
    ),
    "cancel-park": (
        "router.turns.cli",
        "end the park the provider's usage limit put a session in (its kept messages are dropped)",
    ),
    "asks": (
        "router.asks.cli",
        "list the permission asks of Claude Code sessions waiting on you, across your routers",
    ),
    "answer": (
        "router.asks.cli",
        "answer a permission ask allow or deny (the first answer wins)",
    ),
    "store": (
        "router.record.cli",
        "copy a SQLite data directory into a PostgreSQL database (router store copy --from DIR --to URL)",
    ),
    "pair": (
        "router.remote.cli",
        "pair a phone: a one-time code's URL and QR code, for `router serve --listen`",
    ),
    "devices": (
        "router.remote.cli",
        "list the paired devices, or revoke one (router devices revoke NAME)",
    ),
    # Notifications (router.notify, docs/notifications.md).
    "notifications": (
        "router.notify.cli",
        "list recent notifications with each destination's receipt (sent, suppressed, failed), and config errors",
    ),
    # Sessions in git worktrees (router.worktrees, docs/sessions.md).
    "projects": (
        "router.worktrees.cli",
        "list, add or remove the git repositories sessions may be started in",
    ),
    "new": (
        "router.worktrees.cli",
        "start a session in a new git worktree of a project (local in tmux, or in a container)",
    ),
    "end": (
        "router.worktrees.cli",
        "end a session and remove its worktree and branch when its work is saved",
    ),
    "attach": (
        "router.worktrees.cli",
        "attach this terminal to a local session's tmux session",
    ),
    "diff": (
        "router.worktrees.cli",
        "show a session's worktree changes and commits against its base",
    ),
    "mcp": (
        "router.mcp",
        "serve MCP on stdio with the router inside (the board, send, read, abort, search, limits)",
    ),
    "acp": (
        "router.acp.cli",
        "be an ACP agent on stdio: any ACP client attaches to any session on the board",
    ),
}

#: command -> modules its process loads on first use rather than when
#: imported (:mod:`router._deferred`): ``router mcp`` runs once per Claude
#: Code session and never speaks TLS itself, but trio imports ``ssl``.
DEFERRED: Final[dict[str, tuple[str, ...]]] = {"mcp": ("ssl",)}


def version() -> str:
    """This package's version, as installed (``pyproject.toml``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("router")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        "usage: router <command> [options]   (router --version: the version)",
        "",
        "A structured-concurrency router for AI agent sessions.",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'router <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] in ("-V", "--version"):
        print(f"router {version()}")
        return 0
    name = args[0]
    if name not in COMMANDS:
        print(f"router: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, help_ = COMMANDS[name]
    if name in DEFERRED:
        from router._deferred import defer

        defer(*DEFERRED[name])
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"router {name}", description=help_)
    attribute = name.replace("-", "_")
    configure = getattr(module, f"configure_{attribute}", None) or module.configure
    run = getattr(module, f"run_{attribute}", None) or module.run
    configure(parser)
    parsed = parser.parse_args(args[1:])
    try:
        return int(run(parsed) or 0)
    except BaseException as exc:
        if not interrupted(exc):
            raise
        # SIGINT where the command did not handle it itself: one line, no
        # traceback, and the status a shell gives an interrupted command.
        print(f"router {name}: interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is SIGINT's ``KeyboardInterrupt``, alone or as the
    only kind of error in an exception group (a nursery wraps it)."""
    if isinstance(exc, BaseExceptionGroup):
        return bool(exc.exceptions) and all(interrupted(each) for each in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
