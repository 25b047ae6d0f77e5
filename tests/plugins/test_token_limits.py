"""token-limit and daily-quota, called as the core calls them."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from router.plugins.loader import Loader
from router.errors import Refusal

loader = Loader(log=lambda entry: pytest.fail(str(entry)))
loader.load({"limit-check": ["token-limit", "daily-quota"]}, only=["limit-check"])
TOKEN = loader.module("limit-check", "token-limit").module
DAILY = loader.module("limit-check", "daily-quota").module

UTC = dt.timezone.utc


def usage(i=0, o=0, cc=0, cr=0):
    return {"input": i, "output": o, "cache_creation": cc, "cache_read": cr}


def rec(at: str, use, **who):
    base = {"instance": "coder", "provider": "anthropic", "model": "opus", "account": None}
    return {**base, **who, "at": at, "usage": use}


def args(limits, records, subject=None, now="2026-03-01T00:00:00Z"):
    return {"limits": limits, "records": records, "now": now,
            "subject": subject or {"instance": "coder", "provider": "anthropic",
                                   "model": "opus", "account": None}}


# --------------------------------------------------------------------------- token-limit


def test_counts_all_four_kinds_since_since_and_unknown_turns_apart() -> None:
    limits = {"tokens": {"instances": {"coder": {"limit": 1000, "since": "2026-02-01T00:00:00Z"}}}}
    records = [
        rec("2026-01-31T23:59:59Z", usage(500)),         # before since: not counted
        rec("2026-02-01T00:00:00Z", usage(1, 2, 3, 4)),  # at since: counted
        rec("2026-02-02T00:00:00Z", usage(10, 20, 30, 40)),
        rec("2026-02-03T00:00:00Z", None),               # unknown turn
        rec("2026-02-03T00:00:00Z", usage(100), instance="other"),
        rec("not a time", usage(100)),                    # unreadable time: unknown
    ]
    [entry] = TOKEN.report(args(limits, records))
    assert entry == {
        "path": ["tokens", "instances", "coder"], "limit": 1000, "since": "2026-02-01T00:00:00Z",
        "count": 110, "kinds": {"input": 11, "output": 22, "cache_creation": 33, "cache_read": 44},
        "unknown_turns": 2,
    }
    assert TOKEN.may_launch(args(limits, records)) == {"allow": True}
    assert TOKEN.must_stop(args(limits, records)) == {"stop": False}


def test_a_reset_moves_the_count_window() -> None:
    records = [rec("2026-02-10T00:00:00Z", usage(900)), rec("2026-02-20T00:00:00Z", usage(200))]
    before = {"tokens": {"instances": {"coder": {"limit": 1000, "since": "2026-02-01T00:00:00Z"}}}}
    after = {"tokens": {"instances": {"coder": {"limit": 1000, "since": "2026-02-15T00:00:00Z"}}}}
    hit = TOKEN.may_launch(args(before, records))
    assert hit == {"allow": False, "hit": {"path": ["tokens", "instances", "coder"],
                                           "limit": 1000, "count": 1100, "unknown_turns": 0}}
    assert TOKEN.must_stop(args(before, records))["stop"] is True
    assert TOKEN.may_launch(args(after, records)) == {"allow": True}


def test_at_the_limit_launches_stop() -> None:
    limits = {"tokens": {"providers": {"anthropic": {"limit": 100, "since": "2026-01-01T00:00:00Z"}}}}
    assert TOKEN.may_launch(args(limits, [rec("2026-02-01T00:00:00Z", usage(99))]))["allow"]
    assert not TOKEN.may_launch(args(limits, [rec("2026-02-01T00:00:00Z", usage(100))]))["allow"]


def test_models_and_keys_match_their_subjects() -> None:
    limits = {"tokens": {
        "models": {"anthropic": {"opus": {"limit": 10, "since": "2026-01-01T00:00:00Z"}}},
        "keys": {"team": {"limit": 10, "since": "2026-01-01T00:00:00Z"}},
    }}
    records = [rec("2026-02-01T00:00:00Z", usage(50), model="sonnet"),
               rec("2026-02-01T00:00:00Z", usage(50), account="other-team")]
    # opus saw 50 of other-team's tokens; "team" saw none.
    answer = TOKEN.may_launch(args(limits, records))
    assert answer["hit"]["path"] == ["tokens", "models", "anthropic", "opus"]
    sonnet = {"instance": "coder", "provider": "anthropic", "model": "sonnet", "account": "team"}
    assert TOKEN.may_launch(args(limits, records, subject=sonnet)) == {"allow": True}
    report = TOKEN.report(args(limits, records))
    assert [e["path"][1] for e in report] == ["models", "keys"]
    assert report[1]["count"] == 0


def test_a_key_limit_is_not_enforced_while_no_record_names_an_account() -> None:
    limits = {"tokens": {"keys": {"team": {"limit": 10, "since": "2026-01-01T00:00:00Z"}}}}
    [entry] = TOKEN.report(args(limits, [rec("2026-02-01T00:00:00Z", usage(5))]))
    assert "not_enforced" in entry


@pytest.mark.parametrize("limits", [
    {"tokens": []},
    {"tokens": {"instances": {"coder": {"limit": "ten", "since": "2026-01-01T00:00:00Z"}}}},
    {"tokens": {"instances": {"coder": {"limit": 10}}}},
    {"tokens": {"models": {"anthropic": {"limit": 10, "since": "2026-01-01T00:00:00Z"}}}},
])
def test_a_limit_it_cannot_read_raises_a_coded_error(limits) -> None:
    with pytest.raises(Refusal) as caught:
        TOKEN.report(args(limits, []))
    assert caught.value.code == "invalid-limit"


# --------------------------------------------------------------------------- daily-quota


def daily(reset: str, zone: str, limit=100, since="2020-01-01T00:00:00Z"):
    return {"tokens": {"daily": {"max": {"limit": limit, "since": since, "reset": reset,
                                         "time_zone": zone}}}}


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@pytest.mark.parametrize(
    "zone, reset, now, start",
    [
        # Chicago, winter (UTC-6): 05:00 local is 11:00 UTC.
        ("America/Chicago", "05:00", "2026-01-15T10:59:59Z", "2026-01-14T11:00:00+00:00"),
        ("America/Chicago", "05:00", "2026-01-15T11:00:00Z", "2026-01-15T11:00:00+00:00"),
        # Chicago, summer (UTC-5): 05:00 local is 10:00 UTC.
        ("America/Chicago", "05:00", "2026-07-15T10:00:00Z", "2026-07-15T10:00:00+00:00"),
        # Tokyo (UTC+9, no DST): 00:00 local is 15:00 UTC the day before.
        ("Asia/Tokyo", "00:00", "2026-03-08T14:59:59Z", "2026-03-07T15:00:00+00:00"),
        ("Asia/Tokyo", "00:00", "2026-03-08T15:00:00Z", "2026-03-08T15:00:00+00:00"),
        # Chicago springs forward on 2026-03-08 at 02:00 CST -> 03:00 CDT.
        # A 05:00 reset: the day before starts at 11:00 UTC, that day at 10:00.
        ("America/Chicago", "05:00", "2026-03-08T09:59:59Z", "2026-03-07T11:00:00+00:00"),
        ("America/Chicago", "05:00", "2026-03-08T10:00:00Z", "2026-03-08T10:00:00+00:00"),
        # A 02:30 reset does not exist that night: read with the offset before
        # the change (CST), 02:30 CST = 08:30 UTC = 03:30 CDT.
        ("America/Chicago", "02:30", "2026-03-08T08:29:59Z", "2026-03-07T08:30:00+00:00"),
        ("America/Chicago", "02:30", "2026-03-08T08:30:00Z", "2026-03-08T08:30:00+00:00"),
        # Falls back on 2026-11-01 at 02:00 CDT -> 01:00 CST; 01:30 happens
        # twice (06:30 and 07:30 UTC): the day starts at the first.
        ("America/Chicago", "01:30", "2026-11-01T06:29:59Z", "2026-10-31T06:30:00+00:00"),
        ("America/Chicago", "01:30", "2026-11-01T06:30:00Z", "2026-11-01T06:30:00+00:00"),
        ("America/Chicago", "01:30", "2026-11-01T07:45:00Z", "2026-11-01T06:30:00+00:00"),
        # ... and the next day starts at 01:30 CST = 07:30 UTC: 25 hours later.
        ("America/Chicago", "01:30", "2026-11-02T07:30:00Z", "2026-11-02T07:30:00+00:00"),
        # Berlin springs forward on 2026-03-29 at 02:00 CET -> 03:00 CEST.
        ("Europe/Berlin", "00:00", "2026-03-29T21:59:59Z", "2026-03-28T23:00:00+00:00"),
        ("Europe/Berlin", "00:00", "2026-03-29T22:00:00Z", "2026-03-29T22:00:00+00:00"),
    ],
)
def test_day_start(zone: str, reset: str, now: str, start: str) -> None:
    hours, minutes = map(int, reset.split(":"))
    got = DAILY.day_start(at(now.replace("Z", "+00:00")), dt.time(hours, minutes),
                          zoneinfo.ZoneInfo(zone))
    assert got == at(start)


def test_the_quota_counts_from_the_day_start_across_a_dst_change() -> None:
    limits = daily("05:00", "America/Chicago", limit=100)
    records = [
        rec("2026-03-08T09:59:00Z", usage(90), account="max"),   # the day before
        rec("2026-03-08T10:00:00Z", usage(60), account="max"),   # the new day
        rec("2026-03-08T10:30:00Z", None, account="max"),        # unknown
        rec("2026-03-08T10:31:00Z", usage(60), account="other"),
    ]
    subject = {"instance": "coder", "provider": "anthropic", "model": "opus", "account": "max"}
    just_before = args(limits, records[:1], subject, now="2026-03-08T09:59:30Z")
    assert DAILY.may_launch(just_before) == {"allow": True}
    after = args(limits, records, subject, now="2026-03-08T11:00:00Z")
    assert DAILY.may_launch(after) == {"allow": True}
    [entry] = DAILY.report(after)
    assert (entry["count"], entry["unknown_turns"], entry["since"]) == (60, 1, "2026-03-08T10:00:00.000Z")
    assert "own use" in entry["note"]
    more = records + [rec("2026-03-08T10:45:00Z", usage(0, 40), account="max")]
    assert DAILY.must_stop(args(limits, more, subject, now="2026-03-08T11:00:00Z")) == {
        "stop": True, "hit": {"path": ["tokens", "daily", "max"], "limit": 100, "count": 100,
                              "unknown_turns": 1}}


def test_since_later_than_the_day_start_wins() -> None:
    limits = daily("00:00", "Asia/Tokyo", since="2026-03-08T16:00:00Z")
    records = [rec("2026-03-08T15:30:00Z", usage(50), account="max")]
    [entry] = DAILY.report(args(limits, records, now="2026-03-08T17:00:00Z"))
    assert (entry["count"], entry["since"]) == (0, "2026-03-08T16:00:00.000Z")


def test_no_account_no_quota() -> None:
    limits = daily("00:00", "Asia/Tokyo", limit=0)
    assert DAILY.may_launch(args(limits, [])) == {"allow": True}


@pytest.mark.parametrize("reset, zone", [("5am", "Asia/Tokyo"), ("24:00", "Asia/Tokyo"),
                                         ("05:00", "Mars/Olympus"), ("05:00", None),
                                         ("05:00", "../../etc/passwd"), ("05:00\n", "Asia/Tokyo")])
def test_a_quota_it_cannot_read_raises_a_coded_error(reset, zone) -> None:
    with pytest.raises(Refusal) as caught:
        DAILY.report(args(daily(reset, zone), []))
    assert caught.value.code == "invalid-quota"
