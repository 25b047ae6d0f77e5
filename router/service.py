"""``router service``: ``router serve`` as a user service that starts at login
and comes back when it dies.

Theory of operation
-------------------
Reaching sessions from a phone needs the router running all the time, and a
terminal is not a service manager. The operating system has one per user:
systemd's user manager on Linux, launchd's per-user agents on macOS. This
module writes the one file each wants and asks the manager to take it; it
runs nothing itself.

- **What is written.** :func:`systemd_unit` and :func:`launchd_plist` are
  pure: a :class:`ServiceSpec` (the command line, the environment, where the
  log goes) in, the file's text out, so tests check them without a manager
  (and CI checks the unit with ``systemd-analyze verify``). The command is
  this interpreter running ``-m router serve`` with the person's options:
  absolute paths only, so the service does not depend on the login shell's
  ``PATH``.
- **A stable name.** The unit always passes ``--name``: the one given, else
  the name ``router serve`` derives from its data directory
  (:func:`router.board.local.stable_name`), so the router the service runs
  is the same ``--router NAME`` after every restart, and ``status`` can ask
  whether it answers.
- **No secrets.** A unit file is readable by others (it is a config file,
  written 0644 by systemd convention), so options that carry a secret
  (``--token``, ``--daemon-token``) are refused with the file or
  environment alternative to use instead, and only non-secret variables
  (``PATH``, ``ROUTER_DATA_DIR``, ``ROUTER_SETTINGS_DIR``, ``DOCKER_HOST``,
  ``XDG_*`` but the runtime directory, which the manager sets) are carried
  into the service's environment.
- **Restart on failure.** systemd: ``Restart=on-failure`` with a 2 s pause
  (``RestartSec``) and no start limit that gives up for good; launchd:
  ``KeepAlive`` with ``SuccessfulExit=false`` (a clean stop stays stopped),
  ``ThrottleInterval`` 5 s.
- **Logs.** systemd sends the service's stdout and stderr to the journal
  (``journalctl --user -u router``); launchd writes them to
  ``~/Library/Logs/router/serve.log``, which the macOS Console shows.
- **When no manager answers** (a container, a machine without a user
  session), ``install`` writes the file and prints the commands that load
  it, instead of failing: the file is right either way.

Error handling: every "no" is a :class:`~router.errors.Refusal`
(``unsupported-platform``, ``secret-on-command-line``, ``not-installed``,
``service-manager-failed``), printed as one line by :func:`run`, exit 1.
"""

from __future__ import annotations

import argparse
import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final, Mapping, Sequence

import attrs

from router.errors import Refusal

__all__ = ["ServiceSpec", "configure", "launchd_plist", "run", "service_spec", "systemd_unit"]

#: The unit's name on systemd (``router.service``) and the agent's label on
#: launchd (reverse-DNS, as launchd's labels are by convention; ours).
UNIT: Final = "router"
LABEL: Final = "dev.router.serve"
#: Seconds between a crash and the restart (systemd ``RestartSec``; launchd
#: ``ThrottleInterval``, whose floor is launchd's own 10 s default otherwise).
RESTART_DELAY_S: Final = 2
THROTTLE_S: Final = 5

#: ``router serve`` options whose value is a secret: refused in a unit file.
SECRET_OPTIONS: Final = ("--token", "--daemon-token")
#: Environment variables carried into the service (never a secret).
CARRIED_VARIABLES: Final = ("PATH", "ROUTER_DATA_DIR", "ROUTER_SETTINGS_DIR", "DOCKER_HOST", "XDG_DATA_HOME",
                            "XDG_CONFIG_HOME", "LANG")


@attrs.frozen(kw_only=True)
class ServiceSpec:
    """What the service runs: ``argv`` (absolute), ``environment``, the
    router's ``name``, and where launchd writes the log."""

    argv: tuple[str, ...]
    environment: Mapping[str, str]
    name: str
    log_file: Path


def service_spec(serve_args: Sequence[str], env: Mapping[str, str], *, name: str | None = None,
                 data_dir: Path | None = None, python: str = sys.executable) -> ServiceSpec:
    """The service for ``router serve SERVE_ARGS`` as this user would run it
    from this environment; refuses a secret on the command line."""
    from router.board.local import check_name, stable_name
    from router.dirs import default_data_dir

    for arg in serve_args:
        option = arg.split("=", 1)[0]
        if option in SECRET_OPTIONS:
            raise Refusal("secret-on-command-line", f"{option} would put a secret in the unit file, which others "
                          "can read; give it as a file (--daemon-token-file FILE, mode 0600) or in the "
                          "environment of your login session instead", option=option)
        if option == "--name":
            raise Refusal("bad-service-options", "give the name as `router service install --name NAME`, not "
                          "among the serve options")
    data = Path(data_dir) if data_dir is not None else default_data_dir(env)
    router_name = check_name(name) if name is not None else stable_name("serve", data)
    argv = [os.path.abspath(python), "-m", "router", "serve", "--name", router_name]
    if data_dir is not None:
        argv += ["--data-dir", os.path.abspath(data_dir)]
    argv += list(serve_args)
    carried = {key: env[key] for key in CARRIED_VARIABLES if env.get(key)}
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    return ServiceSpec(argv=tuple(argv), environment=carried, name=router_name,
                       log_file=home / "Library" / "Logs" / "router" / "serve.log")


# --------------------------------------------------------------------------- the files (pure)


def _systemd_quote(word: str) -> str:
    """One word of an ``ExecStart=`` or ``Environment=`` line: double-quoted,
    with systemd's specifiers (``%``) and variable expansion (``$``)
    escaped so the word reaches the program as written."""
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_unit(spec: ServiceSpec) -> str:
    """The systemd user unit (``router.service``)."""
    lines = [
        "[Unit]",
        f"Description=router: your AI agent sessions, reachable (router {spec.name})",
        # Never give up restarting: the phone needs it up.
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(_systemd_quote(word) for word in spec.argv),
        *(f"Environment={_systemd_quote(f'{key}={value}')}" for key, value in sorted(spec.environment.items())),
        "Restart=on-failure",
        f"RestartSec={RESTART_DELAY_S}",
        # SIGTERM is a clean stop for `router serve` (it exits 0).
        "KillSignal=SIGTERM",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def launchd_plist(spec: ServiceSpec) -> bytes:
    """The launchd agent's property list (``dev.router.serve.plist``)."""
    document: dict[str, Any] = {
        "Label": LABEL,
        "ProgramArguments": list(spec.argv),
        "EnvironmentVariables": dict(spec.environment),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": THROTTLE_S,
        "StandardOutPath": str(spec.log_file),
        "StandardErrorPath": str(spec.log_file),
        "ProcessType": "Interactive",
    }
    return plistlib.dumps(document)


# --------------------------------------------------------------------------- where, and the managers


def platform_of(value: str | None = None) -> str:
    """``systemd`` or ``launchd``: the manager of this system (or ``value``)."""
    kind = value or ("launchd" if sys.platform == "darwin" else "systemd" if sys.platform.startswith("linux")
                     else None)
    if kind not in ("systemd", "launchd"):
        raise Refusal("unsupported-platform", f"no user service manager is known on {sys.platform}: run "
                      "`router serve` under your own supervisor")
    return kind


def service_file(kind: str, env: Mapping[str, str]) -> Path:
    """Where the service's file goes for this user."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    if kind == "launchd":
        return home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    config = env.get("XDG_CONFIG_HOME") or ""
    base = Path(config) if os.path.isabs(config) else home / ".config"
    return base / "systemd" / "user" / f"{UNIT}.service"


def _manager_commands(kind: str, path: Path, action: str) -> list[list[str]]:
    if kind == "systemd":
        unit = f"{UNIT}.service"
        if action == "install":
            return [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", unit]]
        return [["systemctl", "--user", "disable", "--now", unit], ["systemctl", "--user", "daemon-reload"]]
    domain = f"gui/{os.getuid()}"
    if action == "install":
        return [["launchctl", "bootstrap", domain, str(path)]]
    return [["launchctl", "bootout", f"{domain}/{LABEL}"]]


def _manager_answers(kind: str) -> bool:
    """Whether this user's service manager can be asked (a systemd user
    manager running; launchctl present)."""
    if kind == "launchd":
        return shutil.which("launchctl") is not None
    if shutil.which("systemctl") is None:
        return False
    probe = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, check=False)
    return probe.returncode == 0


def _run_manager(commands: list[list[str]], *, tolerate: bool = False) -> None:
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 and not tolerate:
            words = (done.stderr or done.stdout).strip().splitlines()
            raise Refusal("service-manager-failed", f"`{' '.join(command)}` failed: "
                          f"{words[-1] if words else f'exit {done.returncode}'}")


def _read_name(kind: str, path: Path) -> str | None:
    """The router name the installed file passes (``--name``)."""
    try:
        if kind == "launchd":
            argv = plistlib.loads(path.read_bytes()).get("ProgramArguments", [])
        else:
            line = next((each for each in path.read_text().splitlines() if each.startswith("ExecStart=")), "")
            argv = [word.strip('"') for word in line.split(" ")]
    except (OSError, plistlib.InvalidFileException, ValueError):
        return None
    for index, word in enumerate(argv[:-1]):
        if word == "--name":
            return str(argv[index + 1])
    return None


# --------------------------------------------------------------------------- the command


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="install|uninstall|status")
    install = actions.add_parser("install", help="write the user service and start it (systemd --user, launchd)")
    install.add_argument("--name", help="the router's name (default: from its data directory)")
    install.add_argument("--data-dir", metavar="DIR", help="the data directory `router serve` uses")
    install.add_argument("--no-start", action="store_true", help="write the file only; start nothing")
    install.add_argument("serve_args", nargs=argparse.REMAINDER, metavar="-- SERVE OPTIONS",
                         help="options for `router serve` (after --), e.g. -- --listen 0.0.0.0:8443")
    uninstall = actions.add_parser("uninstall", help="stop the user service and remove its file")
    status = actions.add_parser("status", help="whether the service is installed, and whether its router answers")
    status.add_argument("--json", action="store_true")
    for each in (install, uninstall, status):
        each.add_argument("--platform", choices=["systemd", "launchd"], help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    try:
        kind = platform_of(args.platform)
        if args.action == "install":
            return _install(args, kind, os.environ)
        if args.action == "uninstall":
            return _uninstall(kind, os.environ)
        return _status(args, kind, os.environ)
    except Refusal as refused:
        print(f"router service: {refused}", file=sys.stderr)
        return 1


def _install(args: argparse.Namespace, kind: str, env: Mapping[str, str]) -> int:
    serve_args = list(args.serve_args)
    if serve_args[:1] == ["--"]:
        del serve_args[0]
    spec = service_spec(serve_args, env, name=args.name, data_dir=Path(args.data_dir) if args.data_dir else None)
    path = service_file(kind, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = launchd_plist(spec) if kind == "launchd" else systemd_unit(spec).encode()
    temporary = path.with_name(path.name + ".new")
    temporary.write_bytes(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    print(f"router service: wrote {path} (router {spec.name})")
    commands = _manager_commands(kind, path, "install")
    if args.no_start:
        print("router service: not started (--no-start); to start it: " + " && ".join(map(" ".join, commands)))
    elif _manager_answers(kind):
        _run_manager(commands)
        print(f"router service: started; logs: {_logs_hint(kind, spec)}")
    else:
        print("router service: no service manager answers here; in your login session run: "
              + " && ".join(map(" ".join, commands)))
    if kind == "systemd":
        print("router service: to keep it running while you are logged out: loginctl enable-linger $USER")
    return 0


def _uninstall(kind: str, env: Mapping[str, str]) -> int:
    path = service_file(kind, env)
    if not path.exists():
        raise Refusal("not-installed", f"no router service is installed ({path} does not exist)")
    if _manager_answers(kind):
        _run_manager(_manager_commands(kind, path, "uninstall"), tolerate=True)
    path.unlink()
    print(f"router service: removed {path}")
    return 0


def _status(args: argparse.Namespace, kind: str, env: Mapping[str, str]) -> int:
    from router._unix import listener_gone
    from router.board.paths import socket_path

    path = service_file(kind, env)
    installed = path.exists()
    name = _read_name(kind, path) if installed else None
    socket = str(socket_path(env, name)) if name else None
    answers = socket is not None and os.path.exists(socket) and not listener_gone(socket)
    report = {"platform": kind, "file": str(path), "installed": installed, "name": name, "running": answers}
    if args.json:
        import json

        print(json.dumps(report))
    elif not installed:
        print(f"not installed ({path} does not exist); `router service install` installs it")
    else:
        state = f"running: router {name} answers on {socket}" if answers else f"not running (router {name})"
        print(f"installed: {path}\n{state}")
    return 0 if installed else 1


def _logs_hint(kind: str, spec: ServiceSpec) -> str:
    return f"journalctl --user -u {UNIT}" if kind == "systemd" else str(spec.log_file)
