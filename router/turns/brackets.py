"""Turn brackets and limit stops, without I/O: the sans-IO core.

Theory of operation
-------------------
The plug-in layer meters a turn with two calls (``PluginLayer.begin_turn``
before it, ``end_turn`` after its result has landed) and answers, at the
end, whether the session must stop (the Mosaic plug-in layer's README, "Limit checks": "a stop lets the
turn's result land, then stops the session"). This module decides *when*
to make those calls for one session, from the turn events the session's
view task sees, and what a stop means for the session; the Trio layer
(:mod:`router.turns.session_brackets`) makes the calls and applies the effects.

A *turn* is what the harness actually runs:

- in a container session, the daemon's turn: from the first
  ``operation-start`` while nothing runs to the ``operation-end`` that
  leaves nothing running (an input steered into a running turn starts and
  settles inside it, so it shares its bracket);
- in a Claude Code session, ``turn-start`` ... ``turn-complete`` on the mod
  link; one turn at a time, so a ``turn-start`` while one runs ends the one
  before (its ``turn-complete`` was lost), as do ``hello`` (the mod
  restarted) and ``session-end``.

:class:`BracketCore` holds one bracket at a time, in a :class:`Phase`:

=========== ============================================================
``idle``    no bracket; the next turn that starts opens one (``Begin``)
``opening`` ``begin_turn`` is in flight
``open``    the bracket is held while its turn runs
``closing`` ``end_turn`` is in flight (the turn's result has landed)
=========== ============================================================

Inputs are the turn events (:meth:`~BracketCore.turn_started`,
:meth:`~BracketCore.turn_ended`, :meth:`~BracketCore.resync` after a gap in
the events), and the answers of the calls (:meth:`~BracketCore.begun`,
:meth:`~BracketCore.ended`). Each returns the effects to carry out, in
order: :class:`Begin`, :class:`End` and :class:`StopSession`.

- A bracket is opened *ahead* of a turn the router itself writes into an
  idle container session (:meth:`~BracketCore.writing`, before the
  ``submit``): the adapter may report usage the instant its turn starts,
  before the router has seen the start, and a bracket opened then would
  miss it. Turns nobody announced (typed at Claude Code's terminal, queued
  behind the running one) open their bracket when they start.
- A turn that ends while its bracket is still opening is closed as soon as
  the bracket is open; a turn that starts and ends while the bracket before
  it is closing gets a bracket of its own afterwards (its usage is then
  most likely unknown, which the limit checks count apart, never as zero).
- A turn whose ``begin_turn`` raised cannot be measured: at its end the
  session stops as if a limit check had failed (fail closed), without an
  ``end_turn``. An ``end_turn`` that raised stops it the same way. The
  layer's own failures (a usage source or a limit check that raises or
  answers wrongly) are not raises: the layer turns them into an unknown
  reading and a ``MustStop`` of its own.
- A stop is taken at most once: a stopped session stays stopped (later
  stops of the same session are not news) until :meth:`~BracketCore.resume`.
  Turns of a stopped session are still measured: the usage was spent.

:attr:`BracketCore.measuring` is true from the moment a turn ended until
its stop decision is in; the router holds the session's next delivery
until then, so a delivery never slips in between a turn that reached a
limit and its stop.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final, Iterable, Mapping, Union

import attrs

if TYPE_CHECKING:  # the record is built where needed: the routing module loads the broker (Trio)
    from router.plugins.routing import LaunchRecord

__all__ = [
    "ATTACHED_ROUTE",
    "BeginFailed",
    "Begin",
    "BracketCore",
    "Effect",
    "End",
    "Phase",
    "StopInfo",
    "StopSession",
    "attached_launch",
    "bracket_failure",
    "launch_of_json",
    "launch_to_json",
]

#: ``LaunchRecord.route`` of a session the router did not launch itself (a
#: Claude Code session it attached to, a container session created before
#: the launch was recorded): ours, beside the layer's primary/fallback.
ATTACHED_ROUTE: Final = "attached"


class Phase(enum.Enum):
    IDLE = "idle"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"


@attrs.frozen(kw_only=True)
class StopInfo:
    """Why a session was stopped: the stop's ``reason`` (the layer's,
    ``limit: <check> <path> limit <n> count <c>``, or ``limit-check-failed:
    ...``), the ``check`` that decided, and when (ISO time)."""

    reason: str
    check: str
    at: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "check": self.check, "at": self.at}


@attrs.frozen(kw_only=True)
class BeginFailed:
    """What a bracket holds when ``begin_turn`` raised: the stop its turn
    ends in (see :func:`bracket_failure`), or None when it raised on the
    store blinking (no limit said no: the turn ends without a record)."""

    stop: StopInfo | None


@attrs.frozen(kw_only=True)
class Begin:
    """Call ``begin_turn``; give its bracket (or :class:`BeginFailed`) to
    :meth:`BracketCore.begun`."""


@attrs.frozen(kw_only=True)
class End:
    """Call ``end_turn(bracket)``; give its stop (a :class:`StopInfo`, or
    None) to :meth:`BracketCore.ended`."""

    bracket: Any


@attrs.frozen(kw_only=True)
class StopSession:
    """The session has just been stopped: record it, tell its viewers, and
    stop what is queued in it."""

    stop: StopInfo


Effect = Union[Begin, End, StopSession]


def bracket_failure(call: str, exc: BaseException, at: str) -> StopInfo:
    """The stop of a bracket whose ``call`` (``begin_turn``/``end_turn``)
    raised: fail closed, as a failed limit check does."""
    name = type(exc).__name__
    return StopInfo(
        reason=f"limit-check-failed: turn-bracket check failed: {call} raised {name} "
        "(the turn's usage could not be recorded; see the log)",
        check="turn-bracket",
        at=at,
    )


class BracketCore:
    """One session's turn brackets and stop (see the module docstring).

    ``one_turn``: the session runs one turn at a time and a new turn ends
    the one before (Claude Code). ``stopped``: the stop recorded before
    (a router restart keeps a session stopped).

    The decisions are level-triggered: every input updates what is known
    (``running``, ``expected``), then :meth:`_step` compares it with the
    phase and answers the one call to make next, if any:

    - idle, and something runs or is expected: open a bracket (``Begin``);
    - open, a turn started in it and nothing runs now: close it (``End``);
    - open, no turn started in it and nothing runs or is expected any
      more (the write that was expected failed): drop it (no call: a
      bracket that only began has stored nothing).
    """

    def __init__(self, *, one_turn: bool = False, stopped: StopInfo | None = None) -> None:
        self.one_turn = one_turn
        self.stopped = stopped
        self.phase = Phase.IDLE
        #: Ids of the turns (operations) running now, as the events say.
        self.running: set[str] = set()
        #: Operations the router is writing into the session, not started
        #: yet: a bracket is opened for them *before* they can start, so the
        #: first usage they report falls inside it.
        self.expected: set[str] = set()
        #: The open bracket (a layer ``Bracket`` or :class:`BeginFailed`).
        self.bracket: Any = None
        #: A turn started in the bracket that is opening or open.
        self.turned = False
        #: A turn started while the bracket before was closing: it belongs
        #: to the next bracket.
        self.carried = False
        #: Brackets begun, ended (``end_turn`` answered or failed), dropped.
        self.begun_count = 0
        self.ended_count = 0
        self.dropped_count = 0

    def __repr__(self) -> str:
        stopped = f" stopped={self.stopped.reason!r}" if self.stopped else ""
        return (
            f"<BracketCore {self.phase.value} running={sorted(self.running)} expected={sorted(self.expected)} "
            f"begun={self.begun_count} ended={self.ended_count}{stopped}>"
        )

    @property
    def measuring(self) -> bool:
        """A turn has ended and its stop decision is not in yet."""
        if self.phase is Phase.CLOSING:
            return True
        return self.phase is Phase.OPENING and self.turned and not self.running

    @property
    def open(self) -> bool:
        """A bracket is open (its marks are taken)."""
        return self.phase is Phase.OPEN

    def _step(self) -> list[Effect]:
        if self.phase is Phase.IDLE and (self.running or self.expected or self.carried):
            self.phase = Phase.OPENING
            self.turned = bool(self.running) or self.carried
            self.carried = False
            return [Begin()]
        if self.phase is Phase.OPEN and not self.running:
            if self.turned:
                bracket, self.bracket = self.bracket, None
                self.phase = Phase.CLOSING
                if isinstance(bracket, BeginFailed):
                    # Nothing to end: the stop is decided here (fail closed).
                    return self.ended(bracket.stop)
                return [End(bracket=bracket)]
            if not self.expected:
                self.phase = Phase.IDLE
                self.bracket = None
                self.dropped_count += 1
        return []

    # ------------------------------------------------------------------ events

    def writing(self, turn_id: str) -> list[Effect]:
        """The router is about to write ``turn_id`` into the session (an
        operation it will submit): open a bracket ahead of it."""
        self.expected.add(turn_id)
        return self._step()

    def not_writing(self, turn_id: str) -> list[Effect]:
        """The write of ``turn_id`` failed, or made no new turn."""
        self.expected.discard(turn_id)
        return self._step()

    def turn_started(self, turn_id: str) -> list[Effect]:
        self.expected.discard(turn_id)
        if turn_id in self.running:
            return []
        effects: list[Effect] = []
        if self.one_turn and self.running:
            # One turn at a time: the one before is over (its end was lost).
            self.running.clear()
            effects += self._step()
        self.running.add(turn_id)
        if self.phase is Phase.CLOSING:
            self.carried = True
        elif self.phase is not Phase.IDLE:
            self.turned = True
        return effects + self._step()

    def turn_ended(self, turn_id: str) -> list[Effect]:
        self.expected.discard(turn_id)
        self.running.discard(turn_id)
        return self._step()

    def all_ended(self) -> list[Effect]:
        """Every running turn is over (the mod restarted, the session ended)."""
        self.running.clear()
        return self._step()

    def resync(self, running: Iterable[str]) -> list[Effect]:
        """The turns running now, after a gap in the events (a fresh
        subscription): what ended meanwhile ends, what started starts."""
        now = set(running)
        effects: list[Effect] = []
        for turn_id in sorted(self.running - now):
            effects += self.turn_ended(turn_id)
        for turn_id in sorted(now - self.running):
            effects += self.turn_started(turn_id)
        return effects

    # ------------------------------------------------------------------ answers

    def begun(self, bracket: Any) -> list[Effect]:
        """``begin_turn`` answered ``bracket`` (or raised: :class:`BeginFailed`)."""
        if self.phase is not Phase.OPENING:
            raise RuntimeError(f"begun while {self.phase.value}")
        self.phase = Phase.OPEN
        self.bracket = bracket
        self.begun_count += 1
        return self._step()

    def ended(self, stop: StopInfo | None) -> list[Effect]:
        """``end_turn`` answered (``stop`` None: the session may go on)."""
        if self.phase is not Phase.CLOSING:
            raise RuntimeError(f"ended while {self.phase.value}")
        self.phase = Phase.IDLE
        self.turned = False
        self.ended_count += 1
        effects: list[Effect] = []
        if stop is not None and self.stopped is None:
            self.stopped = stop
            effects.append(StopSession(stop=stop))
        return effects + self._step()

    # ------------------------------------------------------------------ the person

    def resume(self) -> StopInfo | None:
        """The person resumed the session: the stop it had (None: none)."""
        stopped, self.stopped = self.stopped, None
        return stopped


# --------------------------------------------------------------------------- launch records


def _str(value: object) -> str | None:
    return value if type(value) is str and value else None


def attached_launch(
    *,
    session: str,
    instance: str,
    harness: str,
    via: str,
    routes: object,
    model: str | None = None,
    harness_version: str | None = None,
    counts_account: bool = False,
) -> LaunchRecord:
    """The launch record of a session the router did not launch (route
    ``attached``), for its turn brackets: the instance, and from
    ``routes.json`` what the instance's route says when it routes to this
    ``harness`` (model, thinking, the account when the harness spends one),
    the provider of the model (``model`` given wins over the route's: the
    session's own, as its mod reports it)."""
    from router.plugins.routing import LaunchRecord

    routes = routes if type(routes) is dict else {}
    instances = routes.get("instances") if type(routes.get("instances")) is dict else {}
    route = instances.get(instance)
    thinking = None
    account = None
    if type(route) is dict and route.get("harness") == harness:
        model = model or _str(route.get("model"))
        thinking = _str(route.get("thinking"))
        if counts_account:
            account = _str(route.get("account"))
    models = routes.get("models") if type(routes.get("models")) is dict else {}
    entry = models.get(model) if model is not None else None
    provider = _str(entry.get("provider")) if type(entry) is dict else None
    return LaunchRecord(
        instance=instance,
        session=session,
        route=ATTACHED_ROUTE,
        route_reason=f"a {harness} session the router attached to; the instance {instance!r} names its limits",
        harness=harness,
        model=model,  # type: ignore[arg-type]  # None: the model is not known
        thinking=thinking or "",
        provider=provider,
        account=account,
        harness_version=harness_version,
        reach={"via": via},
        env={},
    )


#: The launch record's fields kept in the record (``turns.sqlite``); ``env``
#: and all of ``reach`` but ``via`` are left out: they may hold a secret
#: (the container harness's daemon token) and a bracket needs neither.
_KEPT: Final = (
    "instance", "session", "route", "route_reason", "harness", "model", "thinking", "provider",
    "account", "harness_version",
)  # fmt: skip


def launch_to_json(record: LaunchRecord) -> dict[str, Any]:
    out: dict[str, Any] = {key: getattr(record, key) for key in _KEPT}
    via = record.reach.get("via") if isinstance(record.reach, Mapping) else None
    out["reach"] = {"via": via} if type(via) is str else {}
    return out


def launch_of_json(value: object) -> LaunchRecord | None:
    """A record :func:`launch_to_json` wrote, or None when it is not one."""
    from router.plugins.routing import LaunchRecord

    if type(value) is not dict or type(value.get("instance")) is not str or type(value.get("reach")) is not dict:
        return None
    try:
        return LaunchRecord(**{key: value.get(key) for key in _KEPT}, reach=dict(value["reach"]), env={})
    except TypeError:
        return None
