"""usage-source ``frames``: the usage a container session's adapter reported.

Covers sessions reached through a daemon (``reach.via`` is ``daemon`` or
``in-process``). The host stores every ``usage`` event the adapter emits
(one per frame, so a replay is not counted twice) and sums them per
operation; the router hands this source that ledger as ``deps["ledger"]``
(see ``router.plugins.usage.UsageLedger``: the host's store through
``StoreLedger``, or ``MemoryLedger``).

A turn is bracketed by snapshots: the first read answers, as its mark, each
operation's event count and sums; the second read takes the difference. So
the turn's usage is exactly the events recorded between the two reads,
whichever operation they belong to (a steered input, or events between
turns). The mark holds one entry per operation of the session that
reported usage.

The wire's ``usage`` event has ``inputTokens`` and ``outputTokens`` and no
cache kinds, so those are 0 here; each event is taken as an increment (one
per model call), and fractional figures are rounded. A turn with no new
event, or only events without counts, is unknown: an adapter that does not
report usage (the echo adapter) makes every turn unknown, never zero.
"""

import math

from router.plugins.refusal import PluginError

INTERFACE_VERSION = 1

#: The ``reach.via`` values whose sessions have frames.
COVERS = ("daemon", "in-process")


def _snapshot(totals):
    return [
        [t.operation_id, t.events, t.input_tokens, t.output_tokens]
        for t in totals
    ]


def _number(value):
    return value if type(value) in (int, float) and math.isfinite(value) else None


async def read_turn(request, deps):
    reach = request.get("reach")
    if type(reach) is not dict or reach.get("via") not in COVERS:
        return None
    ledger = deps.get("ledger")
    if ledger is None:
        raise PluginError(
            "no-usage-ledger",
            "the router gave the frames source no usage ledger; container usage is unknown "
            "until the host's store is wired in",
        )
    now = _snapshot(await ledger.usage_totals(request["session"]))
    mark = request["mark"]
    if mark is None:
        return {"mark": now, "usage": None}
    if type(mark) is not list or any(type(m) is not list or len(m) != 4 for m in mark):
        raise PluginError("bad-mark", "the frames mark is not one this source made")
    before = {m[0]: m for m in mark}
    input_tokens = output_tokens = 0.0
    counted = False
    for operation, events, i, o in now:
        _, old_events, old_i, old_o = before.get(operation, (operation, 0, None, None))
        if events <= old_events:
            continue
        for new, old, kind in ((i, old_i, "input"), (o, old_o, "output")):
            if _number(new) is None:
                continue
            delta = _number(new) - (_number(old) or 0)
            if delta < 0:
                continue
            counted = True
            if kind == "input":
                input_tokens += delta
            else:
                output_tokens += delta
    usage = {"input": round(input_tokens), "output": round(output_tokens),
             "cache_creation": 0, "cache_read": 0}
    return {"mark": now, "usage": usage if counted else None}
