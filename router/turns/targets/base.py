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

from typing import Any, AsyncContextManager, AsyncIterator, Protocol

from router.plugins.routing import LaunchRecord
from router.turns.core import Outcome, Readiness, SubmitPrompt, WriteMessage
from router.turns.live import LiveHub, LiveSubscription
from router.turns.session_brackets import SessionBrackets
from router.turns.registry import SessionKind, Starter

__all__ = ["LiveStream", "Target", "live_batches"]


class LiveStream:
    """A live view: ``snapshot`` (``{session, kind, messages, busy}``) and
    ``async for items in stream``."""

    def __init__(self, snapshot: dict[str, Any], batches: AsyncIterator[list[dict[str, Any]]]) -> None:
        self.snapshot = snapshot
        self._batches = batches

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        return self._batches


async def live_batches(subscription: LiveSubscription) -> AsyncIterator[list[dict[str, Any]]]:
    """A live hub's subscription as a stream's batches."""
    async for items in subscription:
        yield items


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

    def tasks(self, brackets: SessionBrackets | None) -> list[Starter]:
        """The tasks the session's nursery runs for this target, in order."""

    def readiness(self, stopped: str | None) -> Readiness:
        """What :func:`~router.turns.core.plan` needs to know of the
        session now; ``stopped`` is its stop's reason, if a limit stopped it."""

    async def prepare(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> None:
        """Get ready to write ``step`` (a container turn's bracket opens first)."""

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

    def live(self) -> AsyncContextManager[LiveStream]:
        """The live view: a snapshot, then the items."""

    async def abort(self, operation_id: str | None) -> dict[str, Any]:
        """Stop the running turn (or one operation): ``{session, aborted}``.
        Raises :class:`~router.errors.Refusal` when the kind cannot."""
