"""The mod link's errors: which side failed, and how.

Every one is a :class:`router.errors.Refusal` (a kebab-case ``code``, a
``message`` a person can act on, ``data``), subclassed because callers
branch on the kind:

- :class:`ModLinkRefused` (local): the server would not start, and bound
  nothing. ``code`` says why: ``no-socket-path``, ``unsafe-directory``,
  ``link-in-use``, ``not-a-socket``, ``bind-failed``; ``path`` is the path
  concerned, when there is one.
- :class:`ModCallError` (remote, ``mod-call-failed``): the mod answered
  ``ok: false``; ``call`` and ``error`` (the mod's text).
- :class:`ModBadResult` (remote, ``mod-bad-result``): the mod answered with
  a value that is not the call's result shape.
- :class:`ModCallTimeout` (local, ``mod-call-timeout``): the caller's
  deadline passed first; a late result is dropped. A ``trio.TooSlowError``
  too.
- :class:`ModLinkClosed` (local, ``link-closed``): the link stopped before
  the call ended.
- :class:`ModSubscriberOverflow` (``subscriber-overflow``): a subscriber's
  queue filled with events it may not shed; it lost events and must
  subscribe again.
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


class ModLinkError(Refusal):
    """Anything the mod link reports."""


class ModLinkRefused(ModLinkError):
    """The link was not started: a :class:`~router.errors.Refusal` (``code``,
    ``message``), with the ``path`` it concerns when there is one (also in
    ``data``)."""

    def __init__(self, code: str, message: str, *, path: str | None = None) -> None:
        super().__init__(code, message, **({} if path is None else {"path": path}))

    @property
    def path(self) -> str | None:
        return self.data.get("path")


class ModCallError(ModLinkError):
    """The mod answered the call with ``ok: false``; ``error`` is its text."""

    code_name = "mod-call-failed"

    def __init__(self, call: str, error: str) -> None:
        super().__init__(self.code_name, f"the mod failed {call}: {error}", call=call, error=error)

    # Read from ``data``, so a refusal rebuilt from its pickle has them too.
    call = property(lambda self: self.data["call"])
    error = property(lambda self: self.data["error"])


class ModBadResult(ModCallError):
    """The mod's answer to the call is not the call's result shape."""

    code_name = "mod-bad-result"


class ModCallTimeout(ModLinkError, trio.TooSlowError):
    """The call's deadline passed before the mod answered."""

    def __init__(self, call: str, deadline: float) -> None:
        super().__init__(
            "mod-call-timeout", f"the mod did not answer {call} within {deadline:g} s", call=call, deadline=deadline
        )

    call = property(lambda self: self.data["call"])
    deadline = property(lambda self: self.data["deadline"])


class ModLinkClosed(ModLinkError):
    """The link stopped (or was never serving) while the call waited."""

    def __init__(self, message: str) -> None:
        super().__init__("link-closed", message)


class ModSubscriberOverflow(ModLinkError):
    """A subscriber fell so far behind that events it may not lose would have
    been lost; it was cut off after the events it had."""

    def __init__(self, message: str) -> None:
        super().__init__("subscriber-overflow", message)
