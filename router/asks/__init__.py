"""Claude Code's permission asks, answered from anywhere: the sans-IO book
of asks, the rules of ``asks.json``.

``core`` holds it all; the Trio layer is the Claude Code target
(:mod:`router.turns.targets.claude_code`).
"""

from router.asks import core, registry
from router.asks.core import (
    DEADLINE_MAX,
    DEADLINE_MIN,
    Ask,
    AskBook,
    AskPolicy,
    policy_from,
    rule_for,
    rule_subject,
    rule_text,
)
from router.asks.registry import ASK_STATUS, answer_ask, list_asks

__all__ = [*core.__all__, *registry.__all__]
