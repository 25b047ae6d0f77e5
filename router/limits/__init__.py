"""The provider's usage limits: parking every session of an account at its
limit and resuming each once at the reset (``docs/limits.md``)."""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.limits.detect": (
        "LIMIT_REASON LimitSeen is_limit_reason limit_of_adapter_event "
        "limit_of_mod_event limit_of_text"
    ),
    "router.limits.runner": "ParkTimer wall_ms",
    "router.limits.schedule": "DELAY_MS JITTER_MS STAGGER_MS Park ParkBook ParkBookStatistics Parked Resume",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
