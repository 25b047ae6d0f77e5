"""``router daemon --adapter acp`` refuses what cannot run, with a code and
a sentence, exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.api.processes import REPO


def daemon(*args: str, settings: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CF_HARNESS_TOKEN": "t", "CF_HARNESS_RUNTIME_ID": "r", "CF_HARNESS_PORT": "0",
           "PYTHONPATH": str(REPO)}
    if settings is not None:
        env["ROUTER_SETTINGS_DIR"] = str(settings)
    return subprocess.run([sys.executable, "-m", "router", "daemon", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60)


def test_acp_without_a_command_is_refused():
    done = daemon("--adapter", "acp")
    assert done.returncode == 2 and "acp-agent-missing" in done.stderr and "-- COMMAND" in done.stderr


def test_an_agent_not_in_the_settings_is_refused_naming_those_that_are(tmp_path: Path):
    (tmp_path / "plugins.json").write_text(json.dumps({"options": {"harness": {"acp": {"agents": {
        "claude": ["npx", "@zed-industries/claude-code-acp"]}}}}}))
    done = daemon("--adapter", "acp:codex", settings=tmp_path)
    assert done.returncode == 2 and "acp-agent-unknown" in done.stderr and "known: claude" in done.stderr
    (tmp_path / "plugins.json").write_text(json.dumps({"options": {"harness": {"acp": {"agents": {
        "claude": "npx"}}}}}))
    done = daemon("--adapter", "acp:claude", settings=tmp_path)
    assert done.returncode == 2 and "invalid-settings" in done.stderr
