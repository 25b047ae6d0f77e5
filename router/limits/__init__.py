"""The provider's usage limits: parking every session of an account at its
limit and resuming each once at the reset (``docs/limits.md``)."""

from router.limits.detect import (
    LIMIT_REASON,
    LimitSeen,
    is_limit_reason,
    limit_of_adapter_event,
    limit_of_mod_event,
    limit_of_text,
)
from router.limits.runner import ParkTimer, wall_ms
from router.limits.schedule import DELAY_MS, JITTER_MS, STAGGER_MS, Park, ParkBook, Parked, Resume

__all__ = [
    "LIMIT_REASON", "LimitSeen", "is_limit_reason", "limit_of_adapter_event", "limit_of_mod_event", "limit_of_text",
    "DELAY_MS", "JITTER_MS", "STAGGER_MS", "Park", "ParkBook", "ParkTimer", "Parked", "Resume", "wall_ms"]
