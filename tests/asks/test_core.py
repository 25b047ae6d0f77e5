"""The sans-IO asks: the book (first answer wins, refusals with codes), the
rules of asks.json and the policy read through the settings models."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from router.asks import DEADLINE_MAX, Ask, AskBook, AskPolicy, policy_from, rule_for, rule_subject, rule_text
from router.errors import Refusal
from router.plugins.models import AskRuleSetting


def ask(ask_id: str = "a1", **fields: object) -> Ask:
    defaults: dict[str, object] = dict(session="s", tool="Bash", input={"command": "ls"}, summary="Bash wants to run: ls",
                                       opened=10.0, deadline=130.0)
    return Ask(id=ask_id, **{**defaults, **fields})  # type: ignore[arg-type]


def test_the_first_answer_wins_and_a_second_is_refused() -> None:
    book = AskBook("s")
    book.open(ask())
    answered = book.answer("a1", "allow", by="cli", now=11.0)
    assert (answered.state, answered.decision, answered.by, answered.answered) == ("answered", "allow", "cli", 11.0)
    with pytest.raises(Refusal) as second:
        book.answer("a1", "deny", by="http", now=12.0)
    assert second.value.code == "ask-answered" and second.value.data["decision"] == "allow"
    assert book.get("a1").decision == "allow"  # type: ignore[union-attr]
    assert book.waiting() == []


def test_an_answer_after_the_deadline_is_refused_expired() -> None:
    book = AskBook("s")
    book.open(ask())
    assert book.close("a1", now=200.0) is not None
    assert book.close("a1", now=201.0) is None  # closed once
    with pytest.raises(Refusal) as late:
        book.answer("a1", "allow", by="cli", now=202.0)
    assert late.value.code == "ask-expired"
    assert book.get("a1").to_json()["state"] == "expired"  # type: ignore[union-attr]


def test_an_answered_ask_is_not_expired_by_its_deadline() -> None:
    book = AskBook("s")
    book.open(ask())
    book.answer("a1", "deny", by="cli", now=11.0)
    assert book.close("a1", now=200.0) is None
    assert book.get("a1").state == "answered"  # type: ignore[union-attr]


@pytest.mark.parametrize(("ask_id", "decision", "code"), [("nope", "allow", "unknown-ask"), ("a1", "maybe", "bad-decision")])
def test_bad_answers_are_refused_with_a_code(ask_id: str, decision: str, code: str) -> None:
    book = AskBook("s")
    book.open(ask())
    with pytest.raises(Refusal) as refused:
        book.answer(ask_id, decision, by="cli", now=11.0)
    assert refused.value.code == code
    assert book.get("a1").state == "waiting"  # type: ignore[union-attr]


def test_an_ask_reported_twice_is_refused() -> None:
    book = AskBook("s")
    book.open(ask())
    with pytest.raises(Refusal) as twice:
        book.open(ask())
    assert twice.value.code == "ask-exists"


def test_the_json_of_an_ask() -> None:
    shown = ask(tool_use_id="toolu_1", reason="needs approval").to_json()
    assert shown == {"id": "a1", "session": "s", "tool": "Bash", "input": {"command": "ls"},
                     "summary": "Bash wants to run: ls", "since": 10.0, "deadline": 130.0, "state": "waiting",
                     "toolUseId": "toolu_1", "reason": "needs approval"}


def test_rules_match_by_tool_and_input_pattern() -> None:
    rules = (
        AskRuleSetting(tool="Bash", input="git status*", decision="allow"),
        AskRuleSetting(tool="Bash", input="rm *", decision="deny"),
        AskRuleSetting(tool="Write", decision="deny"),
    )
    assert rule_for(rules, "Bash", {"command": "git status --short"}) is rules[0]
    assert rule_for(rules, "Bash", {"command": "rm -rf build"}) is rules[1]
    assert rule_for(rules, "Bash", {"command": "git push"}) is None
    assert rule_for(rules, "Write", {"file_path": "a.txt", "content": "x"}) is rules[2]
    assert rule_for(rules, "Edit", {"file_path": "a.txt"}) is None
    assert rule_text(rules[0]) == "Bash(git status*)" and rule_text(rules[2]) == "Write"


def test_a_pattern_is_case_sensitive_and_whole() -> None:
    rules = (AskRuleSetting(tool="Bash", input="git status", decision="allow"),)
    assert rule_for(rules, "Bash", {"command": "git status; rm -rf /"}) is None
    assert rule_for(rules, "Bash", {"command": "GIT STATUS"}) is None
    assert rule_for(rules, "bash", {"command": "git status"}) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3)))
def test_any_input_has_a_subject(value: object) -> None:
    assert isinstance(rule_subject("Tool", value), str)
    assert rule_for((AskRuleSetting(tool="Tool", input="*", decision="allow"),), "Tool", value) is not None


def test_the_policy_from_asks_json() -> None:
    policy = policy_from({"asks": {"deadline": 30, "rules": [{"tool": "Bash", "input": "ls", "decision": "allow"}]}})
    assert policy == AskPolicy(deadline=30.0, rules=(AskRuleSetting(tool="Bash", input="ls", decision="allow"),))
    assert policy_from({}) == AskPolicy()


@pytest.mark.parametrize(("value", "where"), [
    ({"asks": {"deadline": 0}}, "asks.deadline"),
    ({"asks": {"deadline": DEADLINE_MAX + 1}}, "asks.deadline"),
    ({"asks": {"deadline": "soon"}}, "asks.deadline"),
    ({"asks": {"rules": [{"tool": "Bash", "decision": "maybe"}]}}, "asks.rules[0].decision"),
    ({"asks": {"rules": [{"decision": "allow"}]}}, "asks.rules[0]"),
    ({"asks": []}, "asks"),
    ([], ""),
])
def test_a_bad_asks_json_is_refused_with_its_path(value: object, where: str) -> None:
    refused = policy_from(value)
    assert isinstance(refused, Refusal) and refused.code == "invalid-settings"
    assert refused.message.startswith("asks.json") and where in refused.message
