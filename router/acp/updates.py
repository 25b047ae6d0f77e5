"""The live view as ACP ``session/update``s, without I/O (``router acp``).

Theory of operation
-------------------
``router acp`` shows a board session to an ACP client. What it reads is the
router's live view (router/turns/live.py): a snapshot of the transcript
(``ContainerMessage`` JSON), then items (``message``, ``text-delta``,
``reasoning-delta``, ``turn-start``/``turn-end``, notices).
:class:`UpdateConverter` says which ACP updates each makes:

- a user message: ``user_message_chunk``s of its text, except a message of an
  operation this client sent (the client shows its own prompt);
- assistant text and reasoning: ``agent_message_chunk`` /
  ``agent_thought_chunk``. Deltas go out as they come; a message item then
  sends only the text the deltas did not (a reader that missed deltas, or a
  session that sends none, still gets every word, and none twice);
- a tool part: ``tool_call`` the first time its id is seen, then
  ``tool_call_update`` when its state or output changes (``running`` ->
  ``in_progress``, ``done`` -> ``completed``, ``error`` -> ``failed``);
- everything else: nothing.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["UpdateConverter"]

_STATUS: Final = {"running": "in_progress", "done": "completed", "error": "failed"}


def _text(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


class UpdateConverter:
    """One attached session's updates (see the module docstring)."""

    def __init__(self) -> None:
        #: message id -> (text characters sent, reasoning characters sent).
        self._said: dict[str, list[int]] = {}
        #: tool call id -> (state, output) last sent.
        self._tools: dict[str, tuple[Any, Any]] = {}
        #: Operations this client sent: their user messages are not echoed.
        self.own: set[str] = set()
        self.items = 0

    def __repr__(self) -> str:
        return f"<UpdateConverter messages={len(self._said)} tools={len(self._tools)} items={self.items}>"

    def snapshot(self, messages: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            out += self.message(message)
        return out

    def item(self, item: Any) -> list[dict[str, Any]]:
        self.items += 1
        if type(item) is not dict:
            return []
        kind = item.get("type")
        if kind == "message":
            return self.message(item.get("message"))
        if kind in ("text-delta", "reasoning-delta") and type(item.get("delta")) is str \
                and type(item.get("messageId")) is str:
            said = self._said.setdefault(item["messageId"], [0, 0])
            said[0 if kind == "text-delta" else 1] += len(item["delta"])
            return [_text("agent_message_chunk" if kind == "text-delta" else "agent_thought_chunk", item["delta"])]
        return []

    def message(self, message: Any) -> list[dict[str, Any]]:
        if type(message) is not dict or type(message.get("id")) is not str or type(message.get("parts")) is not list:
            return []
        parts = [part for part in message["parts"] if type(part) is dict]
        if message.get("role") == "user":
            return self._user(message, parts)
        out = self._texts(message["id"], parts)
        for part in parts:
            if part.get("type") == "tool" and type(part.get("toolCallId")) is str:
                out += self._tool(part)
        return out

    def _user(self, message: dict[str, Any], parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if message.get("operationId") in self.own or message["id"] in self._said:
            return []
        self._said[message["id"]] = [0, 0]
        return [_text("user_message_chunk", part["text"]) for part in parts
                if part.get("type") == "text" and type(part.get("text")) is str and part["text"]]

    def _texts(self, message_id: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The text and reasoning of an assistant message the deltas did not send."""
        said = self._said.setdefault(message_id, [0, 0])
        out: list[dict[str, Any]] = []
        for index, (kind, update) in enumerate((("text", "agent_message_chunk"), ("reasoning", "agent_thought_chunk"))):
            text = "".join(part["text"] for part in parts if part.get("type") == kind and type(part.get("text")) is str)
            if len(text) > said[index]:
                out.append(_text(update, text[said[index]:]))
                said[index] = len(text)
        return out

    def _tool(self, part: dict[str, Any]) -> list[dict[str, Any]]:
        id = part["toolCallId"]
        state, output = part.get("state"), part.get("output")
        status = _STATUS.get(state, "in_progress") if type(state) is str else "in_progress"
        seen = self._tools.get(id)
        self._tools[id] = (state, output)
        if seen is None:
            update: dict[str, Any] = {"sessionUpdate": "tool_call", "toolCallId": id,
                                      "title": str(part.get("toolName") or "tool"), "status": status,
                                      "rawInput": part.get("input")}
            if output is not None:
                update["rawOutput"] = output
            return [update]
        if seen == (state, output):
            return []
        update = {"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status}
        if output is not None:
            update["rawOutput"] = output
        return [update]
