"""The host's record, one repository per table (see :mod:`router.host.record.base`).

:class:`router.host.store.Store` holds one of each, named for its table.
"""

from __future__ import annotations

from router.host.record.entries import Entries
from router.host.record.messages import Messages
from router.host.record.operations import Operations
from router.host.record.sessions import Sessions
from router.host.record.skipped_frames import SkippedFrames
from router.host.record.usage import Usage

__all__ = ["Entries", "Messages", "Operations", "Sessions", "SkippedFrames", "Usage"]
