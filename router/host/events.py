"""What the host tells its subscribers: typed events, one class per kind.

The host applies a batch of daemon frames in one store transaction and then
hands the events that batch made to every subscriber of the session (the
user-turn router's view and meter tasks, tests, the API). They cross inside
our own process, so they are attrs classes, not JSON: a consumer matches on
the class and reads typed fields, and never re-validates. JSON appears only
at an edge (SSE, MCP, a log line), through :func:`event_json`, which gives
the shapes the live view has always shown.

:class:`OperationResult` (how an operation ended, as the API reports it)
lives here too: it is what :class:`OperationEnded` carries and what a wait
returns.

Kinds:

- :class:`MessageStored`: a transcript message was stored: the person's
  message when its operation started, or an adapter's ``message`` event (an
  update replaces the message with the same id).
- :class:`OperationStarted` / :class:`OperationEnded`: an operation began
  running in the daemon, or settled (with its :class:`OperationResult`).
- :class:`ContainerLost`: a reconcile found that the runtime that ran the
  session's operations is gone (a new ``runtimeId``, operations lost).
- :class:`AdapterEvent`: any other adapter event (text and reasoning deltas,
  tool progress, usage, logs), as the daemon sent it: opaque JSON, with the
  operation it belongs to.
- :class:`FrameSkipped`: the host passed a frame it could not parse or
  apply (recorded in the store and acknowledged, so the session goes on):
  an error notice for whoever watches the session.
- :class:`DaemonChanged`: a launched session's daemon changed state
  (starting, running, replacing, idle-stopped, stopped, unreachable: see
  :mod:`router.host.lifecycle`), with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

if TYPE_CHECKING:  # a type only: the core loads no store (sqlite3, trio)
    from router.host.store import OperationRecord

__all__ = [
    "AdapterEvent",
    "ContainerLost",
    "DaemonChanged",
    "FrameSkipped",
    "HostEvent",
    "MessageStored",
    "OperationEnded",
    "OperationResult",
    "OperationStarted",
    "event_json",
]


@attrs.frozen(kw_only=True)
class OperationResult:
    """How an operation ended, as the API reports it."""

    operation_id: str
    session: str
    status: Literal["done", "unanswered"]
    text: str | None = None
    reason: str | None = None

    @classmethod
    def of(cls, record: OperationRecord) -> OperationResult | None:
        """The result of a settled operation record; None while it is open."""
        if not record.settled or record.outcome is None:
            return None
        if record.status == "done":
            text = record.outcome.get("text")
            return cls(
                operation_id=record.id,
                session=record.session,
                status="done",
                text=text if type(text) is str else "",
            )
        reason = record.outcome.get("reason")
        return cls(
            operation_id=record.id,
            session=record.session,
            status="unanswered",
            reason=reason if type(reason) is str else "unanswered",
        )

    def to_json(self) -> dict:
        body: dict[str, Any] = {
            "operationId": self.operation_id,
            "session": self.session,
            "status": self.status,
        }
        if self.status == "done":
            body["text"] = self.text
        else:
            body["reason"] = self.reason
        return body


@attrs.frozen(kw_only=True)
class MessageStored:
    """A transcript message (a ``ContainerMessage`` JSON object) was stored."""

    message: dict[str, Any]
    operation_id: str | None
    #: ``(generation, version)`` the store gave it in the transaction that
    #: stored it (``store.messages.put``); None when not known.
    stored: tuple[int, int] | None = None


@attrs.frozen(kw_only=True)
class OperationStarted:
    operation_id: str


@attrs.frozen(kw_only=True)
class OperationEnded:
    result: OperationResult

    @property
    def operation_id(self) -> str:
        return self.result.operation_id


@attrs.frozen(kw_only=True)
class ContainerLost:
    """The container that ran the session was lost (found on ``hello``)."""


@attrs.frozen(kw_only=True)
class AdapterEvent:
    """An adapter event other than ``message``, as the daemon sent it."""

    event: dict[str, Any]
    operation_id: str | None

    @property
    def kind(self) -> str:
        return self.event["type"]


@attrs.frozen(kw_only=True)
class FrameSkipped:
    """The host passed frame ``seq`` of runtime ``runtime_id`` without
    applying it: it could not parse it, or applying it failed (``reason``
    says which, and why). It is kept in the store
    (``store.skipped_frames``) and acknowledged, so the daemon drops it and
    the session goes on; whatever it carried (a message, an entry, a settle)
    is missing."""

    runtime_id: str
    seq: int
    reason: str


@attrs.frozen(kw_only=True)
class DaemonChanged:
    """The session's daemon, which a launcher runs, changed ``state``
    (``reason`` says why, when there is one to say); ``container`` and
    ``runtime_id`` name the daemon while one runs."""

    state: str
    reason: str | None = None
    container: str | None = None
    runtime_id: str | None = None


HostEvent: TypeAlias = (
    MessageStored | OperationStarted | OperationEnded | ContainerLost | AdapterEvent | FrameSkipped | DaemonChanged
)


def event_json(event: HostEvent) -> dict[str, Any]:
    """The JSON object an edge shows for ``event``."""
    if type(event) is MessageStored:
        return {"type": "message", "message": event.message, "operationId": event.operation_id}
    if type(event) is OperationStarted:
        return {"type": "operation-start", "operationId": event.operation_id}
    if type(event) is OperationEnded:
        return {"type": "operation-end", "result": event.result.to_json()}
    if type(event) is ContainerLost:
        return {"type": "container", "status": "lost"}
    if type(event) is AdapterEvent:
        return {**event.event, "operationId": event.operation_id}
    if type(event) is FrameSkipped:
        return {"type": "frame-skipped", "runtimeId": event.runtime_id, "seq": event.seq, "reason": event.reason}
    if type(event) is DaemonChanged:
        return {"type": "daemon", "state": event.state, "reason": event.reason, "container": event.container,
                "runtimeId": event.runtime_id}
    raise TypeError(f"not a host event: {event!r}")
