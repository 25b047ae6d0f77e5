"""The user-turn router's decisions, without sockets: admission, planning,
and the settle table, case by case."""

from __future__ import annotations

import attrs

from router.errors import Refusal
import pytest

from router.turns.core import (
    TRANSITIONS,
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
    TurnCoreError,
    AbortOperation,
    Stopped,
    after_write,
    before_write,
    DeliveryUnanswered,
    WriteMessage,
    admit,
    plan,
    settle,
)

PERSON = Person(text="hi", message_id="m1")
DELIVERY = Delivery(event_id="e1", session="s", message=PERSON)
CONNECTED = ClaudeCodeReadiness(connected=True)


def test_a_new_event_id_proceeds_with_a_pending_record() -> None:
    admission = admit(None, DELIVERY)
    assert admission == Proceed(entry=DeliveryEntry(event_id="e1", session="s", message=PERSON), new=True)


def test_an_answered_record_answers_the_resend() -> None:
    record = DeliveryEntry(event_id="e1", session="s", message=PERSON, state=State.ANSWERED, answer={"status": "delivered"})
    assert admit(record, DELIVERY) == Answered(answer={"status": "delivered"}, from_record=True)


@pytest.mark.parametrize(
    "other",
    [
        attrs.evolve(DELIVERY, session="t"),
        attrs.evolve(DELIVERY, message=Person(text="hi!", message_id="m1")),
        attrs.evolve(DELIVERY, message=Person(text="hi", message_id="m2")),
        attrs.evolve(DELIVERY, message=Card(text="hi")),
    ],
)
def test_an_event_id_is_one_session_and_one_message(other: Delivery) -> None:
    record = DeliveryEntry(event_id="e1", session="s", message=PERSON, state=State.ANSWERED, answer={})
    refused = admit(record, other)
    assert isinstance(refused, DeliveryRefused) and refused.code == "event-id-conflict"


def test_the_first_write_is_the_persons_and_spends_the_attempt() -> None:
    record = DeliveryEntry(event_id="e1", session="s", message=PERSON)
    planned, write = plan(record, CONNECTED)
    assert write == WriteMessage(event_id="e1", message=PERSON)
    assert planned.person_spent and planned.attempts == 1
    again, write = plan(attrs.evolve(planned, state=State.UNANSWERED), CONNECTED)
    assert write == WriteMessage(event_id="e1", message=Card(text="hi"))
    assert again.attempts == 2


def test_nothing_is_written_while_the_mod_is_not_connected() -> None:
    record = DeliveryEntry(event_id="e1", session="s", message=PERSON)
    planned, reply = plan(record, ClaudeCodeReadiness(connected=False))
    assert isinstance(reply, DeliveryUnanswered) and reply.code == "mod-not-connected"
    assert planned.state is State.UNANSWERED and not planned.person_spent and planned.attempts == 0


@pytest.mark.parametrize("steers, when_busy", [(True, "steer"), (False, "followUp")])
def test_a_container_prompt_steers_only_when_the_adapter_does(steers: bool, when_busy: str) -> None:
    record = DeliveryEntry(event_id="e1", session="s", message=PERSON)
    _, write = plan(record, ContainerReadiness(steers=steers))
    assert write == SubmitPrompt(operation_id="e1", text="hi", when_busy=when_busy)


@pytest.mark.parametrize(
    "outcome, state, answer",
    [
        (RowWritten(uuid="u1"), State.ANSWERED, {"status": "delivered", "as": "row", "uuid": "u1"}),
        (PromptTaken(), State.ANSWERED, {"status": "delivered", "as": "prompt"}),
        (Denied(deny="gone", as_="prompt"), State.ANSWERED, {"status": "dropped", "as": "prompt", "reason": "gone"}),
        (Denied(deny="no", as_="row"), State.UNANSWERED, None),
        (NoAnswer(refusal=Refusal("no-answer", "late")), State.UNANSWERED, None),
    ],
)
def test_the_mods_answers(outcome: object, state: State, answer: dict | None) -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), CONNECTED)
    settled, reply = settle(record, write, outcome)  # type: ignore[arg-type]
    assert settled.state is state
    if answer is None:
        assert isinstance(reply, DeliveryUnanswered) and settled.answer is None and settled.last is not None
        assert reply.code == ("row-refused" if isinstance(outcome, Denied) else "no-answer")
    else:
        assert isinstance(reply, Answered) and not reply.from_record
        assert reply.answer == {"eventId": "e1", "session": "s", "message": "person", **answer}
        assert settled.answer == reply.answer


def test_a_container_answer() -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), ContainerReadiness(steers=True))
    settled, reply = settle(record, write, Queued(operation_id="e1", when_busy="steer"))
    assert isinstance(reply, Answered)
    assert reply.answer == {
        "eventId": "e1", "session": "s", "status": "delivered", "as": "prompt", "operationId": "e1", "whenBusy": "steer",
    }
    assert settled.state is State.ANSWERED


def test_a_session_stopped_before_the_write_goes_out_writes_nothing() -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), ContainerReadiness(steers=True))
    assert before_write(None) is None
    outcome = before_write("3 turns reached")
    assert outcome == Stopped(reason="3 turns reached")
    settled, reply = settle(record, write, outcome)
    assert isinstance(reply, DeliveryUnanswered) and reply.code == "session-stopped" and "3 turns reached" in reply.message
    assert settled.state is State.UNANSWERED and settled.last == (reply.code, reply.message)
    # A resend once the session is resumed goes as the first attempt would have.
    replanned, again = plan(settled, ContainerReadiness(steers=True))
    assert isinstance(again, SubmitPrompt) and again.operation_id == "e1"


def test_a_prompt_queued_while_the_session_stopped_is_answered_and_aborted() -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), ContainerReadiness(steers=False))
    queued = Queued(operation_id="e1", when_busy="followUp")
    assert after_write(queued, None) == (queued, None)
    outcome, abort = after_write(queued, "3 turns reached")
    assert abort == AbortOperation(operation_id="e1")
    settled, reply = settle(record, write, outcome)
    assert isinstance(reply, Answered) and reply.answer["operationId"] == "e1"
    assert settled.state is State.ANSWERED


def test_a_mod_write_is_not_undone_by_a_stop() -> None:
    row = RowWritten(uuid="u1")
    assert after_write(row, "3 turns reached") == (row, None)


def test_a_stop_with_a_prompt_written_answers_only_a_submit() -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), CONNECTED)
    with pytest.raises(TurnCoreError):
        settle(record, write, Stopped(reason="r", written=Queued(operation_id="e1", when_busy="steer")))


def test_an_answered_record_is_never_settled_again() -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), CONNECTED)
    settled, _ = settle(record, write, PromptTaken())
    with pytest.raises(TurnCoreError):
        settle(settled, write, PromptTaken())
    assert all(before is not State.ANSWERED for before, _ in TRANSITIONS)


def test_an_outcome_must_answer_its_write() -> None:
    record, write = plan(DeliveryEntry(event_id="e1", session="s", message=PERSON), CONNECTED)
    with pytest.raises(TurnCoreError):
        settle(record, write, Queued(operation_id="e1", when_busy="steer"))
