"""Claude Code as a CLI preset: ``claude -p`` with ``stream-json`` output, one
process per turn, resuming its own session by id.

``router daemon --adapter claude-code`` runs :data:`adapter`, a
:class:`~router.daemon.adapters.process_per_turn.CliAdapter` **object** (not a factory;
the same convention as ``router.daemon.adapters.echo:adapter``). It finds
``claude`` on ``PATH``; session homes go under ``$ROUTER_CLI_HOMES`` (default
``~/.harness/sessions``) and the working directory is ``$ROUTER_CLI_CWD``
(default ``/workspace`` when it exists, else a scratch ``workspace`` in each
session's home). :func:`make_adapter` builds one with other choices.

This follows the reference's ``claudeCodeCli`` preset (npm ``agents@0.32.0``,
``presets/claude-code.ts`` and ``claude-code-events.ts``).

The command
-----------

``claude -p --output-format stream-json --verbose --include-partial-messages
--dangerously-skip-permissions``, the prompt on stdin, then from the
settings and the session's state:

==============================  =====================================
``settings.model``              ``--model <model>``
state ``sessionId``             ``--resume <id>`` (from the last turn)
``options.effort``              ``--effort <low|medium|high|xhigh|max>``
``options.appendSystemPrompt``  ``--append-system-prompt <text>``
``options.tools``               ``--tools <a,b>`` (the built-in set)
``options.allowedTools``        ``--allowedTools <a,b>``
``options.disallowedTools``     ``--disallowedTools <a,b>``
``options.maxTurns``            ``--max-turns <n>``
``options.permissionMode``      ``--permission-mode <mode>`` instead of
                                skipping permissions
==============================  =====================================

``--verbose`` is required by ``-p`` with ``stream-json``; partial messages
give the live ``text-delta``/``reasoning-delta`` events. Permissions are
skipped because the container is the sandbox (the reference's comment). The
environment adds ``DISABLE_AUTOUPDATER=1`` (the reference's),
``CLAUDE_CONFIG_DIR=<home>/.claude`` (so an inherited config dir cannot pull
every session into one), and, when the daemon runs as root,
``IS_SANDBOX=1``: Claude Code refuses ``--dangerously-skip-permissions`` as
root otherwise ("cannot be used with root/sudo privileges"); the reference
offers a non-root ``user`` for this instead.

Credentials come from the daemon's environment: ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL``. Claude Code keeps its transcripts under
``~/.claude/projects``, which the adapter mirrors into persisted entries.

The usage limit
---------------

Signed in as a subscriber (``CLAUDE_CODE_OAUTH_TOKEN``), Claude Code meets
the account's usage limit as a 429 with the ``anthropic-ratelimit-unified-*``
headers; 2.1.332 prints a ``rate_limit_event`` with ``status: "rejected"``
(``resetsAt`` in epoch seconds, ``rateLimitType`` such as ``five_hour``), a
synthetic assistant line (``"error": "rate_limit"``) and a ``result`` with
``"api_error": "usage_limit_reached"``, then exits 1. The adapter reports:

- an adapter event ``{"type": "raw", "value": {"type": "usage-limit",
  "resetsAt": <epoch ms>, "rateLimitType": "five_hour", "text": <Claude
  Code's sentence>}}``, once per turn, from the ``rate_limit_event`` (or
  from the ``result`` line's ``api_error_params`` when no event came). It
  is a ``raw`` event because the container wire's adapter events are a
  closed set (``isEvent`` of npm ``agents@0.32.0``: any other type is
  dropped); ``raw`` is its escape hatch, which every host passes through;
- the outcome ``unanswered`` with the reason ``usage-limit: <sentence>``
  (:data:`USAGE_LIMIT_REASON`): the router reads it as "the limit, keep the
  work", not as a failure (``docs/limits.md``);
- the state ``limitedPrompt``, the SHA-256 of the turn's prompt. Claude Code
  keeps that prompt in its session and merges it into the next user message
  on ``--resume`` (seen with 2.1.332: the request then carries the text
  twice), so a next turn with the same prompt, the router's resume of the
  kept work, sends :data:`RESUME_PROMPT` instead. A turn that ends any
  other way clears it.

The output
----------

:class:`ClaudeProjection` turns each stream-json line (an Agent SDK message)
into container events; see its docstring. :class:`ClaudeCodeParser` adds the
session id (``state.sessionId`` from any line that carries ``session_id``)
and the outcome (from the ``result`` line).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, Callable, Final

from router.daemon.adapters.process_per_turn import (
    CliAdapter,
    CliCommand,
    CliExit,
    CliPreset,
    CliTurn,
    CliUpdate,
    usage_event,
)
from wire.container import ContainerOutcome, Done, Unanswered
from wire.json import JsonValue, dumps, is_json, js_number, loads

__all__ = [
    "ClaudeCodeParser",
    "ClaudeProjection",
    "PRESET",
    "RESUME_PROMPT",
    "USAGE_LIMIT_REASON",
    "adapter",
    "command",
    "make_adapter",
    "parse_options",
    "prompt_digest",
]

#: ``--effort``'s choices (``claude --help``, 2.1.332).
EFFORT_LEVELS: Final = ("low", "medium", "high", "xhigh", "max")
#: ``--permission-mode``'s choices (``claude --help``, 2.1.332).
PERMISSION_MODES: Final = ("acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan")
#: The reason prefix of a turn the provider's usage limit ended (ours; the
#: router's ``router.limits`` reads it).
USAGE_LIMIT_REASON: Final = "usage-limit"
#: What a turn sends in place of a prompt Claude Code already holds from a
#: turn the usage limit ended (ours: it follows that prompt in the same
#: user message).
RESUME_PROMPT: Final = "(The usage limit has reset: please carry on with the request above.)"


def prompt_digest(text: str) -> str:
    """The ``limitedPrompt`` state's value for a prompt."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000  # Date.now()


def _strings(value: Any) -> list[str] | None:
    """The strings of a JSON array (the reference's ``stringsOf``)."""
    if not isinstance(value, list):
        return None
    return [each for each in value if isinstance(each, str)]


def parse_options(value: JsonValue) -> dict[str, Any]:
    """``settings.options`` as the preset reads it: unknown keys and values
    of the wrong type are ignored (as the reference's ``parseOptions``)."""
    if not isinstance(value, dict):
        return {}
    options: dict[str, Any] = {}
    if isinstance(value.get("appendSystemPrompt"), str):
        options["appendSystemPrompt"] = value["appendSystemPrompt"]
    for key in ("tools", "allowedTools", "disallowedTools"):
        strings = _strings(value.get(key))
        if strings is not None:
            options[key] = strings
    max_turns = value.get("maxTurns")
    if isinstance(max_turns, (int, float)) and not isinstance(max_turns, bool):
        options["maxTurns"] = max_turns
    if value.get("effort") in EFFORT_LEVELS:
        options["effort"] = value["effort"]
    if value.get("permissionMode") in PERMISSION_MODES:
        options["permissionMode"] = value["permissionMode"]
    return options


def command(turn: CliTurn) -> CliCommand:
    options = parse_options(turn.settings.options)
    argv = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
    if "permissionMode" in options:
        argv += ["--permission-mode", options["permissionMode"]]
    else:
        # The container is the sandbox.
        argv.append("--dangerously-skip-permissions")
    if turn.settings.model:
        argv += ["--model", turn.settings.model]
    if turn.state.get("sessionId"):
        argv += ["--resume", turn.state["sessionId"]]
    argv += _option_flags(options)
    env = {
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CONFIG_DIR": os.path.join(turn.home, ".claude"),
    }
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "permissionMode" not in options:
        env["IS_SANDBOX"] = "1"
    limited = turn.state.get("limitedPrompt")
    stdin = RESUME_PROMPT if limited and turn.state.get("sessionId") and limited == prompt_digest(turn.prompt) else turn.prompt
    return CliCommand(argv=tuple(argv), stdin=stdin, env=env)


def _option_flags(options: dict[str, Any]) -> list[str]:
    """The ``claude`` flags the parsed harness options ask for."""
    argv: list[str] = []
    if "effort" in options:
        argv += ["--effort", options["effort"]]
    if options.get("appendSystemPrompt"):
        argv += ["--append-system-prompt", options["appendSystemPrompt"]]
    if "tools" in options:
        # "" means no built-in tools, so an empty list is passed too.
        argv += ["--tools", ",".join(options["tools"])]
    if options.get("allowedTools"):
        argv += ["--allowedTools", ",".join(options["allowedTools"])]
    if options.get("disallowedTools"):
        argv += ["--disallowedTools", ",".join(options["disallowedTools"])]
    if "maxTurns" in options:
        argv += ["--max-turns", js_number(options["maxTurns"])]
    return argv


# --------------------------------------------------------------------------
# The projection


def _failure_reason(message: dict[str, Any], result: str | None) -> str:
    """The reason of a ``result`` line that is no success: its subtype and
    its errors (or its result text), ``"error"`` when it has neither."""
    errors = message.get("errors")
    detail = "; ".join(e for e in errors if isinstance(e, str)) if isinstance(errors, list) else ""
    detail = detail or result or ""
    subtype = message.get("subtype")
    subtype = subtype if isinstance(subtype, str) and subtype != "success" else ""
    return ": ".join(part for part in (subtype, detail) if part) or "error"


def _assistant_part(block: Any) -> dict[str, Any] | None:
    """The message part one content block of an ``assistant`` line makes, or
    None for a block that makes none (empty, unknown, malformed)."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
        return {"type": "text", "text": block["text"]}
    if kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
        return {"type": "reasoning", "text": block["thinking"]}
    if kind == "tool_use" and isinstance(block.get("id"), str) and block["id"]:
        name = block.get("name")
        return {
            "type": "tool",
            "toolCallId": block["id"],
            "toolName": name if isinstance(name, str) else "tool",
            "input": _json(block.get("input")),
            "state": "running",
        }
    return None


def _json(value: Any) -> JsonValue:
    """A JSON round trip (``undefined`` becomes ``null``)."""
    if value is None or is_json(value):
        return value
    try:
        return loads(dumps(value))
    except Exception:
        return str(value)


def _tool_output(content: Any) -> JsonValue:
    """A tool result's content: a string as is; a list of text blocks as
    their texts joined with newlines; anything else as its JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            block["text"]
            for block in content
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        ]
        if len(texts) == len(content):
            return "\n".join(texts)
    return _json(content)


def _limit_info(message: dict[str, Any]) -> dict[str, Any]:
    """A usage-limit line's ``api_error_params.rate_limit_info`` (the
    synthetic assistant line carries it; the ``result`` line does when the
    reset is ahead), else a bare rejection."""
    params = message.get("api_error_params")
    info = params.get("rate_limit_info") if isinstance(params, dict) else None
    return info if isinstance(info, dict) else {"status": "rejected"}


def _first_text(message: dict[str, Any]) -> str:
    inner = message.get("message")
    content = inner.get("content") if isinstance(inner, dict) else None
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return block["text"]
    return ""


class ClaudeProjection:
    """Claude Code's stream-json lines projected into container events.

    Sans-IO and structural: it reads only the fields it needs, so it survives
    fields it does not know (the reference's ``ClaudeProjection``).

    - ``stream_event`` (``--include-partial-messages``): ``message_start``
      remembers the API message id; ``text_delta`` and ``thinking_delta``
      become ``text-delta`` and ``reasoning-delta`` under that id.
    - ``assistant``: Claude Code prints one SDK message per content block,
      all under the API message's id; the projection gathers them into one
      transcript message (text, reasoning and ``tool`` parts, tools
      ``running``) and emits it whole each time it grows. A replayed SDK
      message (same ``uuid``) adds nothing.
    - ``user``: its ``tool_result`` blocks finish the tool parts they answer
      (``done``, or ``error`` when ``is_error``) with their output; each
      message that changed is emitted again under its id.
    - ``result``: a ``usage`` event (``inputTokens``, ``outputTokens``,
      ``costUsd`` from ``total_cost_usd``).
    - Subagent traffic (``parent_tool_use_id`` set) is left out; the
      top-level tool call that started the subagent carries its result.
    """

    def __init__(self, now: Callable[[], int] = _now_ms) -> None:
        self._now = now
        self._drafts: dict[str, dict[str, Any]] = {}
        self._tool_owners: dict[str, str] = {}
        self._seen: set[str] = set()
        self._streaming: str | None = None
        #: Whether this turn reported its ``usage-limit`` event.
        self.limit_seen = False

    def __repr__(self) -> str:
        return f"<ClaudeProjection messages={len(self._drafts)} tools={len(self._tool_owners)} streaming={self._streaming}>"

    def project(self, message: dict[str, Any], operation_id: str | None) -> list[JsonValue]:
        if message.get("parent_tool_use_id"):
            return []
        kind = message.get("type")
        if kind == "stream_event":
            return self._stream(message)
        if kind == "assistant":
            events = self._assistant(message, operation_id)
            if message.get("api_error") == "usage_limit_reached":
                events += self._limit(_limit_info(message), _first_text(message))
            return events
        if kind == "user":
            return self._tool_results(message)
        if kind == "rate_limit_event":
            return self._limit(message.get("rate_limit_info"), "")
        if kind == "result":
            events = self._usage(message)
            if message.get("api_error") == "usage_limit_reached":
                text = message.get("result") if isinstance(message.get("result"), str) else ""
                events += self._limit(_limit_info(message), text)
            return events
        return []

    def _limit(self, info: Any, text: str) -> list[JsonValue]:
        """The ``usage-limit`` event, once per turn: from a rejected
        ``rate_limit_event``, or the ``result`` line when none came."""
        if not isinstance(info, dict) or info.get("status") != "rejected" or self.limit_seen:
            return []
        self.limit_seen = True
        event: dict[str, Any] = {"type": "usage-limit"}
        resets = info.get("resetsAt")
        if isinstance(resets, (int, float)) and not isinstance(resets, bool) and resets > 0:
            event["resetsAt"] = int(resets * 1000)  # epoch seconds from Claude Code; ms on our wire
        if isinstance(info.get("rateLimitType"), str):
            event["rateLimitType"] = info["rateLimitType"]
        if text:
            event["text"] = text
        return [{"type": "raw", "value": event}]

    @staticmethod
    def outcome(message: dict[str, Any], aborted: bool = False) -> ContainerOutcome:
        """How a turn ended, from its ``result`` line."""
        if aborted:
            return Unanswered(reason="aborted")
        result = message.get("result") if isinstance(message.get("result"), str) else None
        if message.get("api_error") == "usage_limit_reached":
            return Unanswered(reason=f"{USAGE_LIMIT_REASON}: {result or 'usage_limit_reached'}")
        if message.get("subtype") == "success" and message.get("is_error") is not True:
            return Done(text=result or "")
        return Unanswered(reason=_failure_reason(message, result))

    def _stream(self, message: dict[str, Any]) -> list[JsonValue]:
        event = message.get("event")
        if not isinstance(event, dict):
            return []
        if event.get("type") == "message_start":
            inner = event.get("message")
            ident = inner.get("id") if isinstance(inner, dict) else None
            self._streaming = ident if isinstance(ident, str) else None
            return []
        delta = event.get("delta")
        if event.get("type") != "content_block_delta" or not self._streaming or not isinstance(delta, dict):
            return []
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
            return [{"type": "text-delta", "messageId": self._streaming, "delta": delta["text"]}]
        if delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str) and delta["thinking"]:
            return [{"type": "reasoning-delta", "messageId": self._streaming, "delta": delta["thinking"]}]
        return []

    def _assistant(self, message: dict[str, Any], operation_id: str | None) -> list[JsonValue]:
        inner = message.get("message")
        if not isinstance(inner, dict):
            return []
        ident = inner.get("id")
        content = inner.get("content")
        if not isinstance(ident, str) or not ident or not isinstance(content, list):
            return []
        uuid = message.get("uuid")
        if isinstance(uuid, str):
            if uuid in self._seen:
                return []
            self._seen.add(uuid)
        draft = self._drafts.get(ident)
        if draft is None:
            draft = {"id": ident, "operationId": operation_id, "createdAt": self._now(), "parts": []}
            self._drafts[ident] = draft
        for block in content:
            part = _assistant_part(block)
            if part is None:
                continue
            draft["parts"].append(part)
            if part["type"] == "tool":
                self._tool_owners[part["toolCallId"]] = ident
        return [{"type": "message", "message": self._message(draft)}]

    def _tool_results(self, message: dict[str, Any]) -> list[JsonValue]:
        inner = message.get("message")
        content = inner.get("content") if isinstance(inner, dict) else None
        if not isinstance(content, list):
            return []
        changed: dict[str, dict[str, Any]] = {}
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = block.get("tool_use_id")
            if not isinstance(tool_id, str) or not tool_id:
                continue
            owner = self._tool_owners.get(tool_id)
            draft = self._drafts.get(owner) if owner is not None else None
            if draft is None:
                continue
            draft["parts"] = [
                {
                    **part,
                    "state": "error" if block.get("is_error") else "done",
                    "output": _tool_output(block.get("content")),
                }
                if part["type"] == "tool" and part["toolCallId"] == tool_id
                else part
                for part in draft["parts"]
            ]
            changed.setdefault(draft["id"], draft)
        return [{"type": "message", "message": self._message(draft)} for draft in changed.values()]

    @staticmethod
    def _usage(message: dict[str, Any]) -> list[JsonValue]:
        event = usage_event(message.get("usage"))
        cost = message.get("total_cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            event["costUsd"] = cost
        return [event]

    @staticmethod
    def _message(draft: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"id": draft["id"], "role": "assistant", "parts": list(draft["parts"])}
        if draft["operationId"] is not None:
            message["operationId"] = draft["operationId"]
        message["createdAt"] = draft["createdAt"]
        return message


class ClaudeCodeParser:
    """One turn's stream-json reader: events, the session id, the outcome."""

    def __init__(
        self, operation_id: str | None, *, now: Callable[[], int] = _now_ms, prompt: str | None = None,
        limited: bool = False,
    ) -> None:
        self.operation_id = operation_id
        self.projection = ClaudeProjection(now)
        #: The turn's prompt (None: the ``limitedPrompt`` state is not kept).
        self.prompt = prompt
        #: Whether the session's state holds a ``limitedPrompt`` to clear.
        self.limited = limited

    def __repr__(self) -> str:
        return f"<ClaudeCodeParser {self.operation_id} {self.projection!r}>"

    def line(self, text: str) -> CliUpdate:
        message = loads(text)  # raises on a line that is not JSON: logged by the adapter
        if not isinstance(message, dict) or "type" not in message:
            return CliUpdate()
        session_id = message.get("session_id")
        state = {"sessionId": session_id} if isinstance(session_id, str) and session_id else {}
        outcome = self.projection.outcome(message) if message.get("type") == "result" else None
        if outcome is not None and self.prompt is not None:
            if isinstance(outcome, Unanswered) and outcome.reason.startswith(USAGE_LIMIT_REASON + ":"):
                state["limitedPrompt"] = prompt_digest(self.prompt)
            elif self.limited:
                state["limitedPrompt"] = ""
        return CliUpdate(
            events=tuple(self.projection.project(message, self.operation_id)),
            state=state or None,
            outcome=outcome,
        )

    def end(self, exit: CliExit) -> ContainerOutcome:
        return Unanswered(reason=exit.describe("claude"))


#: The preset. ``state_dirs``: Claude Code's transcripts, by project.
PRESET: Final = CliPreset(
    id="claude-code",
    command=command,
    parser=lambda turn: ClaudeCodeParser(turn.operation_id, prompt=turn.prompt,
                                         limited=bool(turn.state.get("limitedPrompt"))),
    state_dirs=(".claude/projects",),
)


def make_adapter(**options: Any) -> CliAdapter:
    """A Claude Code adapter; ``options`` are :class:`CliAdapter`'s
    (``program``, ``homes``, ``cwd``, ``env``, ``kill_after``, ``sync_interval``)."""
    return CliAdapter(PRESET, **options)


#: What ``router daemon --adapter claude-code`` runs: an adapter object.
adapter: Final = make_adapter()
