"""harness ``acp``: an ACP agent (the Agent Client Protocol on stdio) run by
a container daemon's ``acp`` adapter (docs/acp.md).

The agents are named in this module's options in ``plugins.json``::

    "options": {"harness": {"acp": {
        "agents": {"claude": ["npx", "@zed-industries/claude-code-acp"],
                   "codex": {"command": ["codex-acp"], "env": {"OPENAI_BASE_URL": "..."}}},
        "agent": "claude"}}}

``router launch SESSION --harness acp:NAME`` starts the session's daemon
with ``--adapter acp:NAME``, which runs ``agents.NAME`` (an argv, or
``{"command", "env"}``); a route to the harness ``acp`` runs ``agent`` (the
default agent). The daemon reads the same ``plugins.json`` (``router serve``
hands the process launcher its settings directory).

Preflight: ``acp-agent-unknown`` (no ``agents`` entry for the agent),
``acp-agent-not-found`` (its program is not an executable file or on
``PATH``). Levels: ``off`` (ACP v1 carries no thinking level). Launches spend
no account of ours (the agent has its own).
"""

import os
import shutil

INTERFACE_VERSION = 1

#: ACP's protocol version (npm @agentclientprotocol/sdk 2.4.0, PROTOCOL_VERSION).
PROTOCOL_VERSION = 1


def _options(context):
    options = context.get("options")
    return options if type(options) is dict else {}


def _agent(options):
    agent = options.get("agent")
    return agent if type(agent) is str and agent else None


def _command(options, name):
    agents = options.get("agents")
    entry = agents.get(name) if type(agents) is dict and name else None
    command = entry.get("command") if type(entry) is dict else entry
    if type(command) is list and command and all(type(part) is str for part in command):
        return command
    return None


def levels(options):
    return ["off"]


def counts_account(options):
    return False


def reach(context):
    return {"via": "daemon", "adapter": f"acp:{_agent(_options(context)) or 'default'}",
            "settings": {"model": context["route"]["model"], "options": {}}}


def env(context):
    return {}


async def preflight(context):
    options = _options(context)
    name = _agent(options)
    command = _command(options, name)
    if command is None:
        return {"code": "acp-agent-unknown",
                "message": f"no ACP agent {name!r} in options.harness.acp.agents; name one with "
                           "`router plugins set` (an argv such as [\"npx\", \"@zed-industries/claude-code-acp\"])"}
    program = command[0]
    path = (context.get("env") or {}).get("PATH") or os.environ.get("PATH") or os.defpath
    found = program if os.path.isabs(program) and os.access(program, os.X_OK) else shutil.which(program, path=path)
    if found is None:
        return {"code": "acp-agent-not-found",
                "message": f"the ACP agent {name!r} runs {program!r}, which is not an executable on PATH"}
    return None


async def version(context):
    return f"acp {PROTOCOL_VERSION}"
