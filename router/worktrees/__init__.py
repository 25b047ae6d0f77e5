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

from router.worktrees.core import session_id_refusal
from router.worktrees.records import Place, Places
from router.worktrees.service import NewRequest, Worktrees, launch_harness_refusal

__all__ = ["NewRequest", "Place", "Places", "Worktrees", "launch_harness_refusal", "session_id_refusal"]
