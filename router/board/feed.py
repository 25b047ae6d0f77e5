"""One survey of the board for every stream that watches it.

``GET /board/live`` streams the board's changes: each second, every router
is asked for its sessions and the differences are sent. Surveying once per
stream makes the cost grow with the viewers (a thousand idle streams: half
a core, measured on the per-stream loop). :class:`BoardFeed` surveys once
for all of them.

Theory of operation
-------------------

One task per feed (one per router: the feed is the :class:`LocalBoard`'s)
surveys and publishes each survey's changes as one batch on a
:class:`router._fanout.FanOut`; it keeps the latest listing. It surveys
again as soon as it is poked (:meth:`BoardFeed.poke`: a session of this
router changed) or the board's own change event fires (``changed()``: in
a cluster, a notification that some router changed the shared record),
and every ``interval`` seconds without either (the fallback: another
router of this machine, outside the cluster, tells nobody). Pokes are
coalesced: those that come during a survey make one more survey after it,
and two surveys are at least ``gap`` seconds apart, so a burst of changes
costs a survey per ``gap``, not one per change.
A viewer subscribes and, in the same step (no checkpoint between), takes
that listing as its snapshot: every batch published later is the change
from it, so the snapshot and the changes agree, whenever the viewer came.

The task starts with the first viewer (in the nursery that viewer names:
the app's) and is cancelled when the last one leaves; a viewer that comes
while none is running waits for the first survey. A viewer that falls
``buffer`` surveys behind (a client that stopped reading) is dropped by
the fan-out and its stream ends with ``lagged``: its memory is bounded.

Error handling: a survey that raises is logged; every viewer is dropped
(``lagged``, so each reconnects and takes a fresh snapshot), and the task
ends; the next viewer starts another.
"""

from __future__ import annotations

import logging
import math
from typing import Any, AsyncIterator, Final, Protocol

import attrs
import trio

from router._fanout import FanOut, FanOutStatistics, Lagged
from router.board.changes import board_changes, by_key

__all__ = ["BoardFeedStatistics", "BOARD_BUFFER", "BOARD_GAP", "BoardFeed"]

log = logging.getLogger("router.board")

#: Surveys a viewer may fall behind before it is dropped (ours: a minute of
#: one-second surveys; each batch is the changes of one survey, often none).
BOARD_BUFFER: Final = 64
#: The least time between two surveys a poke starts (ours: a burst of
#: changes, a streaming turn's, costs at most twenty surveys a second).
BOARD_GAP: Final = 0.05


class _Listing(Protocol):
    sessions: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]: ...


class _Board(Protocol):
    async def listing(self) -> Any: ...

    def changed(self) -> trio.Event | None: ...


class BoardLagged(Lagged):
    """A board viewer fell :data:`BOARD_BUFFER` surveys behind."""


def _lagged() -> BoardLagged:
    return BoardLagged("board-lagged", f"the board's stream fell over {BOARD_BUFFER} surveys behind and was "
                                       "dropped; reconnect for a fresh snapshot")


@attrs.frozen
class BoardFeedStatistics:
    """What a :class:`BoardFeed` is doing: its viewers, whether its survey task
    runs, the surveys made and pokes taken, and its fan-out's figures."""

    viewers: int
    running: bool
    surveys: int
    pokes: int
    fanout: FanOutStatistics


class BoardFeed:
    """The board's changes, surveyed once for every viewer (see the module
    docstring)."""

    def __init__(self, board: _Board, *, interval: float, buffer: int = BOARD_BUFFER, gap: float = BOARD_GAP) -> None:
        self.board = board
        self.interval = interval
        self.gap = gap
        self._poked = trio.Event()
        self._changed: trio.Event | None = None
        self.pokes = 0
        self._fanout: FanOut[list[dict[str, Any]]] = FanOut(buffer=buffer, lagged_error=_lagged)
        self._viewers = 0
        self._scope: trio.CancelScope | None = None
        self._ready = trio.Event()
        self._listing: Any = None
        self.surveys = 0

    def __repr__(self) -> str:
        return f"<BoardFeed {self._viewers} viewers, {'running' if self._scope else 'stopped'}>"

    def statistics(self) -> BoardFeedStatistics:
        return BoardFeedStatistics(viewers=self._viewers, running=self._scope is not None, surveys=self.surveys,
                                   pokes=self.pokes, fanout=self._fanout.statistics())
    def poke(self) -> None:
        """Something on the board changed: survey now (coalesced; nothing
        while no viewer watches). Synchronous, never blocks."""
        if self._scope is not None:
            self.pokes += 1
            self._poked.set()

    async def _next(self) -> None:
        """Wait for a poke, the board's change event or the interval, but
        at least ``gap`` seconds. The events are taken before the survey
        that precedes this wait, so a change during it is not missed."""
        await trio.sleep(min(self.gap, self.interval))
        with trio.move_on_after(max(0.0, self.interval - self.gap)):
            changed = self._changed
            if changed is None:
                await self._poked.wait()
                return
            async with trio.open_nursery() as nursery:
                for event in (self._poked, changed):
                    nursery.start_soon(_set_then_cancel, event, nursery.cancel_scope)

    async def events(self, nursery: trio.Nursery, quiet: float | None = None) -> AsyncIterator[dict[str, Any] | None]:
        """The board's events for one viewer: ``snapshot`` (the whole
        listing), then the changes of each survey (``session-added``,
        ``session-changed``, ``session-removed``, ``routers-skipped``);
        raises :class:`~router._fanout.Lagged` when it fell behind.
        ``nursery`` runs the survey task if none is running. With ``quiet``
        (seconds), ``None`` after each ``quiet`` seconds without a change
        (the stream's keepalive)."""
        self._viewers += 1
        try:
            if self._scope is None:
                self._ready = trio.Event()
                self._scope = trio.CancelScope()
                nursery.start_soon(self._run, self._scope, name="board feed")
            await self._ready.wait()
            with self._fanout.subscribe() as subscription:
                listing = self._listing  # with the subscription, no checkpoint between
                if listing is None:  # the survey failed: the subscription is dropped
                    raise _lagged()
                yield {"type": "snapshot", **listing.to_json()}
                while True:
                    batch: list[dict[str, Any]] | None = None
                    with trio.move_on_after(math.inf if quiet is None else quiet):
                        try:
                            batch = await subscription.__anext__()  # cancel-safe: a channel's receive
                        except StopAsyncIteration:
                            return
                    if batch is None:
                        yield None
                        continue
                    for event in batch:
                        yield event
        finally:
            self._viewers -= 1
            if self._viewers == 0 and self._scope is not None:
                self._scope.cancel()
                self._scope = None

    def _arm(self) -> None:
        """Take fresh events to wait on, before a survey reads anything."""
        self._poked = trio.Event()
        self._changed = self.board.changed()

    async def _run(self, scope: trio.CancelScope) -> None:
        ready = self._ready
        try:
            with scope:
                self._arm()
                listing = await self.board.listing()
                while scope is self._scope:
                    self.surveys += 1
                    self._listing = listing
                    ready.set()
                    await self._next()
                    before, skipped = by_key(listing.sessions), {each.name for each in listing.skipped}
                    self._arm()
                    listing = await self.board.listing()
                    if scope is not self._scope:
                        break
                    batch = board_changes(before, by_key(listing.sessions))
                    if {each.name for each in listing.skipped} != skipped:
                        batch.append({"type": "routers-skipped", "skipped": listing.to_json().get("skipped", [])})
                    if batch:
                        self._fanout.publish(batch)
        except Exception:
            log.exception("the board's survey failed; its viewers reconnect")
            if scope is self._scope:
                self._scope = None
                self._listing = None
                self._fanout.reset()
        finally:
            if scope is self._scope:
                self._listing = None
            ready.set()


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
