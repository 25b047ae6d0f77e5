"""``router projects``, ``router new``, ``router end``, ``router attach``, ``router diff``.

``router projects [--json]``, ``router projects add PATH [--name NAME]``
and ``router projects remove NAME`` read and write ``projects.json`` in the
settings directory (``--settings``, else the default) themselves: no
router need run. The others ask the one ``router serve`` of this user
over its private socket (``--router NAME`` when several run), which owns
the worktrees, the tmux sessions and the container sessions:

- ``router new PROJECT [--name NAME] [--branch B] [--from REF] [--harness H]
  [--where local|container] [--prompt TEXT]`` prints the session's id,
  branch and worktree (``--json``: the whole answer);
- ``router end SESSION [--keep-worktree] [--force]`` prints what it
  removed, or the refusal saying what would be lost;
- ``router attach SESSION`` replaces itself with ``tmux attach`` on the
  session's tmux session;
- ``router diff SESSION [--json]`` prints the commits since the base, one
  line per changed file (``+added -removed path``) and the patch.

SESSION is any id ``router sessions`` lists, or a live session's name.
Exit status: 0 done; 1 refused (the refusal on stderr as ``router CMD:
CODE: sentence``); 2 a usage or connection error (no ``router serve``).
"""

from __future__ import annotations

from router._httpx import unix_transport
import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["configure", "configure_attach", "configure_diff", "configure_end", "configure_new", "run",
           "run_attach", "run_diff", "run_end", "run_new"]

DONE, REFUSED, USAGE = 0, 1, 2


class _Stop(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _say(command: str, text: str) -> None:
    print(f"router {command}: {text}", file=sys.stderr, flush=True)


def _settings(args: argparse.Namespace) -> Path:
    from router.dirs import default_settings_dir

    return Path(args.settings) if args.settings else default_settings_dir(os.environ)


# --------------------------------------------------------------------------- router projects


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", metavar="DIR", help="the settings directory (default $ROUTER_SETTINGS_DIR, "
                        "else $XDG_CONFIG_HOME/router, else ~/.config/router)")
    parser.add_argument("--json", action="store_true", help="print the projects as JSON")
    sub = parser.add_subparsers(dest="action")
    add = sub.add_parser("add", help="add a git repository (its top-level folder)")
    add.add_argument("path")
    add.add_argument("--name", help="the project's name (default: the folder's)")
    remove = sub.add_parser("remove", help="remove a project (its repository is left as it is)")
    remove.add_argument("name")
    for each in (add, remove):
        each.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print it as JSON")


def run(args: argparse.Namespace) -> int:
    import trio

    from router.errors import Refusal
    from router.worktrees.projects import add_project, load_projects, remove_project

    settings = _settings(args)
    try:
        if args.action == "add":
            project = trio.run(partial(add_project, settings, Path(args.path), args.name))
            print(json.dumps(project.to_json()) if args.json else f"added {project.name}: {project.path}")
        elif args.action == "remove":
            project = remove_project(settings, args.name)
            print(json.dumps(project.to_json()) if args.json else f"removed {project.name} ({project.path}); "
                  "the repository is untouched")
        else:
            projects = load_projects(settings)
            if args.json:
                print(json.dumps({"projects": [each.to_json() for each in projects]}))
            else:
                for each in projects:
                    print(f"{each.name}  {each.path}")
                if not projects:
                    _say("projects", "no projects yet; add one with `router projects add PATH`")
    except Refusal as refused:
        _say("projects", str(refused))
        return REFUSED
    return DONE


# --------------------------------------------------------------------------- the router serve


def _add_router(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--router", metavar="NAME", help="the `router serve` to ask, by the name `router sessions` "
                        "shows (default: the one that runs)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait (default 120)")


async def _serve_socket(command: str, named: str | None) -> str:
    from router.board.client import survey
    from router.errors import Refusal

    try:
        board = await survey(os.environ)
    except Refusal as refused:
        _say(command, str(refused))
        raise _Stop(USAGE) from None
    serving = [each for each in board.reached if each.info.get("command") == "serve"
               and (named is None or each.info.get("name") == named)]
    if len(serving) != 1:
        names = ", ".join(str(each.info.get("name")) for each in serving)
        _say(command, "no-router: no `router serve` of yours is running; start one" if not serving else
             f"ambiguous-router: {len(serving)} `router serve` run ({names}); name one with --router NAME")
        raise _Stop(USAGE)
    return str(serving[0].info["socket"])


async def _call(command: str, args: argparse.Namespace, method: str, path: str,
                body: dict[str, Any] | None = None) -> tuple[int, Any]:
    import httpx
    import trio

    from router.board.client import BASE_URL

    socket = await _serve_socket(command, args.router)
    try:
        with trio.fail_after(args.timeout):
            async with httpx.AsyncClient(transport=unix_transport(socket), timeout=None) as client:
                response = await client.request(method, BASE_URL + path, headers={"x-router-channel": "cli",
                                                                                  "content-type": "application/json"},
                                                content=None if body is None else json.dumps(body).encode())
    except trio.TooSlowError:
        _say(command, f"timeout: no answer within {args.timeout:g} s")
        raise _Stop(USAGE) from None
    except httpx.TransportError as exc:
        _say(command, f"cannot-connect: {socket}: {exc}")
        raise _Stop(USAGE) from None
    try:
        return response.status_code, response.json()
    except ValueError:
        _say(command, f"{path} answered {response.status_code} with no JSON")
        raise _Stop(USAGE) from None


def _request(command: str, args: argparse.Namespace, method: str, path: str,
             body: dict[str, Any] | None = None) -> Any:
    """The answer's JSON; raises :class:`_Stop` once stderr said why not."""
    import trio

    from router.errors import Refusal

    status, answer = trio.run(partial(_call, command, args, method, path, body))
    if status not in (200, 201) or type(answer) is not dict or "error" in answer:
        error = answer if type(answer) is dict else Refusal("not-a-router", str(answer)).to_json()
        _say(command, f"{error.get('error', 'not-a-router')}: {error.get('message', answer)}")
        if getattr(args, "json", False):
            print(json.dumps(error))
        raise _Stop(REFUSED)
    return answer


def _session_path(session: str, route: str) -> str:
    return f"/sessions/{quote(session, safe='')}/{route}"


# --------------------------------------------------------------------------- router new


def configure_new(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", help="the project (see `router projects`), by name or by its folder")
    parser.add_argument("--name", help="the session's name: its folder, branch and tmux session (default: "
                        "PROJECT-xxxxxx)")
    parser.add_argument("--branch", help="the new branch (default router/NAME); an existing one is refused")
    parser.add_argument("--from", dest="from_", metavar="REF", help="where the branch starts (default: the "
                        "project's HEAD)")
    parser.add_argument("--harness", help="what the agent is (local: claude-code, the default, or echo; "
                        "container: what its daemon runs)")
    parser.add_argument("--where", choices=["local", "container"], default="local",
                        help="local: the agent's own program in tmux (default); container: the worktree at "
                        "/workspace of a container session")
    parser.add_argument("--prompt", help="the first prompt, sent once the session is ready")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    _add_router(parser)


def run_new(args: argparse.Namespace) -> int:
    project = args.project
    if os.sep in project or project in (".", ".."):  # a folder: the listed project it is (not-a-project if none)
        project = os.path.abspath(project)
    body = {"project": project, "where": args.where}
    for key, value in (("name", args.name), ("branch", args.branch), ("from", args.from_),
                       ("harness", args.harness), ("prompt", args.prompt)):
        if value is not None:
            body[key] = value
    try:
        answer = _request("new", args, "POST", "/sessions", body)
    except _Stop as stop:
        return stop.status
    if args.json:
        print(json.dumps(answer))
    else:
        print(f"{answer['session']}: {answer['name']} ({answer['where']}, {answer['harness']}) on branch "
              f"{answer['branch']} in {answer['worktree']}")
        if answer.get("tmux"):
            print(f"attach with: router attach {answer['name']}")
    return DONE


# --------------------------------------------------------------------------- router end


def configure_end(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session (an id `router sessions` lists, or its name)")
    parser.add_argument("--keep-worktree", action="store_true", help="end the session but keep its worktree "
                        "and branch")
    parser.add_argument("--force", action="store_true", help="remove the worktree and branch even with work "
                        "that is not saved")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    _add_router(parser)


def run_end(args: argparse.Namespace) -> int:
    try:
        answer = _request("end", args, "POST", _session_path(args.session, "end"),
                          {"keepWorktree": args.keep_worktree, "force": args.force})
    except _Stop as stop:
        return stop.status
    if args.json:
        print(json.dumps(answer))
    else:
        removed = [what for what, flag in (("worktree", answer.get("worktreeRemoved")),
                                           ("branch", answer.get("branchRemoved"))) if flag]
        print(f"ended {args.session}" + (f"; removed its {' and '.join(removed)}" if removed else
                                         f"; kept {answer.get('worktree') or 'nothing'}"))
    return DONE


# --------------------------------------------------------------------------- router attach


def configure_attach(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="a local session (an id `router sessions` lists, or its name)")
    _add_router(parser)


def run_attach(args: argparse.Namespace) -> int:
    from router.errors import Refusal
    from router.worktrees.tmux import attach_argv

    try:
        place = _request("attach", args, "GET", _session_path(args.session, "place"))
    except _Stop as stop:
        return stop.status
    if not place.get("tmux"):
        _say("attach", f"not-local: {args.session} runs in a container; it has no terminal to attach to")
        return REFUSED
    try:
        argv = attach_argv(place["tmux"])
    except Refusal as refused:
        _say("attach", str(refused))
        return USAGE
    os.execv(argv[0], argv)
    return DONE  # pragma: no cover - execv does not return


# --------------------------------------------------------------------------- router diff


def configure_diff(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session (an id `router sessions` lists, or its name)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    _add_router(parser)


def run_diff(args: argparse.Namespace) -> int:
    try:
        answer = _request("diff", args, "GET", _session_path(args.session, "diff"))
    except _Stop as stop:
        return stop.status
    if args.json:
        print(json.dumps(answer))
        return DONE
    print(f"{answer['branch']} against {answer['base'][:12]}: {len(answer['commits'])} commit(s), "
          f"{len(answer['files'])} file(s)")
    for commit in answer["commits"]:
        print(f"  {commit['sha'][:12]} {commit['subject']}")
    for each in answer["files"]:
        added = "-" if each["added"] is None else each["added"]
        removed = "-" if each["removed"] is None else each["removed"]
        print(f"  +{added} -{removed} {each['path']}")
    for each in answer["files"]:
        if each["patch"]:
            print()
            print(each["patch"].rstrip("\n"))
    return DONE
