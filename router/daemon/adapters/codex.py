"""Codex as a CLI preset: ``codex exec --json``, one process per turn,
resuming its own thread with ``codex exec resume <thread>``.

``router daemon --adapter codex`` runs :data:`adapter`, a
:class:`~router.daemon.adapters.process_per_turn.CliAdapter` **object** (the same
convention as ``echo`` and ``claude-code``); :func:`make_adapter` builds one
with other choices. It finds ``codex`` on ``PATH``.

This follows the reference's ``codexCli`` preset (npm ``agents@0.32.0``,
``presets/codex.ts``).

The command
-----------

``codex exec [resume <threadId>] --json --skip-git-repo-check
--dangerously-bypass-approvals-and-sandbox [-c ...] [-m <model>] -``, the
prompt on stdin (``-``). Approvals and the sandbox are bypassed because the
container is the sandbox (the reference's comment).

==============================  =====================================
state ``threadId``              ``resume <threadId>`` (from ``thread.started``)
``$OPENAI_BASE_URL``            ``-c model_provider=gateway -c model_providers.gateway={...}``
                                (Codex does not read the variable itself;
                                ``wire_api="responses"``, key from
                                ``OPENAI_API_KEY``)
``options.config``              one ``-c <key=value>`` each, in order
``options.effort``              ``-c model_reasoning_effort="<effort>"``
``settings.model``              ``-m <model>``
==============================  =====================================

Rollouts live under ``~/.codex/sessions``, which the adapter mirrors.

The output
----------

:class:`CodexParser`: one assistant message per turn, id
``<operationId>:assistant``, its parts in item order (``agent_message`` →
text, ``reasoning`` → reasoning, ``command_execution`` → tool ``shell``,
``file_change``, ``mcp_tool_call`` → ``<server>.<tool>``, ``web_search``,
``todo_list``), emitted whole whenever an item starts, updates or completes;
``turn.completed`` gives ``usage`` and the outcome (the last completed agent
message's text); ``turn.failed`` gives ``unanswered`` with its message; an
``error`` line or an ``error`` item is a ``log`` warning (a fatal one ends in
``turn.failed`` or a non-zero exit, whose reason then quotes it).
"""

from __future__ import annotations

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
from wire.json import JsonValue, dumps, loads

__all__ = ["CodexParser", "PRESET", "adapter", "command", "make_adapter", "parse_options"]

#: Codex's ``model_reasoning_effort`` values (its config reference).
EFFORT_LEVELS: Final = ("minimal", "low", "medium", "high", "xhigh")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_options(value: JsonValue) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    options: dict[str, Any] = {}
    if isinstance(value.get("config"), list):
        options["config"] = [each for each in value["config"] if isinstance(each, str)]
    if value.get("effort") in EFFORT_LEVELS:
        options["effort"] = value["effort"]
    return options


def command(turn: CliTurn) -> CliCommand:
    argv = ["codex", "exec"]
    if turn.state.get("threadId"):
        argv += ["resume", turn.state["threadId"]]
    # The container is the sandbox.
    argv += ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    base_url = turn.environ.get("OPENAI_BASE_URL")
    if base_url:
        argv += [
            "-c",
            "model_provider=gateway",
            "-c",
            # TOML inline table; a JSON string is a valid TOML basic string.
            f'model_providers.gateway={{name="AI Gateway",base_url={dumps(base_url)},'
            f'env_key="OPENAI_API_KEY",wire_api="responses"}}',
        ]
    options = parse_options(turn.settings.options)
    for config in options.get("config", []):
        argv += ["-c", config]
    if "effort" in options:
        argv += ["-c", f'model_reasoning_effort="{options["effort"]}"']
    if turn.settings.model:
        argv += ["-m", turn.settings.model]
    # `-` reads the prompt from stdin.
    argv.append("-")
    return CliCommand(argv=tuple(argv), stdin=turn.prompt)


def _tool_state(status: Any) -> str:
    if status == "completed":
        return "done"
    if status in ("failed", "declined"):
        return "error"
    return "running"


def _str(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


def _part_of(item: dict[str, Any]) -> dict[str, Any] | None:
    """One item as a transcript part, or ``None`` for items that are not."""
    ident = _str(item.get("id"), "item")
    state = _tool_state(item.get("status"))
    kind = item.get("type")
    if kind == "agent_message":
        return {"type": "text", "text": _str(item.get("text"), "")}
    if kind == "reasoning":
        return {"type": "reasoning", "text": _str(item.get("text"), "")}
    if kind == "command_execution":
        exit_code = item.get("exit_code")
        if state == "done" and exit_code is not None and exit_code != 0:
            state = "error"
        part: dict[str, Any] = {
            "type": "tool",
            "toolCallId": ident,
            "toolName": "shell",
            "input": {"command": _str(item.get("command"), "")},
            "state": state,
        }
        if item.get("aggregated_output"):
            part["output"] = item["aggregated_output"]
        return part
    if kind == "file_change":
        return {"type": "tool", "toolCallId": ident, "toolName": "file_change", "input": item.get("changes"), "state": state}
    if kind == "mcp_tool_call":
        part = {
            "type": "tool",
            "toolCallId": ident,
            "toolName": f"{_str(item.get('server'), 'mcp')}.{_str(item.get('tool'), 'tool')}",
            "input": item.get("arguments"),
            "state": state,
        }
        if "result" in item or "error" in item:
            result = item.get("result")
            part["output"] = result if result is not None else item.get("error")
        return part
    if kind == "web_search":
        return {"type": "tool", "toolCallId": ident, "toolName": "web_search", "input": {"query": _str(item.get("query"), "")}, "state": state}
    if kind == "todo_list":
        return {"type": "tool", "toolCallId": ident, "toolName": "todo_list", "input": item.get("items"), "state": state}
    return None


class CodexParser:
    """One turn's ``codex exec --json`` reader. Sans-IO."""

    def __init__(self, operation_id: str, *, now: Callable[[], int] = _now_ms) -> None:
        # One assistant message per turn, its parts in item order.
        self.message_id = f"{operation_id}:assistant"
        self.operation_id = operation_id
        self.created_at = now()
        self.parts: dict[str, dict[str, Any]] = {}
        self.last_text = ""
        self.failure: str | None = None

    def __repr__(self) -> str:
        return f"<CodexParser {self.message_id} parts={len(self.parts)}>"

    def _message(self) -> dict[str, Any]:
        return {
            "type": "message",
            "message": {
                "id": self.message_id,
                "role": "assistant",
                "parts": list(self.parts.values()),
                "operationId": self.operation_id,
                "createdAt": self.created_at,
            },
        }

    def line(self, text: str) -> CliUpdate:
        event = loads(text)
        if not isinstance(event, dict):
            return CliUpdate()
        kind = event.get("type")
        if kind in ("item.started", "item.updated", "item.completed"):
            return self._item(kind, event.get("item"))
        read = self._READERS.get(kind) if isinstance(kind, str) else None
        return CliUpdate() if read is None else read(self, event)

    def _thread_started(self, event: dict[str, Any]) -> CliUpdate:
        thread = event.get("thread_id")
        return CliUpdate(state={"threadId": thread}) if isinstance(thread, str) and thread else CliUpdate()

    def _item(self, kind: str, item: Any) -> CliUpdate:
        if not isinstance(item, dict):
            return CliUpdate()
        if item.get("type") == "error":
            return CliUpdate(events=({"type": "log", "level": "warn", "message": _str(item.get("message"), "error")},))
        part = _part_of(item)
        if part is None:
            return CliUpdate()
        key = item["id"] if isinstance(item.get("id"), str) else str(len(self.parts))
        self.parts[key] = part
        if part["type"] == "text" and kind == "item.completed":
            self.last_text = part["text"]
        return CliUpdate(events=(self._message(),))

    def _turn_completed(self, event: dict[str, Any]) -> CliUpdate:
        return CliUpdate(events=(usage_event(event.get("usage")),), outcome=Done(text=self.last_text))

    def _turn_failed(self, event: dict[str, Any]) -> CliUpdate:
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return CliUpdate(outcome=Unanswered(reason=_str(message, "turn failed")))

    def _error(self, event: dict[str, Any]) -> CliUpdate:
        # Reconnect notices and the like; a fatal one ends in `turn.failed`
        # or a non-zero exit.
        message = event.get("message")
        self.failure = message if isinstance(message, str) else self.failure
        return CliUpdate(events=({"type": "log", "level": "warn", "message": _str(message, "error")},))

    #: The readers of the top-level event types other than items.
    _READERS: Final[dict[str, Callable[["CodexParser", dict[str, Any]], CliUpdate]]] = {
        "thread.started": _thread_started,
        "turn.completed": _turn_completed,
        "turn.failed": _turn_failed,
        "error": _error,
    }

    def end(self, exit: CliExit) -> ContainerOutcome:
        if self.failure is not None:
            return Unanswered(reason=CliExit(code=exit.code, signal=exit.signal, stderr=self.failure).describe("codex"))
        return Unanswered(reason=exit.describe("codex"))


#: The preset. ``state_dirs``: Codex's rollouts.
PRESET: Final = CliPreset(
    id="codex",
    command=command,
    parser=lambda turn: CodexParser(turn.operation_id),
    state_dirs=(".codex/sessions",),
)


def make_adapter(**options: Any) -> CliAdapter:
    """A Codex adapter; ``options`` are :class:`CliAdapter`'s."""
    return CliAdapter(PRESET, **options)


#: What ``router daemon --adapter codex`` runs: an adapter object.
adapter: Final = make_adapter()
