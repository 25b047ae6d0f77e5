"""``router acp``: the router as an ACP agent on stdio (docs/acp.md).

stdout is the wire; logs go to stderr. Exits 0 when the client closes its
end."""

from __future__ import annotations

import argparse
import logging
import os
import sys

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="WARNING", type=str.upper,
                        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                        help="stderr log level (default: WARNING)")


def run(args: argparse.Namespace) -> int:
    import trio

    from router.acp.server import serve_stdio

    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="router acp: %(levelname)s %(message)s")
    trio.run(serve_stdio, dict(os.environ))
    return 0
