"""Waiting in tests for what nothing can wake the test for."""

from __future__ import annotations

from typing import Callable

import trio


async def until(condition: Callable[[], bool], *, step: float = 0.005) -> None:
    """Wait until ``condition()`` holds: another process's, another socket's
    or another component's inner state. Each check is a real event, not a
    timing; bound the wait with ``trio.fail_after`` where it may never come."""
    while not condition():
        await trio.sleep(step)
