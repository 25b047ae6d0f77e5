"""An adapter for ``router daemon --adapter tests.limits.limit_adapter:adapter``
in the process tests: each turn meets the provider's usage limit, as the
``claude-code`` adapter reports it, while ``$LIMIT_RESETS_AT`` (epoch ms) is
ahead (or the number in the file ``$LIMIT_RESETS_AT_FILE``, read at each
turn, so a test can fix the reset once everything has started); after it,
each turn answers ``got: <text>``. ``$LIMIT_LOG`` names a
file that gets one line per turn that reached "the provider": ``<status>
<text>``, so a test counts what was sent."""

from __future__ import annotations

import os
import time

from router.daemon import AdapterContext, AdapterTurn
from router.daemon.adapters.echo import emit_answer
from wire.container import AdapterInfo, ContainerOutcome, Done, Unanswered, input_text


class LimitAdapter:
    info = AdapterInfo(id="limit", version="1", capabilities=())

    async def open(self, context: AdapterContext) -> "LimitSession":
        return LimitSession(context)


class LimitSession:
    def __init__(self, context: AdapterContext) -> None:
        self.context = context

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        text = input_text(turn.input)
        resets_at = _resets_at()
        limited = time.time() * 1000 < resets_at
        with open(os.environ["LIMIT_LOG"], "a") as log:
            log.write(f"{'429' if limited else '200'} {text}\n")
        if limited:
            self.context.emit({"type": "raw", "value": {"type": "usage-limit", "resetsAt": resets_at,
                                                        "rateLimitType": "five_hour"}})
            return Unanswered(reason="usage-limit: You've hit your 5-hour limit")
        emit_answer(self.context, turn.operation_id, "got: " + text)
        return Done(text="got: " + text)

    async def close(self) -> None:
        return None


def _resets_at() -> int:
    path = os.environ.get("LIMIT_RESETS_AT_FILE")
    if path:
        try:
            with open(path) as file:
                return int(file.read().strip() or "0")
        except FileNotFoundError:
            return 0
    return int(os.environ.get("LIMIT_RESETS_AT", "0"))


adapter = LimitAdapter()
