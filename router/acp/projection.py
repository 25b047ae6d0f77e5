"""One turn of an ACP agent as container events, without I/O.

Theory of operation
-------------------
An ACP turn is a ``session/prompt`` request; while it runs the agent sends
``session/update`` notifications, and the turn ends with the request's
answer, ``{"stopReason": ...}``. :class:`TurnProjection` reads those updates
(already checked against the ACP schema: :func:`parse_update`) and says
which container events (``wire.container`` ``ContainerEvent`` JSON) they
are:

- the turn's answer is one assistant message, ``<operation id>:assistant``,
  whose parts keep the order the agent sent them in: text
  (``agent_message_chunk``), reasoning (``agent_thought_chunk``), a tool part
  per ``toolCallId`` (``tool_call``, updated in place by
  ``tool_call_update``), and the plan (``plan``) as a tool part named
  ``plan`` whose input is the entries;
- text and thoughts also go out live as ``text-delta`` / ``reasoning-delta``
  of that message id; each tool or plan change, and the end of the turn,
  emit the whole message again (the host stores a message by its id, so a
  later emission replaces the earlier);
- ``usage`` in the prompt's answer (ACP's unstable ``PromptResponse.usage``)
  becomes a ``usage`` event;
- every other update (``available_commands_update``, modes, session info,
  ``usage_update``'s context window, ``user_message_chunk``) changes nothing
  on the transcript.

The stop reason settles the turn (:func:`outcome_of`): ``end_turn``,
``max_tokens`` and ``max_turn_requests`` answer with the text so far,
``refusal`` and ``cancelled`` leave the turn unanswered.
"""

from __future__ import annotations

from typing import Any, Callable, Final

from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    PromptResponse,
    SessionNotification,
    ToolCallProgress,
    ToolCallStart,
)
from pydantic import ValidationError

from wire.container import ContainerOutcome, Done, Unanswered
from wire.json import JsonValue, is_json

__all__ = ["STOP_REASONS", "TurnProjection", "outcome_of", "parse_update", "tool_call_text", "usage_of"]

#: ACP's ``StopReason`` values (schema ``StopReason``) and whether each
#: answered the turn.
STOP_REASONS: Final = {
    "end_turn": True,
    "max_tokens": True,
    "max_turn_requests": True,
    "refusal": False,
    "cancelled": False,
}

#: A tool call's ACP status -> the container tool part's state.
_TOOL_STATE: Final = {"pending": "running", "in_progress": "running", "completed": "done", "failed": "error"}


def parse_update(params: Any) -> SessionNotification | str:
    """A ``session/update``'s params as the schema's model, or the reason
    they are not one (a sentence)."""
    try:
        return SessionNotification.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"session/update does not match the ACP schema at {where or 'the top'}: {first.get('msg', exc)}"


def _json(value: Any) -> JsonValue:
    return value if is_json(value) else None


def _content_text(content: Any) -> str | None:
    """The text of an ACP content block (or None for images and others)."""
    return getattr(content, "text", None) if getattr(content, "type", None) == "text" else None


def tool_call_text(content: Any) -> str:
    """The text of a tool call's ``content`` list (``content`` items' text
    blocks and diffs' paths), for a tool part's output."""
    texts: list[str] = []
    for item in content or ():
        kind = getattr(item, "type", None)
        if kind == "content":
            text = _content_text(item.content)
            if text:
                texts.append(text)
        elif kind == "diff":
            texts.append(f"diff {item.path}")
        elif kind == "terminal":
            texts.append(f"terminal {item.terminal_id}")
    return "\n".join(texts)


def usage_of(answer: Any) -> dict[str, Any] | None:
    """A ``usage`` event from a prompt's answer, when it carries usage
    (checked against the schema's ``PromptResponse``; bad usage is none)."""
    try:
        response = PromptResponse.model_validate(answer)
    except ValidationError:
        return None
    if response.usage is None:
        return None
    return {"type": "usage", "inputTokens": response.usage.input_tokens,
            "outputTokens": response.usage.output_tokens}


def outcome_of(stop_reason: str, text: str) -> ContainerOutcome:
    if STOP_REASONS.get(stop_reason, False):
        return Done(text=text)
    if stop_reason == "cancelled":
        return Unanswered(reason="cancelled: the agent ended the turn as cancelled")
    if stop_reason == "refusal":
        return Unanswered(reason="refusal: the agent refused to go on")
    return Unanswered(reason=f"the agent stopped with {stop_reason!r}")


class TurnProjection:
    """One turn's updates -> container events (see the module docstring).
    ``now`` gives milliseconds since the epoch (the message's
    ``createdAt``)."""

    def __init__(self, operation_id: str, now: Callable[[], int]) -> None:
        self.operation_id = operation_id
        self.message_id = f"{operation_id}:assistant"
        self._now = now
        self._created = now()
        #: Parts in order; tool parts are dicts updated in place.
        self._parts: list[dict[str, Any]] = []
        self._tools: dict[str, dict[str, Any]] = {}
        self.updates = 0
        self.ignored = 0

    def __repr__(self) -> str:
        return (f"<TurnProjection {self.operation_id!r} parts={len(self._parts)} tools={len(self._tools)} "
                f"updates={self.updates}>")

    @property
    def text(self) -> str:
        """Everything the agent said in this turn, its text parts joined."""
        return "".join(part["text"] for part in self._parts if part["type"] == "text")

    def tool(self, tool_call_id: str) -> dict[str, Any] | None:
        return self._tools.get(tool_call_id)

    def update(self, notification: SessionNotification) -> list[JsonValue]:
        """The events one ``session/update`` makes."""
        self.updates += 1
        update = notification.update
        if isinstance(update, AgentMessageChunk):
            return self._chunk("text", "text-delta", update.content)
        if isinstance(update, AgentThoughtChunk):
            return self._chunk("reasoning", "reasoning-delta", update.content)
        if isinstance(update, ToolCallStart):
            self._tool_start(update)
            return [self.message()]
        if isinstance(update, ToolCallProgress):
            self._tool_progress(update)
            return [self.message()]
        if isinstance(update, AgentPlanUpdate):
            self._plan([{"content": e.content, "priority": e.priority, "status": e.status} for e in update.entries])
            return [self.message()]
        self.ignored += 1
        return []

    def _chunk(self, kind: str, event: str, content: Any) -> list[JsonValue]:
        text = _content_text(content)
        if not text:
            self.ignored += 1
            return []
        if self._parts and self._parts[-1]["type"] == kind:
            self._parts[-1]["text"] += text
        else:
            self._parts.append({"type": kind, "text": text})
        return [{"type": event, "messageId": self.message_id, "delta": text}]

    def _tool_start(self, call: ToolCallStart) -> None:
        part = self._tools.get(call.tool_call_id)
        if part is None:
            part = {"type": "tool", "toolCallId": call.tool_call_id, "toolName": call.title,
                    "input": _json(call.raw_input) if call.raw_input is not None else {}, "state": "running"}
            self._tools[call.tool_call_id] = part
            self._parts.append(part)
        self._tool_fields(part, call.title, call.status, call.raw_input, call.raw_output, call.content)

    def _tool_progress(self, call: ToolCallProgress) -> None:
        part = self._tools.get(call.tool_call_id)
        if part is None:  # an update of a call never announced: announce it
            part = {"type": "tool", "toolCallId": call.tool_call_id, "toolName": call.title or call.tool_call_id,
                    "input": {}, "state": "running"}
            self._tools[call.tool_call_id] = part
            self._parts.append(part)
        self._tool_fields(part, call.title, call.status, call.raw_input, call.raw_output, call.content)

    @staticmethod
    def _tool_fields(part: dict[str, Any], title: str | None, status: str | None, raw_input: Any,
                     raw_output: Any, content: Any) -> None:
        if title:
            part["toolName"] = title
        if raw_input is not None:
            part["input"] = _json(raw_input)
        if status is not None:
            part["state"] = _TOOL_STATE.get(status, "running")
        text = tool_call_text(content)
        if raw_output is not None:
            part["output"] = _json(raw_output)
        elif text:
            part["output"] = text

    def _plan(self, entries: list[dict[str, Any]]) -> None:
        plan_id = f"{self.operation_id}:plan"
        done = all(entry["status"] == "completed" for entry in entries)
        part = self._tools.get(plan_id)
        if part is None:
            part = {"type": "tool", "toolCallId": plan_id, "toolName": "plan", "input": {}, "state": "running"}
            self._tools[plan_id] = part
            self._parts.append(part)
        part["input"] = {"entries": entries}
        part["state"] = "done" if done else "running"

    def message(self) -> dict[str, Any]:
        """The ``message`` event holding the turn's answer as it stands."""
        return {
            "type": "message",
            "message": {
                "id": self.message_id,
                "role": "assistant",
                "parts": [dict(part) for part in self._parts],
                "operationId": self.operation_id,
                "createdAt": self._created,
            },
        }

    def finish(self, *, aborted: bool = False) -> list[JsonValue]:
        """The events that end the turn: the message as it stands (tool
        calls still running are marked ``error`` when the turn was aborted);
        none when the agent said nothing."""
        if aborted:
            for part in self._tools.values():
                if part["state"] == "running":
                    part["state"] = "error"
        return [self.message()] if self._parts else []
