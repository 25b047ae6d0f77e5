"""What a session shows at the provider's usage limit, read without I/O.

Two session kinds, two ways the limit shows (docs/limits.md has what the
real Claude Code 2.1.332 prints and posts):

- **A container session** running the ``claude-code`` adapter: an adapter
  event ``{"type": "raw", "value": {"type": "usage-limit", "resetsAt": <epoch
  ms>, "rateLimitType": ...}}`` (:func:`limit_of_adapter_event`), then the
  operation settles ``unanswered`` with a reason that starts
  ``usage-limit:`` (:func:`is_limit_reason`): that operation is kept.
- **A local (Claude Code) session**, through the router's mod: an event
  ``{"kind": "usage-limit", "resetsAt": <epoch ms>, "rateLimitType"}``
  (:func:`limit_of_mod_event`), posted when the session's measure reports a
  rate-limit window at 100 % with its reset. A mod that does not post it
  still shows Claude Code's own answer, a ``response`` row from the model
  ``<synthetic>`` reading ``You've hit your 5-hour limit · resets 6:40am
  (UTC)``: :func:`limit_of_text` reads its reset (minutes only, in the
  zone it names) as the next such minute's end.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

__all__ = [
    "LIMIT_REASON",
    "UNKNOWN_RESET_MS",
    "LimitSeen",
    "is_limit_reason",
    "limit_of_adapter_event",
    "limit_of_mod_event",
    "limit_of_text",
]

#: The reason prefix the ``claude-code`` adapter settles a limited turn with
#: (``router.daemon.adapters.claude_code.USAGE_LIMIT_REASON``; the daemon
#: and this side never import each other, so the word is written twice).
LIMIT_REASON: Final = "usage-limit"
#: How long a limit with no reset parks its account (ours: the provider's
#: shortest window is five hours; a quarter hour retries well before it,
#: and a retry into the limit parks again).
UNKNOWN_RESET_MS: Final = 15 * 60 * 1000

_TEXT: Final = re.compile(
    r"hit your (?P<what>[^·]*?)limit\s*·\s*resets\s+(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>am|pm)"
    r"(?:\s*\((?P<zone>[^)]+)\))?",
    re.IGNORECASE,
)


@attrs.frozen(kw_only=True)
class LimitSeen:
    """A session met its account's usage limit. ``resets_at`` is epoch ms."""

    resets_at: int
    limit_kind: str = ""


def is_limit_reason(reason: object) -> bool:
    """Whether an operation's ``unanswered`` reason is the usage limit's."""
    return type(reason) is str and reason.startswith(LIMIT_REASON + ":")


def _limit(resets: object, kind: object, now: int) -> LimitSeen:
    ok = type(resets) in (int, float) and resets > 0  # type: ignore[operator]
    return LimitSeen(resets_at=int(resets) if ok else now + UNKNOWN_RESET_MS,  # type: ignore[call-overload]
                     limit_kind=kind if type(kind) is str else "")


def limit_of_adapter_event(event: Any, now: int) -> LimitSeen | None:
    """A container adapter event: the limit, when it is ``usage-limit``."""
    if type(event) is not dict or event.get("type") != "raw":
        return None
    value = event.get("value")
    if type(value) is not dict or value.get("type") != "usage-limit":
        return None
    return _limit(value.get("resetsAt"), value.get("rateLimitType"), now)


def limit_of_mod_event(raw: Any, now: int) -> LimitSeen | None:
    """A mod event the link passed through raw: the limit, when it is
    ``usage-limit``."""
    if type(raw) is not dict or raw.get("kind") != "usage-limit":
        return None
    return _limit(raw.get("resetsAt"), raw.get("rateLimitType"), now)


def limit_of_text(text: str, now: int) -> LimitSeen | None:
    """Claude Code's sentence at the limit (``You've hit your 5-hour limit ·
    resets 6:40am (UTC)``): the end of the next minute it names, in the
    zone it names (an IANA name or ``UTC``; UTC when it names none or one
    this machine does not know), after ``now`` (epoch ms). The minute's end,
    because the sentence drops the seconds: resuming a little late costs
    less than resuming into the limit."""
    match = _TEXT.search(text)
    if match is None:
        return None
    hour, minute = int(match["hour"]) % 12, int(match["minute"] or 0)
    if match["half"].lower() == "pm":
        hour += 12
    if hour > 23 or minute > 59:
        return None
    zone: Any = timezone.utc
    if match["zone"] and match["zone"].strip().upper() != "UTC":
        try:
            zone = ZoneInfo(match["zone"].strip())
        except (ZoneInfoNotFoundError, ValueError):
            zone = timezone.utc
    here = datetime.fromtimestamp(now / 1000, tz=zone)
    at = here.replace(hour=hour, minute=minute, second=0, microsecond=0) + timedelta(minutes=1)
    if at.timestamp() * 1000 <= now:
        at = (at - timedelta(minutes=1) + timedelta(days=1)).replace(hour=hour, minute=minute) + timedelta(minutes=1)
    kind = "five_hour" if "5-hour" in match["what"] else ("seven_day" if "weekly" in match["what"].lower() else "")
    return LimitSeen(resets_at=int(at.timestamp() * 1000), limit_kind=kind)
