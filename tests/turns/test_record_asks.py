"""The asks in the delivery record (schema 3): kept per ask id, replaced as
the ask is answered, and a schema-2 file gains the table with nothing lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from router.asks import Ask
from router.turns.core import Delivery, Person, Proceed
from router.turns.delivery_log import SCHEMA_VERSION, DeliveryLog


def an_ask(ask_id: str, session: str = "s") -> Ask:
    return Ask(id=ask_id, session=session, tool="Bash", input={"command": "ls"}, summary="Bash wants to run: ls",
               opened=1.0, deadline=121.0)


def test_an_ask_is_kept_and_its_answer_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    first, other = an_ask("a1"), an_ask("a2", session="elsewhere")
    with DeliveryLog(path) as log:
        log.put_ask(first.to_json())
        log.put_ask(other.to_json())
        first.state, first.decision, first.by, first.answered = "answered", "deny", "cli", 2.0
        log.put_ask(first.to_json())
    with DeliveryLog(path) as log:
        assert log.asks_of("s") == [first.to_json()]
        assert log.asks_of("elsewhere") == [other.to_json()]
        assert log.asks_of("nobody") == []


def test_a_schema_2_file_gains_the_asks(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:
        assert isinstance(log.admit(Delivery(event_id="e1", session="s", message=Person(text="hi", message_id="e1"))),
                          Proceed)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE asks")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    with DeliveryLog(path) as log:
        assert [r.event_id for r in log.entries()] == ["e1"]
        log.put_ask(an_ask("a1").to_json())
        assert [each["id"] for each in log.asks_of("s")] == ["a1"]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (3,)
    db.close()
