"""The replay adapter: recorded Claude Code turns played back, at their
recorded pace or faster, with no model and no binary.

``router daemon --adapter replay`` runs it. It plays a recording made from
the real Claude Code binary (``tests/fixtures/replay/record.py`` makes
``claude-code.jsonl``: one object per stream-json line, ``{"turn": N, "ms":
M, "line": LINE}``, ``ms`` when the line came, from the turn's start)
through the Claude Code preset's own projection
(:class:`router.daemon.adapters.claude_code.ClaudeProjection`), so a
session sees exactly the container events a Claude Code session that
printed those lines would: text and reasoning deltas, the assistant
message growing block by block, tool parts finished by their results, the
usage event, the outcome of the ``result`` line.

Theory of operation
-------------------

Each turn plays the next recorded turns of the session (from the first
again after the last). The prompt chooses how: ``replay [N] [pace P]
[stamped]`` (anywhere in the prompt's text) plays ``N`` recorded turns in
one operation (default 1), at ``P`` times the recorded pace (default: the
adapter's ``pace``, ``$ROUTER_REPLAY_PACE`` or 1; ``0`` is full speed: no
waits, one checkpoint a line); any other prompt plays one turn at the
adapter's pace. A line is projected at ``start + (ms - first) / P``,
``first`` the ``ms`` of the turn's first line (the CLI's start-up before it
printed anything is not replayed: a session's process is already up) and
``start`` when the recorded turn began playing; deadlines are absolute, so
waits do not drift. Message ids are the recording's under the operation's
id (``<operation>:<id>``), so a recorded turn played twice makes new
messages, not an update of the old ones.

``stamped`` marks every event a live viewer reads (``text-delta``,
``reasoning-delta``, ``message``) with :func:`stamp`: ``[replay:SEQ:NS]``,
``SEQ`` the session's count of stamped events (from 1, on across turns)
and ``NS`` ``time.monotonic_ns()`` when it was emitted (Linux's
``CLOCK_MONOTONIC``, one clock for every process of the machine). A delta
carries it at the end of its text; a message as one more text part, last.
The wire is unchanged: a reader that finds the stamp (:data:`STAMP`) knows
which event it holds, in what order it was emitted and how long it took to
come (``bench/stream_load.py``); one that does not shows a few more
characters.

Resource handling: nothing but the recording (read once, when the adapter
is made) and a counter per session; an abort is a cancellation at the next
wait or checkpoint, and the turn settles ``unanswered``/``aborted``.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Final, Mapping

import attrs
import trio

from router.daemon.adapter import AdapterContext, AdapterTurn
from router.daemon.adapters.claude_code import ClaudeProjection
from router.errors import Refusal
from wire.container import AdapterInfo, ContainerInput, ContainerOutcome, Done, input_text
from wire.json import JsonValue, loads

__all__ = ["ReplaySessionStatistics", 
    "PACE_ENV",
    "RECORDING_ENV",
    "STAMP",
    "Recording",
    "RecordedLine",
    "ReplayAdapter",
    "ReplaySession",
    "TurnPlan",
    "adapter",
    "plan_of",
    "stamp",
]

#: The recording a daemon plays (a path); default :data:`DEFAULT_RECORDING`.
RECORDING_ENV: Final = "ROUTER_REPLAY_RECORDING"
#: The pace factor of a prompt that names none (1: as recorded; 0: full speed).
PACE_ENV: Final = "ROUTER_REPLAY_PACE"
#: The recording committed with the tests (present in a checkout).
DEFAULT_RECORDING: Final = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "replay" / "claude-code.jsonl"
#: A stamp: ``[replay:SEQ:NS]`` (ASCII, so JSON carries it as it is).
STAMP: Final = re.compile(r"\[replay:([0-9]+):([0-9]+)\]")
#: What a prompt may say: ``replay [N] [pace P] [stamped]``.
_PLAN: Final = re.compile(r"replay(?: ([0-9]{1,6}))?(?: pace ([0-9]{1,6}(?:\.[0-9]{1,6})?))?( stamped)?")
#: Event kinds a live viewer reads, which ``stamped`` marks.
_STAMPED: Final = frozenset({"text-delta", "reasoning-delta", "message"})


class RecordingError(Refusal):
    """The recording cannot be played: ``replay-recording-missing`` or
    ``replay-recording-bad``, with a sentence saying which line and why."""


@attrs.frozen
class RecordedLine:
    """One stream-json line and when it came, in ms from its turn's start."""

    ms: float
    line: Mapping[str, Any]


@attrs.frozen
class Recording:
    """Recorded turns, in order, each a tuple of lines in order."""

    turns: tuple[tuple[RecordedLine, ...], ...]
    source: str = ""

    def __repr__(self) -> str:
        return f"<Recording {self.source} turns={len(self.turns)} lines={sum(map(len, self.turns))}>"

    @classmethod
    def parse(cls, text: str, source: str = "") -> Recording:
        """A recording from its JSONL text; :class:`RecordingError` names
        the first line that is not ``{"turn", "ms", "line"}`` with turns in
        order and times that do not go back."""
        turns: dict[int, list[RecordedLine]] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                row = loads(raw)
            except Exception as exc:
                raise RecordingError("replay-recording-bad", f"{source}:{number} is not JSON ({exc})") from None
            if not _is_row(row) or (turns and row["turn"] < max(turns)):
                raise RecordingError(
                    "replay-recording-bad",
                    f"{source}:{number} is not a recorded line ({{\"turn\": N, \"ms\": M, \"line\": {{...}}}}, "
                    "turns in order); record it again with tests/fixtures/replay/record.py",
                )
            lines = turns.setdefault(row["turn"], [])
            if lines and row["ms"] < lines[-1].ms:
                raise RecordingError("replay-recording-bad", f"{source}:{number} goes back in time within its turn")
            lines.append(RecordedLine(ms=float(row["ms"]), line=row["line"]))
        if not turns:
            raise RecordingError("replay-recording-bad", f"{source} holds no recorded turn")
        return cls(turns=tuple(tuple(turns[key]) for key in sorted(turns)), source=source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recording:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise RecordingError(
                "replay-recording-missing",
                f"the replay recording {path} cannot be read ({exc.strerror}); set {RECORDING_ENV} to a file "
                "tests/fixtures/replay/record.py wrote",
            ) from None
        return cls.parse(text, str(path))


def _is_row(row: Any) -> bool:
    return (
        type(row) is dict
        and type(row.get("turn")) is int
        and type(row.get("ms")) in (int, float)
        and row["ms"] >= 0
        and type(row.get("line")) is dict
    )


@attrs.frozen
class TurnPlan:
    """What one operation plays: ``turns`` recorded turns at ``pace``."""

    turns: int = 1
    pace: float = 1.0
    stamped: bool = False


def plan_of(text: str, default_pace: float) -> TurnPlan:
    """The plan a prompt's text asks for (see the module docstring)."""
    found = _PLAN.search(text)
    if found is None:
        return TurnPlan(pace=default_pace)
    turns = int(found[1]) if found[1] else 1
    pace = float(found[2]) if found[2] else default_pace
    return TurnPlan(turns=max(1, turns), pace=pace, stamped=bool(found[3]))


def stamp(seq: int, ns: int) -> str:
    return f"[replay:{seq}:{ns}]"


def _renamed(event: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``event`` with its message id under ``prefix``."""
    if type(event.get("messageId")) is str:
        return {**event, "messageId": prefix + event["messageId"]}
    message = event.get("message")
    if event.get("type") == "message" and type(message) is dict and type(message.get("id")) is str:
        return {**event, "message": {**message, "id": prefix + message["id"]}}
    return event


def _stamped(event: dict[str, Any], mark: str) -> dict[str, Any]:
    if event["type"] == "message":
        message = event["message"]
        return {**event, "message": {**message, "parts": [*message["parts"], {"type": "text", "text": mark}]}}
    return {**event, "delta": event["delta"] + mark}


@attrs.frozen
class ReplaySessionStatistics:
    """Where a :class:`ReplaySession` is: the next recorded turn, the turns
    played, and the entries stamped."""

    next_turn: int
    played: int
    stamped: int


class ReplaySession:
    """One session's replay: which recorded turn comes next, and its count
    of stamped events."""

    def __init__(self, context: AdapterContext, recording: Recording, pace: float) -> None:
        self._context = context
        self._recording = recording
        self._pace = pace
        self.next_turn = 0
        self.stamped = 0
        self.played = 0

    def __repr__(self) -> str:
        return f"<ReplaySession {self._context.session} next={self.next_turn} played={self.played} stamped={self.stamped}>"

    def statistics(self) -> ReplaySessionStatistics:
        return ReplaySessionStatistics(next_turn=self.next_turn, played=self.played, stamped=self.stamped)
    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        plan = plan_of(input_text(turn.input), self._pace)
        outcome: ContainerOutcome = Done(text="")
        for _ in range(plan.turns):
            lines = self._recording.turns[self.next_turn]
            self.next_turn = (self.next_turn + 1) % len(self._recording.turns)
            outcome = await self._play(lines, turn.operation_id, plan)
            self.played += 1
        return outcome

    async def _play(self, lines: tuple[RecordedLine, ...], operation_id: str, plan: TurnPlan) -> ContainerOutcome:
        projection = ClaudeProjection()
        prefix = f"{operation_id}:{self.played}:"
        start, first = trio.current_time(), lines[0].ms
        outcome: ContainerOutcome = Done(text="")
        for recorded in lines:
            if plan.pace > 0:
                await trio.sleep_until(start + (recorded.ms - first) / 1000 / plan.pace)
            else:
                await trio.lowlevel.checkpoint()
            message = dict(recorded.line)
            for event in projection.project(message, operation_id):
                self._emit(_renamed(event, prefix), plan.stamped)  # type: ignore[arg-type]
            if message.get("type") == "result":
                outcome = projection.outcome(message)
        return outcome

    def _emit(self, event: dict[str, Any], stamped: bool) -> None:
        if stamped and event.get("type") in _STAMPED:
            self.stamped += 1
            event = _stamped(event, stamp(self.stamped, time.monotonic_ns()))
        self._context.emit(event)

    async def steer(self, input: ContainerInput) -> bool:
        return False

    async def close(self) -> None:
        pass


class ReplayAdapter:
    """Plays ``recording`` at ``pace`` (see the module docstring)."""

    info: Final = AdapterInfo(id="replay", version="1", capabilities=())

    def __init__(self, recording: Recording, *, pace: float = 1.0) -> None:
        if pace < 0:
            raise ValueError("a pace factor is 0 (full speed) or more")
        self.recording = recording
        self.pace = pace

    def __repr__(self) -> str:
        return f"<ReplayAdapter pace={self.pace} {self.recording!r}>"

    async def open(self, context: AdapterContext) -> ReplaySession:
        return ReplaySession(context, self.recording, self.pace)


def adapter(environ: Mapping[str, str] | None = None) -> ReplayAdapter:
    """What ``router daemon --adapter replay`` runs: the recording
    ``$ROUTER_REPLAY_RECORDING`` names (else the one committed with the
    tests) at ``$ROUTER_REPLAY_PACE`` (else 1)."""
    env = os.environ if environ is None else environ
    raw = env.get(PACE_ENV, "1")
    try:
        pace = float(raw)
    except ValueError:
        pace = -1.0
    if not pace >= 0:
        raise RecordingError("replay-bad-pace", f"{PACE_ENV}={raw!r} is not a pace factor (1: as recorded, 0: full speed)")
    return ReplayAdapter(Recording.load(env.get(RECORDING_ENV) or DEFAULT_RECORDING), pace=pace)
