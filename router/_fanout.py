"""One fan-out: a batch published once reaches every subscriber, and a
subscriber that falls behind is dropped, never waited for.

The host's event streams and the live view's hub are this one mechanism.
Each subscriber has a bounded memory channel of ``buffer`` batches;
:meth:`FanOut.publish` is a plain synchronous call (so it can run right after
a store transaction commits, with no checkpoint between the commit and the
notice), puts the batch in every channel without blocking, and drops a
subscriber whose channel is full. A dropped subscriber's iteration ends with
:class:`Lagged` once it has read what it holds, and it subscribes again: its
new snapshot catches it up. :meth:`FanOut.close` ends every subscription
normally (``StopAsyncIteration``) after what it holds.

Resource handling: :meth:`FanOut.subscribe` is a context manager; leaving it
removes the subscriber and closes both ends of its channel, whatever the
exit, ``Cancelled`` included.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Generic, Iterator, TypeVar

import trio

from router.errors import Refusal

__all__ = ["FanOut", "Lagged", "Subscription"]

T = TypeVar("T")


class Lagged(Refusal):
    """A subscriber fell more than its buffer behind and was dropped;
    subscribe again (the snapshot catches up). The code names the stream
    (``events-lagged``, ``live-lagged``)."""


class Subscription(Generic[T]):
    """The receiving side of one subscriber: ``async for batch in it`` until
    the fan-out closes; raises :class:`Lagged` when it was dropped."""

    __slots__ = ("_receive", "_lagged", "_fanout")

    def __init__(self, fanout: FanOut[T], receive: trio.MemoryReceiveChannel[T]) -> None:
        self._fanout = fanout
        self._receive = receive
        self._lagged = False

    @property
    def lagged(self) -> bool:
        """Whether this subscriber was dropped for falling behind."""
        return self._lagged

    def __aiter__(self) -> Subscription[T]:
        return self

    def receive_nowait(self) -> T | None:
        """The next batch if one is waiting, else None; never waits. At
        the end (closed, or dropped as lagged) it is None too: the next
        ``__anext__`` says which."""
        try:
            return self._receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return None

    async def __anext__(self) -> T:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self._lagged:
                raise self._fanout.lagged_error() from None
            raise StopAsyncIteration from None


class FanOut(Generic[T]):
    """Publish batches to any number of subscribers; see the module docstring.

    ``lagged_error`` makes the :class:`Lagged` a dropped subscriber raises
    (its code and sentence are the owner's).
    """

    def __init__(self, *, buffer: int, lagged_error: Callable[[], Lagged]) -> None:
        self.buffer = buffer
        self.lagged_error = lagged_error
        self._subscribers: dict[trio.MemorySendChannel[T], Subscription[T]] = {}
        self.closed = False
        self.published = 0
        self.dropped = 0

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<FanOut {state} subscribers={len(self._subscribers)} published={self.published} dropped={self.dropped}>"

    def __len__(self) -> int:
        return len(self._subscribers)

    def statistics(self) -> dict[str, int | bool]:
        return {
            "subscribers": len(self._subscribers),
            "published": self.published,
            "dropped": self.dropped,
            "closed": self.closed,
        }

    def publish(self, batch: T) -> None:
        """Hand ``batch`` to every subscriber, dropping those that are full."""
        self.published += 1
        for send, subscription in list(self._subscribers.items()):
            try:
                send.send_nowait(batch)
            except trio.WouldBlock:
                self._drop(send, subscription)

    def reset(self) -> None:
        """Drop every subscriber as lagged (the stream was interrupted), so
        each takes a fresh snapshot."""
        for send, subscription in list(self._subscribers.items()):
            self._drop(send, subscription)

    def close(self) -> None:
        """End every subscription after what it holds; later subscriptions
        end at once."""
        self.closed = True
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[Subscription[T]]:
        send, receive = trio.open_memory_channel[T](self.buffer)
        subscription = Subscription(self, receive)
        if self.closed:
            send.close()
        else:
            self._subscribers[send] = subscription
        try:
            yield subscription
        finally:
            self._subscribers.pop(send, None)
            send.close()
            receive.close()

    def _drop(self, send: trio.MemorySendChannel[T], subscription: Subscription[T]) -> None:
        subscription._lagged = True
        self.dropped += 1
        del self._subscribers[send]
        send.close()
