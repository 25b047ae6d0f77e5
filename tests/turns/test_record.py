"""The deliveries' durable record: what a restart keeps, one router per
file, and records of any text. Tests taking ``store_url`` run on both
backends (a SQLite file, a PostgreSQL database)."""

from __future__ import annotations

import itertools
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.turns.core import Answered, Card, Delivery, Person, Proceed, DeliveryEntry, State, check_delivery
from router.errors import Refusal
from router.turns.delivery_log import DeliveryLog
from tests.support.postgres import postgres, postgres_url, store_url  # noqa: F401  (fixtures)

DELIVERY = Delivery(event_id="e1", session="s", message=Person(text="hi", message_id="m1"))


def test_a_record_survives_a_restart(store_url: str) -> None:
    path = store_url
    with DeliveryLog(path) as log:
        admission = log.admit(DELIVERY)
        assert isinstance(admission, Proceed) and admission.new
        answer = {"eventId": "e1", "status": "delivered"}
        log.put(attrs.evolve(admission.entry, state=State.ANSWERED, attempts=1, person_spent=True, answer=answer))
    with DeliveryLog(path) as log:
        assert log.admit(DELIVERY) == Answered(answer=answer, from_record=True)
        (record,) = log.entries()
        assert record.attempts == 1 and record.person_spent


def test_a_second_admission_of_a_new_id_makes_no_second_record(store_url: str) -> None:
    with DeliveryLog(store_url) as log:
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


async def test_calls_run_off_the_loop_one_at_a_time(store_url: str) -> None:
    with DeliveryLog(store_url) as log:
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
    record = entry_of(event_id, session, text, message_id, state, attempts, spent, answer)
    path = tmp_path / "round.db"
    with DeliveryLog(path) as log:
        log.put(record)
        assert log.get(event_id) == record
    path.unlink()


def entry_of(
    event_id: str, session: str, text: str, message_id: str | None, state: State, attempts: int, spent: bool,
    answer: dict | None,
) -> DeliveryEntry:
    message = Card(text=text) if message_id is None else Person(text=text, message_id=message_id)
    return DeliveryEntry(
        event_id=event_id, session=session, message=message, state=state, attempts=attempts,
        person_spent=spent, answer=answer, last=None if answer else ("no-answer", text),
    )


#: PostgreSQL's text holds no NUL (docs/store.md says so): any other text.
PG_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=40)


def test_any_record_round_trips_in_postgresql(postgres_url: str) -> None:
    examples = itertools.count()
    with DeliveryLog(postgres_url) as log:

        @settings(max_examples=60, deadline=None)
        @given(
            event_id=PG_TEXT, session=PG_TEXT, text=PG_TEXT, message_id=st.one_of(st.none(), PG_TEXT),
            state=st.sampled_from(list(State)), attempts=st.integers(0, 10), spent=st.booleans(),
            answer=st.one_of(st.none(), st.dictionaries(PG_TEXT, PG_TEXT, max_size=3)),
        )
        def round_trip(event_id: str, **fields: object) -> None:
            # put() replaces only the delivery's progress of an id it holds: a new id each example.
            record = entry_of(f"{next(examples)}:{event_id}", **fields)  # type: ignore[arg-type]
            log.put(record)
            assert log.get(record.event_id) == record

        round_trip()


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
