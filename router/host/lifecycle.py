"""The sans-IO core of a launched session's daemon: when to start it, when
it is lost and replaced, when it idles and stops, when it is unreachable.

:class:`LifecycleCore` is a plain class: the Trio layer
(:mod:`router.host.supervisor`) tells it what happened (inputs, each with
the time where one matters) and does what it answers (a list of effects,
in order). It never awaits and never reads a clock.

Theory of operation
-------------------

The lifecycle is the reference's harness's (npm ``agents@0.32.0``: its
platform starts a container on the first request, replaces a lost one and
stops an idle one), on one machine:

- **Start on the first delivery.** A session's daemon starts when there is
  work for it (:meth:`demand`: a submit, or open operations when the host
  starts), never because something merely looks at the session (the live
  view subscribes to every open session's events).
- **Replace on loss.** A daemon that is lost (:meth:`lost`: the launcher's
  ``wait`` returned: killed, out of memory, exited; or it is missing) is
  cleaned up (``stop``: a container is removed, a process reaped) and the
  session's link is told to redial. With work open, a new daemon starts at
  once, with a new runtime id: the host's reconcile on its ``hello``
  restores the session from its persisted entries and settles or re-runs
  the cut operation by the host's policy. With none, the next delivery
  starts it.
- **Idle stop.** With no work open for ``idle_timeout`` seconds
  (:meth:`work_done` arms it, :meth:`demand` disarms it), the daemon is
  stopped (:meth:`idle_expired`: the Trio layer runs its wait in a cancel
  scope whose deadline is :attr:`idle_deadline`); the next delivery starts
  it again, and its ``hello`` restores the session as after a loss.
- **Adopt.** When the host starts, a daemon its record names that still
  runs and answers its health check (a router killed and started again;
  its containers live on) is the session's again (:meth:`adopted`); one
  that does not is stopped, and the next delivery starts a new one.
- **Unreachable.** A start that fails (the launcher's refusal, or a crash,
  or its deadline) is retried after a pause (``retry_base`` doubling to
  ``retry_cap``); after ``max_failures`` failures in a row the session is
  ``unreachable`` with the last reason, its open operations are settled
  ``unanswered`` with the refusal's code (so no sender waits on a daemon
  that will not come), and nothing is tried until the next delivery, which
  starts over.

At most one start is in flight (:attr:`starting`), and a daemon is
watched, stopped and forgotten by its container id: a loss reported for a
container the core no longer holds (the one it just stopped for idling) is
stale and changes nothing.

**States** (shown on the board and in the live view): ``stopped`` (no
daemon; the next delivery starts one), ``starting``, ``running``,
``replacing`` (lost with work open: a new one is starting), ``idle-stopped``,
``unreachable`` (:attr:`reason` says why).
"""

from __future__ import annotations

import math
from typing import Final, Literal, TypeAlias

import attrs

from router.errors import Refusal

__all__ = [
    "DaemonInfo",
    "Effect",
    "FailOpen",
    "LifecycleCore",
    "LifecycleStatistics",
    "LifecycleState",
    "MAX_FAILURES",
    "Publish",
    "RedialLink",
    "Start",
    "StopContainer",
    "Watch",
]

LifecycleState = Literal["stopped", "starting", "running", "replacing", "idle-stopped", "unreachable"]

#: Failed starts in a row before a session is unreachable (ours: the
#: reference's platform gives up on a container after a few tries too;
#: three rides out one slow start without hiding a missing image for long).
MAX_FAILURES: Final = 3
#: The pause after a failed start, doubling, and its cap (ours).
RETRY_BASE: Final = 1.0
RETRY_CAP: Final = 30.0


@attrs.frozen(kw_only=True)
class DaemonInfo:
    """A started daemon: where it listens, its token, runtime id and the
    launcher's id for it."""

    url: str
    token: str = attrs.field(repr=False)
    runtime: str
    container: str


# --------------------------------------------------------------------------- effects


@attrs.frozen
class Start:
    """Start a daemon, after ``delay`` seconds (a retry's pause)."""

    delay: float = 0.0


@attrs.frozen
class Watch:
    """Wait on this container until it is no longer running."""

    container: str


@attrs.frozen
class StopContainer:
    """Stop (and remove) this container; ``why`` for the log."""

    container: str
    why: str


@attrs.frozen
class RedialLink:
    """Tell the session's link to drop its connection and dial again."""


@attrs.frozen
class Publish:
    """The state changed: record it and tell the session's watchers."""

    state: LifecycleState
    reason: str | None
    daemon: DaemonInfo | None


@attrs.frozen
class FailOpen:
    """Settle the session's open operations ``unanswered`` with the
    refusal's code and sentence."""

    refusal: Refusal


Effect: TypeAlias = Start | Watch | StopContainer | RedialLink | Publish | FailOpen


@attrs.frozen(kw_only=True)
class LifecycleStatistics:
    """What :meth:`LifecycleCore.statistics` answers: the state and why, the
    daemon's container and runtime, whether one is wanted or starting, the
    counts of failures, starts, losses and adoptions, and the idle deadline."""

    state: str
    reason: str | None
    container: str | None
    runtime: str | None
    wanted: bool
    starting: bool
    failures: int
    starts: int
    losses: int
    adoptions: int
    idle_deadline: float


class LifecycleCore:
    """One launched session's daemon lifecycle; see the module docstring."""

    def __init__(
        self,
        *,
        idle_timeout: float | None = None,
        max_failures: int = MAX_FAILURES,
        retry_base: float = RETRY_BASE,
        retry_cap: float = RETRY_CAP,
    ) -> None:
        if max_failures < 1:
            raise ValueError("max_failures is at least 1")
        self.idle_timeout = idle_timeout
        self.max_failures = max_failures
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self.state: LifecycleState = "stopped"
        self.reason: str | None = None
        #: The running daemon (None unless ``state == "running"``).
        self.daemon: DaemonInfo | None = None
        #: Whether the session has work open (the last word of demand / work_done).
        self.wanted = False
        #: Whether a start is in flight.
        self.starting = False
        #: Failed starts in a row.
        self.failures = 0
        #: Daemons started, and lost, over the core's life.
        self.starts = 0
        self.losses = 0
        #: Daemons of an earlier run taken over (:meth:`adopted`).
        self.adoptions = 0
        #: When the idle daemon is to stop (``math.inf``: not armed).
        self.idle_deadline = math.inf

    def __repr__(self) -> str:
        container = None if self.daemon is None else self.daemon.container
        return (
            f"<LifecycleCore {self.state} container={container!r} wanted={self.wanted} "
            f"failures={self.failures} starts={self.starts} losses={self.losses}>"
        )

    def statistics(self) -> LifecycleStatistics:
        return LifecycleStatistics(
            state=self.state,
            reason=self.reason,
            container=None if self.daemon is None else self.daemon.container,
            runtime=None if self.daemon is None else self.daemon.runtime,
            wanted=self.wanted,
            starting=self.starting,
            failures=self.failures,
            starts=self.starts,
            losses=self.losses,
            adoptions=self.adoptions,
            idle_deadline=self.idle_deadline,
        )

    # ------------------------------------------------------------------ inputs

    def demand(self) -> list[Effect]:
        """There is work for the session (a delivery): start a daemon unless
        one runs or is starting. An unreachable session tries again."""
        self.wanted = True
        self.idle_deadline = math.inf
        if self.state == "running" or self.starting:
            return []
        self.failures = 0
        return self._start("starting", None)

    def work_done(self, now: float) -> list[Effect]:
        """The session has no work open: arm the idle stop."""
        self.wanted = False
        if self.state == "running" and self.idle_timeout is not None:
            self.idle_deadline = now + self.idle_timeout
        return []

    def started(self, daemon: DaemonInfo, now: float) -> list[Effect]:
        """The start in flight succeeded."""
        self.starting = False
        self.failures = 0
        self.starts += 1
        self.daemon = daemon
        self.state, self.reason = "running", None
        if not self.wanted and self.idle_timeout is not None:
            self.idle_deadline = now + self.idle_timeout
        return [Watch(daemon.container), Publish("running", None, daemon)]

    def adopted(self, daemon: DaemonInfo, now: float) -> list[Effect]:
        """A daemon an earlier run of the host started still runs and
        answers: it is this session's again (no start)."""
        if self.daemon is not None or self.starting:
            return []
        self.adoptions += 1
        self.daemon = daemon
        self.state, self.reason = "running", "adopted from an earlier run of the router"
        if not self.wanted and self.idle_timeout is not None:
            self.idle_deadline = now + self.idle_timeout
        return [Watch(daemon.container), Publish("running", self.reason, daemon)]

    def start_failed(self, code: str, message: str) -> list[Effect]:
        """The start in flight failed (``code``: the launcher's refusal, or
        ours for a crash or a deadline)."""
        self.starting = False
        self.failures += 1
        reason = f"{code}: {message}"
        if self.failures >= self.max_failures:
            self.wanted = False
            self.state, self.reason = "unreachable", reason
            tries = f"{self.failures} start{'s' if self.failures > 1 else ''} failed in a row"
            return [Publish("unreachable", f"{reason} ({tries})", None),
                    FailOpen(Refusal(code, f"{message} ({tries}); send again to try again"))]
        delay = min(self.retry_cap, self.retry_base * 2 ** (self.failures - 1))
        self.reason = f"start {self.failures} of {self.max_failures} failed: {reason}"
        self.starting = True
        return [Publish(self.state, self.reason, None), Start(delay)]

    def lost(self, container: str, reason: str) -> list[Effect]:
        """The daemon in ``container`` stopped running (``reason``: how)."""
        if self.daemon is None or self.daemon.container != container:
            return []  # stale: a daemon this core already let go
        self.losses += 1
        self.daemon = None
        self.idle_deadline = math.inf
        effects: list[Effect] = [StopContainer(container, f"lost: {reason}"), RedialLink()]
        if self.wanted:
            return effects + self._start("replacing", f"lost: {reason}; replacing it")
        self.state, self.reason = "stopped", f"lost: {reason}; the next delivery starts a new one"
        return [*effects, Publish("stopped", self.reason, None)]

    def idle_expired(self, now: float) -> list[Effect]:
        """The idle deadline passed: stop the daemon if it is still idle."""
        if self.state != "running" or self.wanted or now < self.idle_deadline or self.daemon is None:
            return []
        container = self.daemon.container
        self.daemon = None
        self.idle_deadline = math.inf
        self.state, self.reason = "idle-stopped", f"idle for {self.idle_timeout:g} s"
        return [StopContainer(container, self.reason), Publish("idle-stopped", self.reason, None)]

    def close(self) -> list[Effect]:
        """The host stops: stop the daemon."""
        self.wanted = False
        self.idle_deadline = math.inf
        if self.daemon is None:
            return []
        container, self.daemon = self.daemon.container, None
        self.state, self.reason = "stopped", "the router stopped"
        return [StopContainer(container, "the router stops")]

    # ------------------------------------------------------------------ inside

    def _start(self, state: LifecycleState, reason: str | None) -> list[Effect]:
        self.starting = True
        self.state, self.reason = state, reason
        return [Publish(state, reason, None), Start(0.0)]
