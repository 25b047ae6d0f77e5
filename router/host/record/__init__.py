"""The host's record, one repository per table (see :mod:`router.host.record.base`).

:class:`Tables` holds the six; :class:`router.host.store.Store` makes one
over itself and answers each repository's methods under their names.
"""

from __future__ import annotations

import attrs

from router.host.record.base import Unit
from router.host.record.entries import Entries
from router.host.record.messages import Messages
from router.host.record.operations import Operations
from router.host.record.sessions import Sessions
from router.host.record.skipped_frames import SkippedFrames
from router.host.record.usage import Usage

__all__ = ["Entries", "Messages", "Operations", "Sessions", "SkippedFrames", "Tables", "Usage"]


@attrs.frozen
class Tables:
    """The record's repositories, by table."""

    sessions: Sessions
    operations: Operations
    messages: Messages
    entries: Entries
    usage: Usage
    skipped_frames: SkippedFrames

    @classmethod
    def over(cls, unit: Unit) -> Tables:
        """The six repositories working through ``unit`` (the store)."""
        return cls(sessions=Sessions(unit), operations=Operations(unit), messages=Messages(unit),
                   entries=Entries(unit), usage=Usage(unit), skipped_frames=SkippedFrames(unit))
