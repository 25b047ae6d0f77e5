"""Sessions in git worktrees (:mod:`router.worktrees`, docs/sessions.md).

=========================================  ==============================================
``GET /projects``                          ``{projects: [{name, path}]}``
``POST /sessions {project, name?,``        start a session in a new worktree (201):
``branch?, from?, harness?, where?,``      ``{session, name, project, branch, base,
``prompt?}``                               worktree, where, harness, tmux?}``
``GET /sessions/<id>/diff``                ``{session, base, branch, commits: [{sha,
                                           subject}], files: [{path, added, removed,
                                           patch}]}``
``POST /sessions/<id>/end``                ``{keepWorktree?, force?}`` → 200 ``{session,
                                           ended, worktreeRemoved, branchRemoved}``; 409
                                           ``{error: "unsaved-work", message}`` saying
                                           what would be lost
``GET /sessions/<id>/place``               the place's record (``router attach``)
=========================================  ==============================================

``POST /sessions`` is :mod:`.sessions`' route: a body with ``project`` is
handed to :func:`new_session` here. ``<id>`` is any id the board lists,
URL-encoded (``/`` included). Only ``router serve`` starts sessions in
worktrees; another router refuses ``no-worktrees``.
"""

from __future__ import annotations

from quart import Blueprint, Response, request

from router.api.bodies import EndBody, NewSessionBody, read_body
from router.api.context import current
from router.api.responses import json_response
from router.errors import Refusal
from router.worktrees import NewRequest, Worktrees

__all__ = ["blueprint", "new_session"]

blueprint = Blueprint("places", __name__)


def _worktrees() -> Worktrees:
    worktrees = current().worktrees
    if worktrees is None:
        raise Refusal("no-worktrees", "this router does not start sessions in worktrees; `router serve` does "
                      "(`router new` finds it)")
    assert isinstance(worktrees, Worktrees)
    return worktrees


async def new_session(raw: bytes) -> Response:
    """``POST /sessions`` with ``project``: a new session in a worktree."""
    body = read_body(raw, NewSessionBody, "POST /sessions")
    made = await _worktrees().new(NewRequest(project=body.project, name=body.name, branch=body.branch,
                                             from_=body.from_, harness=body.harness, where=body.where or "local",
                                             prompt=body.prompt))
    return json_response(made, 201)


@blueprint.get("/projects")
async def projects() -> Response:
    return json_response({"projects": [each.to_json() for each in await _worktrees().projects()]})


@blueprint.get("/sessions/<path:session>/diff")
async def diff(session: str) -> Response:
    return json_response(await _worktrees().diff(session))


@blueprint.get("/sessions/<path:session>/place")
async def place(session: str) -> Response:
    return json_response((await _worktrees().place(session)).to_json())


@blueprint.post("/sessions/<path:session>/end")
async def end(session: str) -> Response:
    body = read_body(await request.get_data(cache=False), EndBody, "POST /sessions/<id>/end")
    return json_response(await _worktrees().end(session, keep_worktree=body.keep_worktree, force=body.force))
