"""The git commands a place needs, each one ``git`` process.

Every call runs ``git -C FOLDER ...`` with ``core.quotePath=false`` and no
pager, captures its output, and raises :class:`GitFailed` (a
:class:`~router.errors.Refusal`, ``git-failed``, with git's own words)
when git exits non-zero, except where a non-zero exit is an answer (a
``rev-parse --verify`` that finds nothing). ``git`` missing from ``PATH``
is ``git-missing``.

Resource handling: each call is one process, killed if the caller is
cancelled (``trio.run_process``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
import trio

from router.errors import Refusal
from router.worktrees.core import Commit, FileChange, parse_log, parse_numstat, parse_status, split_patch

__all__ = ["Diff", "GitFailed", "add_worktree", "branch_exists", "commits", "diff", "dirty_paths",
           "remove_worktree", "resolve", "run_git", "toplevel", "unsaved_commits", "delete_branch", "branch_name_ok"]


class GitFailed(Refusal):
    """git refused (``git-failed``) or is missing (``git-missing``)."""


def _git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise GitFailed("git-missing", "git is not on PATH; install git to start sessions in worktrees")
    return found


async def run_git(folder: Path | str, *args: str, check: bool = True, env: dict[str, str] | None = None
                  ) -> tuple[int, bytes, str]:
    """``git -C folder args``: exit status, stdout, stderr."""
    argv = [_git_binary(), "-C", str(folder), "-c", "core.quotePath=false", "--no-pager", *args]
    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False,
                                  stdin=subprocess.DEVNULL, env={**os.environ, "GIT_TERMINAL_PROMPT": "0",
                                                                 **(env or {})})
    err = done.stderr.decode("utf-8", "replace").strip()
    if check and done.returncode != 0:
        raise GitFailed("git-failed", f"`git {' '.join(args[:3])}` failed in {folder}: {err or 'no output'}")
    return done.returncode, done.stdout, err


async def toplevel(path: Path) -> Path | None:
    """The repository's top-level folder that ``path`` is in, or None
    when it is in none (or is not a folder)."""
    if not path.is_dir():
        return None
    code, out, _ = await run_git(path, "rev-parse", "--show-toplevel", check=False)
    if code != 0:
        return None
    return Path(out.decode("utf-8", "surrogateescape").strip())


async def resolve(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo``, or None."""
    code, out, _ = await run_git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                                 check=False)
    return out.decode().strip() if code == 0 else None


async def branch_exists(repo: Path, branch: str) -> bool:
    code, _, _ = await run_git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
    return code == 0


async def branch_name_ok(repo: Path, branch: str) -> bool:
    code, _, _ = await run_git(repo, "check-ref-format", "--branch", branch, check=False)
    return code == 0


async def add_worktree(repo: Path, folder: Path, branch: str, base: str) -> None:
    """A new worktree at ``folder`` on a new ``branch`` from ``base``
    (``git worktree add -b``: git refuses an existing branch itself)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    await run_git(repo, "worktree", "add", "-b", branch, str(folder), base)


async def remove_worktree(repo: Path, folder: Path, *, force: bool) -> None:
    """``git worktree remove`` (``--force`` twice with ``force``: dirty or
    locked); a folder already gone is pruned instead."""
    if not folder.exists():
        await run_git(repo, "worktree", "prune")
        return
    await run_git(repo, "worktree", "remove", *(["--force", "--force"] if force else []), str(folder))


async def delete_branch(repo: Path, branch: str) -> None:
    if await branch_exists(repo, branch):
        await run_git(repo, "branch", "-D", "--", branch)


async def dirty_paths(worktree: Path) -> list[str]:
    """The worktree's uncommitted paths, untracked ones included."""
    _, out, _ = await run_git(worktree, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    return parse_status(out)


async def unsaved_commits(repo: Path, branch: str) -> list[str]:
    """``sha subject`` of each commit on ``branch`` that no other branch
    has (empty when the branch is gone)."""
    if not await branch_exists(repo, branch):
        return []
    _, out, _ = await run_git(repo, "log", "--format=%H%x00%s%x00", f"refs/heads/{branch}", "--not",
                              f"--exclude={branch}", "--branches")  # (a branch name has no glob character)
    return [f"{commit.sha[:12]} {commit.subject}" for commit in parse_log(out)]


async def commits(worktree: Path, base: str) -> list[Commit]:
    _, out, _ = await run_git(worktree, "log", "--format=%H%x00%s%x00", f"{base}..HEAD")
    return parse_log(out)


class Diff:
    """A worktree's changes against its base: its commits and its files
    (committed or not, untracked ones included)."""

    def __init__(self, commits: list[Commit], files: list[FileChange]) -> None:
        self.commits = commits
        self.files = files


async def diff(worktree: Path, base: str) -> Diff:
    """The worktree's diff against ``base``, untracked files included,
    read through a scratch index (a copy of the worktree's, with every
    file added), so the worktree's own index is never touched."""
    _, index_out, _ = await run_git(worktree, "rev-parse", "--path-format=absolute", "--git-path", "index")
    index = Path(index_out.decode("utf-8", "surrogateescape").strip())
    with tempfile.TemporaryDirectory(prefix="router-diff-") as scratch:
        scratch_index = Path(scratch) / "index"
        if index.exists():
            shutil.copyfile(index, scratch_index)
        env = {"GIT_INDEX_FILE": str(scratch_index)}
        await run_git(worktree, "add", "-A", env=env)
        _, numstat, _ = await run_git(worktree, "diff", "--cached", "--no-renames", "--numstat", "-z", base, env=env)
        _, patch, _ = await run_git(worktree, "diff", "--cached", "--no-renames", base, env=env)
    files = parse_numstat(numstat)
    parts = split_patch(patch.decode("utf-8", "replace"), [each.path for each in files])
    return Diff(await commits(worktree, base),
                [FileChange(path=f.path, added=f.added, removed=f.removed, patch=parts.get(f.path, "")) for f in files])
