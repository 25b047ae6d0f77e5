"""Sans-IO decisions for sessions started in git worktrees.

Theory of operation
-------------------

``router new PROJECT`` makes a session that owns a *place*: a git worktree
of the project on a new branch, and (``--where local``) a tmux session in
it where the agent's own interactive program runs, or (``--where
container``) a container session whose daemon has the worktree at
``/workspace``. ``router end`` takes the place down again. Everything that
can be decided without running git, tmux or a process is decided here, so
the Trio layer (:mod:`router.worktrees.service`) only runs the commands
this module names and feeds their output back:

- **Ids and names** (:func:`session_id_refusal`, :func:`name_refusal`): a
  session id is any text a person could type back (non-empty, at most
  :data:`MAX_SESSION_ID` characters, no control character), refused with
  ``bad-session-id`` at creation, never later. A place's *name* is stricter
  (it becomes a directory, a branch and a tmux session's name):
  ``bad-name``.
- **The plan** (:func:`plan_new`): the branch (``router/<name>`` unless
  given), the worktree's folder (``<data>/worktrees/<project>/<name>``),
  the tmux session's name (the name; tmux refuses ``.`` and ``:`` in one,
  so they become ``-``).
- **What ending may remove** (:func:`end_verdict`): the worktree only when
  nothing in it is uncommitted, the branch only when every commit on it is
  on another branch too; ``--force`` removes both anyway, and
  ``--keep-worktree`` removes neither (nothing is checked). A refusal
  (``unsaved-work``) says what would be lost, file by file and commit by
  commit, so the person can save it.
- **Reading git's answers** (:func:`parse_numstat`, :func:`split_patch`,
  :func:`parse_log`, :func:`parse_status`): ``-z`` and NUL-separated
  formats wherever git offers them, so a file name with spaces or newlines
  is read as it is.

Nothing here raises on git's output: a line that does not parse is skipped.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Final, Sequence

import attrs

from router.errors import Refusal

__all__ = [
    "BRANCH_PREFIX",
    "Commit",
    "EndVerdict",
    "FileChange",
    "MAX_NAME",
    "MAX_SESSION_ID",
    "NewPlan",
    "WHERE",
    "DAEMON_HARNESSES",
    "end_verdict",
    "harness_refusal",
    "name_refusal",
    "parse_log",
    "parse_numstat",
    "parse_status",
    "plan_new",
    "session_id_refusal",
    "split_patch",
    "tmux_name",
]

#: The longest session id (ours: far beyond any id a person types, short
#: enough for a URL path segment and a log line).
MAX_SESSION_ID: Final = 200
#: The longest place name (ours: it is a directory, a branch's last part
#: and a tmux session's name, each shown in a terminal's width).
MAX_NAME: Final = 64
#: The branch a new session's worktree gets when none is given.
BRANCH_PREFIX: Final = "router/"
#: Where a session may run.
WHERE: Final = ("local", "container")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def session_id_refusal(session_id: object) -> Refusal | None:
    """Why ``session_id`` cannot be a session's id (``bad-session-id``), or
    None when it can: a non-empty string of at most :data:`MAX_SESSION_ID`
    characters with no control character (C0, DEL, C1, or a Unicode line
    or paragraph separator), which any command and any URL can carry."""
    if type(session_id) is not str or not session_id:
        return Refusal("bad-session-id", "a session id is a non-empty string")
    if len(session_id) > MAX_SESSION_ID:
        return Refusal("bad-session-id", f"a session id has at most {MAX_SESSION_ID} characters, this one "
                       f"{len(session_id)}")
    for character in session_id:
        if unicodedata.category(character) in ("Cc", "Zl", "Zp"):
            return Refusal("bad-session-id", f"a session id has no control characters; this one has "
                           f"U+{ord(character):04X}")
    return None


def name_refusal(name: object) -> Refusal | None:
    """Why ``name`` cannot name a place (``bad-name``), or None."""
    if type(name) is not str or not _NAME.fullmatch(name) or len(name) > MAX_NAME or name.endswith(".lock") \
            or ".." in name:
        return Refusal("bad-name", f"a session's name is 1 to {MAX_NAME} letters, digits, '.', '_' or '-', "
                       f"starting with a letter or digit (it names a folder, a branch and a tmux session), "
                       f"not {name!r}")
    return None


def tmux_name(name: str) -> str:
    """The tmux session's name for place ``name`` (tmux takes neither
    ``.`` nor ``:`` in one)."""
    return name.replace(".", "-").replace(":", "-")


@attrs.frozen(kw_only=True)
class NewPlan:
    """What ``router new`` makes: the session's name, its branch, the
    worktree's folder, the tmux session's name (local only) and where it
    runs."""

    name: str
    branch: str
    worktree: Path
    tmux: str | None
    where: str


def plan_new(*, project: str, name: str, branch: str | None, where: str, worktrees: Path) -> NewPlan | Refusal:
    """The plan for a new place, or why there is none (``bad-name``,
    ``bad-where``). Whether the branch or the folder exists already is the
    git layer's to check (``branch-exists``, ``worktree-exists``)."""
    refused = name_refusal(name)
    if refused is not None:
        return refused
    if where not in WHERE:
        return Refusal("bad-where", f"--where is {' or '.join(WHERE)}, not {where!r}")
    return NewPlan(name=name, branch=branch or BRANCH_PREFIX + name, worktree=worktrees / project / name,
                   tmux=tmux_name(name) if where == "local" else None, where=where)


# --------------------------------------------------------------------------- ending


@attrs.frozen(kw_only=True)
class EndVerdict:
    """What ending removes: the worktree, the branch; or the refusal."""

    remove_worktree: bool
    remove_branch: bool
    refusal: Refusal | None = None


#: How many files or commits a refusal names before "and N more".
_NAMED: Final = 10


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_NAMED])
    return shown + (f" and {len(items) - _NAMED} more" if len(items) > _NAMED else "")


def end_verdict(*, dirty: Sequence[str], unsaved: Sequence[str], branch: str, keep_worktree: bool,
                force: bool) -> EndVerdict:
    """What ending a place removes. ``dirty``: the worktree's uncommitted
    paths (untracked ones included); ``unsaved``: its branch's commits that
    no other branch has (``sha subject``). ``keep_worktree`` removes
    nothing and checks nothing; ``force`` removes both whatever they hold;
    else both go only when nothing is lost, and the refusal
    (``unsaved-work``) names what would be."""
    if keep_worktree:
        return EndVerdict(remove_worktree=False, remove_branch=False)
    if force or (not dirty and not unsaved):
        return EndVerdict(remove_worktree=True, remove_branch=True)
    lost = []
    if dirty:
        lost.append(f"{len(dirty)} uncommitted file(s) in the worktree ({_listed(list(dirty))})")
    if unsaved:
        lost.append(f"{len(unsaved)} commit(s) on {branch} that no other branch has ({_listed(list(unsaved))})")
    message = ("ending would lose " + " and ".join(lost) + "; commit and merge them (or push them to another "
               "branch), or end with --keep-worktree to keep the worktree and branch, or --force to drop them")
    return EndVerdict(remove_worktree=False, remove_branch=False,
                      refusal=Refusal("unsaved-work", message, dirty=list(dirty), unsaved=list(unsaved)))


# --------------------------------------------------------------------------- git's output


@attrs.frozen(kw_only=True)
class Commit:
    sha: str
    subject: str

    def to_json(self) -> dict[str, str]:
        return {"sha": self.sha, "subject": self.subject}


@attrs.frozen(kw_only=True)
class FileChange:
    """One file's change: ``added`` and ``removed`` lines (None for a
    binary file), and its patch text."""

    path: str
    added: int | None
    removed: int | None
    patch: str = ""

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "added": self.added, "removed": self.removed, "patch": self.patch}


def parse_status(output: bytes) -> list[str]:
    """The paths ``git status --porcelain=v1 -z --untracked-files=all``
    names (a rename's new path; its old one is the next NUL field)."""
    fields = output.decode("utf-8", "surrogateescape").split("\0")
    paths: list[str] = []
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":
            index += 1  # the rename's source
    return paths


def parse_numstat(output: bytes) -> list[FileChange]:
    """``git diff --numstat -z --no-renames``: ``added\\tremoved\\tpath\\0``
    each (``-`` for a binary file's counts)."""
    out = []
    for entry in output.decode("utf-8", "surrogateescape").split("\0"):
        parts = entry.split("\t", 2)
        if len(parts) != 3 or not parts[2]:
            continue
        added, removed, path = parts
        out.append(FileChange(path=path, added=int(added) if added.isdigit() else None,
                              removed=int(removed) if removed.isdigit() else None))
    return out


_DIFF_HEADER = re.compile(r"^diff --git ", re.MULTILINE)


def split_patch(patch: str, paths: Sequence[str]) -> dict[str, str]:
    """``git diff --no-renames`` split by file: path -> that file's part
    (header included). Each part is matched to one of ``paths`` by its
    ``diff --git a/PATH b/PATH`` line, so an unusual name is found as long
    as git wrote it unquoted (``core.quotePath=false``)."""
    out: dict[str, str] = {}
    starts = [match.start() for match in _DIFF_HEADER.finditer(patch)]
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(patch)
        part = patch[start:end]
        header = part.split("\n", 1)[0]
        for path in paths:
            if header == f"diff --git a/{path} b/{path}":
                out[path] = part
                break
    return out


def parse_log(output: bytes) -> list[Commit]:
    """``git log --format=%H%x00%s%x00``: commits, newest first."""
    fields = output.decode("utf-8", "replace").split("\0")
    out = []
    for index in range(0, len(fields) - 1, 2):
        sha, subject = fields[index].strip(), fields[index + 1]
        if sha:
            out.append(Commit(sha=sha, subject=subject))
    return out


# --------------------------------------------------------------------------- harnesses

#: What a launched daemon runs (``router daemon --adapter``; kept equal to
#: ``router.daemon.cli.ADAPTERS``' names but ``replay``, recorded turns
#: played back for benchmarks and tests, not an agent: a test checks it).
DAEMON_HARNESSES: Final = ("echo", "claude-code", "codex")
_MODULE_ATTR = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*")


def harness_refusal(harness: str, *, plugin_harnesses: Sequence[str], switched_on: Sequence[str],
                    launcher: str | None, module_found: bool | None = None) -> Refusal | None:
    """Why a container session cannot be launched on ``harness``, decided
    at launch (not at its first message): ``unknown-harness`` (no daemon
    adapter of that name, or a ``MODULE:ATTR`` whose module is not found:
    ``module_found`` False), ``harness-off`` (a harness plug-in module
    ``plugins.json`` does not switch on), ``harness-unsupported`` (the
    in-process launcher runs echo only)."""
    if harness not in DAEMON_HARNESSES and not _MODULE_ATTR.fullmatch(harness):
        return Refusal("unknown-harness", f"there is no harness {harness!r}: a session's daemon runs "
                       f"{', '.join(DAEMON_HARNESSES)} or an adapter of your own as package.module:attribute")
    if _MODULE_ATTR.fullmatch(harness) and module_found is False:
        return Refusal("unknown-harness", f"the adapter {harness!r} names a module that is not installed")
    if harness in plugin_harnesses and harness not in switched_on:
        return Refusal("harness-off", f"the harness {harness!r} is not switched on; run `router plugins` and "
                       f"`router plugins set --file PATCH` with \"harness\" listing it")
    if launcher == "in-process" and harness != "echo":
        return Refusal("harness-unsupported", f"the in-process launcher runs the echo harness only, not "
                       f"{harness!r}; start the router with `router serve --launcher process` (or docker)")
    return None
