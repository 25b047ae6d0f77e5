"""What the API's routes share: one typed object kept on the app.

:func:`router.api.app.make_app` builds one :class:`ApiContext` and keeps it
in ``app.extensions`` under :data:`KEY`; a route reads it with
:func:`current` (inside a request, or a streamed response's generator,
which Quart runs in the request's app context). Nothing here is a global:
two apps in one process (the TCP API and the private socket) each have
their own.
"""

from __future__ import annotations

from typing import Any, Callable, Final

import attrs
from quart import current_app
from quart_trio import QuartTrio

from router.api.config import ApiConfig  # its home: a module without Quart, for the private socket
from router.api.streams import StreamSlots
from router.board.service import LocalBoard
from router.notify.routes import KEY as NOTIFICATIONS_KEY
from router.plugins.layer import PluginLayer
from router.turns.router import TurnRouter

__all__ = ["ApiConfig", "ApiContext", "KEY", "current", "of"]

#: The key of the context in ``app.extensions``.
KEY: Final = "router.api"


@attrs.frozen(kw_only=True)
class ApiContext:
    """The parts of the router the routes reach, and the door's settings."""

    router: TurnRouter
    layer: PluginLayer
    config: ApiConfig
    #: The ``Host`` values to accept (known once the port is bound).
    allowed_hosts: Callable[[], set[str]]
    #: The bearer token every route but the open ones takes (None: none, as
    #: on the private socket, whose directory is the guard).
    token: str | None = None
    #: Every local router's sessions, and forwarding to their holders.
    board: LocalBoard | None = None
    #: Sessions in git worktrees (``router.worktrees.Worktrees``; ``router
    #: serve`` only): :mod:`router.api.routes.places`.
    worktrees: Any = None
    #: The live streams open, per credential.
    streams: StreamSlots = attrs.field(default=attrs.Factory(lambda self: StreamSlots(self.config.max_streams),
                                                              takes_self=True))

    def install(self, app: QuartTrio) -> None:
        app.extensions[KEY] = self
        # How the notification routes (router.notify.routes) find the
        # router's notifications: read at each request, as they may start
        # after the app is made.
        app.extensions[NOTIFICATIONS_KEY] = lambda: getattr(self.router, "notifications", None)


def current() -> ApiContext:
    """The context of the app serving this request."""
    return of(current_app)


def of(app: QuartTrio) -> ApiContext:
    """The context kept on ``app`` (outside a request: a server's statistics)."""
    context = app.extensions[KEY]
    assert isinstance(context, ApiContext)
    return context
