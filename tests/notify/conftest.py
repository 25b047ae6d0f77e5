"""Fixtures for the notification tests: a delivery record with the
notifications hooked on it, the settings written as a person would."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio

from router.notify.outbox import Notifications
from router.plugins.settings import SettingsDir
from router.turns.delivery_log import DeliveryLog
from tests.support.postgres import postgres, postgres_url, store_url  # noqa: F401  (fixtures)


def write_settings(settings_dir: Path, *, notifiers: list[str], notify: dict[str, Any] | None = None) -> None:
    settings_dir.mkdir(parents=True, exist_ok=True)
    (settings_dir / "plugins.json").write_text(json.dumps({"plugins": {"notifier": notifiers}}))
    if notify is not None:
        path = settings_dir / "notifications.json"
        path.write_text(json.dumps(notify))
        os.chmod(path, 0o600)


def waiting_ask(ask_id: str = "ask-1", session: str = "s-1") -> dict[str, Any]:
    return {"id": ask_id, "session": session, "tool": "Bash", "input": {"command": "ls"},
            "summary": "Bash: ls", "since": 1.0, "deadline": 120.0, "state": "waiting"}


class Rig:
    def __init__(self, tmp: Path, log: DeliveryLog) -> None:
        self.tmp = tmp
        self.log = log
        self.settings_dir = tmp / "settings"
        self.service = Notifications(deliveries=log, settings=SettingsDir(self.settings_dir),
                                     settings_dir=self.settings_dir, data_dir=tmp / "data", claimant="r1")

    async def db(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.log.call(lambda: fn(self.log.database, *args, **kwargs))

    async def events(self, **kwargs: Any) -> list[dict[str, Any]]:
        return await self.service.events(**kwargs)


@pytest.fixture
async def rig(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Rig]:
    log = DeliveryLog(tmp_path / "turns.sqlite")
    made = Rig(tmp_path, log)
    write_settings(made.settings_dir, notifiers=[])
    await made.service.attach()
    await nursery.start(made.service.run)
    try:
        yield made
    finally:
        nursery.cancel_scope.cancel()
        log.close()
