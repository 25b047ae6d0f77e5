"""Serving a fake's Quart-Trio app on loopback, for tests and benchmarks."""

from __future__ import annotations

import logging
from typing import Any

import hypercorn.config
import hypercorn.trio
import trio


async def serve_on_loopback(
    app: Any, *, host: str, logger: str, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``app`` on ``host`` at a free port until cancelled; reports the
    base URL (``http://host:port``) through ``task_status`` once listening."""
    config = hypercorn.config.Config()
    config.bind = [f"{host}:0"]
    config.accesslog = None
    config.errorlog = logging.getLogger(logger)
    # A cancelled test must not wait for streams to drain.
    config.graceful_timeout = 0.1
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn.trio.serve, app, config)
        task_status.started(binds[0])
