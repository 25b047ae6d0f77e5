"""The record's stops and launches (schema 2): a stop survives a restart
until it is cleared; a launch is kept without its secrets; a file written by
the schema-1 router gains both tables and keeps its deliveries."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from router.plugins.routing import LaunchRecord
from router.turns.brackets import StopInfo
from router.turns.core import Delivery, Person, Proceed
from router.limits import Park
from router.turns.delivery_log import SCHEMA_VERSION, DeliveryLog

STOP = StopInfo(reason="limit: token-limit tokens.instances.default limit 5 count 7", check="token-limit",
                at="2030-01-01T00:00:00.000Z")
LAUNCH = LaunchRecord(
    instance="coder", session="s1", route="primary", route_reason="the instance's route", harness="container",
    model="m", thinking="off", provider="p", account=None, harness_version="container-protocol 1",
    reach={"via": "daemon", "url": "ws://127.0.0.1:1", "token": "hunter2"}, env={"SECRET": "hunter2"},
)


def test_a_stop_survives_a_restart_until_cleared(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:
        assert log.stop_of("s1") is None and log.stops() == {}
        log.put_stop("s1", STOP)
        log.put_launch("s1", LAUNCH)
    with DeliveryLog(path) as log:
        assert log.stop_of("s1") == STOP and log.stops() == {"s1": STOP}
        launch = log.launch_of("s1")
        assert launch is not None and launch.subject() == LAUNCH.subject()
        assert launch.reach == {"via": "daemon"} and launch.env == {}
        assert log.clear_stop("s1") and not log.clear_stop("s1")
        assert log.stop_of("s1") is None and log.launch_of("nobody") is None
    assert b"hunter2" not in path.read_bytes()


@pytest.mark.parametrize("version,dropped", [
    (1, ("stops", "launches", "asks", "parks", "park_work")), (2, ("asks", "parks", "park_work")),
    (3, ("parks", "park_work")),
])
def test_an_older_file_gains_the_tables(tmp_path: Path, version: int, dropped: tuple[str, ...]) -> None:
    from router.asks import Ask

    path = tmp_path / "turns.db"
    with DeliveryLog(path) as log:
        assert isinstance(log.admit(Delivery(event_id="e1", session="s", message=Person(text="hi", message_id="e1"))),
                          Proceed)
    db = sqlite3.connect(path)
    for table in dropped:
        db.execute(f"DROP TABLE {table}")
    db.execute(f"PRAGMA user_version={version}")
    db.commit()
    db.close()
    ask = Ask(id="a1", session="s", tool="Bash", input={}, summary="Bash wants to run: {}", opened=1.0, deadline=2.0)
    with DeliveryLog(path) as log:
        assert [r.event_id for r in log.entries()] == ["e1"]
        log.put_stop("s", STOP)
        assert log.stop_of("s") == STOP
        log.put_ask(ask.to_json())
        assert log.asks_of("s") == [ask.to_json()]
        park = Park(session="s", account="default", resets_at=10, limit_kind="five_hour", source="s", since=1,
                    slot=0, jitter=3, resume_at=5_013)
        log.put_park(park)
        assert log.keep("s", "e1", "delivery") and not log.keep("s", "e1", "delivery")
        assert log.parks() == [park] and log.kept("s") == [("e1", "delivery", "kept")]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (4,)
    db.close()
