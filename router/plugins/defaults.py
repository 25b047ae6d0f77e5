"""The settings a router starts from when a settings file does not exist yet.

Safe defaults: everything runs on this machine with nothing else installed.
The echo harness (the in-process daemon with the echo adapter) is switched
on and routed to; both limit checks are on, with no limits set (so nothing
is refused until a person sets a limit); search is the harness's own (the
broker serves none: nothing leaves the machine until a person points
``searxng-url`` at a SearXNG); both channels are on, so ``router send`` and
the page work on a first start. The launcher is the in-process echo
daemon (``router serve --launcher`` names another for one run).

These are the only core lines that name shipped modules, and only as data:
no core code branches on a module's name.
"""

from __future__ import annotations

from typing import Any, Final, Mapping

PLUGINS: Final[Mapping[str, Any]] = {
    "plugins": {
        "harness": ["echo"],
        "usage-source": ["frames", "claude-transcript"],
        "limit-check": ["token-limit", "daily-quota"],
        "search-source": "harness-builtin",
        "channel": ["cli", "webui"],
        "launcher": "in-process",
    },
    "options": {},
}

ROUTES: Final[Mapping[str, Any]] = {
    "models": {"echo": {"provider": "echo"}},
    "instances": {"default": {"harness": "echo", "model": "echo", "thinking": "off"}},
}

LIMITS: Final[Mapping[str, Any]] = {"limits": {}}

#: No rules; an ask waits two minutes for a person (router.asks).
ASKS: Final[Mapping[str, Any]] = {"asks": {"deadline": 120, "rules": []}}

#: file name -> the document used while that file does not exist.
DOCUMENTS: Final[Mapping[str, Mapping[str, Any]]] = {
    "plugins.json": PLUGINS,
    "routes.json": ROUTES,
    "limits.json": LIMITS,
    "asks.json": ASKS,
}
