"""The API's live streams, counted per credential against a cap.

A live stream (``GET /sessions/<id>/live``, ``GET /board/live``, a live
view relayed from the router that holds the session) holds a connection, a
task, a subscription and its buffer for as long as the client keeps it. A
credential (today: the API's bearer token, ``token``; the private socket,
whose 0700 directory is its check, ``local-socket``; a paired device's own
id later) may hold :attr:`StreamSlots.limit` at once; one more is refused
``too-many-streams`` (429) before anything is opened.

Resource handling: :meth:`StreamSlots.take` counts the stream in; the
:class:`HeldStream` around its body gives the slot back however the body
ends: read to its end, closed by Quart when the client goes
(``aclose``), or never started (the response dropped before its first
byte: ``__del__``, run by CPython when the response's last reference
goes). Giving back twice is a no-op.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import attrs

from quart import Response

from router.errors import Refusal

__all__ = ["StreamSlotsStatistics", "SSE_HEADERS", "HeldStream", "StreamSlot", "StreamSlots", "stream_response"]

#: The headers of every server-sent events response.
SSE_HEADERS: dict[str, str] = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class StreamSlot:
    """One stream's place under its credential's cap."""

    def __init__(self, slots: StreamSlots, credential: str) -> None:
        self._slots = slots
        self.credential = credential
        self.held = True

    def __repr__(self) -> str:
        return f"<StreamSlot {self.credential} {'held' if self.held else 'given back'}>"

    def release(self) -> None:
        if self.held:
            self.held = False
            self._slots._release(self.credential)


@attrs.frozen
class StreamSlotsStatistics:
    """The live streams held: the limit per credential, those held by each
    credential now, and the streams refused past the limit."""

    limit: int
    held: dict[str, int]
    refused: int


class StreamSlots:
    """Live streams per credential id, at most ``limit`` each."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a stream cap is at least 1")
        self.limit = limit
        self._held: dict[str, int] = {}
        self.refused = 0

    def __repr__(self) -> str:
        return f"<StreamSlots {sum(self._held.values())} held, at most {self.limit} per credential>"

    def statistics(self) -> StreamSlotsStatistics:
        return StreamSlotsStatistics(limit=self.limit, held=dict(self._held), refused=self.refused)
    def take(self, credential: str) -> StreamSlot:
        """A slot for one more stream of ``credential``; raises
        ``too-many-streams`` when it holds ``limit`` already."""
        held = self._held.get(credential, 0)
        if held >= self.limit:
            self.refused += 1
            raise Refusal(
                "too-many-streams",
                f"this credential already holds {self.limit} live streams, the most it may; "
                "close one (another tab or page) and open this again",
                limit=self.limit,
            )
        self._held[credential] = held + 1
        return StreamSlot(self, credential)

    def _release(self, credential: str) -> None:
        left = self._held[credential] - 1
        if left:
            self._held[credential] = left
        else:
            del self._held[credential]


class HeldStream:
    """A response body that holds ``slot`` until it ends (see the module
    docstring)."""

    def __init__(self, body: AsyncIterator[bytes], slot: StreamSlot) -> None:
        self._body = body
        self._slot = slot

    def __aiter__(self) -> HeldStream:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._body.__anext__()
        except BaseException:
            # The end (StopAsyncIteration), an error or a cancellation: the
            # body is over either way (Quart closes it).
            self._slot.release()
            raise

    async def aclose(self) -> None:
        self._slot.release()
        close = getattr(self._body, "aclose", None)
        if close is not None:
            await close()

    def __del__(self) -> None:
        self._slot.release()


def stream_response(body: AsyncIterator[bytes], slot: StreamSlot, *, status: int = 200,
                    content_type: str = "text/event-stream") -> Response:
    """A live stream's response: ``body`` holding ``slot``, no response
    timeout, the SSE headers."""
    response = Response(HeldStream(body, slot), status=status, content_type=content_type, headers=SSE_HEADERS)
    response.timeout = None
    return response
