"""Configuration errors and a destination's last failure are refusals, shown
in the refusal's one JSON spelling (``{"notifier", "error", "message"}``,
docs/notifications.md "HTTP"), whatever a notifier's ``check`` answered: its
rows, a row of another shape, or a crash."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import trio

from router.errors import Refusal
from router.notify.core import NotifyProblem, check_problems
from router.notify.outbox import Notifications
from router.plugins.settings import SettingsDir
from router.turns.delivery_log import DeliveryLog
from tests.notify.conftest import write_settings

SEND = """
INTERFACE_VERSION = 1

def destinations(context):
    return []

async def send(request, context):
    return {"outcome": "sent", "detail": "sent"}
"""


def write_notifier(root: Path, name: str, check: str) -> None:
    directory = root / "notifier" / name
    directory.mkdir(parents=True)
    (directory / "__init__.py").write_text(SEND + "\n" + textwrap.dedent(check))


def test_a_checks_rows_are_refusals_and_a_row_of_another_shape_is_one_too() -> None:
    found = [{"code": "apprise-bad-url", "message": "apprise cannot read the URL"}, {"code": "Not Kebab"}]
    good, odd = check_problems("apprise", found)
    assert good == NotifyProblem(notifier="apprise", refusal=Refusal("apprise-bad-url", "apprise cannot read the URL"))
    assert (good.code, good.message) == ("apprise-bad-url", "apprise cannot read the URL")
    assert odd.to_json() == {"notifier": "apprise", "error": "notifier-check-malformed",
                             "message": "the apprise notifier's check answered {'code': 'Not Kebab'}, "
                                        "not a list of {code, message}"}
    (whole,) = check_problems("apprise", None)  # not a list at all
    assert (whole.code, whole.message) == (
        "notifier-check-malformed", "the apprise notifier's check answered None, not a list of {code, message}")
    assert check_problems("apprise", []) == []


def test_a_failure_carries_its_time_in_the_same_spelling() -> None:
    failed = NotifyProblem(notifier="web-push", refusal=Refusal("send-failed", "410: the subscription is gone"),
                           at=1764642000000)
    assert failed.to_json() == {"notifier": "web-push", "error": "send-failed",
                                "message": "410: the subscription is gone", "at": 1764642000000}


async def test_the_settings_view_shows_each_problem_as_a_refusal(tmp_path: Path) -> None:
    root = tmp_path / "plugins"
    write_notifier(root, "crashes", """
        def check(context):
            raise RuntimeError("boom")
    """)
    write_notifier(root, "odd", """
        def check(context):
            return [{"code": "odd-url", "message": "odd cannot read its URL"}, "nonsense"]
    """)
    settings_dir = tmp_path / "settings"
    write_settings(settings_dir, notifiers=["crashes", "odd"])
    path = settings_dir / "notifications.json"
    path.write_text(json.dumps({"quiet_hours": "always"}))
    os.chmod(path, 0o600)
    log = DeliveryLog(tmp_path / "turns.sqlite")
    try:
        service = Notifications(deliveries=log, settings=SettingsDir(settings_dir), settings_dir=settings_dir,
                                data_dir=tmp_path / "data", claimant="r1", loader_root=str(root))
        with trio.fail_after(30):
            await service.attach()
            view = await service.view()
            write_settings(settings_dir, notifiers=["absent"])
            refused = (await service.view())["errors"]
    finally:
        log.close()
    errors = {(e["notifier"], e["error"]): e for e in view["errors"]}
    assert all(set(e) == {"notifier", "error", "message"} for e in view["errors"]), view["errors"]
    assert list(errors) == [(None, "bad-notify-settings"), ("crashes", "notifier-check-failed"), ("odd", "odd-url"),
                            ("odd", "notifier-check-malformed")]
    assert errors["crashes", "notifier-check-failed"]["message"] == \
        "the crashes notifier's check failed: RuntimeError: boom"
    assert errors["odd", "odd-url"]["message"] == "odd cannot read its URL"
    assert errors["odd", "notifier-check-malformed"]["message"] == \
        "the odd notifier's check answered nonsense, not a list of {code, message}"
    assert "notifications.json: quiet_hours: " in errors[None, "bad-notify-settings"]["message"]
    assert refused[1]["notifier"] == "absent" and refused[1]["error"] == "missing"
    assert refused[1]["message"].startswith('no notifier module "absent" in the plug-in tree')
