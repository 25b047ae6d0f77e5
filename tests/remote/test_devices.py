"""The devices' record (router.remote.devices) on both backends: pairing,
names, revocation; routers sharing one PostgreSQL share devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.store.db import StoreTarget
from router.errors import Refusal
from router.remote import DeviceStore, StreamBook
from router.remote.devices import StreamBookStatistics, hash_secret, name_from_agent

IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 Version/17.5 Mobile/15E148 Safari/604.1"


def _target(store_url: str, tmp_path: Path) -> StoreTarget:
    return StoreTarget("postgresql", store_url) if store_url.startswith("postgresql") else StoreTarget("sqlite", str(tmp_path))


def test_pair_authenticate_rename_revoke(store_url: str, tmp_path: Path) -> None:
    store = DeviceStore.open(_target(store_url, tmp_path), tmp_path)
    try:
        device, secret = store.pair(IPHONE, now=1000.0)
        assert device.name == "iPhone Safari" and device.credential == f"device:{device.id}"
        twin, _ = store.pair(IPHONE, now=1001.0)
        assert twin.name == "iPhone Safari-2"
        assert store.authenticate(secret, now=1002.0) == device  # within a minute: last use not written
        assert store.authenticate(secret, now=1100.0).last_used_at == 1_100_000  # type: ignore[union-attr]
        assert store.authenticate("x" * 43) is None and store.authenticate("") is None
        renamed = store.rename("iPhone Safari", "my phone")
        assert renamed.name == "my phone"
        with pytest.raises(Refusal) as taken:
            store.rename("iPhone Safari-2", "my phone")
        assert taken.value.code == "device-name-taken"
        revoked = store.revoke("my phone", now=1200.0)
        assert revoked.revoked_at == 1_200_000
        assert store.authenticate(secret) is None
        assert store.revoked_among([device.id, twin.id]) == {device.id}
        listed = {each.name: each for each in store.devices()}
        assert listed["my phone"].revoked_at is not None and listed["iPhone Safari-2"].revoked_at is None
        with pytest.raises(Refusal) as unknown:
            store.revoke("nobody")
        assert unknown.value.code == "unknown-device"
    finally:
        store.close()


def test_the_record_holds_only_the_secret_hash(tmp_path: Path) -> None:
    store = DeviceStore.open(None, tmp_path)
    _, secret = store.pair(IPHONE)
    store.close()
    raw = (tmp_path / "devices.sqlite").read_bytes()
    assert secret.encode() not in raw and hash_secret(secret).encode() in raw


def test_routers_sharing_postgresql_share_devices(postgres_url: str, tmp_path: Path) -> None:
    one = DeviceStore.open(StoreTarget("postgresql", postgres_url), tmp_path / "one")
    two = DeviceStore.open(StoreTarget("postgresql", postgres_url), tmp_path / "two")
    try:
        device, secret = one.pair(IPHONE)
        assert two.authenticate(secret).id == device.id  # type: ignore[union-attr]
        two.revoke(device.name)
        assert one.authenticate(secret) is None and one.revoked_among([device.id]) == {device.id}
    finally:
        one.close()
        two.close()


def test_stream_book() -> None:
    book = StreamBook()
    assert book.open("d1", "a") and book.open("d1", "b") and book.open("d2", "c")
    book.close("d1", "a")
    assert book.watched() == ["d1", "d2"]
    assert book.revoked("d1") == ["b"]
    assert not book.open("d1", "e") and book.statistics() == StreamBookStatistics(devices=1, streams=1, revoked=1)


@pytest.mark.parametrize(("agent", "name"), [
    (IPHONE, "iPhone Safari"),
    ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36", "Android Chrome"),
    ("curl/8.5", "Device browser"),
])
def test_names_from_user_agents(agent: str, name: str) -> None:
    assert name_from_agent(agent) == name


async def test_a_revocation_by_another_router_closes_the_streams_open_here(postgres_url: str, tmp_path: Path) -> None:
    import trio

    from router.remote import Reach, ReachConfig

    target = StoreTarget("postgresql", postgres_url)
    here = Reach(ReachConfig(), settings_dir=tmp_path / "here", devices=DeviceStore.open(target, tmp_path / "here"))
    there = DeviceStore.open(target, tmp_path / "there")
    try:
        device, secret = there.pair(IPHONE)
        async with trio.open_nursery() as nursery:
            await nursery.start(here.run)
            assert (await here.authenticate(secret)).id == device.id  # type: ignore[union-attr]
            with trio.CancelScope() as stream:
                assert here.streams.open(device.id, stream)
                await trio.to_thread.run_sync(there.revoke, device.name)
                with trio.fail_after(10):  # the watcher's round, not a timing this asserts
                    await trio.sleep_forever()
            assert stream.cancelled_caught and here.streams.statistics().streams == 0
            assert await here.authenticate(secret) is None
            nursery.cancel_scope.cancel()
    finally:
        there.close()
