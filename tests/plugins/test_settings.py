"""Settings: plugins.json patches, revisions, atomic writes, the change log,
and two writers racing."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from router.plugins.defaults import PLUGINS
from router.plugins.loader import check_paths
from router.plugins.settings import SettingsDir, apply_plugins_patch, redact, revision_of
from wire.json import loads


def exists(kind: str, name: str):
    return check_paths(kind, name)


def patch_plugins(settings: SettingsDir, patch: dict, actor: str = "tester"):
    return settings.update(
        "plugins.json", patch.get("revision"),
        lambda current: apply_plugins_patch(current, patch, module_exists=exists),
        actor=actor,
    )


def test_a_missing_file_reads_as_the_defaults(settings_dir: Path) -> None:
    document = SettingsDir(settings_dir).read("plugins.json")
    assert not document.exists
    assert document.value == dict(PLUGINS)
    assert document.revision == revision_of(b"")


def test_a_patch_changes_only_the_kinds_it_names_and_logs_the_change(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    first = settings.read("plugins.json")
    written = patch_plugins(settings, {"revision": first.revision,
                                       "plugins": {"harness": ["echo", "claude-code"],
                                                   "limit-check": None}})
    assert written.value["plugins"]["harness"] == ["echo", "claude-code"]
    assert "limit-check" not in written.value["plugins"]
    assert written.value["plugins"]["channel"] == ["cli", "webui"]  # untouched
    again = settings.read("plugins.json")
    assert again.value == written.value
    assert again.revision == written.revision == revision_of(
        (settings_dir / "plugins.json").read_bytes())
    [change] = settings.changes()
    assert change["actor"] == "tester"
    assert change["file"] == "plugins.json"
    assert (change["old_revision"], change["new_revision"]) == (first.revision, written.revision)
    assert change["changes"] == {
        "plugins.harness": {"old": ["echo"], "new": ["echo", "claude-code"]},
        "plugins.limit-check": {"old": ["token-limit", "daily-quota"], "new": None},
    }


def test_no_temporary_file_is_left_and_the_file_is_private(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    patch_plugins(settings, {"revision": settings.read("plugins.json").revision,
                             "plugins": {"channel": ["cli"]}})
    names = sorted(p.name for p in settings_dir.iterdir())
    assert names == [".settings.lock", "changes.jsonl", "plugins.json"]
    assert (settings_dir / "plugins.json").stat().st_mode & 0o077 == 0


def test_a_failed_write_leaves_the_old_file(settings_dir: Path, monkeypatch) -> None:
    settings = SettingsDir(settings_dir)
    settings.ensure("plugins.json")
    before = (settings_dir / "plugins.json").read_bytes()
    import router.plugins.settings as module

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(module.os, "fsync", crash)
    with pytest.raises(OSError):
        patch_plugins(settings, {"revision": revision_of(before), "plugins": {"channel": []}})
    assert (settings_dir / "plugins.json").read_bytes() == before
    assert [p.name for p in settings_dir.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    "patch, code",
    [
        (["not", "an", "object"], "invalid-patch"),
        ({"plugins": {"harness": ["echo"]}}, "invalid-patch"),  # no revision
        ({"revision": "R", "plugins": {"harness": ["echo"]}, "extra": 1}, "invalid-patch"),
        ({"revision": "R", "plugins": ["echo"]}, "invalid-patch"),
        ({"revision": "R", "plugins": {"harness": "echo"}}, "invalid-plugins"),
        ({"revision": "R", "plugins": {"search-source": ["searxng-url"]}}, "invalid-plugins"),
        ({"revision": "R", "plugins": {"harness": ["echo", "echo"]}}, "invalid-plugins"),
        ({"revision": "R", "plugins": {"harness": ["Echo"]}}, "bad-name"),
        ({"revision": "R", "plugins": {"telepathy": ["x"]}}, "unknown-kind"),
        ({"revision": "R", "options": {"telepathy": {"x": {}}}}, "unknown-kind"),
        ({"revision": "R", "plugins": {"harness": ["echo", "no-such-harness"]}}, "unknown-plugin"),
        ({"revision": "R", "options": {"harness": {"no-such-harness": {"a": 1}}}}, "unknown-plugin"),
        ({"revision": "R", "options": {"harness": {"container": "url"}}}, "invalid-patch"),
        ({"revision": "R"}, "empty-patch"),
        ({"revision": "R", "plugins": {}, "options": {}}, "empty-patch"),
        ({"revision": "R", "options": {"harness": {}}}, "empty-patch"),
    ],
)
def test_every_refusal_of_a_plugins_patch(settings_dir: Path, patch, code: str) -> None:
    settings = SettingsDir(settings_dir)
    if isinstance(patch, dict) and "revision" in patch:
        patch["revision"] = settings.read("plugins.json").revision
    refusal = apply_plugins_patch(settings.read("plugins.json").value, patch, module_exists=exists)
    assert refusal.code == code, refusal
    assert refusal.message
    # Through the writer: nothing is written and nothing logged.
    if isinstance(patch, dict) and "revision" in patch:
        assert patch_plugins(settings, patch).code == code
    assert not (settings_dir / "plugins.json").exists()
    assert settings.changes() == []


def test_options_are_set_removed_and_redacted_in_the_log(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    revision = settings.read("plugins.json").revision
    doc = patch_plugins(settings, {"revision": revision, "options": {
        "harness": {"container": {"url": "http://127.0.0.1:1", "token": "s3cret"}}}})
    assert doc.value["options"]["harness"]["container"]["token"] == "s3cret"
    assert "s3cret" not in (settings_dir / "changes.jsonl").read_text()
    doc = patch_plugins(settings, {"revision": doc.revision,
                                   "options": {"harness": {"container": None}}})
    assert doc.value["options"] == {}
    assert redact({"a": {"api_key": "x", "n": [{"token": "y"}]}}) == {
        "a": {"api_key": "<redacted>", "n": [{"token": "<redacted>"}]}}


def test_identical_bytes_share_a_revision(settings_dir: Path) -> None:
    """A patch made against bytes identical to the current ones applies:
    the revision names the content, not the number of writes."""
    settings = SettingsDir(settings_dir)
    start = settings.read("plugins.json").revision
    once = patch_plugins(settings, {"revision": start, "plugins": {"channel": ["cli"]}})
    twice = patch_plugins(settings, {"revision": once.revision, "plugins": {"channel": ["cli"]}})
    assert twice.revision == once.revision
    assert patch_plugins(settings, {"revision": once.revision,
                                    "plugins": {"channel": ["webui"]}}).revision != once.revision


def test_stale_revision(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    old = settings.read("plugins.json").revision
    patch_plugins(settings, {"revision": old, "plugins": {"channel": ["cli"]}})
    refusal = patch_plugins(settings, {"revision": old, "plugins": {"channel": ["webui"]}})
    assert refusal.code == "stale-revision"
    assert settings.read("plugins.json").value["plugins"]["channel"] == ["cli"]
    assert len(settings.changes()) == 1


def test_a_hand_edit_changes_the_revision(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    doc = patch_plugins(settings, {"revision": settings.read("plugins.json").revision,
                                   "plugins": {"channel": ["cli"]}})
    path = settings_dir / "plugins.json"
    path.write_text(path.read_text().replace('"cli"', '"webui"'))
    refusal = patch_plugins(settings, {"revision": doc.revision, "plugins": {"harness": []}})
    assert refusal.code == "stale-revision"


def test_a_file_that_is_not_json_refuses_reads_and_writes(settings_dir: Path) -> None:
    (settings_dir / "plugins.json").write_text("{torn")
    settings = SettingsDir(settings_dir)
    assert settings.read("plugins.json").code == "invalid-settings"
    refusal = patch_plugins(settings, {"revision": revision_of(b"{torn"), "plugins": {"harness": []}})
    assert refusal.code == "invalid-settings"


def _distinct_patch(revision: str, round_: int, writer: int) -> dict:
    # Each writer writes different bytes: two identical contents share a
    # revision (by design), which would make a same-content race uninteresting.
    return {"revision": revision,
            "options": {"harness": {"echo": {"round": round_, "writer": writer}}}}


def _race_thread(settings_dir: Path, revision: str, round_: int, barrier, results, index) -> None:
    settings = SettingsDir(settings_dir)
    barrier.wait()
    answer = patch_plugins(settings, _distinct_patch(revision, round_, index),
                           actor=f"writer-{index}")
    results[index] = getattr(answer, "code", "written")


def test_two_writers_in_threads_holding_one_revision(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    for round_ in range(20):
        revision = settings.read("plugins.json").revision
        barrier = threading.Barrier(2)
        results: list = [None, None]
        threads = [
            threading.Thread(target=_race_thread,
                             args=(settings_dir, revision, round_, barrier, results, i))
            for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["stale-revision", "written"], (round_, results)
    changes = settings.changes()
    assert len(changes) == 20
    # Every change starts from the revision the previous one ended at.
    for before, after in zip(changes, changes[1:]):
        assert after["old_revision"] == before["new_revision"]


def _race_process(settings_dir: str, revision: str, round_: int, writer: int, start, queue) -> None:
    settings = SettingsDir(settings_dir)
    start.wait()
    answer = patch_plugins(settings, _distinct_patch(revision, round_, writer))
    queue.put(getattr(answer, "code", "written"))


def test_two_writer_processes_holding_one_revision(settings_dir: Path) -> None:
    context = multiprocessing.get_context("fork")
    settings = SettingsDir(settings_dir)
    for round_ in range(5):
        revision = settings.read("plugins.json").revision
        start = context.Event()
        queue = context.Queue()
        processes = [
            context.Process(target=_race_process,
                            args=(str(settings_dir), revision, round_, writer, start, queue))
            for writer in range(2)
        ]
        for p in processes:
            p.start()
        start.set()
        results = sorted(queue.get(timeout=30) for _ in processes)
        for p in processes:
            p.join(timeout=30)
            assert p.exitcode == 0
        assert results == ["stale-revision", "written"]
    lines = (settings_dir / "changes.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(type(loads(line)) is dict for line in lines)


def test_ensure_writes_the_defaults_once(settings_dir: Path) -> None:
    settings = SettingsDir(settings_dir)
    first = settings.ensure("plugins.json")
    assert first.exists
    second = settings.ensure("plugins.json")
    assert second.revision == first.revision
    assert len(settings.changes()) == 1
