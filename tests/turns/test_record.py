"""The deliveries' durable record: what a restart keeps, one router per
file, and records of any text."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.turns.core import Answered, Card, Delivery, Person, Proceed, DeliveryEntry, State, check_delivery
from router.errors import Refusal
from router.turns.delivery_log import DeliveryLog

DELIVERY = Delivery(event_id="e1", session="s", message=Person(text="hi", message_id="m1"))


def test_a_record_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:
        admission = log.admit(DELIVERY)
        assert isinstance(admission, Proceed) and admission.new
        answer = {"eventId": "e1", "status": "delivered"}
        log.put(attrs.evolve(admission.entry, state=State.ANSWERED, attempts=1, person_spent=True, answer=answer))
    with DeliveryLog(path) as log:
        assert log.admit(DELIVERY) == Answered(answer=answer, from_record=True)
        (record,) = log.entries()
        assert record.attempts == 1 and record.person_spent


def test_a_second_admission_of_a_new_id_makes_no_second_record(tmp_path: Path) -> None:
    with DeliveryLog(tmp_path / "turns.db") as log:
        first = log.admit(DELIVERY)
        second = log.admit(DELIVERY)
        assert isinstance(first, Proceed) and first.new
        assert isinstance(second, Proceed) and not second.new
        assert len(log.entries()) == 1


def test_one_router_per_record(tmp_path: Path) -> None:
    with DeliveryLog(tmp_path / "turns.db"):
        with pytest.raises(Refusal) as caught:
            DeliveryLog(tmp_path / "turns.db")
        assert caught.value.code == "deliveries-busy"
    DeliveryLog(tmp_path / "turns.db").close()  # free again


async def test_calls_run_off_the_loop_one_at_a_time(tmp_path: Path) -> None:
    with DeliveryLog(tmp_path / "turns.db") as log:
        results: list[object] = []

        async def admit(n: int) -> None:
            results.append(await log.call(log.admit, attrs.evolve(DELIVERY, event_id=f"e{n % 5}")))

        async with trio.open_nursery() as nursery:
            for n in range(40):
                nursery.start_soon(admit, n)
        assert sum(isinstance(r, Proceed) and r.new for r in results) == 5
        assert len(await log.call(log.entries)) == 5


TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    event_id=TEXT,
    session=TEXT,
    text=TEXT,
    message_id=st.one_of(st.none(), TEXT),
    state=st.sampled_from(list(State)),
    attempts=st.integers(0, 10),
    spent=st.booleans(),
    answer=st.one_of(st.none(), st.dictionaries(TEXT, TEXT, max_size=3)),
)
def test_any_record_round_trips(
    tmp_path: Path, event_id: str, session: str, text: str, message_id: str | None, state: State,
    attempts: int, spent: bool, answer: dict | None,
) -> None:
    message = Card(text=text) if message_id is None else Person(text=text, message_id=message_id)
    record = DeliveryEntry(
        event_id=event_id, session=session, message=message, state=state, attempts=attempts,
        person_spent=spent, answer=answer, last=None if answer else ("no-answer", text),
    )
    path = tmp_path / "round.db"
    with DeliveryLog(path) as log:
        log.put(record)
        assert log.get(event_id) == record
    path.unlink()


def test_lone_surrogates_are_refused_before_the_record() -> None:
    for delivery in (
        attrs.evolve(DELIVERY, event_id="e\ud800"),
        attrs.evolve(DELIVERY, message=Card(text="bad \udfff text")),
        attrs.evolve(DELIVERY, message=Person(text="ok", message_id="\ud800")),
        attrs.evolve(DELIVERY, message=Card(text="")),
        attrs.evolve(DELIVERY, session=""),
        attrs.evolve(DELIVERY, event_id="x" * 257),
    ):
        refused = check_delivery(delivery)
        assert refused is not None and refused.code == "bad-delivery"
    assert check_delivery(DELIVERY) is None
