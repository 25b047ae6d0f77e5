"""Sessions started and ended in git worktrees: projects, places, the commands.

- :mod:`router.worktrees.core`: sans-IO: ids and names, the plan of a new
  place, what ending may remove, git's output read;
- :mod:`router.worktrees.projects`: ``projects.json``, the repositories
  sessions may start in;
- :mod:`router.worktrees.records`: ``places.json``, every place made;
- :mod:`router.worktrees.git`, :mod:`router.worktrees.tmux`: the commands;
- :mod:`router.worktrees.service`: :class:`Worktrees`, the main job's part;
- :mod:`router.worktrees.cli`: ``router projects|new|end|attach|diff``.

See docs/sessions.md.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.worktrees.core": "session_id_refusal",
    "router.worktrees.records": "Place Places",
    "router.worktrees.service": "NewRequest Worktrees launch_harness_refusal",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
