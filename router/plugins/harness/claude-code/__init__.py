"""harness ``claude-code``: a Claude Code session on this machine, reached
through the mod link.

The session is reached at the mod link's Unix socket for its session id
(``wire.mod.resolve_mod_socket_path`` over the environment); the router serves
the link and the mod inside Claude Code dials it. The route's thinking level
is Claude Code's effort (``--effort``): ``low``, ``medium``, ``high``,
``xhigh`` or ``max`` (``ModEffortLevel`` of claude-envoy 1.19.0 ``hooks/mod-protocol.ts``). Launches spend the
instance's account (``counts_account``), so daily quotas cover them.

Preflight, in order:

- ``claude-binary-missing``: no Claude Code binary: ``options.bin``, else
  ``$ROUTER_CLAUDE_BIN``, else ``claude`` on ``PATH``;
- ``no-session-credential``: none of ``ANTHROPIC_API_KEY``,
  ``CLAUDE_CODE_OAUTH_TOKEN`` or a ``.credentials.json`` in Claude Code's
  configuration directory (``CLAUDE_CONFIG_DIR``, else ``~/.claude``), which
  is where Claude Code keeps its login on Linux;
- ``claude-version-unknown`` / ``claude-too-old``: ``claude --version`` does
  not answer a version, or one older than ``MOD_MIN_CLAUDE_VERSION`` (below
  it the mod never connects);
- ``no-mod-socket``: the mod link has no socket path for the session.

The version probe runs ``<binary> --version`` (cancelled, and the process
killed, at the broker's deadline).
"""

import os
import re
import shutil

import trio

from wire.mod import MOD_MIN_CLAUDE_VERSION, mod_version_at_least, resolve_mod_socket_path

from router.errors import Refusal

INTERFACE_VERSION = 1

#: Claude Code's effort levels (``mod-protocol.ts``, ``ModEffortLevel``).
LEVELS = ("low", "medium", "high", "xhigh", "max")

_VERSION = re.compile(rb"\b(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?)")


def levels(options):
    return list(LEVELS)


def counts_account(options):
    return True


def _binary(context):
    options = context.get("options") or {}
    env = context.get("env") or {}
    given = options.get("bin") or env.get("ROUTER_CLAUDE_BIN")
    if given:
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    return shutil.which("claude", path=env.get("PATH") or os.defpath)


def _config_dir(env):
    if env.get("CLAUDE_CONFIG_DIR"):
        return env["CLAUDE_CONFIG_DIR"]
    if env.get("HOME"):
        return os.path.join(env["HOME"], ".claude")
    return None


def reach(context):
    route = context["route"]
    answer = {
        "via": "mod-link",
        "args": ["--model", route["model"], "--effort", route["thinking"]],
    }
    session = context.get("session")
    if session:
        resolved = resolve_mod_socket_path(session, context.get("env") or {})
        answer["socket"] = resolved.path
    return answer


def env(context):
    return {"ROUTER_THINKING": context["route"]["thinking"]}


async def _probe(binary, env):
    result = await trio.run_process(
        [binary, "--version"], capture_stdout=True, capture_stderr=True, check=False, env=env,
    )
    match = _VERSION.search(result.stdout or b"")
    if result.returncode != 0 or match is None:
        return None
    return match.group(1).decode()


async def preflight(context):
    env = context.get("env") or {}
    binary = _binary(context)
    if binary is None:
        return {
            "code": "claude-binary-missing",
            "message": "no Claude Code binary: install Claude Code, put `claude` on PATH, or set "
            "ROUTER_CLAUDE_BIN or options.harness.claude-code.bin",
        }
    config = _config_dir(env)
    has_file = config is not None and os.path.isfile(os.path.join(config, ".credentials.json"))
    if not (env.get("ANTHROPIC_API_KEY") or env.get("CLAUDE_CODE_OAUTH_TOKEN") or has_file):
        return {
            "code": "no-session-credential",
            "message": "Claude Code has no credential here: run `claude` once and log in, or set "
            "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN",
        }
    found = await _probe(binary, env)
    if found is None:
        return {
            "code": "claude-version-unknown",
            "message": f"`{binary} --version` did not print a version; check the binary",
        }
    if not mod_version_at_least(found, MOD_MIN_CLAUDE_VERSION):
        return {
            "code": "claude-too-old",
            "message": f"Claude Code {found} is older than {MOD_MIN_CLAUDE_VERSION}, the first "
            "release the mod link works with; update Claude Code",
        }
    session = context.get("session")
    if session:
        resolved = resolve_mod_socket_path(session, env)
        if resolved.refusal is not None:
            return {"code": "no-mod-socket", "message": resolved.refusal}
    return None


async def version(context):
    binary = _binary(context)
    if binary is None:
        raise Refusal("claude-binary-missing", "no Claude Code binary to ask its version")
    found = await _probe(binary, context.get("env") or {})
    if found is None:
        raise Refusal("claude-version-unknown", f"`{binary} --version` printed no version")
    return found
