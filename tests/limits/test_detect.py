"""Reading the usage limit from what sessions show (``router.limits.detect``):
the adapter's and the mod's events, and Claude Code's sentence with its
reset in minutes, in the zone it names."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.limits import LimitSeen, is_limit_reason, limit_of_adapter_event, limit_of_mod_event, limit_of_text
from router.limits.detect import UNKNOWN_RESET_MS

#: 2026-12-01T11:50:00Z in epoch ms.
NOW = int(datetime(2026, 12, 1, 11, 50, tzinfo=timezone.utc).timestamp() * 1000)


def ms(*args: int, tz=timezone.utc) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def test_the_adapter_event_and_the_reason():
    event = {"type": "raw", "value": {"type": "usage-limit", "resetsAt": 1_893_480_000_000, "rateLimitType": "five_hour"}}
    assert limit_of_adapter_event(event, NOW) == LimitSeen(resets_at=1_893_480_000_000, limit_kind="five_hour")
    assert limit_of_adapter_event({"type": "raw", "value": {"type": "usage-limit"}}, NOW) == LimitSeen(
        resets_at=NOW + UNKNOWN_RESET_MS)
    assert limit_of_adapter_event({"type": "usage", "inputTokens": 1}, NOW) is None
    assert is_limit_reason("usage-limit: You've hit your 5-hour limit") and not is_limit_reason("aborted")
    assert not is_limit_reason(None)


def test_the_mod_event():
    raw = {"kind": "usage-limit", "resetsAt": 1_796_126_113_000, "rateLimitType": "five_hour"}
    assert limit_of_mod_event(raw, NOW) == LimitSeen(resets_at=1_796_126_113_000, limit_kind="five_hour")
    assert limit_of_mod_event({"kind": "model", "model": "x"}, NOW) is None
    assert limit_of_mod_event({"kind": "usage-limit", "resetsAt": True}, NOW).resets_at == NOW + UNKNOWN_RESET_MS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # As Claude Code 2.1.332 printed it (TZ unset: UTC); the minute's end.
        ("You've hit your 5-hour limit · resets 11:55am (UTC)", ms(2026, 12, 1, 11, 56)),
        ("You've hit your 5-hour limit · resets 6:40am (UTC)", ms(2026, 12, 2, 6, 41)),  # tomorrow's
        ("You've hit your 5-hour limit · resets 3pm (America/New_York)", ms(2026, 12, 1, 20, 1)),
        ("You've hit your 5-hour limit · resets 5:30pm (Asia/Kolkata)", ms(2026, 12, 1, 12, 1)),
        ("You've hit your 5-hour limit · resets 12:10am (Pacific/Kiritimati)", ms(2026, 12, 2, 10, 11)),
        ("You've hit your 5-hour limit · resets 11:55am (Not/AZone)", ms(2026, 12, 1, 11, 56)),  # read as UTC
    ],
)
def test_the_sentence_in_several_time_zones(text, expected):
    seen = limit_of_text(text, NOW)
    assert seen is not None and seen.resets_at == expected and seen.resets_at > NOW
    assert seen.limit_kind == "five_hour"


@given(st.text(max_size=300))
def test_any_text_reads_as_a_limit_ahead_or_as_none(text):
    seen = limit_of_text(text, NOW)
    assert seen is None or NOW < seen.resets_at <= NOW + 2 * 86_400_000
