"""``Worktrees``: starting and ending sessions in git worktrees, in ``router serve``.

Theory of operation
-------------------

One object in the main job (``MainJob.worktrees``), behind the API's
``GET /projects``, ``POST /sessions {project, ...}``, ``GET
/sessions/<id>/diff``, ``POST /sessions/<id>/end`` and ``GET
/sessions/<id>/place`` (:mod:`router.api.places`), which the commands
``router projects|new|end|attach|diff`` post to.

**New** (:meth:`Worktrees.new`): the project must be listed
(``unknown-project``); the plan (:func:`router.worktrees.core.plan_new`)
names the branch, the folder and the tmux session; an existing branch
(``branch-exists``), folder (``worktree-exists``), live name or session
(``session-exists``), or a ``--from`` that names no commit
(``unknown-ref``) is refused before anything is made. Then, in order:
the worktree (``git worktree add -b``), the record (:class:`Places`), and
the session:

- ``--where local --harness claude-code`` (the default): ``claude
  --plugin-dir PLUGIN --session-id UUID`` in a tmux session named after the
  session, in the worktree. Claude Code starts the plug-in's ``router
  mcp``, which puts the session on the board under UUID, its id. The first
  prompt goes in once the board lists it connected, through the holder's
  ``POST /sessions/UUID/messages`` with the event id ``new-UUID``: exactly
  once, however often it is retried (the holder's record answers a
  resend), and a restarted router retries it from the record.
- ``--where local --harness echo``: the echo agent has no interactive
  program of its own, so the session is a launched one (the launcher in
  force runs its daemon: ``process`` in the worktree) and its tmux session
  is a shell in the worktree, where ``router attach`` puts the person.
- ``--where container``: a container session through the launcher in
  force, whose context names the worktree (``docker`` mounts it at
  ``/workspace``).

If the session cannot start, the worktree, branch and record are removed
again and the refusal is the answer.

**End** (:meth:`Worktrees.end`): the verdict first
(:func:`router.worktrees.core.end_verdict` over ``git status`` and the
branch's commits no other branch has): a refusal (``unsaved-work``) ends
nothing. Then the turn stops (Escape into Claude Code; the container
session's operations abort), the tmux session or the container session
ends (its daemon stopped, its workspace volume removed, its record marked
ended: :meth:`router.host.Host.end_session`), and the worktree and branch
go as the verdict says. The place's record stays, with ``endedAt``.

**Restarts**: tmux sessions and the Claude Code processes in them do not
belong to the router's process: a router killed and started again finds
each live place's tmux session (:meth:`run`) and goes on (a first prompt
not yet in is sent, under the same event id).

Error handling: every refusal is a :class:`~router.errors.Refusal` with a
code; git's and tmux's failures are ``git-failed`` / ``tmux-failed`` with
their words. Resource handling: :meth:`run` owns the first-prompt tasks;
cancelling it stops them (each is retried on the next start).
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import attrs
import trio

from router.errors import Refusal
from router.worktrees import git, tmux
from router.worktrees.core import end_verdict, harness_refusal, plan_new, session_id_refusal
from router.worktrees.projects import Project, add_project, find_project, load_projects, remove_project
from router.worktrees.records import Place, Places

__all__ = ["WorktreesStatistics", "NewRequest", "PLUGIN_ENV", "Worktrees", "launch_harness_refusal", "plugin_dir"]

log = logging.getLogger("router.worktrees")

#: The plug-in folder a local Claude Code session loads (default: the
#: repository's ``plugin/``); tests point it at a writable copy.
PLUGIN_ENV = "ROUTER_PLUGIN_DIR"
#: Extra arguments for ``claude`` (shell words), e.g. a permission mode.
CLAUDE_ARGS_ENV = "ROUTER_CLAUDE_ARGS"
#: Seconds between two looks at the board while a first prompt waits for
#: its session to connect (ours: Claude Code takes seconds to start).
PROMPT_POLL = 0.5
#: The harness a local session runs by default.
LOCAL_DEFAULT = "claude-code"
#: Harnesses a local session can run (see the module docstring).
LOCAL_HARNESSES = ("claude-code", "echo")


def launch_harness_refusal(layer: Any, launcher: str | None, harness: str) -> Refusal | None:
    """Why a container session launched through ``launcher`` (its name)
    cannot run ``harness``, as ``plugins.json`` (``layer``) switches the
    harness modules on: :func:`router.worktrees.core.harness_refusal`."""
    module = harness.partition(":")[0] if ":" in harness else None
    found = None
    if module is not None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
    plugin_harnesses = [entry.name for entry in (Path(__file__).resolve().parents[1] / "plugins" / "harness"
                                                  ).iterdir() if entry.is_dir()]
    switched = layer.switched_on("harness") if layer is not None else plugin_harnesses
    return harness_refusal(harness, plugin_harnesses=plugin_harnesses, switched_on=switched, launcher=launcher,
                           module_found=found)


def plugin_dir(env: Mapping[str, str]) -> Path:
    configured = env.get(PLUGIN_ENV)
    folder = Path(configured) if configured else Path(__file__).resolve().parents[2] / "plugin"
    if not (folder / ".claude-plugin" / "plugin.json").is_file():
        raise Refusal("plugin-missing", f"the router's Claude Code plug-in is not at {folder}; set ${PLUGIN_ENV} "
                      "to its folder (the repository's plugin/)")
    return folder


@attrs.frozen(kw_only=True)
class NewRequest:
    project: str
    name: str | None = None
    branch: str | None = None
    from_: str | None = None
    harness: str | None = None
    where: str = "local"
    prompt: str | None = None


async def _base(repo: Any, from_: str | None) -> str:
    """The commit ``--from`` names (HEAD when absent), refused when none."""
    base = await git.resolve(repo, from_ or "HEAD")
    if base is None:
        raise Refusal("unknown-ref", f"{from_ or 'HEAD'!r} names no commit in {repo}; give --from "
                      "a branch, tag or commit of the project")
    return base


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.frozen
class WorktreesStatistics:
    """What :class:`Worktrees` holds: the sessions being prompted, and the
    places adopted at start."""

    prompting: int
    adopted: int


class Worktrees:
    """See the module docstring. ``router``: the ``TurnRouter``;
    ``layer``: the ``PluginLayer``; ``board``: the ``LocalBoard`` (the
    first prompt's way to a Claude Code session); ``host``: the ``Host``
    (None: no container sessions); ``launcher``: the launcher in force's
    name."""

    def __init__(self, *, router: Any, layer: Any, board: Any, host: Any, launcher: str | None,
                 settings_dir: Path, data_dir: Path, env: Mapping[str, str]) -> None:
        self.router = router
        self.layer = layer
        self.board = board
        self.host = host
        self.launcher = launcher
        self.settings_dir = settings_dir
        self.data_dir = data_dir
        self.env = dict(env)
        self.places = Places(data_dir)
        self._nursery: trio.Nursery | None = None
        self._prompting: set[str] = set()
        self._adopted = 0
        #: One new or end at a time: the checks and what they check for
        #: (a free branch, a saved worktree) are never split by another's.
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<Worktrees {self.data_dir} prompting={len(self._prompting)} adopted={self._adopted}>"

    def statistics(self) -> WorktreesStatistics:
        return WorktreesStatistics(prompting=len(self._prompting), adopted=self._adopted)
    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: trio.TaskStatus[Worktrees] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await self._adopt()
                task_status.started(self)
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def _adopt(self) -> None:
        """The live local places an earlier run made: each whose tmux
        session still runs is this router's again; its first prompt goes
        in if it had not."""
        places = await trio.to_thread.run_sync(self.places.live)
        for place in places.values():
            if place.tmux is None or not await tmux.has_session(place.tmux):
                continue
            self._adopted += 1
            log.info("adopted %s (%s, tmux %s)", place.id, place.worktree, place.tmux)
            if place.prompt is not None and not place.prompted:
                self._prompt_later(place)

    # ------------------------------------------------------------------ projects

    async def projects(self) -> list[Project]:
        return await trio.to_thread.run_sync(load_projects, self.settings_dir)

    async def add_project(self, path: str, name: str | None = None) -> Project:
        return await add_project(self.settings_dir, Path(path), name)

    async def remove_project(self, name: str) -> Project:
        return await trio.to_thread.run_sync(remove_project, self.settings_dir, name)

    # ------------------------------------------------------------------ the board

    def board_fields(self) -> dict[str, dict[str, Any]]:
        """Session id -> what the board shows of its place."""
        return {key: place.board_fields() for key, place in self.places.live().items()}

    async def place(self, key: str) -> Place:
        found = await trio.to_thread.run_sync(self.places.get, key)
        if found is None:
            raise Refusal("unknown-place", f"{key!r} is not a session `router new` started (`router sessions` "
                          "shows each one's project and branch)", session=key)
        return found

    # ------------------------------------------------------------------ harness checks

    async def harness_refusal(self, harness: str) -> Refusal | None:
        """Why a container session cannot run ``harness`` (decided at launch)."""
        return launch_harness_refusal(self.layer, self.launcher, harness)

    # ------------------------------------------------------------------ new

    async def new(self, request: NewRequest) -> dict[str, Any]:
        project = await trio.to_thread.run_sync(find_project, self.settings_dir, request.project)
        repo = project.path
        name = request.name or f"{project.name}-{uuid.uuid4().hex[:6]}"
        plan = plan_new(project=project.name, name=name, branch=request.branch, where=request.where,
                        worktrees=self.data_dir / "worktrees")
        if isinstance(plan, Refusal):
            raise plan
        harness = request.harness or (LOCAL_DEFAULT if plan.where == "local" else None)
        argv = await self.local_argv(harness) if plan.where == "local" else None
        claude = plan.where == "local" and harness == "claude-code"
        session_id = str(uuid.uuid4()) if claude else name
        await self._check_harness(session_id, harness, claude=claude)
        async with self._lock:
            await self._check_free(repo, plan.branch, plan.worktree, name, session_id)
            base = await _base(repo, request.from_)
            await git.add_worktree(repo, plan.worktree, plan.branch, base)
            place = Place(id=session_id, name=name, project=project.name, project_path=str(repo),
                          branch=plan.branch, base=base, worktree=str(plan.worktree), where=plan.where,
                          harness=harness or "echo", tmux=plan.tmux, claude_session=session_id if claude else None,
                          prompt=request.prompt, prompt_event=f"new-{session_id}" if request.prompt else None,
                          created_at=_now_ms())
            await self._record_and_start(place, argv)
        if place.prompt is not None:
            if claude:
                self._prompt_later(place)
            else:
                await self._prompt_now(place)
        return place.to_json()

    async def _record_and_start(self, place: Place, argv: list[str] | None) -> None:
        """Record the place and start its session; undone (shielded) when
        the start fails or is cancelled."""
        await trio.to_thread.run_sync(self.places.put, place)
        try:
            await self._start(place, argv)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._undo(place)
            raise

    async def _check_harness(self, session_id: str, harness: str | None, *, claude: bool) -> None:
        refused = session_id_refusal(session_id)
        if refused is None and not claude and self.launcher is None:
            refused = Refusal("no-launcher", "this router drives one daemon named by URL (`router serve --daemon`), "
                              "which cannot work in a worktree; start it with a launcher (in-process, process or "
                              "docker) for sessions in worktrees")
        if refused is None and not claude and harness is not None:
            refused = await self.harness_refusal(harness)
        if refused is not None:
            raise refused

    async def local_argv(self, harness: str | None) -> list[str]:
        """What a local session's tmux session runs, or why it cannot run
        (``tmux-missing``, ``harness-unsupported``, ``agent-missing``,
        ``plugin-missing``), decided before anything is made."""
        tmux.tmux_binary(self.env)  # tmux-missing, before anything is made
        if harness not in LOCAL_HARNESSES:
            raise Refusal("harness-unsupported", f"a local session runs {' or '.join(LOCAL_HARNESSES)}, not "
                          f"{harness!r}; run it with --where container")
        if harness != "claude-code":
            return [self.env.get("SHELL") or "/bin/sh"]
        claude = shutil.which("claude", path=self.env.get("PATH"))
        if claude is None:
            raise Refusal("agent-missing", "Claude Code (`claude`) is not on PATH; install it, or start the session "
                          "with --harness echo or --where container")
        plugin = plugin_dir(self.env)
        return [claude, "--plugin-dir", str(plugin), *shlex.split(self.env.get(CLAUDE_ARGS_ENV, ""))]

    async def _check_free(self, repo: Path, branch: str, folder: Path, name: str, session_id: str) -> None:
        if not await git.branch_name_ok(repo, branch):
            raise Refusal("bad-branch", f"{branch!r} is not a valid branch name")
        if await git.branch_exists(repo, branch):
            raise Refusal("branch-exists", f"the branch {branch} exists in {repo}; nothing was overwritten: give "
                          "another --name or --branch", branch=branch)
        if folder.exists():
            raise Refusal("worktree-exists", f"{folder} exists; nothing was overwritten: give another --name",
                          worktree=str(folder))
        live = await trio.to_thread.run_sync(self.places.live)
        if session_id in live or any(place.name == name for place in live.values()):
            raise Refusal("session-exists", f"a session named {name!r} exists; end it (`router end {name}`) or give "
                          "another --name")
        if self.router.is_open(session_id) or (self.host is not None and
                                               await self.host.store.call(self.host.store.sessions.get, session_id)):
            raise Refusal("session-exists", f"a session {session_id!r} exists already; give another --name")

    async def _start(self, place: Place, argv: list[str] | None) -> None:
        if place.claude_session is not None:
            assert argv is not None and place.tmux is not None
            await tmux.new_session(place.tmux, place.worktree, [*argv, "--session-id", place.claude_session],
                                   self.env)
            return
        launch = await self.layer.launch("default", session=place.id)
        if isinstance(launch, Refusal):
            raise launch
        await self.router.create(place.id, launch=launch, harness=place.harness)
        if place.tmux is not None:
            assert argv is not None
            await tmux.new_session(place.tmux, place.worktree, argv, self.env)

    async def _undo(self, place: Place) -> None:
        """A session that could not start leaves nothing behind."""
        try:
            if place.tmux is not None:
                await tmux.kill_session(place.tmux)
            await git.remove_worktree(Path(place.project_path), Path(place.worktree), force=True)
            await git.delete_branch(Path(place.project_path), place.branch)
        except Refusal as refused:
            log.warning("undoing %s: %s", place.id, refused)
        await trio.to_thread.run_sync(self.places.update, place.id, lambda p: attrs.evolve(p, ended_at=_now_ms()))

    # ------------------------------------------------------------------ the first prompt

    def _prompt_later(self, place: Place) -> None:
        if self._nursery is None or place.id in self._prompting:
            return
        self._prompting.add(place.id)
        self._nursery.start_soon(self._prompt_when_ready, place, name=f"first prompt of {place.id}")

    async def _prompt_when_ready(self, place: Place) -> None:
        """Wait until the board lists the session connected, then deliver
        the first prompt through its holder, under its event id, until it
        is answered (a resend is answered from the holder's record)."""
        from wire.json import dumps, loads

        assert place.prompt is not None and place.prompt_event is not None
        body = dumps({"text": place.prompt, "eventId": place.prompt_event}).encode()
        path = f"/sessions/{quote(place.id, safe='')}/messages"
        try:
            while True:
                listing = await self.board.listing()
                entry = next((each for each in listing.sessions if each.get("id") == place.id), None)
                if entry is not None and entry.get("connected"):
                    try:
                        reached = await self.board.holder(place.id)
                        if reached is not None:
                            status, content = await self.board.forward(
                                reached, "POST", path, body, {"content-type": "application/json",
                                                              "x-router-channel": "cli"})
                            if status == 200:
                                await trio.to_thread.run_sync(
                                    self.places.update, place.id, lambda p: attrs.evolve(p, prompted=True))
                                log.info("first prompt of %s delivered: %s", place.id, loads(content.decode()))
                                return
                            log.info("first prompt of %s: %s %s; again", place.id, status, content[:200])
                    except Refusal as refused:
                        log.info("first prompt of %s: %s; again", place.id, refused)
                elif place.tmux is not None and not await tmux.has_session(place.tmux):
                    log.warning("first prompt of %s: its tmux session is gone", place.id)
                    return
                await trio.sleep(PROMPT_POLL)
        finally:
            self._prompting.discard(place.id)

    async def _prompt_now(self, place: Place) -> None:
        from router.turns.core import Answered

        assert place.prompt is not None
        reply, body = await self.router.send(place.id, place.prompt, event_id=place.prompt_event)
        if isinstance(reply, Answered):
            await trio.to_thread.run_sync(self.places.update, place.id, lambda p: attrs.evolve(p, prompted=True))
        else:
            log.warning("first prompt of %s: %s", place.id, body)

    # ------------------------------------------------------------------ diff

    async def diff(self, key: str) -> dict[str, Any]:
        place = await self.place(key)
        worktree = Path(place.worktree)
        if not worktree.is_dir():
            raise Refusal("worktree-gone", f"the worktree of {key!r} ({worktree}) was removed")
        found = await git.diff(worktree, place.base)
        return {"session": place.id, "name": place.name, "base": place.base, "branch": place.branch,
                "worktree": place.worktree, "commits": [each.to_json() for each in found.commits],
                "files": [each.to_json() for each in found.files]}

    # ------------------------------------------------------------------ end

    async def end(self, key: str, *, keep_worktree: bool = False, force: bool = False) -> dict[str, Any]:
        async with self._lock:
            return await self._end(key, keep_worktree=keep_worktree, force=force)

    async def _end(self, key: str, *, keep_worktree: bool, force: bool) -> dict[str, Any]:
        place = await trio.to_thread.run_sync(self.places.get, key)
        if place is None:
            return await self._end_plain(key)
        if place.ended_at is not None:
            raise Refusal("session-ended", f"{key!r} was ended already")
        repo, worktree = Path(place.project_path), Path(place.worktree)
        dirty = await git.dirty_paths(worktree) if worktree.is_dir() and not keep_worktree else []
        unsaved = await git.unsaved_commits(repo, place.branch) if not keep_worktree else []
        verdict = end_verdict(dirty=dirty, unsaved=unsaved, branch=place.branch, keep_worktree=keep_worktree,
                              force=force)
        if verdict.refusal is not None:
            raise verdict.refusal
        await self._stop(place)
        if verdict.remove_worktree:
            await git.remove_worktree(repo, worktree, force=force)
        if verdict.remove_branch:
            await git.delete_branch(repo, place.branch)
        ended = await trio.to_thread.run_sync(self.places.update, place.id,
                                              lambda p: attrs.evolve(p, ended_at=_now_ms()))
        assert ended is not None
        return {**ended.to_json(), "ended": True, "worktreeRemoved": verdict.remove_worktree,
                "branchRemoved": verdict.remove_branch}

    async def _stop(self, place: Place) -> None:
        if place.tmux is not None and await tmux.has_session(place.tmux):
            if place.claude_session is not None:
                await tmux.send_keys(place.tmux, "Escape")  # stop the running turn, as a person would
            await tmux.kill_session(place.tmux)
        if place.claude_session is None:
            await self._end_container(place.id)

    async def _end_container(self, session_id: str) -> None:
        if self.host is None:
            raise Refusal("no-host", "this router serves no container sessions")
        await self.router.registry.close(session_id)
        await self.host.end_session(session_id, reason="ended by `router end`")

    async def _end_plain(self, key: str) -> dict[str, Any]:
        """A session ``router new`` did not make: a container session of
        this router ends (its daemon, its workspace); anything else is
        not this router's to end."""
        if self.host is not None and await self.host.store.call(self.host.store.sessions.get, key) is not None:
            if await self.host.ended(key):
                raise Refusal("session-ended", f"{key!r} was ended already")
            await self._end_container(key)
            return {"session": key, "ended": True, "worktreeRemoved": False, "branchRemoved": False}
        raise Refusal("not-ended-here", f"{key!r} is not a session this router started; a Claude Code session you "
                      "opened yourself ends in its terminal (/exit)", session=key)
