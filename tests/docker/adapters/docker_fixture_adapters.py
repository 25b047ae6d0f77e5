"""Adapters for the Docker tests, bind-mounted into the container (at
``/opt/fixtures``, on ``PYTHONPATH``) and named with ``--adapter MODULE:ATTR``.

- ``hog``: the echo, except that the input ``hog`` makes the daemon itself
  allocate memory until the kernel kills it (the container's memory limit
  then shows as ``OOMKilled``).
- ``stall``: a factory that never returns, so the daemon never listens: a
  start that can only end by cancellation or the health timeout.

The image holds the project but not its tests: only this file goes in.
"""

from __future__ import annotations

import time

from router.daemon.adapters.echo import EchoAdapter, EchoSession
from wire.container import input_text

#: Allocation step: 16 MiB, written (not calloc'd zero pages) so it counts.
CHUNK = 16 * 1024 * 1024


class HogSession(EchoSession):
    async def run(self, turn):  # type: ignore[no-untyped-def]
        if input_text(turn.input) == "hog":
            hoard = []
            while True:
                hoard.append(b"\x01" * CHUNK)
        return await super().run(turn)


class HogAdapter(EchoAdapter):
    async def open(self, context):  # type: ignore[no-untyped-def]
        return HogSession(context)


hog = HogAdapter()


def stall() -> None:
    while True:
        time.sleep(3600)
