"""The permission asks of Claude Code sessions, without I/O.

Theory of operation
-------------------
When Claude Code is about to ask the person whether a tool call may run,
the session's mod reports the ask over the mod link (``wire.mod.ModAskEvent``)
and waits for ``ask.answer``. The router keeps each ask in an
:class:`AskBook`: a rule of ``asks.json`` may answer it at once
(:func:`rule_for`); otherwise it waits for a person (``router answer``, the
page, the ``answer_ask`` tool) until the deadline, which the Trio layer
(:mod:`router.turns.targets.claude_code`) keeps as a cancel scope. The first
answer wins (:meth:`AskBook.answer`); a second, or one after the deadline,
is refused with a code. An ask nobody answered in time is *expired*: the mod
is told ``ask`` and Claude Code's own prompt comes up in its terminal.

Times here are wall-clock seconds passed in by the caller, recorded for the
person to read ("since when"); no decision is made by comparing them.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any, Final, Literal, Sequence

import attrs

from router.errors import Refusal
from router.plugins.models import AskRuleSetting, AsksDocument, structure
from wire.json import dumps

__all__ = [
    "DEADLINE_MAX",
    "DEADLINE_MIN",
    "Ask",
    "AskBook",
    "AskPolicy",
    "policy_from",
    "rule_for",
    "rule_subject",
    "rule_text",
]

#: The longest an ask may wait: the mod's ``tool.check`` hook may wait on its
#: ``$`` calls for 20 minutes in all (Claude Code 2.1.332's declarations,
#: ``HookBudget``); thirty seconds are kept for the answer's way back (ours).
DEADLINE_MAX: Final = 20 * 60 - 30
#: The shortest: a person needs a moment to read it (ours).
DEADLINE_MIN: Final = 1

Decision = Literal["allow", "deny"]
#: The input keys a permission rule of a tool reads, in Claude Code's rule
#: syntax (``Bash(git status)``, ``Edit(src/*)``).
_SUBJECT_KEYS: Final = ("command", "file_path", "path", "url", "pattern")


def rule_subject(tool: str, input: Any) -> str:
    """What a rule's pattern is matched against: the command of a shell
    call, the path of a file call, else the input as JSON text."""
    if type(input) is dict:
        for key in _SUBJECT_KEYS:
            if type(input.get(key)) is str:
                return str(input[key])
    return dumps(input)


def rule_for(rules: Sequence[AskRuleSetting], tool: str, input: Any) -> AskRuleSetting | None:
    """The first rule that answers an ask of ``tool`` with ``input``."""
    subject = rule_subject(tool, input)
    for rule in rules:
        if rule.tool == tool and (rule.input is None or fnmatch.fnmatchcase(subject, rule.input)):
            return rule
    return None


def rule_text(rule: AskRuleSetting) -> str:
    """A rule as Claude Code writes one: ``Bash(git status)``."""
    return rule.tool if rule.input is None else f"{rule.tool}({rule.input})"


@attrs.frozen
class AskPolicy:
    """What ``asks.json`` says: the deadline (seconds) and the rules."""

    deadline: float = 120.0
    rules: tuple[AskRuleSetting, ...] = ()


def policy_from(value: object) -> AskPolicy | Refusal:
    """``asks.json``'s value as a policy, or ``invalid-settings`` naming the
    failing path (a deadline outside ``DEADLINE_MIN``..``DEADLINE_MAX``
    included)."""
    document = structure(value, AsksDocument, what="asks.json", code="invalid-settings")
    if isinstance(document, Refusal):
        return document
    deadline = float(document.asks.deadline)
    if not math.isfinite(deadline) or not DEADLINE_MIN <= deadline <= DEADLINE_MAX:
        return Refusal(
            "invalid-settings",
            f"asks.json: asks.deadline: {deadline:g} s is outside {DEADLINE_MIN}..{DEADLINE_MAX} s "
            "(a tool.check hook may wait 20 minutes in all)",
        )
    return AskPolicy(deadline=deadline, rules=document.asks.rules)


@attrs.define
class Ask:
    """One ask and, once it has one, its answer. ``state`` is ``waiting``,
    ``answered`` (``decision`` and ``by``: a person's channel or
    ``rule:<rule>``), ``expired`` (nobody answered in time: Claude Code's own
    prompt came up) or ``gone`` (the link closed first)."""

    id: str
    session: str
    tool: str
    input: Any
    summary: str
    opened: float
    deadline: float
    reason: str | None = None
    tool_use_id: str | None = None
    state: str = "waiting"
    decision: str | None = None
    by: str | None = None
    answered: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "session": self.session, "tool": self.tool, "input": self.input,
            "summary": self.summary, "since": self.opened, "deadline": self.deadline, "state": self.state,
        }
        for key in ("reason", "tool_use_id", "decision", "by", "answered"):
            value = getattr(self, key)
            if value is not None:
                out["toolUseId" if key == "tool_use_id" else key] = value
        return out


class AskBook:
    """The asks of one session: opened, answered once, expired."""

    def __init__(self, session: str) -> None:
        self.session = session
        self._asks: dict[str, Ask] = {}

    def __repr__(self) -> str:
        return f"<AskBook {self.session!r} waiting={len(self.waiting())} kept={len(self._asks)}>"

    def open(self, ask: Ask) -> Ask:
        """Keep a new ask; an id seen before is refused (``ask-exists``)."""
        if ask.id in self._asks:
            raise Refusal("ask-exists", f"the ask {ask.id!r} was reported before", ask=ask.id)
        self._asks[ask.id] = ask
        return ask

    def get(self, ask_id: str) -> Ask | None:
        return self._asks.get(ask_id)

    def answer(self, ask_id: str, decision: str, *, by: str, now: float) -> Ask:
        """Settle the ask with ``decision``; the first answer wins. Refuses
        ``bad-decision``, ``unknown-ask``, ``ask-answered`` (another answer
        came first), ``ask-expired`` (past its deadline, or its link closed)."""
        if decision not in ("allow", "deny"):
            raise Refusal("bad-decision", f"an ask is answered allow or deny, not {decision!r}")
        ask = self._asks.get(ask_id)
        if ask is None:
            raise Refusal("unknown-ask", f"there is no ask {ask_id!r}; `router asks` lists them", ask=ask_id)
        if ask.state == "answered":
            raise Refusal(
                "ask-answered", f"the ask {ask_id!r} was already answered {ask.decision} by {ask.by}",
                ask=ask_id, decision=ask.decision, by=ask.by,
            )
        if ask.state != "waiting":
            raise Refusal(
                "ask-expired",
                f"the ask {ask_id!r} is no longer waiting ({ask.state}): Claude Code's own prompt has it",
                ask=ask_id, state=ask.state,
            )
        ask.state, ask.decision, ask.by, ask.answered = "answered", decision, by, now
        return ask

    def close(self, ask_id: str, *, now: float, state: str = "expired") -> Ask | None:
        """The ask's wait ended with no answer (``expired``, or ``gone`` when
        the link closed): the ask, if it was still waiting, else None."""
        ask = self._asks.get(ask_id)
        if ask is None or ask.state != "waiting":
            return None
        ask.state, ask.answered = state, now
        return ask

    def waiting(self) -> list[Ask]:
        return [ask for ask in self._asks.values() if ask.state == "waiting"]

    def all(self) -> list[Ask]:
        return list(self._asks.values())
