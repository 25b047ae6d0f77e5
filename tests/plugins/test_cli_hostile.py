"""The settings commands given hostile patch files and settings files: a
refusal with a code on stderr (exit 1), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.cli import main


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
@pytest.mark.parametrize("command, key", [("plugins", "options"), ("routes", "instances"),
                                          ("limits", "limits")])
def test_a_deep_patch_file_is_refused(settings_dir: Path, tmp_path: Path, capsys, command: str,
                                      key: str, depth: int) -> None:
    assert main([command, "--settings", str(settings_dir), "--json"]) == 0
    revision = json.loads(capsys.readouterr().out)["revision"]
    patch = tmp_path / "patch.json"
    patch.write_text('{"revision": %s, "%s": {"x": %s}}' % (json.dumps(revision), key, deep(depth)))
    status = main([command, "--settings", str(settings_dir), "set", "--file", str(patch)])
    err = capsys.readouterr().err
    assert status == 1, err
    assert f"router {command} set: refused: invalid-patch: " in err


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
@pytest.mark.parametrize("name", ["plugins", "routes", "limits"])
def test_a_deep_settings_file_is_refused_when_shown(settings_dir: Path, capsys, name: str,
                                                    depth: int) -> None:
    (settings_dir / f"{name}.json").write_text('{"x": %s}' % deep(depth))
    status = main([name, "--settings", str(settings_dir)])
    err = capsys.readouterr().err
    assert status == 1 and "refused: invalid-settings: " in err, err


def test_huge_patch_and_settings_files_are_refused_unparsed(settings_dir: Path, tmp_path: Path,
                                                            capsys) -> None:
    from router.plugins.models import MAX_SETTINGS_BYTES

    huge = '{"revision": "r", "models": {"m": {"provider": "%s"}}}' % ("x" * MAX_SETTINGS_BYTES)
    patch = tmp_path / "patch.json"
    patch.write_text(huge)
    assert main(["routes", "--settings", str(settings_dir), "set", "--file", str(patch)]) == 1
    assert "refused: invalid-patch: " in capsys.readouterr().err
    (settings_dir / "routes.json").write_text(huge)
    assert main(["routes", "--settings", str(settings_dir)]) == 1
    assert "refused: invalid-settings: " in capsys.readouterr().err
