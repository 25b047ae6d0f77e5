"""``router store copy`` takes the notifications' record and the paired
devices along (router.record.copy): the events of both SQLite files merged
in the order they were made and numbered anew, their receipts, the
browsers' push subscriptions, and every device (its credential's hash, its
revocation), so a phone paired before the move to PostgreSQL stays paired
and an event still open is still sent, oldest first."""

from __future__ import annotations

from pathlib import Path

from router import cli
from router.host import Store
from router.notify import record
from router.notify.core import Event, PushSubscription
from router.remote.devices import DeviceStore
from router.store.db import StoreTarget
from router.turns.delivery_log import DeliveryLog
from tests.support.postgres import postgres, postgres_url  # noqa: F401  (fixtures)

IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) AppleWebKit/605.1.15 Version/18.0 Safari/604.1"
ANDROID = "Mozilla/5.0 (Linux; Android 15) AppleWebKit/537.36 Chrome/140.0 Mobile Safari/537.36"
SUBSCRIPTION = PushSubscription(endpoint="https://push.example.invalid/send/abc", p256dh="BPk", auth="secret-auth")


def event(id: str, kind: str, at: int) -> Event:
    return Event(id=id, kind=kind, session="a", title=f"{kind} {id}", body="body", at=at)


def a_data_dir(root: Path) -> tuple[Path, str]:
    """A SQLite directory with events in both files (the host's made
    between the delivery record's two), one sent and finished, a
    subscription, a paired phone and a revoked one; the phone's secret."""
    data = root / "data"
    data.mkdir()
    with DeliveryLog(data / "turns.sqlite") as log:
        record.install(log.database)
        with log.database.transaction():
            record.add_event(log.database, event("ev-ask", "ask", 500), dedup="ask:k1", claimant="r1", until=0)
            record.add_event(log.database, event("ev-stop", "stopped", 2000), dedup="stop:a", claimant="r1", until=0)
            record.put_receipt(log.database, "ev-ask", "push:sub-1", "iPhone Safari", "sent", detail="201", status=201)
            record.finish(log.database, "ev-ask")
            record.put_subscription(log.database, SUBSCRIPTION, "dev-1", "iPhone Safari")
    with Store(data / "host.sqlite") as store:
        record.install(store.database)
        with store.database.transaction():
            record.add_event(store.database, event("ev-gone", "unreachable", 1000), dedup="unreachable:a",
                             claimant="r1", until=0)
    devices = DeviceStore.open(None, data)
    try:
        _, secret = devices.pair(IPHONE)
        devices.pair(ANDROID)
        devices.revoke("Android Chrome")
    finally:
        devices.close()
    return data, secret


def copied_notices(url: str) -> tuple[list[tuple[str, int]], list[dict[str, object]], list[dict[str, object]]]:
    with DeliveryLog(url) as log:
        rows = log.database.execute("SELECT id, seq FROM notify_events ORDER BY seq").fetchall()
        return [tuple(row) for row in rows], record.events(log.database), record.subscriptions(log.database)


def test_notices_and_devices_go_along_in_the_order_they_were_made(tmp_path: Path, postgres_url: str, capsys) -> None:
    data, secret = a_data_dir(tmp_path)
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert "notify_events: 3 rows" in out and "devices: 2 rows" in out and "notify_subscriptions: 1 rows" in out

    order, events, subscriptions = copied_notices(postgres_url)
    assert order == [("ev-ask", 1), ("ev-gone", 2), ("ev-stop", 3)]
    by_id = {each["id"]: each for each in events}
    assert [r["outcome"] for r in by_id["ev-ask"]["receipts"]] == ["sent"] and by_id["ev-stop"]["receipts"] == []
    assert subscriptions[0]["subscription"] == SUBSCRIPTION and subscriptions[0]["device"] == "dev-1"
    with DeliveryLog(postgres_url) as log:
        # What is still open is sent oldest first; the finished one is not sent again.
        claimed = record.claim(log.database, "r2", now=10**13)
    assert [each.id for each in claimed] == ["ev-gone", "ev-stop"]

    devices = DeviceStore.open(StoreTarget("postgresql", postgres_url), tmp_path)
    try:
        phone = devices.authenticate(secret)
        assert phone is not None and phone.name == "iPhone Safari"
        assert {d.name: d.revoked_at is not None for d in devices.devices()} == {
            "iPhone Safari": False, "Android Chrome": True}
    finally:
        devices.close()


def test_a_paired_device_in_the_target_is_refused_unless_replacing_and_then_idempotent(
        tmp_path: Path, postgres_url: str, capsys) -> None:
    data, _ = a_data_dir(tmp_path)
    devices = DeviceStore.open(StoreTarget("postgresql", postgres_url), tmp_path)
    try:
        devices.pair(IPHONE)
    finally:
        devices.close()
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 2
    assert "store-not-empty" in capsys.readouterr().err
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url, "--replace"]) == 0
    first = copied_notices(postgres_url)
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url, "--replace"]) == 0
    assert copied_notices(postgres_url) == first
    devices = DeviceStore.open(StoreTarget("postgresql", postgres_url), tmp_path)
    try:
        assert sorted(d.name for d in devices.devices()) == ["Android Chrome", "iPhone Safari"]
    finally:
        devices.close()


def test_a_directory_with_only_paired_devices_is_copied(tmp_path: Path, postgres_url: str, capsys) -> None:
    data = tmp_path / "data"
    devices = DeviceStore.open(None, data)
    try:
        _, secret = devices.pair(IPHONE)
    finally:
        devices.close()
    assert cli.main(["store", "copy", "--from", str(data), "--to", postgres_url]) == 0
    assert "devices: 1 rows" in capsys.readouterr().out
    devices = DeviceStore.open(StoreTarget("postgresql", postgres_url), tmp_path)
    try:
        assert devices.authenticate(secret) is not None
    finally:
        devices.close()
