"""The HTTP API: a Quart-Trio app over the user-turn router.

Routes (JSON unless said otherwise; every refusal is ``{"error": code,
"message": sentence, ...data}`` with the status
:data:`router.api.responses.STATUS` names for its code):

=======================================  ==================================================
``GET /healthz``                         ``{"ok": true}``
``GET /``                                the page: the live view and a send box (HTML)
``GET /sessions``                        the board: ``{"sessions": [{id, kind, state, harness,
                                         model?, cwd?, lastActivity, router, ...}], skipped?}``
                                         (``?scope=router``: this router's own only;
                                         ``?scope=unshared``: but a cluster's shared ones)
``GET /board/live``                      server-sent events: the board's snapshot, then
                                         each session that appears, changes or goes
``POST /sessions {id?, instance?}``      create a container session (201)
``POST /sessions/<id>/messages``         ``{text, eventId?, kind?, messageId?, wait?}`` →
                                         the delivery's answer
``GET /sessions/<id>/messages``          ``{session, kind, messages}``
``GET /sessions/<id>/live``              server-sent events: a snapshot, then live items
``POST /sessions/<id>/abort``            ``{operationId?}`` → ``{session, aborted}``
``POST /sessions/<id>/cancel-park``      ``{}`` → ``{session, cancelled}``: end a park
                                         (the provider's usage limit; docs/limits.md)
``POST /sessions/<id>/resume``           ``{}`` → ``{session, resumed}``: a session a
                                         limit stopped takes deliveries again
``GET /asks``, ``POST /asks/<ask>``      permission asks (:mod:`router.api.routes.asks`)
``POST /sessions/<id>/asks/<ask>``       ``{decision}``: answer a permission ask of the
                                         session, forwarded to the router holding it
=======================================  ==================================================

The app is built from parts, each a module of this package:

- :mod:`router.api.context`: what the routes share (:class:`ApiContext`,
  kept on the app; :func:`~router.api.context.current` inside a request);
- :mod:`router.api.routes`: the Blueprints, one per area (how to add a
  route is said there);
- :mod:`router.api.guards`: the door (``Host``, token, content type) and
  the error handlers, one for every :class:`~router.errors.Refusal`;
- :mod:`router.api.responses`: the status table and the JSON answers;
- :mod:`router.api.bodies`: the request bodies and their converter;
- :mod:`router.api.dispatch`, :mod:`router.api.forward`: the plug-in
  layer's channels, and forwarding to the router that holds a session;
- :mod:`router.api.events`: the server-sent event streams.

A delivery's answer (``POST .../messages``): 200 with the answer
(``status`` ``delivered`` or ``dropped``, ``fromRecord``, and ``reply``
when ``wait`` asked for a container session's result); 503 with the
``eventId`` when it went unanswered (resend the same ``eventId``); a
refusal otherwise.
"""

from __future__ import annotations

from typing import Any, Callable

from quart_trio import QuartTrio

from router.api import guards
from router.api.context import ApiConfig, ApiContext
from router.api.dispatch import CHANNEL_HEADER, DEFAULT_CHANNEL
from router.api.responses import STATUS, status_of
from router.api.routes import BLUEPRINTS
from router.board.service import LocalBoard
from router.plugins.layer import PluginLayer
from router.turns.router import TurnRouter

__all__ = ["ApiConfig", "CHANNEL_HEADER", "DEFAULT_CHANNEL", "STATUS", "make_app", "status_of"]


def make_app(router: TurnRouter, layer: PluginLayer, config: ApiConfig, allowed_hosts: Callable[[], set[str]], *,
             token: str | None = None, board: LocalBoard | None = None, worktrees: Any = None) -> QuartTrio:
    """The app. ``allowed_hosts()`` names the ``Host`` values to accept
    (known once the port is bound); ``token``, when given, is required on
    every route but :data:`router.api.guards.OPEN_ROUTES`; ``board``, when
    given, lists every local router's sessions and forwards to their
    holders; ``worktrees`` (a :class:`router.worktrees.Worktrees`), when
    given, starts and ends sessions in git worktrees
    (:mod:`router.api.routes.places`)."""
    app = QuartTrio("router.api")
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = 60
    ApiContext(router=router, layer=layer, config=config, allowed_hosts=allowed_hosts, token=token,
               board=board, worktrees=worktrees).install(app)
    guards.install(app)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    return app
