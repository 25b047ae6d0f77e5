"""A synchronous driver for :class:`SessionCore`, for tests without sockets.

It plays the runner's part by hand: connections are :class:`Conn` objects
that record what was sent to them; adapter calls the core asks for are held
as pending until the test answers them (or answered at once, with
``auto=True``); turns are held until the test finishes them.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from router.daemon.core import (
    AwaitTurn,
    CancelTurn,
    CloseConnection,
    CloseSession,
    ConfigureSession,
    Effect,
    OpenSession,
    Send,
    SessionCore,
    StartTurn,
    Steer,
    Turn,
    TurnCancelled,
)
from wire.container import AdapterInfo, parse_host_message

ECHO_INFO = AdapterInfo(id="echo", version="1", capabilities=("steer",))


class Conn:
    """A connection: everything sent to it, parsed, and how it was closed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[dict] = []
        self.texts: list[str] = []
        self.closed: tuple[int, str] | None = None

    def __repr__(self) -> str:
        return f"<Conn {self.name}>"

    def frames(self) -> list[dict]:
        return [m for m in self.sent if m["type"] == "frame"]

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in self.sent if m["type"] == kind]


@attrs.define
class FakeSession:
    generation: int
    restore: tuple
    can_steer: bool = True
    closed: bool = False
    steered: list = attrs.Factory(list)
    configured: list = attrs.Factory(list)


class Driver:
    """Feeds a core and performs its effects synchronously."""

    def __init__(self, core: SessionCore | None = None, *, auto: bool = True, can_steer: bool = True) -> None:
        self.core = core or SessionCore("s", runtime_id="r", adapter=ECHO_INFO)
        self.auto = auto
        self.can_steer = can_steer
        #: Turns started and not finished, oldest first.
        self.turns: list[Turn] = []
        #: Turns whose scope was cancelled.
        self.cancelled: set[Turn] = set()
        #: Adapter calls waiting for an answer (when not auto): the effect.
        self.pending: list[Effect] = []
        self.sessions: list[FakeSession] = []
        self.effects: list[Effect] = []

    # ------------------------------------------------------------ inputs

    def attach(self, conn: Conn) -> None:
        self.perform(self.core.attach(conn))

    def send(self, conn: Conn, message: dict | str) -> None:
        """A host message arrives on ``conn`` and is handled at once."""
        text = message if isinstance(message, str) else json.dumps(message)
        parsed, effects = self.core.receive(conn, text)
        self.perform(effects)
        if parsed is not None:
            self.perform(self.core.handle(conn, parsed))

    def handle(self, conn: Conn, message: dict) -> None:
        """Handle a message without the receive check (queued earlier)."""
        parsed = parse_host_message(json.dumps(message))
        assert parsed is not None, message
        self.perform(self.core.handle(conn, parsed))

    def finish(self, turn: Turn, result: Any) -> None:
        self.turns.remove(turn)
        self.perform(self.core.turn_finished(turn, result))

    def answer_open(self, *, fail: BaseException | None = None) -> None:
        effect = self.pending.pop(0)
        assert isinstance(effect, OpenSession), effect
        self._open(effect, fail)

    def answer_steer(self, took: bool = True, *, fail: BaseException | None = None) -> None:
        effect = self.pending.pop(0)
        assert isinstance(effect, Steer), effect
        self._steer(effect, took, fail)

    # ------------------------------------------------------------ effects

    def perform(self, effects: list[Effect]) -> None:
        for effect in effects:
            self.effects.append(effect)
            kind = type(effect)
            if kind is Send:
                effect.conn.texts.append(effect.text)
                effect.conn.sent.append(json.loads(effect.text))
            elif kind is CloseConnection:
                effect.conn.closed = (effect.code, effect.reason)
            elif kind is StartTurn:
                self.turns.append(effect.turn)
            elif kind is CancelTurn:
                self.cancelled.add(effect.turn)
            elif kind is AwaitTurn:
                # The runner waits; here the cancelled turn ends at once.
                if effect.turn in self.turns:
                    self.finish(effect.turn, TurnCancelled())
            elif kind is CloseSession:
                effect.session.closed = True
            elif kind is ConfigureSession:
                effect.session.configured.append(effect.settings)
            elif kind is OpenSession:
                if self.auto:
                    self._open(effect, None)
                else:
                    self.pending.append(effect)
            elif kind is Steer:
                if self.auto:
                    self._steer(effect, True, None)
                else:
                    self.pending.append(effect)
            else:  # pragma: no cover
                raise AssertionError(effect)

    def _open(self, effect: OpenSession, fail: BaseException | None) -> None:
        if fail is not None:
            self.perform(self.core.open_failed(effect.conn, effect.generation, fail))
            return
        session = FakeSession(effect.generation, effect.restore, self.can_steer)
        self.sessions.append(session)
        self.perform(self.core.opened(effect.generation, session, can_steer=self.can_steer))

    def _steer(self, effect: Steer, took: bool, fail: BaseException | None) -> None:
        effect.session.steered.append(effect.input)
        if fail is not None:
            self.perform(self.core.steer_failed(effect.conn, effect.turn, effect.operation_id, fail))
        else:
            self.perform(self.core.steered(effect.turn, effect.operation_id, took))


def prompt(operation_id: str, text: str = "hi", when_busy: str = "followUp") -> dict:
    return {"type": "prompt", "operationId": operation_id, "input": text, "whenBusy": when_busy}


def open_(generation: int = 1, restore: list | None = None) -> dict:
    return {"type": "open", "generation": generation, "settings": {}, "restore": restore or []}
