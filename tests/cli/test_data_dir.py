"""Every command takes the data directory the same way (docs/cli.md, "The
data directory"): ``router prompt --store`` and ``router transcript
--store`` take it (its ``host.sqlite``) as ``router serve --data-dir``
does, and ``router limits --records`` (its ``usage.jsonl``)."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.api.processes import REPO, ROUTER, environment
from tests.support.daemons import spawn_daemon


async def router(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False,
                                  env=environment(env), cwd=REPO)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_prompt_and_transcript_take_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with spawn_daemon("ours", token="dir-token") as daemon:
        status, out, err = await router("prompt", "--daemon", daemon.url, "--store", str(data), "hello",
                                        env={"ROUTER_DAEMON_TOKEN": "dir-token"})
    assert status == 0 and json.loads(out)["text"] == "echo: hello (turn 1)", err
    assert (data / "host.sqlite").is_file()
    by_dir = await router("transcript", "--store", str(data))
    by_file = await router("transcript", "--store", str(data / "host.sqlite"))
    assert by_dir == by_file and by_dir[0] == 0
    assert [m["role"] for m in json.loads(by_dir[1])] == ["user", "assistant"]


async def test_limits_take_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "usage.jsonl").write_text("")
    settings = ["--settings", str(tmp_path / "settings")]
    by_dir = await router("limits", "--json", "--records", str(data), *settings)
    by_file = await router("limits", "--json", "--records", str(data / "usage.jsonl"), *settings)
    assert by_dir[0] == 0 and by_dir == by_file, by_dir
