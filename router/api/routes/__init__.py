"""The API's routes: one Quart Blueprint per area, each a module here.

=====================  ==========================================================
:mod:`.health`         ``GET /healthz``
:mod:`router.api.shell` ``GET /`` (the page), its manifest, worker and icons;
                       ``POST /render``
:mod:`.sessions`       ``GET|POST /sessions``, a session's messages, live view,
                       abort, resume, cancel-park
:mod:`.board`          ``GET /board/live``
:mod:`.asks`           ``GET /asks``, ``POST /asks/<id>``,
                       ``POST /sessions/<id>/asks/<ask>``
:mod:`.places`         ``GET /projects``, ``POST /sessions {project, ...}``,
                       ``GET /sessions/<id>/diff``, ``POST /sessions/<id>/end``:
                       sessions in git worktrees (docs/sessions.md)
=====================  ==========================================================

The notification routes (``/notifications``, ``/presence``, ``POST
/sessions/<id>/notify``) are :mod:`router.notify.routes`'s Blueprint,
named in :data:`BLUEPRINTS` too (docs/notifications.md, "HTTP").

How to add a route
------------------

1. Write a module here (or add to the area's) with a Blueprint::

       from quart import Blueprint, Response
       from router.api.bodies import read_body          # a POST's body
       from router.api.context import current           # router, layer, board, config
       from router.api.responses import json_response

       blueprint = Blueprint("things", __name__)

       @blueprint.get("/things")
       async def things() -> Response:
           return json_response({"things": await current().router.list()})

2. Name it in :data:`BLUEPRINTS` below (the order does not matter; a path
   must be unique across them).
3. Refuse by raising :class:`router.errors.Refusal`: the app's one handler
   answers ``{"error": code, "message": ..., ...data}`` at the status
   :data:`router.api.responses.STATUS` names for the code (add the code
   there with its status; a code not there answers 409). Never build an
   error response by hand.
4. A ``POST`` body is a frozen attrs class in :mod:`router.api.bodies`
   (added to its converter), read with ``read_body(await
   request.get_data(cache=False), TheBody, "POST /things")``; the code after
   it trusts the types.
5. The door (:mod:`router.api.guards`) already checks every route: the
   ``Host``, the token (add the path to ``OPEN_ROUTES`` only if it holds no
   data), JSON on ``POST``. A stream answers with
   :data:`router.api.forward.SSE_HEADERS` and ``response.timeout = None``,
   and takes a slot from the app's stream cap (:mod:`router.api.streams`).
6. Test it in ``tests/api/`` against the real server (the ``api`` fixture),
   and list it in docs/turns.md, "The HTTP API".
"""

from __future__ import annotations

from typing import Final

from quart import Blueprint

from router.api import shell
from router.api.routes import asks, board, health, places, sessions
from router.notify.routes import blueprint as notify_blueprint

__all__ = ["BLUEPRINTS"]

#: Every Blueprint of the API, registered by :func:`router.api.app.make_app`.
BLUEPRINTS: Final[tuple[Blueprint, ...]] = (health.blueprint, shell.blueprint, sessions.blueprint, board.blueprint,
                                            asks.blueprint, places.blueprint, notify_blueprint)
