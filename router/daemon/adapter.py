"""The adapter interface: the one agent-specific part of the container daemon.

The daemon owns the transport, the numbering of frames, the queue and replay;
an adapter owns only the agent. It opens a session (resuming it from entries
it persisted earlier, possibly in another container), runs one turn at a time,
and reports what happens as container events (plain JSON objects of the
``ContainerEvent`` shapes in ``wire.container``).

This is the Trio form of the reference's ``ContainerAdapter`` (npm
``agents@0.32.0``, ``daemon-core``):

- ``open`` gets an :class:`AdapterContext` and returns an :class:`AdapterSession`.
- ``run`` is awaited inside the turn's own cancel scope. Abort is Trio
  cancellation: the daemon cancels that scope, ``run`` sees ``Cancelled`` at
  its next checkpoint, cleans up (shielded, under a deadline, if it must wait
  for a process) and lets ``Cancelled`` propagate. The operation then settles
  ``unanswered``/``aborted``; a turn that returns ``done`` after its scope was
  cancelled settles the same way. Any other exception settles ``unanswered``
  with the exception's text as the reason.
- ``steer`` (optional) folds input into the running turn and says whether it
  took it; ``configure`` (optional) applies new settings; ``close`` ends the
  session.
- ``emit``, ``persist`` and ``log`` are plain synchronous calls: the daemon
  numbers and keeps the frame at once and sends it when the socket is live,
  so an adapter never blocks on the network and its events keep their order.
"""

from __future__ import annotations

from typing import Callable, Literal, Protocol, Sequence, runtime_checkable

import attrs

from wire.container import AdapterInfo, ContainerInput, ContainerOutcome, ContainerSettings
from wire.json import JsonValue

LogLevel = Literal["info", "warn", "error"]


@attrs.frozen(kw_only=True)
class AdapterContext:
    """What an adapter session is opened with."""

    #: The harness session id (the WebSocket path's id).
    session: str
    settings: ContainerSettings
    #: Every entry this session persisted before, in order: the ``restore``
    #: messages of the generation followed by ``open.restore``.
    restore: tuple[JsonValue, ...]
    #: Report an event (a ``ContainerEvent`` JSON object). Tagged with the
    #: running operation's id, or null between turns.
    emit: Callable[[JsonValue], None]
    #: Keep resume state; sent as ``persist`` frames of at most
    #: ``MAX_CHUNK_CHARS`` each, and handed back in ``restore`` on a new
    #: container.
    persist: Callable[[Sequence[JsonValue]], None]
    #: A diagnostic line, sent as a ``log`` event.
    log: Callable[[LogLevel, str], None]


@attrs.frozen(kw_only=True)
class AdapterTurn:
    """One turn to run."""

    operation_id: str
    input: ContainerInput


@runtime_checkable
class AdapterSession(Protocol):
    """An open adapter session. ``steer`` and ``configure`` are optional:
    the daemon looks them up with ``getattr``."""

    async def run(self, turn: AdapterTurn) -> ContainerOutcome: ...

    async def close(self) -> None: ...


class SteeringSession(AdapterSession, Protocol):
    async def steer(self, input: ContainerInput) -> bool: ...


class ConfigurableSession(AdapterSession, Protocol):
    async def configure(self, settings: ContainerSettings) -> None: ...


@runtime_checkable
class Adapter(Protocol):
    """An agent the daemon can run: its identity, and how to open a session."""

    @property
    def info(self) -> AdapterInfo: ...

    async def open(self, context: AdapterContext) -> AdapterSession: ...
