"""Targets: each session kind behind one protocol (:class:`Target`), so the
user-turn router never asks which kind a session is.

- :mod:`router.turns.targets.base`: the protocol, and the live stream a
  target serves;
- :mod:`router.turns.targets.claude_code`: a Claude Code session, over its
  mod link;
- :mod:`router.turns.targets.container`: a container session, over the
  host; and the host's container sessions, open or not.
"""

from router.turns.targets.base import LiveStream, Target, stale
from router.turns.targets.claude_code import ClaudeCodeTarget
from router.turns.targets.container import RESUBSCRIBE_PAUSE, ContainerSessions, ContainerTarget

__all__ = ["ClaudeCodeTarget", "ContainerSessions", "ContainerTarget", "LiveStream", "RESUBSCRIBE_PAUSE", "Target",
           "stale"]
