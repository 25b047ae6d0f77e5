"""The mod link's errors: which side failed, and how.

- :class:`ModLinkRefused` (local): the server would not start, and bound
  nothing. ``code`` says why: ``no-socket-path``, ``unsafe-directory``,
  ``link-in-use``, ``not-a-socket``, ``bind-failed``.
- :class:`ModCallError` (remote): the mod answered ``ok: false``.
- :class:`ModBadResult` (remote): the mod answered with a value that is not
  the call's result shape.
- :class:`ModCallTimeout` (local): the caller's deadline passed first; a late
  result is dropped. A ``trio.TooSlowError`` too.
- :class:`ModLinkClosed` (local): the link stopped before the call ended.
- :class:`ModSubscriberOverflow`: a subscriber's queue filled with events it
  may not shed; it lost events and must subscribe again.
"""

from __future__ import annotations

import trio

from router.errors import Refusal

__all__ = [
    "ModBadResult",
    "ModCallError",
    "ModCallTimeout",
    "ModLinkClosed",
    "ModLinkError",
    "ModLinkRefused",
    "ModSubscriberOverflow",
]


class ModLinkError(Exception):
    """Anything the mod link reports."""


class ModLinkRefused(Refusal, ModLinkError):
    """The link was not started: a :class:`~router.errors.Refusal` (``code``,
    ``message``), with the ``path`` it concerns when there is one (also in
    ``data``)."""

    def __init__(self, code: str, message: str, *, path: str | None = None) -> None:
        super().__init__(code, message, **({} if path is None else {"path": path}))
        self.path = path


class ModCallError(ModLinkError):
    """The mod answered the call with ``ok: false``; ``error`` is its text."""

    def __init__(self, call: str, error: str) -> None:
        super().__init__(f"the mod failed {call}: {error}")
        self.call = call
        self.error = error


class ModBadResult(ModCallError):
    """The mod's answer to the call is not the call's result shape."""


class ModCallTimeout(ModLinkError, trio.TooSlowError):
    """The call's deadline passed before the mod answered."""

    def __init__(self, call: str, deadline: float) -> None:
        super().__init__(f"the mod did not answer {call} within {deadline:g} s")
        self.call = call
        self.deadline = deadline


class ModLinkClosed(ModLinkError):
    """The link stopped (or was never serving) while the call waited."""


class ModSubscriberOverflow(ModLinkError):
    """A subscriber fell so far behind that events it may not lose would have
    been lost; it was cut off after the events it had."""
