"""The live view: one normalized stream per session, in the container's
``ContainerMessage`` shape.

Every session, whichever way it is reached, is shown as the same stream of
*items* (plain JSON objects):

``{"type": "message", "message": MESSAGE}``
    a transcript message, new or updated: a later item with the same
    ``message.id`` replaces it. ``MESSAGE`` is a ``ContainerMessage`` as the
    container wire writes it (``id``, ``role``, ``parts``, ``operationId``,
    ``createdAt``), plus ``"card": true`` on a message the router delivered
    into a Claude Code session (a row the mod stamped ``wrote: "message"``).
``{"type": "text-delta" | "reasoning-delta", "messageId": ID, "delta": TEXT}``
    live text for a message still being written: append ``delta`` to the
    message's last part when that part is of the delta's kind, else add a
    part of that kind holding it.
``{"type": "turn-start", "id": ID}`` / ``{"type": "turn-end", "id": ID, ...}``
    a turn (a container operation, a Claude Code turn) began or ended.
``{"type": "notice", "level": "error", "code": "frame-skipped", "seq", "runtimeId", "message"}``
    the host passed a container frame it could not parse or apply
    (:class:`router.host.FrameSkipped`): what it carried is missing.

A subscriber first gets a snapshot, ``{"session", "kind", "messages",
"busy"}``, then the items from that point on.

This module holds the sans-IO parts: :class:`ModLiveConverter` (mod events
in, items out, and the transcript so far for snapshots) and
:func:`container_items` (the host's live events in, items out). The Trio
fan-out is :class:`LiveHub`, on :mod:`router._fanout`.

Theory of operation (the mod's events)
--------------------------------------
- A ``step`` snapshot carries the whole step so far (claude-envoy 1.19.0 ``hooks/mod-protocol.ts``, ``step``). Its
  message is ``<turnId>:<index>``, role ``assistant``: the first snapshot
  draws it; a later one that only grew the last text (or reasoning) part is
  sent as a delta; any other change redraws the message; the ``done``
  snapshot always draws the whole message, so a reader that missed deltas
  ends right. Tool calls become ``tool`` parts (``running``), their
  arguments parsed once they parse (partial JSON text stays text).
- An ``append`` row: one stamped ``wrote: "pointer"`` (the prompt at rows a
  turn never read) is hidden; one stamped ``wrote: "message"`` (a row or a
  prompt this router wrote) is drawn as a card; the ``response`` row of a
  step already drawn from its snapshots is not drawn again (rows and steps
  pair up in order), nor one that comes while its step still streams (Claude
  Code writes a step's rows, one per block, before the step's ``done``
  snapshot, which draws the step whole); a ``tool_result`` block completes its ``tool`` part;
  other user and assistant rows (a prompt typed at the terminal, say) are
  drawn as they are, meta rows and attachments are not. ``mod-protocol.ts`` says the
  stamp, never the words, tells a card from a pointer; so does this.
- ``turn-start`` / ``turn-complete`` become ``turn-start`` / ``turn-end``.
  Other kinds (``hello``, ``model``, ``session-id`` ...) draw nothing.

At most ``max_messages`` messages are kept for snapshots (oldest dropped),
so a long session costs bounded memory.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from typing import Any, Callable, Final, Iterator, Mapping

from router._fanout import FanOut, FanOutStatistics, FanOutSubscription, Lagged
from router.host import (
    AdapterEvent, DaemonChanged, FrameSkipped, HostEvent, MessageStored, OperationEnded, OperationStarted,
)
from router.turns.resume import HISTORY_BATCHES, HISTORY_BYTES, LiveBatch, LiveHistory, LiveId
from wire.json import JsonError, JsonValue, loads
from wire.mod import (
    ModAppendEvent,
    ModEvent,
    ModStepEvent,
    ModStepReasoning,
    ModStepText,
    ModStepToolCall,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
)

__all__ = [
    "LIVE_BUFFER",
    "LiveHub",
    "LiveLagged",
    "LiveSubscription",
    "MAX_MESSAGES",
    "ModLiveConverter",
    "apply_item",
    "container_items",
    "skipped_notice",
]

log = logging.getLogger("router.turns.live")

#: Messages a Claude Code session's view keeps for snapshots (ours).
MAX_MESSAGES: Final = 2000
#: Item batches a live subscriber may fall behind before it is dropped (ours:
#: a step streams at most ten snapshots a second, so this is minutes).
LIVE_BUFFER: Final = 1024


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _block_parts(content: tuple[Mapping[str, JsonValue], ...] | list[Any]) -> list[dict[str, Any]]:
    """Claude Code content blocks as ``ContainerMessage`` parts (blocks the
    live view has no part for are left out)."""
    parts: list[dict[str, Any]] = []
    for block in content:
        if type(block) is not dict:
            continue
        kind = block.get("type")
        if kind == "text" and type(block.get("text")) is str:
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and type(block.get("thinking")) is str:
            parts.append({"type": "reasoning", "text": block["thinking"]})
        elif kind == "image":
            source = block.get("source")
            if (
                type(source) is dict
                and type(source.get("media_type")) is str
                and type(source.get("data")) is str
            ):
                parts.append({"type": "image", "mediaType": source["media_type"], "data": source["data"]})
        elif kind == "tool_use" and type(block.get("id")) is str and type(block.get("name")) is str:
            parts.append(
                {
                    "type": "tool",
                    "toolCallId": block["id"],
                    "toolName": block["name"],
                    "input": block.get("input"),
                    "state": "running",
                }
            )
    return parts


def _tool_input(args: str) -> JsonValue:
    """A tool call's arguments: parsed once whole, the text while partial."""
    try:
        return loads(args)
    except (JsonError, RecursionError):
        return args


def _step_parts(event: ModStepEvent) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in event.parts:
        if isinstance(part, ModStepText):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ModStepReasoning):
            parts.append({"type": "reasoning", "text": part.text})
        elif isinstance(part, ModStepToolCall):
            parts.append(
                {
                    "type": "tool",
                    "toolCallId": part.id,
                    "toolName": part.name,
                    "input": _tool_input(part.args),
                    "state": "running",
                }
            )
    return parts


def _delta(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(kind, text)`` when ``new`` is ``old`` with only its last text or
    reasoning part grown (or one such part added at the end), else None."""
    if len(new) == len(old) and new:
        *head, last = new
        if head != old[:-1]:
            return None
        before = old[-1]
        if last["type"] in ("text", "reasoning") and before["type"] == last["type"]:
            if last["text"].startswith(before["text"]) and last["text"] != before["text"]:
                return last["type"], last["text"][len(before["text"]) :]
        return None
    if len(new) == len(old) + 1 and new[:-1] == old:
        last = new[-1]
        if last["type"] in ("text", "reasoning") and (not old or old[-1]["type"] != last["type"]) and last["text"]:
            return last["type"], last["text"]
    return None


def _text_of(parts: list[dict[str, Any]]) -> str:
    return "".join(part["text"] for part in parts if part.get("type") == "text")


def apply_item(messages: dict[str, dict[str, Any]], item: Mapping[str, Any]) -> None:
    """Apply one live item to a reader's transcript (id -> message), as a
    page does. The reference reader the tests hold the converter to."""
    kind = item.get("type")
    if kind == "message":
        message = item["message"]
        messages[message["id"]] = message
    elif kind in ("text-delta", "reasoning-delta"):
        message = messages.get(item["messageId"])
        if message is None:
            return
        part_type = "text" if kind == "text-delta" else "reasoning"
        parts = [dict(part) for part in message["parts"]]
        if parts and parts[-1]["type"] == part_type:
            parts[-1]["text"] += item["delta"]
        else:
            parts.append({"type": part_type, "text": item["delta"]})
        messages[message["id"]] = {**message, "parts": parts}


class ModLiveConverter:
    """Mod events in, live items out (see the module docstring)."""

    def __init__(self, *, now: Callable[[], int] = _now_ms, max_messages: int = MAX_MESSAGES) -> None:
        self._now = now
        self.max_messages = max_messages
        #: The transcript so far, oldest first (id -> message).
        self.messages: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.busy = False
        #: Steps drawn from snapshots whose ``response`` row has not come.
        self._awaiting_row: collections.deque[str] = collections.deque(maxlen=64)
        #: The step whose snapshots stream now (no ``done`` yet). Claude Code
        #: writes a step's ``response`` rows, one per content block, before the
        #: step's last snapshot (recorded, tests/fixtures/mod-events): such a
        #: row is that step, which its ``done`` snapshot draws whole.
        self._streaming: str | None = None
        #: tool call id -> the message holding its part.
        self._tools: dict[str, str] = {}
        self.events_seen = 0

    def __repr__(self) -> str:
        return (
            f"<ModLiveConverter messages={len(self.messages)} busy={self.busy} "
            f"awaiting_rows={len(self._awaiting_row)} events={self.events_seen}>"
        )

    def snapshot(self) -> dict[str, Any]:
        return {"messages": list(self.messages.values()), "busy": self.busy}

    def _store(self, message: dict[str, Any]) -> dict[str, Any]:
        mid = message["id"]
        if mid in self.messages:
            self.messages[mid] = message
        else:
            self.messages[mid] = message
            while len(self.messages) > self.max_messages:
                old, dropped = self.messages.popitem(last=False)
                for part in dropped["parts"]:
                    if part.get("type") == "tool":
                        self._tools.pop(part["toolCallId"], None)
        for part in message["parts"]:
            if part.get("type") == "tool":
                self._tools[part["toolCallId"]] = mid
        return {"type": "message", "message": message}

    def feed(self, event: ModEvent) -> list[dict[str, Any]]:
        """The items one mod event makes (often none)."""
        self.events_seen += 1
        if isinstance(event, ModStepEvent):
            return self._step(event)
        if isinstance(event, ModAppendEvent):
            return self._append(event)
        if isinstance(event, ModTurnStartEvent):
            self.busy = True
            return [{"type": "turn-start", "id": event.turn_id}]
        if isinstance(event, ModTurnCompleteEvent):
            self.busy = False
            return [{"type": "turn-end", "id": event.turn_id, "reason": event.stop_reason}]
        return []

    def _step(self, event: ModStepEvent) -> list[dict[str, Any]]:
        mid = f"{event.turn_id}:{event.index}"
        parts = _step_parts(event)
        self._streaming = None if event.done else mid
        old = self.messages.get(mid)
        if old is None:
            message = {
                "id": mid,
                "role": "assistant",
                "parts": parts,
                "operationId": event.turn_id,
                "createdAt": self._now(),
            }
            items = [self._store(message)]
        else:
            message = {**old, "parts": parts}
            change = None if event.done else _delta(old["parts"], parts)
            if change is not None:
                kind, text = change
                self._store(message)
                items = [{"type": f"{kind}-delta", "messageId": mid, "delta": text}]
            elif parts == old["parts"] and not event.done:
                items = []
            else:
                items = [self._store(message)]
        if event.done and mid not in self._awaiting_row:
            self._awaiting_row.append(mid)
        return items

    def _append(self, event: ModAppendEvent) -> list[dict[str, Any]]:
        wrote = event.wrote if type(event.wrote) is str else None
        if wrote == "pointer":
            return []  # the prompt at rows a turn never read: the view draws nothing for it
        row = event.message
        if wrote is None and event.door == "response" and row.type == "assistant":
            if self._streaming is not None or self._drawn_step(row.content):
                return []  # the step its snapshots draw
        items = self._tool_results(row.content)
        if type(row.is_meta) is bool and row.is_meta and wrote is None:
            return items
        if row.type not in ("user", "assistant"):
            return items
        parts = _block_parts(row.content)
        if not parts:
            return items
        message: dict[str, Any] = {"id": event.uuid, "role": row.type, "parts": parts, "createdAt": self._now()}
        if wrote == "message":
            message["card"] = True
        items.append(self._store(message))
        return items

    def _drawn_step(self, content: tuple[Any, ...]) -> bool:
        """Whether a ``response`` row is a step already drawn from its
        snapshots: the oldest finished step whose text is the row's."""
        text = _text_of(_block_parts(content))
        for mid in list(self._awaiting_row):
            message = self.messages.get(mid)
            if message is None:
                self._awaiting_row.remove(mid)  # dropped from the view already
            elif _text_of(message["parts"]) == text:
                self._awaiting_row.remove(mid)
                return True
        return False

    def _tool_results(self, content: tuple[Any, ...]) -> list[dict[str, Any]]:
        items = []
        for block in content:
            if type(block) is not dict or block.get("type") != "tool_result":
                continue
            call_id = block.get("tool_use_id")
            mid = self._tools.get(call_id) if type(call_id) is str else None
            message = self.messages.get(mid) if mid is not None else None
            if message is None:
                continue
            parts = []
            for part in message["parts"]:
                if part.get("type") == "tool" and part["toolCallId"] == call_id:
                    part = {
                        **part,
                        "state": "error" if block.get("is_error") is True else "done",
                        "output": block.get("content"),
                    }
                parts.append(part)
            items.append(self._store({**message, "parts": parts}))
        return items


def container_items(event: HostEvent) -> list[dict[str, Any]]:
    """The items one of the host's events makes (the host already speaks
    ``ContainerMessage``; this drops what the view does not show)."""
    kind = type(event)
    if kind is MessageStored:
        return [{"type": "message", "message": event.message}]
    if kind is AdapterEvent:
        raw = event.event
        if raw["type"] in ("text-delta", "reasoning-delta"):
            if type(raw.get("messageId")) is str and type(raw.get("delta")) is str:
                return [{"type": raw["type"], "messageId": raw["messageId"], "delta": raw["delta"]}]
        return []
    if kind is OperationStarted:
        return [{"type": "turn-start", "id": event.operation_id}]
    if kind is OperationEnded:
        return [{"type": "turn-end", "id": event.operation_id, "result": event.result.to_json()}]
    if kind is FrameSkipped:
        return [skipped_notice(event.runtime_id, event.seq, event.reason)]
    if kind is DaemonChanged:
        return [daemon_notice(event.state, event.reason, event.container)]
    return []


#: How the live view words a launched daemon's state (``router.host.lifecycle``).
DAEMON_STATES: Final = {
    "starting": ("info", "its daemon is starting"),
    "running": ("info", "its daemon runs"),
    "replacing": ("warning", "its daemon was lost; a new one is starting"),
    "idle-stopped": ("info", "its daemon was stopped while idle; the next message starts it again"),
    "stopped": ("info", "its daemon is stopped; the next message starts one"),
    "unreachable": ("error", "its daemon cannot be started; the next message tries again"),
}


def daemon_notice(state: str, reason: str | None, container: str | None) -> dict[str, Any]:
    """The live view's notice of a launched daemon's change of state (from
    :class:`router.host.DaemonChanged`)."""
    level, said = DAEMON_STATES.get(state, ("info", f"its daemon is {state}"))
    notice: dict[str, Any] = {"type": "notice", "level": level, "code": f"daemon-{state}", "state": state,
                              "message": said + (f" ({reason})" if reason else "")}
    if container is not None:
        notice["container"] = container
    return notice


def skipped_notice(runtime_id: str, seq: int, reason: str) -> dict[str, Any]:
    """The live view's notice of a frame the host skipped (live, from
    :class:`router.host.FrameSkipped`; in a snapshot, from the store's
    ``skipped_frames``)."""
    return {
        "type": "notice",
        "level": "error",
        "code": "frame-skipped",
        "seq": seq,
        "runtimeId": runtime_id,
        "message": f"the host skipped frame {seq} of runtime {runtime_id}, so what it carried is missing: {reason}",
    }


# --------------------------------------------------------------------------- Trio fan-out


class LiveLagged(Lagged):
    """A live subscriber fell more than its buffer (:data:`LIVE_BUFFER`
    batches) behind and was dropped; subscribe again (the snapshot catches
    up). Its code is ``live-lagged``."""


def _live_lagged(buffer: int) -> Callable[[], LiveLagged]:
    def make() -> LiveLagged:
        return LiveLagged(
            "live-lagged",
            f"the live view fell over {buffer} batches behind and was dropped; subscribe again",
        )

    return make


class LiveSubscription:
    """A snapshot, then ``async for batch in subscription`` (lists of items)
    until the session closes; raises :class:`LiveLagged` when dropped.

    ``replay`` is what a resume missed (``None``: the resume point is not
    held, or none was asked for), ``epoch`` and ``position`` where the view
    stood when it subscribed. :meth:`receive` is the next numbered batch
    (``None`` at the end); cancelling it loses nothing. :meth:`receive_nowait`
    is the next one already waiting, if any."""

    __slots__ = ("snapshot", "replay", "epoch", "position", "durable", "_items")

    def __init__(
        self,
        snapshot: dict[str, Any],
        items: FanOutSubscription[LiveBatch],
        *,
        replay: list[LiveBatch] | None = None,
        epoch: str = "",
        position: int = 0,
        durable: tuple[int, int] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.replay = replay
        self.epoch = epoch
        self.position = position
        self.durable = durable
        self._items = items

    @property
    def lagged(self) -> bool:
        """Whether this subscriber was dropped for falling behind."""
        return self._items.lagged

    async def receive(self) -> LiveBatch | None:
        try:
            return await self._items.__anext__()
        except StopAsyncIteration:
            return None

    def receive_nowait(self) -> LiveBatch | None:
        """The next batch if one is waiting, else None (never waits)."""
        return self._items.receive_nowait()

    def __aiter__(self) -> LiveSubscription:
        return self

    async def __anext__(self) -> list[dict[str, Any]]:
        batch = await self._items.__anext__()
        return list(batch.items)


class LiveHub:
    """One session's live view: a :class:`ModLiveConverter` and its
    subscribers, over the one fan-out (:class:`router._fanout.FanOut`), and
    the numbering and recent batches of the view
    (:class:`router.turns.resume.LiveHistory`), so a reader resumes where
    it stopped. :meth:`feed` (mod events) and :meth:`publish` (items) are
    called by the session's one view task; a subscriber that cannot keep up
    is dropped, never waited for."""

    def __init__(
        self,
        converter: ModLiveConverter | None = None,
        *,
        buffer: int = LIVE_BUFFER,
        history_batches: int = HISTORY_BATCHES,
        history_bytes: int = HISTORY_BYTES,
    ) -> None:
        self.converter = converter or ModLiveConverter()
        self.history = LiveHistory(batches=history_batches, max_bytes=history_bytes)
        #: A container session's durable position as of the last batch
        #: (``(generation, version)``; None: not known, or not a container).
        self.durable: tuple[int, int] | None = None
        self._fanout: FanOut[LiveBatch] = FanOut(buffer=buffer, lagged_error=_live_lagged(buffer))
        #: Told after each batch is handed out (the turn router's
        #: ``on_change``: the session's listing may have changed).
        self.on_publish: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<LiveHub subscribers={len(self._fanout)} {self.history!r} {self.converter!r}>"

    @property
    def buffer(self) -> int:
        return self._fanout.buffer

    @property
    def closed(self) -> bool:
        return self._fanout.closed

    def statistics(self) -> FanOutStatistics:
        """The fan-out's figures: ``subscribers``, ``published``, ``dropped``, ``closed``."""
        return self._fanout.statistics()

    def feed(self, events: list[ModEvent]) -> None:
        items: list[dict[str, Any]] = []
        for event in events:
            items += self.converter.feed(event)
        self.publish(items)

    def publish(self, items: list[dict[str, Any]], durable: tuple[int, int] | None = None) -> None:
        """Number ``items`` and hand them out; ``durable`` is a container
        session's position once a reader has them (default: the last)."""
        if durable is not None:
            self.durable = durable
        if items:
            self._fanout.publish(self.history.publish(items, self.durable))
            if self.on_publish is not None:
                self.on_publish()

    def reset(self, why: str, *, level: int = logging.WARNING) -> None:
        """The events were interrupted (a subscription overflowed, the
        host's events ended): every subscriber is dropped as lagged, so
        each takes a fresh snapshot, and the view takes a new epoch, so no
        id from before resumes from memory across the gap."""
        log.log(level, "live view reset: %s", why)
        self.history.restart()
        self._fanout.reset()

    def close(self) -> None:
        self._fanout.close()

    @contextlib.contextmanager
    def subscribe(self, since: LiveId | None = None) -> Iterator[LiveSubscription]:
        """Subscribe; with ``since``, the batches after it when the history
        holds it (``replay``). The snapshot, the replay and the subscription
        are taken at one instant (no checkpoint between), so nothing falls
        between them and nothing repeats."""
        snapshot = self.converter.snapshot()
        replay = self.history.since(since)
        with self._fanout.subscribe() as items:
            yield LiveSubscription(
                snapshot, items, replay=replay, epoch=self.history.epoch,
                position=self.history.position, durable=self.durable,
            )  # fmt: skip
