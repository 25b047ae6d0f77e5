"""A container session's live view meeting ``store-unavailable`` as it
follows the host's events again: the session stays open.

The view reads the host's store only when it (re)subscribes (the durable
position of each batch comes from the host's apply), so the store is made
to fail exactly there: the host's store is a PostgreSQL of this test's own,
stopped (a fast shutdown), and the session's link closed, so the view's
events end and its next subscription meets the server away past the retry
budget (``store-unavailable``). Asserted: the session is not closed and has
no failure; once the server is back the view follows again, and a viewer
sees a new turn's items live.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from router.daemon.adapters.echo import adapter as echo_adapter
from router.host import Host, HostSettings, Store
from router.turns.core import Answered, Delivery, Person
from router.turns.delivery_log import DeliveryLog
from router.turns.registry import SessionRegistry
from router.turns.router import TurnRouter
from tests.support import postgres as pg_support
from tests.support.polling import until
from tests.turns.conftest import FAST, start_daemon


def person(event_id: str, text: str) -> Delivery:
    return Delivery(event_id=event_id, session="root", message=Person(text=text, message_id=f"m-{event_id}"))


def resets(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Why the view was reset, in order (the hub logs each)."""
    return [record.getMessage() for record in caplog.records if record.name == "router.turns.live"]


def unavailable_seen(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether the view reset for ``store-unavailable``."""
    return any("store-unavailable" in why for why in resets(caplog))


def follows_again(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether the view followed the host's events again after it met
    ``store-unavailable`` (its subscription open: a viewer from now on is
    not reset)."""
    seen = resets(caplog)
    met = [i for i, why in enumerate(seen) if "store-unavailable" in why]
    return bool(met) and any("follows the host's events again" in why for why in seen[met[0] + 1:])


async def wait_for(condition: Any, timeout: float) -> None:
    with trio.fail_after(timeout):
        await until(condition, step=0.05)


@pytest.mark.skipif(pg_support.missing() is not None, reason=str(pg_support.missing()))
async def test_the_view_keeps_its_session_when_the_store_is_away_as_it_subscribes_again(
    tmp_path: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # A server of this test's own (it is stopped), started on this thread:
    # it dies with the thread that started it.
    server = pg_support.Cluster().start()
    store = log = None
    try:
        store = Store(server.create_database())
        log = DeliveryLog(tmp_path / "turns.db")
        async with trio.open_nursery() as nursery:
            endpoint, _daemon = await start_daemon(nursery, echo_adapter)
            host = Host(store, endpoint, HostSettings(**FAST))  # type: ignore[arg-type]
            await nursery.start(host.run)
            registry = SessionRegistry()
            await nursery.start(registry.run)
            router = TurnRouter(deliveries=log, registry=registry, host=host, env=env)

            first = await router.deliver(person("e1", "before"))
            assert isinstance(first, Answered)
            assert (await router.reply_of("root", "e1"))["text"] == "echo: before (turn 1)"
            session = registry.get("root")
            assert session is not None and "live-view" in session.tasks

            # The store goes away; the link closes, so the view subscribes
            # again and its first read meets the server down past the budget.
            server.shut_down("fast")
            await host.close_session("root")
            await wait_for(lambda: unavailable_seen(caplog) or session.failure is not None, timeout=60)
            assert session.failure is None, f"the view's store-unavailable closed the session: {session.failure!r}"
            assert registry.get("root") is session and "live-view" in session.tasks

            # Back: the view follows again and a viewer sees a new turn live.
            server.restart()
            await wait_for(lambda: follows_again(caplog), timeout=60)
            async with router.live("root") as stream:
                assert stream.snapshot is not None
                second = await router.deliver(person("e2", "after"))
                assert isinstance(second, Answered)
                seen: list[dict[str, Any]] = []
                with trio.fail_after(60):
                    async for items in stream:
                        seen += items
                        if any(item.get("type") == "turn-end" and item.get("id") == "e2" for item in items):
                            break
            assert (await router.reply_of("root", "e2"))["text"] == "echo: after (turn 2)"
            assert registry.get("root") is session and session.failure is None
            nursery.cancel_scope.cancel()
    finally:
        for each in (log, store):
            if each is not None:
                each.close()
        server.stop()
