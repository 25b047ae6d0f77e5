"""Routing and receipts: a device whose page shows the session gets nothing
(and neither does anyone else: the person is looking), quiet hours, mute,
an ask answered before its notification went out; every outcome a receipt
that says why. The real outbox over a real delivery record (SQLite and
PostgreSQL), a push service on loopback."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import attrs
import pytest
import trio

from router.notify import record
from router.notify.core import Destination, Event, Presence, QuietHours, RoutingFacts, SessionSetting, parse_subscription, route
from router.turns.delivery_log import DeliveryLog
from tests.notify.conftest import Rig, waiting_ask, write_settings
from tests.notify.pushservice import Browser, PushService


async def _settled(rig: Rig, n: int = 1) -> list[dict[str, Any]]:
    """The newest event's receipts once ``n`` are final."""
    with trio.fail_after(20):
        while True:
            events = await rig.events()
            receipts = events[0]["receipts"] if events else []
            if len([r for r in receipts if r["outcome"] != "pending"]) >= n:
                return receipts
            await trio.sleep(0.01)


async def _phone(rig: Rig, service: PushService, device: str = "dev-1", name: str = "iPhone Safari") -> Browser:
    browser = Browser(service.endpoint(device))
    await rig.db(record.put_subscription, parse_subscription(browser.subscription, allow_http=True), device, name)
    return browser


async def test_a_visible_device_gets_nothing_and_the_receipts_say_why(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=["web-push"])
    with PushService() as service:
        await _phone(rig, service, "dev-1", "iPhone Safari")
        await _phone(rig, service, "dev-2", "Mac Chrome")
        rig.service.presence.post("dev-2", "Mac Chrome", visible=True, session="s-1", now=time.time())
        await rig.log.call(rig.log.put_ask, waiting_ask())
        receipts = {r["destination"]: r for r in await _settled(rig, 2)}
        assert service.received == []
    assert receipts["web-push: Mac Chrome"]["outcome"] == "suppressed"
    assert receipts["web-push: Mac Chrome"]["code"] == "visible"
    assert "this device" in receipts["web-push: Mac Chrome"]["detail"]
    assert receipts["web-push: iPhone Safari"]["code"] == "visible"
    assert "Mac Chrome" in receipts["web-push: iPhone Safari"]["detail"]


async def test_a_page_showing_another_session_is_away(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=["web-push"])
    with PushService() as service:
        await _phone(rig, service)
        rig.service.presence.post("dev-1", "iPhone Safari", visible=True, session="other", now=time.time())
        await rig.log.call(rig.log.put_ask, waiting_ask())
        (receipt,) = await _settled(rig)
        assert receipt["outcome"] == "sent" and len(service.received) == 1


async def test_quiet_hours_suppress(rig: Rig) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    quiet = {"start": (now - dt.timedelta(hours=1)).strftime("%H:%M"),
             "end": (now + dt.timedelta(hours=1)).strftime("%H:%M"), "time_zone": "UTC"}
    write_settings(rig.settings_dir, notifiers=["web-push"], notify={"quiet_hours": quiet})
    with PushService() as service:
        await _phone(rig, service)
        await rig.log.call(rig.log.put_ask, waiting_ask())
        (receipt,) = await _settled(rig)
        assert service.received == []
    assert receipt["outcome"] == "suppressed" and receipt["code"] == "quiet-hours"


async def test_a_muted_session_is_suppressed_and_others_are_not(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=["web-push"])
    setting = await rig.service.set_session("s-1", lambda current: attrs.evolve(current, muted=True))
    assert setting == SessionSetting(muted=True)
    with PushService() as service:
        await _phone(rig, service)
        await rig.log.call(rig.log.put_ask, waiting_ask("ask-1", "s-1"))
        (receipt,) = await _settled(rig)
        assert receipt["outcome"] == "suppressed" and receipt["code"] == "muted"
        await rig.log.call(rig.log.put_ask, waiting_ask("ask-2", "s-2"))
        with trio.fail_after(20):
            while len(service.received) < 1:
                await trio.sleep(0.01)


async def test_an_ask_answered_before_the_send_is_not_notified(rig: Rig) -> None:
    write_settings(rig.settings_dir, notifiers=["web-push"])
    answered = {**waiting_ask(), "state": "answered", "decision": "allow", "by": "cli", "answered": 2.0}

    def both() -> None:  # one transaction: the outbox sees the ask answered when it first looks
        rig.log.put_ask(waiting_ask())
        rig.log.put_ask(answered)

    with PushService() as service:
        await _phone(rig, service)
        await rig.log.call(both)
        (receipt,) = await _settled(rig)
        assert service.received == []
    assert receipt["outcome"] == "suppressed" and receipt["code"] == "answered"
    assert "answered" in receipt["detail"]


async def test_a_rule_answered_ask_and_a_second_write_make_no_second_event(rig: Rig) -> None:
    await rig.log.call(rig.log.put_ask, {**waiting_ask("ask-r"), "state": "answered", "by": "rule:Bash"})
    await rig.log.call(rig.log.put_ask, waiting_ask("ask-w"))
    await rig.log.call(rig.log.put_ask, waiting_ask("ask-w"))  # kept again (a restart)
    events = await rig.events()
    assert [e["ask"]["id"] for e in events] == ["ask-w"]


async def test_stops_parks_and_resumes_are_events(rig: Rig) -> None:
    from router.limits import Park
    from router.turns.brackets import StopInfo

    await rig.log.call(rig.log.put_stop, "s-1", StopInfo(reason="limit: token-limit x limit 1 count 2",
                                                         check="token-limit", at="2026-01-01T00:00:00Z"))
    await rig.log.call(rig.log.clear_stop, "s-1")
    await rig.log.call(rig.log.clear_stop, "s-1")  # nothing to clear: no event
    park = Park(session="s-2", account="acct", resets_at=1_900_000_000_000, limit_kind="five_hour", source="s-2",
                since=1_800_000_000_000, slot=0, jitter=0, resume_at=1_900_000_000_000)
    await rig.log.call(rig.log.put_park, park)
    await rig.log.call(rig.log.drop_park, "s-2")
    kinds = [e["kind"] for e in reversed(await rig.events())]
    assert kinds == ["limit-stopped", "resumed", "parked", "resumed"]
    parked = [e for e in await rig.events() if e["kind"] == "parked"][0]
    assert "2030-03-17" in parked["body"] and "five_hour" in parked["body"]


async def test_the_record_works_on_postgresql(tmp_path: Any, store_url: str, nursery: trio.Nursery) -> None:
    log = DeliveryLog(store_url)
    try:
        rig = Rig(tmp_path, log)
        write_settings(rig.settings_dir, notifiers=["web-push"])
        await rig.service.attach()
        await rig.service.attach()  # a second router on the same database: installed once
        await nursery.start(rig.service.run)
        with PushService() as service:
            browser = await _phone(rig, service)
            await rig.log.call(rig.log.put_ask, waiting_ask("ask-pg", "s-pg"))
            (receipt,) = await _settled(rig)
            assert receipt["outcome"] == "sent"
            assert browser.decrypt(service.received[0])["ask"]["id"] == "ask-pg"
    finally:
        nursery.cancel_scope.cancel()
        log.close()


def test_route_order_and_at_most_once_per_destination() -> None:
    event = Event(id="ntf-1", kind="ask", session="s", title="t", body="b", at=0,
                  ask={"id": "a", "tool": "Bash", "session": "s"})
    phone = Destination(id="web-push:d1", notifier="web-push", label="phone", device="d1")
    mail = Destination(id="apprise:x", notifier="apprise", label="mail")
    facts = RoutingFacts(now=0.0, ask_state="waiting")
    assert [d.destination.id for d in route(event, [phone, mail], facts)] == ["web-push:d1", "apprise:x"]
    assert [d.destination.id for d in route(event, [phone, mail], facts, final={"web-push:d1"})] == ["apprise:x"]
    midnight = QuietHours("23:00", "01:00", "UTC")
    assert midnight.contains(dt.datetime(2026, 1, 1, 0, 30, tzinfo=dt.timezone.utc).timestamp())
    assert not midnight.contains(dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc).timestamp())


def test_presence_lapses_without_a_renewal() -> None:
    presence = Presence(ttl=45.0)
    presence.post("d1", "phone", visible=True, session="s", now=100.0)
    assert presence.watching("s", 144.0) == {"d1": "phone"}
    assert presence.watching("s", 145.0) == {}
    presence.post("d1", "phone", visible=True, session="s", now=200.0)
    presence.post("d1", "phone", visible=False, session="s", now=201.0)
    assert presence.watching("s", 202.0) == {}


@pytest.mark.parametrize("bad", [{"start": "24:00", "end": "01:00"}, {"start": "1:00", "end": "02:00"},
                                 {"start": "01:00", "end": "02:00", "time_zone": "Mars/Olympus"}])
def test_bad_quiet_hours_are_a_clear_error(tmp_path: Any, bad: dict[str, str]) -> None:
    from router.notify.config import load_settings

    write_settings(tmp_path, notifiers=[], notify={"quiet_hours": bad})
    loaded = load_settings(tmp_path)
    assert loaded.error is not None and loaded.error.code == "bad-notify-settings"
    assert loaded.quiet is None


async def test_a_container_turn_that_ended_and_an_unreachable_daemon_are_events(tmp_path: Any,
                                                                                 nursery: trio.Nursery) -> None:
    """The host's store writes them in the transaction of the settle and of
    the daemon's state; "turn ended" only for a session that opted in."""
    from router.host.store import Store

    log = DeliveryLog(tmp_path / "turns.sqlite")
    store = Store(tmp_path / "host.sqlite")
    try:
        rig = Rig(tmp_path, log)
        rig.service.host_store = store
        write_settings(rig.settings_dir, notifiers=["web-push"])
        await rig.service.attach()
        await nursery.start(rig.service.run)
        await rig.service.set_session("s-on", lambda current: attrs.evolve(current, turn_ended=True))
        with PushService() as service:
            await _phone(rig, service)  # before the events: a destination to send them to
            for session in ("s-on", "s-off"):
                await store.call(store.sessions.create, session)
                await store.call(store.operations.enqueue, session, "op-1", "hello")
                await store.call(store.operations.settle, session, "op-1",
                                 {"status": "done", "text": "\nAll done.\nmore"})
            await store.call(lambda: store.sessions.set_daemon("s-off", state="unreachable",
                                                               reason="image-missing: no image"))
            with trio.fail_after(20):
                while len(service.received) < 2:
                    await trio.sleep(0.01)
        events = await rig.events()
        assert [(e["kind"], e["session"]) for e in events] == [("unreachable", "s-off"), ("turn-ended", "s-on")]
        assert events[1]["body"] == "s-on: All done." and "image-missing" in events[0]["body"]
    finally:
        nursery.cancel_scope.cancel()
        log.close()
        store.close()


async def test_in_a_cluster_the_writer_sends_and_another_takes_over_only_a_lapsed_claim(
        tmp_path: Any, store_url: str, nursery: trio.Nursery) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("a cluster shares a PostgreSQL record")
    logs = [DeliveryLog(store_url), DeliveryLog(store_url)]
    try:
        rigs = [Rig(tmp_path / name, log) for name, log in zip(("a", "b"), logs)]
        for rig, claimant in zip(rigs, ("r1", "r2")):
            rig.service.claimant = rig.service.notices.claimant = claimant
            write_settings(rig.settings_dir, notifiers=["web-push"])
            await rig.service.attach()
            await nursery.start(rig.service.run)
        with PushService() as service:
            await _phone(rigs[0], service)
            await rigs[0].log.call(rigs[0].log.put_ask, waiting_ask("ask-c", "s-c"))  # written by r1
            with trio.fail_after(20):
                # The sent receipt, not the push service's copy: the service
                # holds the message before the receipt is written.
                while rigs[0].service.statistics().sent < 1:
                    await trio.sleep(0.01)
            await rigs[1].service.drain()
            assert len(service.received) == 1
        assert (rigs[0].service.sent, rigs[1].service.sent) == (1, 0)
        # r1 is gone with an event open: r2 takes it only once r1's claim lapsed.
        await rigs[0].log.call(lambda: record.add_event(
            rigs[0].log.database, Event(id="ntf-left", kind="resumed", session="s-c", title="t", body="b", at=1),
            dedup="left", claimant="r-gone", until=int(time.time() * 1000) + 60_000))
        db = rigs[1].log.database
        now = int(time.time() * 1000)
        assert await rigs[1].log.call(lambda: record.claim(db, "r2-probe", now)) == []
        taken = await rigs[1].log.call(lambda: record.claim(db, "r2-probe", now + 61_000))
        assert [event.id for event in taken] == ["ntf-left"]
    finally:
        nursery.cancel_scope.cancel()
        for log in logs:
            log.close()


async def test_a_send_cut_short_to_a_destination_now_gone_fails_its_receipt(rig: Rig) -> None:
    """A router stopped mid-send, restarted with that destination gone (its
    notifier switched off): the receipt says so instead of staying pending."""
    event = Event(id="ntf-cut", kind="resumed", session="s-1", title="t", body="b", at=1)

    def cut() -> None:
        record.add_event(rig.log.database, event, dedup="cut", claimant="r1", until=0)
        record.put_receipt(rig.log.database, event.id, "web-push:dev-x", "web-push: Old Phone", "pending",
                           detail="sending")

    await rig.log.call(cut)
    rig.service.wake()
    with trio.fail_after(20):
        while True:
            (listed,) = await rig.events()
            if listed["receipts"][0]["outcome"] != "pending":
                break
            await trio.sleep(0.01)
    assert listed["receipts"][0]["outcome"] == "failed" and "no longer a destination" in listed["receipts"][0]["detail"]
