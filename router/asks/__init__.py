"""Claude Code's permission asks, answered from anywhere: the sans-IO book
of asks, the rules of ``asks.json``.

``core`` holds it all; the Trio layer is the Claude Code target
(:mod:`router.turns.targets.claude_code`).
"""

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.asks.core": (
        "DEADLINE_MAX DEADLINE_MIN Ask AskBook AskPolicy policy_from rule_for rule_subject rule_text"
    ),
    "router.asks.registry": "ASK_STATUS answer_ask list_asks",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
