"""The target protocol: each session kind behind one protocol, so the user-turn router
(:mod:`router.turns.router`) never asks which kind a session is.

A :class:`Target` is one open session's way in and out, whichever way the
session is reached:

- :class:`~router.turns.targets.claude_code.ClaudeCodeTarget`: a Claude Code
  session on this machine, over its mod link (``session.message``, the
  link's events);
- :class:`~router.turns.targets.container.ContainerTarget`: a container
  session, over the host (``submit``, the host's events); the container
  sessions the host knows, open or not, are
  :class:`~router.turns.targets.container.ContainerSessions`.

The router opens a session with its target's :meth:`Target.tasks` (the
link's server and the live-view task, in the session's nursery), asks it
for the facts :func:`router.turns.core.plan` needs (:meth:`Target.readiness`),
writes the planned step through it (:meth:`Target.prepare`, then
:meth:`Target.write`, or :meth:`Target.withdraw` when the core says the
write no longer goes out) and serves its transcript, live view and aborts.

Every method answers from the target's own state or its channel; the
decisions stay in the core, so a target holds no delivery state.
"""

from __future__ import annotations

from typing import Any, AsyncContextManager, AsyncIterator, Callable, Protocol, TypeVar

from router.plugins.routing import LaunchRecord
from router.turns.core import Outcome, Readiness, SubmitPrompt, WriteMessage
from router.errors import Refusal
from router.turns.live import LiveHub, LiveSubscription
from router.turns.resume import LiveBatch, LiveId, StreamCursor
from router.turns.session_brackets import SessionBrackets
from router.turns.registry import SessionKind, Starter

__all__ = ["LiveStream", "Target", "stale"]

#: What a live stream's reader takes of each item: ``(id, item)`` or ``(id, JSON text)``.
P = TypeVar("P")


class LiveStream:
    """A live view for one reader.

    A fresh stream has ``snapshot`` (``{session, kind, messages, busy}``)
    and ``snapshot_id``; a resumed one has ``snapshot`` None and
    ``replay``, the ``(id, item)`` pairs it missed. ``reset`` is the
    refusal that says why a resume point was not honoured (the stream is
    then a fresh one). Then :meth:`receive` gives the next batches as
    ``(id, item)`` pairs (the next one and those already waiting behind
    it; ``None`` at the end; cancelling it loses nothing), or ``async for
    items in stream`` the items alone."""

    def __init__(
        self,
        subscription: LiveSubscription,
        cursor: StreamCursor,
        *,
        snapshot: dict[str, Any] | None = None,
        snapshot_id: str | None = None,
        replay: list[tuple[str, dict[str, Any]]] | None = None,
        reset: Refusal | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.snapshot_id = snapshot_id
        self.replay = replay or []
        self.reset = reset
        self.cursor = cursor
        self._subscription = subscription

    @classmethod
    def resumed(cls, subscription: LiveSubscription, cursor: StreamCursor) -> LiveStream:
        """The stream of a resume the view's history holds."""
        assert subscription.replay is not None
        replay = [pair for batch in subscription.replay for pair in cursor.items(batch)]
        return cls(subscription, cursor, replay=replay)

    async def receive(self) -> list[tuple[str, dict[str, Any]]] | None:
        """The pairs of the next batch and of every batch already waiting
        behind it (a reader that fell behind catches up in one write);
        ``None`` at the end."""
        return await self._receive(self.cursor.items)

    async def receive_encoded(self) -> list[tuple[str, str]] | None:
        """As :meth:`receive`, each item as its JSON text (encoded once
        when published, for every reader): ``(id, text)`` pairs."""
        return await self._receive(self.cursor.encoded)

    async def _receive(self, take: Callable[[LiveBatch], list[P]]) -> list[P] | None:
        while True:
            batch = await self._subscription.receive()
            if batch is None:
                return None
            pairs = take(batch)
            # No checkpoint from here on: a cancellation cannot fall
            # between taking a batch and returning it.
            while (more := self._subscription.receive_nowait()) is not None:
                pairs += take(more)
            if pairs:
                return pairs

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        return self._items()

    async def _items(self) -> AsyncIterator[list[dict[str, Any]]]:
        if self.replay:
            yield [item for _, item in self.replay]
        while (pairs := await self.receive()) is not None:
            yield [item for _, item in pairs]


def stale(since: LiveId | None, text: str | None) -> Refusal | None:
    """Why a resume point is not honoured (``None``: none was asked for)."""
    if text is None or not text.strip():
        return None
    if since is None:
        return Refusal("bad-event-id", f"Last-Event-ID {text[:80]!r} is not an id this server gives; here is a fresh snapshot")
    return Refusal(
        "stale-event-id",
        f"Last-Event-ID {text[:80]!r} is not held any more (the live view restarted or moved on); here is a fresh snapshot",
    )


class Target(Protocol):
    """One open session's channel, as the router uses it (see the module
    docstring). ``brackets`` is the session's turn brackets, or ``None``
    when turns are not metered."""

    #: The session's id and kind.
    id: str
    kind: SessionKind
    #: The session's live view, when it has a view task of its own.
    hub: LiveHub | None
    #: Whether the session runs one turn at a time with no announced
    #: writes (the brackets core's ``one_turn``).
    one_turn: bool
    #: Told what the session shows of the provider's usage limit (a
    #: ``LimitSeen``, a kept operation); the router sets it before the tasks run.
    on_limit: Any

    def tasks(self, brackets: SessionBrackets | None) -> list[Starter]:
        """The tasks the session's nursery runs for this target, in order."""

    def readiness(self, stopped: str | None) -> Readiness:
        """What :func:`~router.turns.core.plan` needs to know of the
        session now; ``stopped`` is its stop's reason, if a limit stopped it."""

    async def prepare(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None,
                      launch: LaunchRecord | None = None) -> None:
        """Get ready to write ``step`` (a container turn's bracket opens
        first). ``launch``: the session's stored launch record when the
        router read it already, in the delivery's plan."""

    def withdraw(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> None:
        """``step`` was prepared and does not go out after all."""

    async def write(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> Outcome:
        """Write ``step``; its outcome, never a refusal raised."""

    async def abort_operation(self, operation_id: str) -> None:
        """Abort one operation the core said must not run."""

    async def turns_seen(self, brackets: SessionBrackets) -> None:
        """Until the view has seen the end of every turn the session's
        channel settled (a delivery waits for its measurement)."""

    async def stopped(self) -> None:
        """A turn's end stopped the session: stop what it has queued."""

    async def launch_record(self) -> LaunchRecord:
        """The launch record the session's turns are metered under."""

    def entry(self) -> dict[str, Any] | None:
        """The session's line in the router's list, or ``None`` when its
        kind is listed elsewhere (the host lists container sessions)."""

    async def messages(self) -> list[Any]:
        """The transcript."""

    def live(self, since: str | None = None) -> AsyncContextManager[LiveStream]:
        """The live view: a snapshot, then the items; with ``since`` (a
        reader's last event id) what it missed instead, when the view can
        tell (else a ``reset`` and a snapshot)."""

    async def abort(self, operation_id: str | None) -> dict[str, Any]:
        """Stop the running turn (or one operation): ``{session, aborted}``.
        Raises :class:`~router.errors.Refusal` when the kind cannot."""
