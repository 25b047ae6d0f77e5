"""The mod link: the socket server a Claude Code session's mod talks to, and a
simulator of that mod.

Spec: ``hooks/mod-protocol.ts`` of claude-envoy 1.19.0; the wire itself is :mod:`wire.mod`.
``core`` is the sans-IO state, ``server`` the Trio/Hypercorn layer, ``sim``
the mod simulator, ``cli`` the ``router modlink`` command.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.modlink.core": "CallOutcome LinkCore LinkState SubscriberQueue",
    "router.modlink.errors": (
        "ModBadResult ModCallError ModCallTimeout ModLinkClosed "
        "ModLinkError ModLinkRefused ModSubscriberOverflow"
    ),
    "router.modlink.server": "ModLink Subscription probe_health",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
