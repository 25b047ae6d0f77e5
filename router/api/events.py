"""The API's server-sent event streams: a session's live view and the board's.

Each event is ``event: <type>`` (when it has one), ``id: <id>`` and one
``data:`` line of JSON. A client that hangs up cancels the generator
(Quart-Trio cancels the response), which ends its subscription.
"""

from __future__ import annotations

import uuid
from contextlib import aclosing
from typing import Any, AsyncIterator, Final, Iterable

import trio

from router._fanout import Lagged
from router.board.service import LocalBoard
from router.errors import Refusal
from router.turns.router import TurnRouter
from wire.json import dumps

__all__ = ["KEEPALIVE", "KEEPALIVE_SECONDS", "board_events", "live_events", "sse", "sse_encoded"]

#: Seconds of quiet after which the live stream sends a comment line, so a
#: proxy or a client with an idle timeout keeps it open (ours: under the 30
#: to 60 s idle timeouts proxies commonly default to).
KEEPALIVE_SECONDS: Final = 15.0
#: The comment line itself (an SSE line starting ``:`` is ignored by readers).
KEEPALIVE: Final = b": keep-alive\n\n"


def sse(data: Any, event: str | None = None, id: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    if id is not None:
        head += f"id: {id}\n"
    return f"{head}data: {dumps(data)}\n\n".encode()


def sse_encoded(pairs: Iterable[tuple[str, str]]) -> bytes:
    """Data events, one per ``(id, JSON text)`` pair, in order, as one
    chunk: what :func:`sse` writes for each item (no ``event:`` line),
    from text encoded once for every reader
    (:meth:`router.turns.resume.StreamCursor.encoded`)."""
    return "".join([f"id: {id}\ndata: {text}\n\n" for id, text in pairs]).encode()


async def board_events(
    board: LocalBoard, resumed: str | None, nursery: trio.Nursery, keepalive: float = KEEPALIVE_SECONDS
) -> AsyncIterator[bytes]:
    """The board's live stream (``event:`` its type): ``snapshot`` first,
    then ``session-added``, ``session-changed``, ``session-removed`` and
    ``routers-skipped``. Every event has an id (``<stream>-<n>``), but the
    board is state, not history: this router keeps no past events, so a
    client that reconnects with ``Last-Event-ID`` gets ``reset`` and then a
    fresh snapshot, which is everything it missed. Every stream shares the
    board's one survey (:class:`router.board.feed.BoardFeed`, run in
    ``nursery``); one that falls behind ends with ``lagged``. A comment
    line after ``keepalive`` seconds of quiet: a proxy keeps the stream
    open, and the server, which notices a closed client only when it
    writes, notices a closed page within that time."""
    stream = uuid.uuid4().hex[:8]
    if resumed is not None:
        yield f"id: {stream}-0\n".encode() + sse({"type": "reset", "lastEventId": resumed}, "reset")
    n = 0
    try:
        async with aclosing(board.feed.events(nursery, keepalive)) as events:
            async for event in events:
                if event is None:
                    yield KEEPALIVE
                    continue
                n += 1
                yield f"id: {stream}-{n}\n".encode() + sse(event, event["type"])
    except Lagged as lagged:
        yield sse({**lagged.to_json(), "type": "lagged"}, "lagged")


async def live_events(
    router: TurnRouter, session: str, since: str | None = None, keepalive: float = KEEPALIVE_SECONDS
) -> AsyncIterator[bytes]:
    """The live view, each event with an ``id``.

    A fresh stream: ``snapshot`` first, then one ``data:`` event per item
    (the items of every batch waiting, in one write).
    A resumed one (``since``, the client's ``Last-Event-ID``, that the
    view can resume from): the items the client missed, then the live ones,
    nothing twice. An id the server cannot resume from: ``reset`` (with the
    code ``stale-event-id`` or ``bad-event-id``), then the fresh stream.
    ``lagged`` (then the end) when the stream fell behind, ``closed`` when
    the session closed, ``error`` (a refusal) when it could not start; a
    comment line after ``keepalive`` seconds of quiet."""
    try:
        async with router.live(session, since) as stream:
            # What the stream opens with (a reset, the snapshot, what a
            # resumed reader missed), in one write.
            head = [] if stream.reset is None else [sse({**stream.reset.to_json(), "type": "reset"}, "reset")]
            if stream.snapshot is not None:
                head.append(sse({"type": "snapshot", **stream.snapshot}, "snapshot", stream.snapshot_id))
            head += [sse(item, id=id) for id, item in stream.replay]
            if head:
                yield b"".join(head)
            while True:
                pairs: list[tuple[str, str]] | None = None
                quiet = True
                with trio.move_on_after(keepalive):
                    pairs = await stream.receive_encoded()  # cancel-safe: a batch is never half taken
                    quiet = False
                if quiet:
                    yield KEEPALIVE
                    continue
                if pairs is None:
                    break
                # One write for everything that is waiting: each write costs
                # the HTTP stack (Quart, Hypercorn, h11, a send) the same
                # whatever it holds (docs/bench.md, "Live streams").
                yield sse_encoded(pairs)
        yield sse({"type": "closed", "session": session}, "closed")
    except Lagged as lagged:
        yield sse({**lagged.to_json(), "type": "lagged"}, "lagged")
    except Refusal as refusal:
        yield sse({**refusal.to_json(), "type": "error"}, "error")
