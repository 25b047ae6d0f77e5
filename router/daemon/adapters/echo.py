"""The echo adapter: answers ``echo: <text>`` and needs no model or credentials.

It behaves exactly as the reference's ``echoAdapter`` (npm ``agents@0.32.0``,
``dist/daemon-core-*.js``), so one host test suite runs against either
daemon. It persists one entry per turn and counts them back after a restore,
so a resumed session visibly remembers its history:

- ``slow <ms> <text>`` waits ``ms`` milliseconds before answering, and stops
  on abort (cancellation);
- ``fail <reason>`` settles the operation ``unanswered`` with ``reason``
  (``failed`` when there is none);
- anything else is echoed with the turn number: ``echo: hi (turn 3)``; texts
  steered into the turn are appended as `` + <text>``.

With ``report_usage`` (``router serve``'s in-process daemon: :data:`counting`)
each answered turn also emits a ``usage`` event after its message, with
token counts taken from its text: ``inputTokens`` the whitespace-separated
words of the turn's input (steered texts included), ``outputTokens`` those
of the answer. The host records it as it records a model's, so a token
limit can be tried on the main job with no model. The reference's echo
reports none, so :data:`adapter` (``router daemon --adapter echo``, the one
the parity tests hold to the reference) does not either.
"""

from __future__ import annotations

import re
import time
from typing import Final

import trio

from router.daemon.adapter import AdapterContext, AdapterTurn
from wire.container import AdapterInfo, ContainerInput, ContainerOutcome, Done, Unanswered, input_text

__all__ = ["EchoAdapter", "EchoSession", "adapter", "counting", "emit_answer", "usage_of"]

# The reference's /^slow (\d+) ?(.*)$/s and /^fail ?(.*)$/s: ASCII digits (JS
# \d), "." matching newlines (the s flag), anchored at both ends (fullmatch;
# Python's $ would also match before a final newline).
_SLOW: Final = re.compile(r"slow ([0-9]+) ?(.*)", re.DOTALL)
_FAIL: Final = re.compile(r"fail ?(.*)", re.DOTALL)

#: Node's setTimeout runs a delay above 2**31 - 1 ms (or below 1) after 1 ms
#: (TimeoutOverflowWarning); the reference sleeps with setTimeout.
_MAX_TIMER_MS: Final = 2**31 - 1


def _timer_seconds(ms: int) -> float:
    if ms > _MAX_TIMER_MS or ms < 1:
        ms = 1
    return ms / 1000


def emit_answer(context: AdapterContext, operation_id: str, answer: str) -> None:
    """Emit ``answer`` as the echo does: the whole text as one delta, then
    the assistant message ``<operation id>:assistant`` holding it."""
    message_id = f"{operation_id}:assistant"
    context.emit({"type": "text-delta", "messageId": message_id, "delta": answer})
    context.emit({
        "type": "message",
        "message": {
            "id": message_id,
            "role": "assistant",
            "parts": [{"type": "text", "text": answer}],
            "operationId": operation_id,
            "createdAt": time.time_ns() // 1_000_000,  # Date.now(): ms
        },
    })


def usage_of(texts: list[str], answer: str) -> dict[str, object]:
    """The ``usage`` event of an echo turn: words in ``texts``, words in ``answer``."""
    return {"type": "usage", "inputTokens": sum(len(text.split()) for text in texts),
            "outputTokens": len(answer.split())}


class EchoSession:
    """One open echo session."""

    def __init__(self, context: AdapterContext, *, report_usage: bool = False) -> None:
        self._report_usage = report_usage
        self._context = context
        self._turns = len(context.restore)
        self._steered: list[str] = []

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        text = input_text(turn.input)
        slow = _SLOW.fullmatch(text)
        if slow:
            await trio.sleep(_timer_seconds(int(slow[1])))
        failure = _FAIL.fullmatch(text)
        if failure:
            return Unanswered(reason=failure[1] or "failed")
        self._turns += 1
        body = slow[2] if slow else text
        texts = [text, *self._steered]
        steered = "".join(f" + {each}" for each in self._steered)
        self._steered.clear()
        answer = f"echo: {body}{steered} (turn {self._turns})"
        emit_answer(self._context, turn.operation_id, answer)
        if self._report_usage:
            self._context.emit(usage_of(texts, answer))
        self._context.persist([{"turn": self._turns, "text": body}])
        return Done(text=answer)

    async def steer(self, input: ContainerInput) -> bool:
        self._steered.append(input_text(input))
        return True

    async def close(self) -> None:
        pass


class EchoAdapter:
    # "rerun" (ours, not the reference's): a turn is safe to run again, so a
    # host may retry one lost with its container; a host that does not know
    # the capability ignores it.
    info: Final = AdapterInfo(id="echo", version="1", capabilities=("steer", "rerun"))

    def __init__(self, *, report_usage: bool = False) -> None:
        self.report_usage = report_usage

    async def open(self, context: AdapterContext) -> EchoSession:
        return EchoSession(context, report_usage=self.report_usage)


#: What ``router daemon --adapter echo`` runs: the reference's echo.
adapter: Final = EchoAdapter()
#: The echo that reports usage: ``router serve``'s in-process daemon.
counting: Final = EchoAdapter(report_usage=True)
