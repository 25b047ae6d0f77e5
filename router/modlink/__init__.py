"""The mod link: the socket server a Claude Code session's mod talks to, and a
simulator of that mod.

Spec: ``hooks/mod-protocol.ts`` of claude-envoy 1.19.0; the wire itself is :mod:`wire.mod`.
``core`` is the sans-IO state, ``server`` the Trio/Hypercorn layer, ``sim``
the mod simulator, ``cli`` the ``router modlink`` command.
"""

from router.modlink.core import CallOutcome, LinkCore, LinkState, SubscriberQueue
from router.modlink.errors import (
    ModBadResult,
    ModCallError,
    ModCallTimeout,
    ModLinkClosed,
    ModLinkError,
    ModLinkRefused,
    ModSubscriberOverflow,
)
from router.modlink.server import ModLink, Subscription, probe_health

__all__ = [
    "CallOutcome",
    "LinkCore",
    "LinkState",
    "ModBadResult",
    "ModCallError",
    "ModCallTimeout",
    "ModLink",
    "ModLinkClosed",
    "ModLinkError",
    "ModLinkRefused",
    "ModSubscriberOverflow",
    "SubscriberQueue",
    "Subscription",
    "probe_health",
]
