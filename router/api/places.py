"""The API's routes for sessions in git worktrees (:mod:`router.worktrees`).

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

``POST /sessions`` is the app's route (a body without ``project`` launches
a container session as before); it hands a body with ``project`` to
:func:`new_from_body`. ``<id>`` is any id the board lists, URL-encoded (a
``/`` in it included). The guards (``Host``, token, content type) are the
app's, for every route here too.
"""

from __future__ import annotations

from typing import Any, Final, Mapping

from quart import Blueprint, Response, request

from router.errors import Refusal
from router.worktrees import NewRequest, Worktrees
from wire.json import JsonError, dumps, loads

__all__ = ["PLACE_STATUS", "make_blueprint", "new_from_body"]

#: Refusal code -> HTTP status for these routes (others: 409).
PLACE_STATUS: Final[Mapping[str, int]] = {
    "bad-body": 400, "bad-name": 400, "bad-where": 400, "bad-branch": 400, "unknown-ref": 400,
    "bad-session-id": 400, "unknown-harness": 400, "not-a-repository": 400,
    "unknown-project": 404, "not-a-project": 404, "unknown-place": 404, "worktree-gone": 410,
    "git-failed": 500, "tmux-failed": 500, "bad-projects": 500,
}

_NEW_FIELDS: Final = {"project", "name", "branch", "from", "harness", "where", "prompt"}


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status=status, content_type="application/json")


def _refused(refusal: Refusal) -> Response:
    return _json({**refusal.data, "error": refusal.code, "message": refusal.message},
                 PLACE_STATUS.get(refusal.code, 409))


def _object(raw: bytes) -> Any:
    try:
        return loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, JsonError, RecursionError):
        return None


async def new_from_body(worktrees: Worktrees, raw: bytes) -> Response | None:
    """``POST /sessions`` with ``project`` in its body: a new session in a
    worktree; None when the body has no ``project`` (the app's launch)."""
    body = _object(raw)
    if type(body) is not dict or "project" not in body:
        return None
    unknown = sorted(set(body) - _NEW_FIELDS)
    if unknown or any(type(value) is not str for value in body.values()):
        return _refused(Refusal("bad-body", "POST /sessions takes {project, name?, branch?, from?, harness?, "
                                "where?, prompt?}, each a string" + (f"; unknown: {', '.join(unknown)}" if unknown
                                                                      else "")))
    try:
        made = await worktrees.new(NewRequest(project=body["project"], name=body.get("name"),
                                              branch=body.get("branch"), from_=body.get("from"),
                                              harness=body.get("harness"), where=body.get("where", "local"),
                                              prompt=body.get("prompt")))
    except Refusal as refusal:
        return _refused(refusal)
    return _json(made, 201)


def make_blueprint(worktrees: Worktrees) -> Blueprint:
    blueprint = Blueprint("places", __name__)

    @blueprint.get("/projects")
    async def projects() -> Response:
        try:
            return _json({"projects": [each.to_json() for each in await worktrees.projects()]})
        except Refusal as refusal:
            return _refused(refusal)

    @blueprint.get("/sessions/<path:session>/diff")
    async def diff(session: str) -> Response:
        try:
            return _json(await worktrees.diff(session))
        except Refusal as refusal:
            return _refused(refusal)

    @blueprint.get("/sessions/<path:session>/place")
    async def place(session: str) -> Response:
        try:
            return _json((await worktrees.place(session)).to_json())
        except Refusal as refusal:
            return _refused(refusal)

    @blueprint.post("/sessions/<path:session>/end")
    async def end(session: str) -> Response:
        body = _object(await request.get_data(cache=False))
        if type(body) is not dict or set(body) - {"keepWorktree", "force"} or \
                any(type(value) is not bool for value in body.values()):
            return _refused(Refusal("bad-body", "POST /sessions/<id>/end takes {keepWorktree?, force?}, each a "
                                    "boolean"))
        try:
            return _json(await worktrees.end(session, keep_worktree=body.get("keepWorktree", False),
                                             force=body.get("force", False)))
        except Refusal as refusal:
            return _refused(refusal)

    return blueprint
