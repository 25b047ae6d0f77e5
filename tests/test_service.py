"""``router service``: the systemd user unit and the launchd agent it
writes, checked by systemd's own verifier; the router the unit runs, run as
the unit says, answers under its stable name; secrets never go in."""

from __future__ import annotations

import json
import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from router.service import ServiceSpec, launchd_plist, service_spec, systemd_unit
from tests.api.processes import REPO, ROUTER, environment

VERIFY = shutil.which("systemd-analyze")
needs_verify = pytest.mark.skipif(VERIFY is None and not os.environ.get("CI"),
                                  reason="systemd-analyze is not installed (Debian package systemd)")


def _home_env(tmp_path: Path) -> dict[str, str]:
    env = environment({"HOME": str(tmp_path / "home")})
    env.pop("XDG_CONFIG_HOME", None)
    return env


async def _router(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    done = await trio.run_process([*ROUTER, *args], capture_stdout=True, capture_stderr=True, check=False, env=env,
                                  cwd=REPO)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    assert VERIFY is not None, "systemd-analyze is not installed (Debian package systemd)"
    return subprocess.run([VERIFY, "verify", "--user", str(unit)], capture_output=True, text=True, check=False)


@needs_verify
def test_the_unit_passes_systemd_analyze_verify_and_a_broken_one_does_not(tmp_path: Path) -> None:
    spec = service_spec(["--port", "8765", "--launcher", "docker"], {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                        data_dir=tmp_path / "data dir %h $HOME")
    unit = tmp_path / "router.service"
    unit.write_text(systemd_unit(spec))
    checked = _verify(unit)
    assert checked.returncode == 0, checked.stderr
    # The check can fail: the same unit with a relative program is refused.
    broken = tmp_path / "broken.service"
    broken.write_text(systemd_unit(ServiceSpec(argv=("router", "serve"), environment={}, name="x",
                                               log_file=tmp_path / "log")))
    assert _verify(broken).returncode != 0


def test_the_unit_restarts_on_failure_and_quotes_every_word(tmp_path: Path) -> None:
    spec = service_spec(["--port", "8765"], {"PATH": "/bin", "ROUTER_TOKEN": "secret", "HOME": str(tmp_path)},
                        data_dir=Path("/data/with space/100%/$HOME"), python="/venv/bin/python")
    text = systemd_unit(spec)
    lines = text.splitlines()
    assert "Restart=on-failure" in lines and "WantedBy=default.target" in lines
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start == ('ExecStart="/venv/bin/python" "-m" "router" "serve" "--name" "' + spec.name + '" '
                          '"--data-dir" "/data/with space/100%%/$$HOME" "--port" "8765"')
    assert 'Environment="PATH=/bin"' in lines
    assert "secret" not in text and "ROUTER_TOKEN" not in text  # only named, non-secret variables


def test_the_launchd_agent_keeps_it_alive_and_logs_to_a_file(tmp_path: Path) -> None:
    spec = service_spec([], {"PATH": "/bin", "HOME": str(tmp_path)}, name="laptop", python="/venv/bin/python")
    agent = plistlib.loads(launchd_plist(spec))
    assert agent["ProgramArguments"] == ["/venv/bin/python", "-m", "router", "serve", "--name", "laptop"]
    assert agent["KeepAlive"] == {"SuccessfulExit": False} and agent["RunAtLoad"] is True
    assert agent["StandardErrorPath"] == str(tmp_path / "Library" / "Logs" / "router" / "serve.log")
    assert agent["EnvironmentVariables"] == {"PATH": "/bin"}


@pytest.mark.parametrize("secret", [["--daemon-token", "t"], ["--token=t"]])
async def test_a_secret_among_the_serve_options_is_refused(tmp_path: Path, secret: list[str]) -> None:
    env = _home_env(tmp_path)
    status, out, err = await _router(env, "service", "install", "--no-start", "--", "--daemon", "ws://x", *secret)
    assert status == 1 and "secret-on-command-line" in err
    assert not (tmp_path / "home" / ".config" / "systemd" / "user" / "router.service").exists()


async def test_install_status_and_uninstall_with_the_router_the_unit_runs(tmp_path: Path) -> None:
    env = _home_env(tmp_path)
    data = tmp_path / "data"
    status, out, err = await _router(env, "service", "install", "--no-start", "--data-dir", str(data), "--",
                                     "--port", "0", "--settings", str(tmp_path / "settings"))
    assert status == 0, err
    unit = tmp_path / "home" / ".config" / "systemd" / "user" / "router.service"
    assert f"wrote {unit}" in out and "systemctl --user enable --now router.service" in out
    assert os.stat(unit).st_mode & 0o777 == 0o644
    status, out, _ = await _router(env, "service", "status", "--json")
    report = json.loads(out)
    assert status == 0 and report["installed"] is True and report["running"] is False
    # Run the unit's command as systemd would (no shell: its words, its environment).
    text = unit.read_text()
    words = shlex.split(next(line for line in text.splitlines() if line.startswith("ExecStart="))[len("ExecStart="):])
    assert words[0] == os.path.abspath(sys.executable)
    unit_env = {**env, **dict(shlex.split(line[len("Environment="):])[0].split("=", 1)
                              for line in text.splitlines() if line.startswith("Environment="))}
    process = await trio.lowlevel.open_process(words, env=unit_env, cwd=REPO, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL)
    try:
        # Another process's readiness: asked again until it answers, bounded.
        with trio.fail_after(60):
            while not json.loads((await _router(env, "service", "status", "--json"))[1])["running"]:
                await trio.sleep(0.1)
        _, out, _ = await _router(env, "service", "status")
        assert "answers on" in out and report["name"] in out
    finally:
        process.terminate()
        await process.wait()
    status, out, err = await _router(env, "service", "uninstall")
    assert status == 0 and not unit.exists()
    status, out, err = await _router(env, "service", "uninstall")
    assert status == 1 and "not-installed" in err
