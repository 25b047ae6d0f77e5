"""The asks in the delivery record (schema 3): kept per ask id, replaced as
the ask is answered (an older file gains the table: test_record_stops)."""

from __future__ import annotations

from pathlib import Path

from router.asks import Ask
from router.turns.delivery_log import DeliveryLog


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
