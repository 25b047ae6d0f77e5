"""`router plugins`, `router routes` and `router limits`, through the real
command dispatcher, against a temporary settings directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.cli import main
from router.plugins.usage import JsonlRecords


@pytest.fixture
def run(settings_dir: Path, capsys, tmp_path: Path):
    def run(*argv: str, patch=None):
        args = list(argv)
        if patch is not None:
            file = tmp_path / "patch.json"
            file.write_text(patch if isinstance(patch, str) else json.dumps(patch))
            args += ["--file", str(file)]
        status = main([args[0], "--settings", str(settings_dir), *args[1:]])
        out, err = capsys.readouterr()
        return status, out, err

    return run


def revision(run, command: str) -> str:
    status, out, _ = run(command, "--json")
    assert status == 0
    return json.loads(out)["revision"]


def test_plugins_show(run) -> None:
    status, out, _ = run("plugins")
    assert status == 0
    assert "(defaults: the file does not exist yet)" in out
    assert "harness" in out and "echo" in out
    status, out, _ = run("plugins", "--json")
    shown = json.loads(out)
    assert shown["plugins"]["search-source"] == "harness-builtin"


def test_plugins_set_and_its_refusals(run, settings_dir: Path) -> None:
    rev = revision(run, "plugins")
    status, out, err = run("plugins", "set", "--actor", "ana",
                           patch={"revision": rev, "plugins": {"search-source": "searxng-url"},
                                  "options": {"search-source": {"searxng-url": {
                                      "url": "http://127.0.0.1:8888"}}}})
    assert status == 0, err
    assert "revision" in out
    status, out, _ = run("plugins", "--json")
    assert json.loads(out)["plugins"]["search-source"] == "searxng-url"
    [change] = [json.loads(line) for line in (settings_dir / "changes.jsonl").read_text().splitlines()]
    assert change["actor"] == "ana"
    assert change["changes"]["plugins.search-source"] == {"old": "harness-builtin",
                                                          "new": "searxng-url"}
    # The old revision is stale now.
    status, _, err = run("plugins", "set", patch={"revision": rev, "plugins": {"channel": []}})
    assert status == 1 and "refused: stale-revision" in err
    new = revision(run, "plugins")
    for patch, code in [
        ({"revision": new, "plugins": {"harness": ["nope"]}}, "unknown-plugin"),
        ({"revision": new, "plugins": {"nope": []}}, "unknown-kind"),
        ({"revision": new}, "empty-patch"),
        ({"revision": new, "plugins": {"harness": "echo"}}, "invalid-plugins"),
        ("{not json", "invalid-patch"),
        ({"plugins": {"harness": []}}, "invalid-patch"),
    ]:
        status, _, err = run("plugins", "set", patch=patch)
        assert status == 1 and f"refused: {code}:" in err, (patch, err)


def test_secrets_are_not_shown(run) -> None:
    rev = revision(run, "plugins")
    run("plugins", "set", patch={"revision": rev, "options": {"harness": {"container": {
        "url": "http://127.0.0.1:1", "token": "hunter2"}}}})
    for argv in (("plugins",), ("plugins", "--json")):
        status, out, _ = run(*argv)
        assert status == 0 and "hunter2" not in out and "<redacted>" in out


def test_a_patch_file_that_cannot_be_read_is_a_usage_error(run, tmp_path: Path) -> None:
    status, _, err = run("plugins", "set", "--file", str(tmp_path / "missing.json"))
    assert status == 2 and "cannot read" in err


def test_routes_show_and_set(run) -> None:
    status, out, _ = run("routes")
    assert status == 0 and "default" in out and "echo/echo/off  [ok]" in out
    rev = revision(run, "routes")
    status, _, err = run("routes", "set", patch={"revision": rev, "instances": {
        "coder": {"harness": "claude-code", "model": "claude-opus-4-5", "thinking": "high"}}})
    assert status == 1 and "refused: harness-off:" in err
    plugins_rev = revision(run, "plugins")
    assert run("plugins", "set", patch={"revision": plugins_rev,
                                        "plugins": {"harness": ["echo", "claude-code"]}})[0] == 0
    status, _, err = run("routes", "set", patch={"revision": rev, "instances": {
        "coder": {"harness": "claude-code", "model": "claude-opus-4-5", "thinking": "off"}}})
    assert status == 1 and "refused: thinking-unsupported:" in err
    status, _, err = run("routes", "set", patch={"revision": rev, "instances": {
        "coder": {"harness": "claude-code", "model": "claude-opus-4-5", "thinking": "high"}}})
    assert status == 1 and "refused: unknown-model:" in err
    status, _, err = run("routes", "set", patch={
        "revision": rev, "models": {"claude-opus-4-5": {"provider": "anthropic"}},
        "instances": {"coder": {"harness": "claude-code", "model": "claude-opus-4-5",
                                "thinking": "high", "account": "max",
                                "fallback": {"harness": "echo", "model": "echo",
                                             "thinking": "off"}}}})
    assert status == 0, err
    status, out, _ = run("routes", "--json")
    checks = {row["instance"]: row for row in json.loads(out)["checks"]}
    assert checks["coder"]["primary"]["status"] == "ok"
    assert checks["coder"]["fallback"]["status"] == "ok"
    assert checks["coder"]["account"] == "max"
    status, _, err = run("routes", "set", patch={"revision": revision(run, "routes"), "instances": {
        "coder": {"harness": "echo", "model": "echo", "thinking": "off",
                  "fallback": {"harness": "echo"}}}})
    assert status == 1 and "refused: partial-fallback:" in err


def test_limits_set_reset_and_report(run, tmp_path: Path) -> None:
    records = tmp_path / "usage.jsonl"
    status, out, _ = run("limits", "--records", str(records))
    assert status == 0 and "no limits are set" in out
    rev = revision(run, "limits")
    status, _, err = run("limits", "set", patch={"revision": rev, "limits": {"tokens": {
        "instances": {"default": {"limit": 1000}},
        "daily": {"max": {"limit": 50, "reset": "05:00", "time_zone": "America/Chicago"}},
    }}})
    assert status == 0, err
    store = JsonlRecords(records)
    store.append({"instance": "default", "account": "max", "at": "2099-01-01T00:00:00Z",
                  "usage": {"input": 1, "output": 2, "cache_creation": 3, "cache_read": 4}})
    status, out, _ = run("limits", "--records", str(records), "--json")
    report = {".".join(e["path"]): e for e in json.loads(out)["report"]}
    assert report["tokens.instances.default"]["status"] == "counted"
    assert report["tokens.daily.max"]["status"] == "counted"
    status, out, _ = run("limits", "--records", str(records))
    assert "tokens.daily.max:" in out and "own use of the account" in out
    # A quota the check cannot read is refused before it is stored.
    status, _, err = run("limits", "set", patch={"revision": revision(run, "limits"), "limits": {
        "tokens": {"daily": {"max": {"limit": 50, "reset": "05:00", "time_zone": "Mars/Base"}}}}})
    assert status == 1 and "refused: invalid-quota:" in err
    status, _, err = run("limits", "set", patch={"revision": revision(run, "limits"), "limits": {
        "tokens": {"instances": {"default": {"limit": 5, "since": "2000-01-01T00:00:00Z"}}}}})
    assert status == 1 and "refused: since-fixed:" in err
    before = json.loads(run("limits", "--json")[1])["limits"]["tokens"]["instances"]["default"]
    status, _, err = run("limits", "reset", "tokens.instances.default")
    assert status == 0, err
    after = json.loads(run("limits", "--json")[1])["limits"]["tokens"]["instances"]["default"]
    assert after["limit"] == before["limit"] and after["since"] >= before["since"]
    status, _, err = run("limits", "reset", "tokens.instances.nobody")
    assert status == 1 and "refused: unknown-limit:" in err


def test_limits_report_shows_a_failed_check(run, settings_dir: Path, tmp_path: Path) -> None:
    rev = revision(run, "limits")
    run("limits", "set", patch={"revision": rev, "limits": {"tokens": {
        "instances": {"default": {"limit": 1000}}}}})
    # Hand-edit the limit into something token-limit cannot read.
    path = settings_dir / "limits.json"
    value = json.loads(path.read_text())
    value["limits"]["tokens"]["instances"]["default"]["since"] = "yesterday"
    path.write_text(json.dumps(value))
    status, out, _ = run("limits", "--records", str(tmp_path / "none.jsonl"))
    assert status == 0
    assert "tokens.instances.default: check failed: invalid-limit" in out


def test_plugins_shows_a_hand_edited_setting_as_written_with_its_refusal(run, settings_dir: Path) -> None:
    settings_dir.mkdir(parents=True, exist_ok=True)
    (settings_dir / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": "echo", "channel": ["cli"]},
        "options": {"harness": {"echo": {"token": "s3cret"}, "other": [1]}},
        "note": "kept",
    }))
    status, out, _ = run("plugins")
    assert status == 0
    assert '"echo" (refused: invalid-plugins)' in out
    assert "options harness/echo" in out and "s3cret" not in out and "harness/other" not in out
    status, out, _ = run("plugins", "--json")
    shown = json.loads(out)
    assert shown["plugins"] == {"harness": "echo", "channel": ["cli"]}
    assert shown["options"] == {"harness": {"echo": {"token": "<redacted>"}}}
