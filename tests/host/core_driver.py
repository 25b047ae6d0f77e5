"""Build daemon messages for the host core's tests, and read its effects."""

from __future__ import annotations

from typing import Any, Iterable

from router.host.reconcile import ConnectionRules, Effects
from router.host.store import Store
from wire.container import CaughtUp, DaemonMessage, FrameMessage, Hello, converter

SESSION = "s"


def hello(
    runtime: str = "r1",
    *,
    open: int | None = None,
    last_seq: int = 0,
    operations: Iterable[dict] = (),
    session: str = SESSION,
    capabilities: Iterable[str] = ("steer",),
) -> Hello:
    return converter.structure(
        {
            "type": "hello",
            "protocol": 1,
            "runtimeId": runtime,
            "session": session,
            "adapter": {"id": "echo", "version": "1", "capabilities": list(capabilities)},
            "open": open,
            "lastSeq": last_seq,
            "operations": list(operations),
        },
        Hello,
    )


def frame(seq: int, body: dict) -> FrameMessage:
    return converter.structure({"type": "frame", "seq": seq, "frame": body}, FrameMessage)


def start(operation_id: str) -> dict:
    return {"kind": "start", "operationId": operation_id}


def event(operation_id: str | None, body: dict) -> dict:
    return {"kind": "event", "operationId": operation_id, "event": body}


def message(id: str, text: str, operation_id: str | None = None) -> dict:
    body: dict[str, Any] = {
        "id": id,
        "role": "assistant",
        "parts": [{"type": "text", "text": text}],
        "createdAt": 5,
    }
    if operation_id is not None:
        body["operationId"] = operation_id
    return {"type": "message", "message": body}


def persist(*entries: Any) -> dict:
    return {"kind": "persist", "entries": list(entries)}


def settle(operation_id: str, text: str | None = None, reason: str | None = None) -> dict:
    outcome = {"status": "done", "text": text} if reason is None else {"status": "unanswered", "reason": reason}
    return {"kind": "settle", "operationId": operation_id, "outcome": outcome}


def caught_up(last_seq: int) -> CaughtUp:
    return CaughtUp(last_seq=last_seq)


def sends(effects: Effects) -> list[dict]:
    """The effects' host messages as wire JSON."""
    return [converter.unstructure(message) for message in effects.sends]


def kinds(effects: Effects) -> list[str]:
    return [body["type"] for body in sends(effects)]


def connect(store: Store, greeting: Hello, **options: Any) -> tuple[ConnectionRules, Effects]:
    """A core reconciled with ``greeting`` and delivered: as the link does."""
    core = ConnectionRules(greeting.session, **options)
    with store.transaction():
        effects = core.hello(store, greeting)
    with store.transaction():
        effects = effects + core.deliver(store)
    return core, effects


def receive(store: Store, core: ConnectionRules, *messages: DaemonMessage) -> Effects:
    with store.transaction():
        return core.receive(store, list(messages))
