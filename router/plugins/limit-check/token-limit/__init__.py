"""limit-check ``token-limit``: token limits per instance, provider, model and key.

Enforces ``limits.tokens``::

    "tokens": {
      "instances": {"coder": {"limit": 5000000, "since": "..."}},
      "providers": {"anthropic": {"limit": 50000000, "since": "..."}},
      "models": {"anthropic": {"claude-opus-4-5": {"limit": 20000000, "since": "..."}}},
      "keys": {"team-key": {"limit": 10000000, "since": "..."}}
    }

A count is the sum of all four token kinds (input, output, cache creation,
cache read) over the known turn records of the limit's subject whose ``at``
is at or after ``since``. Unknown turns add nothing and are counted apart
(``unknown_turns``); so is a record whose time cannot be read. A key matches a
record's ``account``; while no record names an account at all, a key limit
is reported as not enforced (it is still asked at launch).

A launch may start while every limit that covers its subject counts less than
its limit; a session must stop once one counts as much as its limit or more.
There is no ceiling on a limit. ``since`` is set by the limits writer when a
limit is added and moved only by a reset (``router limits reset``).
``tokens.daily`` belongs to ``daily-quota`` and is not read here.
"""

from router.errors import Refusal
from router.plugins.usage import count_usage, parse_time

INTERFACE_VERSION = 2

#: group -> the record fields a limit in it matches, in path order.
GROUPS = {
    "instances": ("instance",),
    "providers": ("provider",),
    "models": ("provider", "model"),
    "keys": ("account",),
}


def _limits(limits):
    """Every token limit: (path, limit object, {field: value})."""
    tokens = limits.get("tokens") if type(limits) is dict else None
    if tokens is None:
        return []
    if type(tokens) is not dict:
        raise Refusal("invalid-limit", "limits.tokens is not an object")
    found = []
    for group, fields in GROUPS.items():
        node = tokens.get(group)
        if node is None:
            continue
        found += _walk(node, ["tokens", group], fields, {})
    return found


def _walk(node, path, fields, matched):
    if type(node) is not dict:
        raise Refusal("invalid-limit", f"{'.'.join(path)} is not an object")
    if not fields:
        if "limit" not in node:
            raise Refusal("invalid-limit", f"{'.'.join(path)} has no limit")
        if type(node["limit"]) is not int or node["limit"] < 0:
            raise Refusal("invalid-limit", f"the limit at {'.'.join(path)} is not a count")
        if parse_time(node.get("since")) is None:
            raise Refusal("invalid-limit", f"the since of {'.'.join(path)} is not a time; "
                              "reset the limit to set it")
        return [(path, node, matched)]
    found = []
    for key, child in node.items():
        found += _walk(child, path + [key], fields[1:], {**matched, fields[0]: key})
    return found


def _count(records, matched, since):
    return count_usage(records, lambda r: all(r.get(f) == v for f, v in matched.items()), since)


def _hits(args):
    subject = args["subject"]
    for path, node, matched in _limits(args["limits"]):
        if any(subject.get(f) != v for f, v in matched.items()):
            continue
        kinds, unknown = _count(args["records"], matched, parse_time(node["since"]))
        count = sum(kinds.values())
        if count >= node["limit"]:
            return {"path": path, "limit": node["limit"], "count": count, "unknown_turns": unknown}
    return None


def may_launch(args):
    hit = _hits(args)
    return {"allow": True} if hit is None else {"allow": False, "hit": hit}


def must_stop(args):
    hit = _hits(args)
    return {"stop": False} if hit is None else {"stop": True, "hit": hit}


def report(args):
    records = args["records"]
    accounts_named = any(type(r) is dict and r.get("account") for r in records)
    entries = []
    for path, node, matched in _limits(args["limits"]):
        if path[1] == "keys" and not accounts_named:
            entries.append({
                "path": path, "limit": node["limit"], "since": node["since"],
                "not_enforced": "no recorded turn names an account yet, so no key is matched",
            })
            continue
        kinds, unknown = _count(records, matched, parse_time(node["since"]))
        entries.append({
            "path": path, "limit": node["limit"], "since": node["since"],
            "count": sum(kinds.values()), "kinds": kinds, "unknown_turns": unknown,
        })
    return entries
