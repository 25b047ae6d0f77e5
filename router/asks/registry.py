"""The asks of every open session of one router: listed and answered the
same way from the HTTP API, the MCP tools and (through the API) the CLI.

A session's target holds its asks when it has an ``asks`` book and an
``answer_ask`` method: the Claude Code target (its mod's asks) and the
container target (asks its adapter raised: an ACP agent's permission
requests, docs/acp.md).
"""

from __future__ import annotations

from typing import Any, Final, Iterable

from router.errors import Refusal

__all__ = ["ASK_STATUS", "answer_ask", "list_asks"]

#: The HTTP status of each refusal of an answer (ours).
ASK_STATUS: Final = {"unknown-ask": 404, "ask-answered": 409, "ask-expired": 409, "bad-decision": 400,
                     "bad-body": 400}


def _targets(sessions: Iterable[Any]) -> list[Any]:
    return [session.target for session in sessions if hasattr(session.target, "answer_ask")]


def list_asks(sessions: Iterable[Any], *, every: bool = False) -> list[dict[str, Any]]:
    """The asks waiting on a person (``every``: kept ones too), oldest first."""
    out = []
    for target in _targets(sessions):
        out += [ask.to_json() for ask in (target.asks.all() if every else target.asks.waiting())]
    return sorted(out, key=lambda ask: ask["since"])


def answer_ask(sessions: Iterable[Any], ask_id: object, decision: object, *, by: str) -> dict[str, Any]:
    """Answer the ask ``ask_id`` ``allow`` or ``deny``; the first answer wins.
    Raises :class:`Refusal`: ``bad-body``, ``bad-decision``, ``unknown-ask``,
    ``ask-answered``, ``ask-expired``."""
    if type(ask_id) is not str or not ask_id:
        raise Refusal("bad-body", "an ask id is a non-empty string")
    if decision not in ("allow", "deny"):
        raise Refusal("bad-decision", f"an ask is answered allow or deny, not {decision!r}")
    for target in _targets(sessions):
        if target.asks.get(ask_id) is not None:
            return target.answer_ask(ask_id, decision, by=by)  # type: ignore[no-any-return]
    raise Refusal("unknown-ask", f"this router has no ask {ask_id!r}; `router asks` lists them", ask=ask_id)
