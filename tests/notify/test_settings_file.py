"""``notifications.json`` with hostile input: any JSON is either the typed
settings or one ``bad-notify-settings`` refusal naming the bad field's path,
never another exception; and what the router writes, it reads back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.notify.config import NotifySettings, load_settings, save_settings
from router.notify.core import QuietHours, SessionSetting

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=16,
)
times = st.one_of(st.sampled_from(["22:00", "07:00", "24:00", "1:00", "23:59"]), json_values)
documents = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "notifiers": st.one_of(json_values, st.dictionaries(st.sampled_from(["apprise", "web-push", ""]),
                                                        st.one_of(json_values, st.dictionaries(st.text(max_size=5),
                                                                                               json_values)))),
    "quiet_hours": st.one_of(json_values, st.fixed_dictionaries(
        {"start": times, "end": times},
        optional={"time_zone": st.one_of(st.sampled_from(["UTC", "Europe/Paris", "Mars/Olympus", "../etc"]),
                                         json_values)})),
    "turn_ended": json_values,
    "sessions": st.one_of(json_values, st.dictionaries(st.text(max_size=5), st.one_of(json_values, st.dictionaries(
        st.sampled_from(["muted", "turn_ended", "other"]), st.one_of(st.booleans(), json_values))))),
    "other": json_values,
}))


def _write(folder: Path, text: str) -> None:
    path = folder / "notifications.json"
    path.write_text(text)
    os.chmod(path, 0o600)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=documents)
def test_any_document_is_typed_settings_or_one_refusal(tmp_path: Path, document: Any) -> None:
    _write(tmp_path, json.dumps(document))
    loaded = load_settings(tmp_path)
    assert type(loaded) is NotifySettings
    if loaded.error is not None:
        assert loaded.error.code == "bad-notify-settings"
        assert loaded.error.message.startswith("notifications.json: ")
        assert loaded == NotifySettings(error=loaded.error)
        return
    assert type(loaded.turn_ended) is bool and (loaded.quiet is None or type(loaded.quiet) is QuietHours)
    assert all(type(k) is str and type(v) is SessionSetting and type(v.muted) is bool
               and type(v.turn_ended) is bool for k, v in loaded.sessions.items())
    assert all(type(k) is str and type(v) is dict for k, v in loaded.notifiers.items())
    save_settings(tmp_path, loaded)
    assert load_settings(tmp_path) == loaded


@pytest.mark.parametrize(("document", "path"), [
    ({"sessions": {"s1": {"muted": "yes"}}}, 'sessions["s1"].muted: expected a boolean, got a string'),
    ({"sessions": {"s1": {"muted": True, "loud": True}}}, 'sessions["s1"]: keys it does not take: loud'),
    ({"quiet_hours": {"start": "22:00"}}, "quiet_hours.end: required"),
    ({"quiet_hours": {"start": 22, "end": "07:00"}}, "quiet_hours.start: expected a string, got a number"),
    ({"notifiers": {"apprise": ["ntfys://x"]}}, 'notifiers["apprise"]: expected an object, got an array'),
    ({"turn_ended": "no"}, "turn_ended: expected a boolean, got a string"),
    ({"turnEnded": True}, "keys it does not take: turnEnded"),
    ([], "expected a JSON object, got an array"),
])
def test_a_bad_field_is_named_by_its_path(tmp_path: Path, document: Any, path: str) -> None:
    _write(tmp_path, json.dumps(document))
    error = load_settings(tmp_path).error
    assert error is not None and error.code == "bad-notify-settings"
    assert error.message.startswith(f"notifications.json: {path}; fix the file"), error.message


def test_the_documented_file_reads_as_written(tmp_path: Path) -> None:
    """The example of docs/notifications.md, with null quiet hours read as none."""
    document = {"notifiers": {"web-push": {"subject": "mailto:me@example.org"},
                              "apprise": {"urls": ["ntfys://ntfy.sh/my-private-topic"]}},
                "quiet_hours": {"start": "23:00", "end": "07:00", "time_zone": "Europe/Paris"},
                "turn_ended": False, "sessions": {"s1": {"muted": True}}}
    _write(tmp_path, json.dumps(document))
    loaded = load_settings(tmp_path)
    assert loaded.error is None
    assert loaded.quiet == QuietHours("23:00", "07:00", "Europe/Paris")
    assert loaded.sessions == {"s1": SessionSetting(muted=True, turn_ended=False)}
    assert loaded.notifiers["apprise"] == {"urls": ["ntfys://ntfy.sh/my-private-topic"]}
    _write(tmp_path, json.dumps({"quiet_hours": None}))
    assert load_settings(tmp_path) == NotifySettings()
