"""The decision core under hypothesis: any interleaving of deliveries,
resends and mod behaviours keeps the invariants of ``router.turns.core``."""

from __future__ import annotations

from typing import Any

import attrs

from router.errors import Refusal
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from router.turns.core import (
    Answered,
    Card,
    ClaudeCodeReadiness,
    ContainerReadiness,
    Delivery,
    Denied,
    NoAnswer,
    Person,
    Proceed,
    PromptTaken,
    Queued,
    DeliveryEntry,
    DeliveryRefused,
    RowWritten,
    State,
    SubmitPrompt,
    DeliveryUnanswered,
    WriteMessage,
    admit,
    after_write,
    before_write,
    plan,
    settle,
)

EVENTS = st.sampled_from(["e1", "e2", "e3"])
SESSIONS = st.sampled_from(["s1", "s2"])
MESSAGES = st.one_of(
    st.builds(Person, text=st.sampled_from(["hi", "yo"]), message_id=st.sampled_from(["m1", "m2"])),
    st.builds(Card, text=st.sampled_from(["hi", "yo"])),
)
#: What the mod does with one write it has no record of.
BEHAVIOURS = st.sampled_from(
    ["row", "prompt", "deny-row", "deny-prompt", "late-written", "late-unwritten", "error", "not-connected",
     # A limit stops a container session before its write goes out, or while the host stores it.
     "stop-before", "stop-after"]
)


@attrs.define
class Mod:
    """A mod, idempotent by event id as the one in claude-envoy 1.19.0
    ``hooks/mod-protocol.ts``: a replay is answered
    from its record and writes nothing; a refusal is not recorded."""

    record: dict[str, Any] = attrs.field(factory=dict)
    writes: list[tuple[str, str]] = attrs.field(factory=list)  # (event id, "person" | "card")
    uuids: int = 0

    def write(self, step: WriteMessage, behaviour: str) -> Any:
        known = self.record.get(step.event_id)
        if known is not None:
            return NoAnswer(refusal=Refusal("no-answer", "late")) if behaviour.startswith("late") else known
        if behaviour == "error":
            return NoAnswer(refusal=Refusal("mod-error", "failed"))
        if behaviour in ("deny-row", "deny-prompt"):
            return Denied(deny="no", as_=behaviour.removeprefix("deny-"))  # type: ignore[arg-type]
        if behaviour == "late-unwritten":
            return NoAnswer(refusal=Refusal("no-answer", "late"))
        kind = "person" if isinstance(step.message, Person) else "card"
        self.writes.append((step.event_id, kind))
        self.uuids += 1
        answer = RowWritten(uuid=f"u{self.uuids}") if behaviour == "row" else PromptTaken()
        self.record[step.event_id] = answer
        return NoAnswer(refusal=Refusal("no-answer", "late")) if behaviour == "late-written" else answer


class Deliveries(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log: dict[str, DeliveryEntry] = {}
        self.mod = Mod()
        self.submitted: dict[str, list[SubmitPrompt]] = {}
        self.answers: dict[str, Any] = {}
        self.first_attempt_kinds: dict[str, list[str]] = {}
        self.aborted: set[str] = set()

    @rule(event=EVENTS, session=SESSIONS, message=MESSAGES, behaviour=BEHAVIOURS, steers=st.booleans())
    def deliver(self, event: str, session: str, message: Any, behaviour: str, steers: bool) -> None:
        # Sessions are of one kind each: s1 a Claude Code session, s2 a container one.
        container = session == "s2"
        delivery = Delivery(event_id=event, session=session, message=message)
        existing = self.log.get(event)
        admission = admit(existing, delivery)
        if isinstance(admission, DeliveryRefused):
            assert existing is not None
            assert (existing.session, existing.message) != (session, message)
            return
        if isinstance(admission, Answered):
            assert admission.from_record and existing is not None and existing.state is State.ANSWERED
            assert admission.answer == self.answers[event]
            return
        assert isinstance(admission, Proceed)
        record = admission.entry
        if admission.new:
            assert existing is None
        target = (
            ContainerReadiness(steers=steers)
            if container
            else ClaudeCodeReadiness(connected=behaviour != "not-connected")
        )
        planned, step = plan(record, target)
        assert planned.event_id == event and planned.session == session
        self.log[event] = planned
        if isinstance(step, DeliveryUnanswered):
            assert step.code == "mod-not-connected" and planned.attempts == record.attempts
            return
        if isinstance(step, SubmitPrompt):
            assert step.operation_id == event and step.when_busy == ("steer" if steers else "followUp")
            outcome: Any = before_write("limit" if behaviour == "stop-before" else None)
            if outcome is None:
                self.submitted.setdefault(event, []).append(step)
                outcome, abort = after_write(
                    NoAnswer(refusal=Refusal("host-not-running", "down")) if behaviour == "error"
                    else Queued(operation_id=event, when_busy=step.when_busy),
                    "limit" if behaviour == "stop-after" else None,
                )
                if abort is not None:
                    assert abort.operation_id == event and behaviour == "stop-after"
                    self.aborted.add(event)
        else:
            assert isinstance(step, WriteMessage)
            kind = "person" if isinstance(step.message, Person) else "card"
            # A person's words go as the person's only on the first write.
            if kind == "person":
                assert isinstance(message, Person) and planned.attempts == 1
            if isinstance(message, Card):
                assert kind == "card"
            outcome = self.mod.write(step, behaviour)
        settled, reply = settle(planned, step, outcome)
        self.log[event] = settled
        if isinstance(reply, Answered):
            assert settled.state is State.ANSWERED and not reply.from_record
            self.answers[event] = reply.answer
        else:
            assert isinstance(reply, DeliveryUnanswered) and settled.state is State.UNANSWERED
            if behaviour == "stop-before" and container:
                assert reply.code == "session-stopped" and "limit" in reply.message

    @invariant()
    def each_event_is_written_at_most_once(self) -> None:
        events = [event for event, _ in self.mod.writes]
        assert len(events) == len(set(events))

    @invariant()
    def answers_never_change(self) -> None:
        for event, answer in self.answers.items():
            record = self.log[event]
            assert record.state is State.ANSWERED and record.answer == answer

    @invariant()
    def an_aborted_prompt_was_submitted_and_answered(self) -> None:
        # The host had it on disk: the sender is answered, and it never runs.
        for event in self.aborted:
            assert event in self.submitted and self.log[event].state is State.ANSWERED

    @invariant()
    def container_prompts_share_the_event_id(self) -> None:
        for event, prompts in self.submitted.items():
            assert {prompt.operation_id for prompt in prompts} == {event}


TestDeliveries = Deliveries.TestCase
TestDeliveries.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
