"""limit-check ``daily-quota``: a daily token quota per account.

Enforces ``limits.tokens.daily``, one quota per account, each with the time of
day it resets and the IANA time zone its day starts in::

    "daily": {"max-plan": {"limit": 40000000, "since": "...",
                           "reset": "05:00", "time_zone": "America/Chicago"}}

A count is the sum of the four token kinds over the account's known turn
records at or after the later of the day's start and ``since``; unknown turns
are counted apart. Only launches on a harness that spends an account carry
one (``counts_account``), so a quota covers nothing else. The count is this
router's own use of the account, not its use anywhere else; the report says
so.

The day's start
---------------

The day starts at the last instant, at or before now, at which the zone's
wall clock read the reset time. Zones come from ``zoneinfo`` (the system's
zone data, or the ``tzdata`` package). Daylight-saving changes:

- a reset time that the clocks skip that day (02:30 on a spring-forward night
  in most US zones) is read with the offset in force before the change, as
  Python reads it (``fold=0``): 02:30 CST is 03:30 CDT, an hour after the
  skip's start, 30 minutes after its end;
- a reset time that happens twice (01:30 on a fall-back night) is its first
  occurrence, so that day is 25 hours long, and the day before it 24.

Comparisons are between instants, never wall times.
"""

import datetime as dt
import re
import zoneinfo

from router.errors import Refusal
from router.plugins.usage import count_usage, iso, parse_time

INTERFACE_VERSION = 2

NOTE = "counts this router's own use of the account, not its use anywhere else"

_RESET = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


def day_start(now, reset, zone):
    """The instant (UTC) the day containing ``now`` started."""
    local = now.astimezone(zone)
    for days_back in (0, 1):
        date = local.date() - dt.timedelta(days=days_back)
        start = dt.datetime.combine(date, reset, tzinfo=zone)  # fold=0: see above
        start_utc = start.astimezone(dt.timezone.utc)
        if start_utc <= now:
            return start_utc
    # Yesterday's reset is before today's midnight, so before now, except
    # where the clocks skipped over it and fold=0 pushed it past midnight (a
    # zone that springs forward at midnight), or the zone skipped that whole
    # date (Samoa, 2011-12-30). Then the day started the day before.
    date = local.date() - dt.timedelta(days=2)
    return dt.datetime.combine(date, reset, tzinfo=zone).astimezone(dt.timezone.utc)


def _quotas(limits):
    tokens = limits.get("tokens") if type(limits) is dict else None
    daily = tokens.get("daily") if type(tokens) is dict else None
    if daily is None:
        return []
    if type(daily) is not dict:
        raise Refusal("invalid-quota", "limits.tokens.daily is not an object")
    found = []
    for account, node in daily.items():
        where = f"tokens.daily.{account}"
        if type(node) is not dict or type(node.get("limit")) is not int or node["limit"] < 0:
            raise Refusal("invalid-quota", f"{where} has no limit that is a count")
        match = _RESET.fullmatch(node.get("reset") or "") if type(node.get("reset")) is str else None
        if match is None:
            raise Refusal("invalid-quota", f'{where} has no reset time of the form "05:00"')
        try:
            zone = zoneinfo.ZoneInfo(node.get("time_zone"))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
            raise Refusal(
                "invalid-quota",
                f"{where} names no IANA time zone this machine knows "
                f"({node.get('time_zone')!r}); use a name such as America/Chicago",
            ) from None
        since = parse_time(node.get("since"))
        if since is None:
            raise Refusal("invalid-quota", f"the since of {where} is not a time; reset it")
        reset = dt.time(int(match.group(1)), int(match.group(2)))
        found.append((["tokens", "daily", account], node, account, reset, zone, since))
    return found


def _count(records, account, start):
    return count_usage(records, lambda r: r.get("account") == account, start)


def _window(args, reset, zone, since):
    now = parse_time(args["now"])
    return max(day_start(now, reset, zone), since)


def _hit(args):
    account = args["subject"].get("account")
    if account is None:
        return None
    for path, node, name, reset, zone, since in _quotas(args["limits"]):
        if name != account:
            continue
        kinds, unknown = _count(args["records"], account, _window(args, reset, zone, since))
        count = sum(kinds.values())
        if count >= node["limit"]:
            return {"path": path, "limit": node["limit"], "count": count, "unknown_turns": unknown}
    return None


def may_launch(args):
    hit = _hit(args)
    return {"allow": True} if hit is None else {"allow": False, "hit": hit}


def must_stop(args):
    hit = _hit(args)
    return {"stop": False} if hit is None else {"stop": True, "hit": hit}


def report(args):
    entries = []
    for path, node, account, reset, zone, since in _quotas(args["limits"]):
        start = _window(args, reset, zone, since)
        kinds, unknown = _count(args["records"], account, start)
        entries.append({
            "path": path, "limit": node["limit"],
            "since": iso(start),
            "count": sum(kinds.values()), "kinds": kinds, "unknown_turns": unknown,
            "note": NOTE,
        })
    return entries
