"""usage-source ``frames``: the usage a container session's adapter reported.

Covers sessions reached through a daemon (``reach.via`` is ``daemon`` or
``in-process``). The host stores every ``usage`` event the adapter emits as a
usage figure (see ``router.plugins.usage.UsageLedger``); this source brackets
a turn by the ledger's position: the first read answers the session's newest
position as the mark, the second sums the figures after it.

The wire's ``usage`` event has ``inputTokens`` and ``outputTokens`` and no
cache kinds, so those are 0 here. Each event is taken as an increment (a
figure per model call), and the turn's usage is their sum. A turn with no
figure, or only figures without counts, is unknown: an adapter that does not
report usage (the echo adapter) makes every turn unknown, never zero.
"""

from wire.json import is_count

from router.plugins.refusal import PluginError

INTERFACE_VERSION = 1

#: The ``reach.via`` values whose sessions have frames.
COVERS = ("daemon", "in-process")


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
    session = request["session"]
    mark = request["mark"]
    if mark is None:
        return {"mark": await ledger.usage_position(session), "usage": None}
    if not is_count(mark):
        raise PluginError("bad-mark", f"the frames mark {mark!r} is not a ledger position")
    figures = await ledger.usage_since(session, mark)
    usage = {"input": 0, "output": 0, "cache_creation": 0, "cache_read": 0}
    counted = False
    newest = mark
    for figure in figures:
        newest = max(newest, figure.position)
        if is_count(figure.input_tokens):
            usage["input"] += figure.input_tokens
            counted = True
        if is_count(figure.output_tokens):
            usage["output"] += figure.output_tokens
            counted = True
    return {"mark": newest, "usage": usage if counted else None}
