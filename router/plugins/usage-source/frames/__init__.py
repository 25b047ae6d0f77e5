"""usage-source ``frames``: the usage a container session's adapter reported.

Covers sessions reached through a daemon (``reach.via`` is ``daemon`` or
``in-process``). The host stores every ``usage`` event the adapter emits
(one per frame, so a replay is not counted twice) and sums those after a
mark; the router hands this source that ledger as ``deps["ledger"]``
(see ``router.plugins.usage.UsageLedger``: the host's store through
``StoreLedger``, or ``MemoryLedger``).

A turn is bracketed by two reads of the ledger: the first answers, as its
mark, the ledger's position (``{"after": N}``: the session's events so
far); the second sums the events recorded after it. So the turn's usage is
exactly the events recorded between the two reads, whichever operation they
belong to (a steered input, or events between turns), and a read costs the
events since the mark, not the session's history.

The wire's ``usage`` event has ``inputTokens`` and ``outputTokens`` and no
cache kinds, so those are 0 here; each event is taken as an increment (one
per model call), and fractional figures are rounded. A turn with no new
event, or only events without counts, is unknown: an adapter that does not
report usage (the echo adapter) makes every turn unknown, never zero.
"""

import math

from router.errors import Refusal

INTERFACE_VERSION = 1

#: The ``reach.via`` values whose sessions have frames.
COVERS = ("daemon", "in-process")


def _number(value):
    return value if type(value) in (int, float) and math.isfinite(value) else None


async def read_turn(request, deps):
    reach = request.get("reach")
    if type(reach) is not dict or reach.get("via") not in COVERS:
        return None
    ledger = deps.get("ledger")
    if ledger is None:
        raise Refusal(
            "no-usage-ledger",
            "the router gave the frames source no usage ledger; container usage is unknown "
            "until the host's store is wired in",
        )
    mark = request["mark"]
    if mark is not None and not _is_mark(mark):
        raise Refusal("bad-mark", "the frames mark is not one this source made")
    read = await ledger.usage_after(request["session"], None if mark is None else mark["after"])
    now = {"after": read.mark}
    if mark is None:
        return {"mark": now, "usage": None}
    return {"mark": now, "usage": _usage(read)}


def _is_mark(mark):
    """Whether ``mark`` is one this source made: ``{"after": N}``, N >= 0."""
    return type(mark) is dict and set(mark) == {"after"} and type(mark["after"]) is int and mark["after"] >= 0


def _usage(read):
    """The usage of a ledger read, or None when it counted nothing."""
    counted = False
    totals = {"input": 0.0, "output": 0.0}
    for kind, value in (("input", read.input_tokens), ("output", read.output_tokens)):
        if _number(value) is not None and value >= 0:
            counted = True
            totals[kind] = value
    usage = {"input": round(totals["input"]), "output": round(totals["output"]),
             "cache_creation": 0, "cache_read": 0}
    return usage if counted and read.events else None
