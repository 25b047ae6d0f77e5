"""The sans-IO core of one session's link: where the link is, what the API
asked it to do, and what to do when a connection ends.

:class:`HostLinkCore` is a plain class: the Trio layer
(:mod:`router.host.session_link`) tells it what happened (inputs) and does
what it answers (the decisions below). It never awaits and never reads a
clock: a time, where one matters, is an argument.

Theory of operation
-------------------

**Requests.** The API asks for work on the session's daemon: *deliver* (the
undelivered operations), *configure* (the stored settings), *abort* (these
operations, by id, in order) and *redial* (drop the connection and dial at
once, after a ``reset``). Deliver and configure are flags (asking twice is
asking once: each reads the record when it is done); aborts are an ordered
set of ids. A request is done in exactly one of two ways:

- by the **reconcile** of a connection that started after it was asked:
  :meth:`HostLinkCore.reconciling` clears every request, because the reconcile
  reads the record as it is then and does all of their work (it delivers,
  configures, and aborts what the daemon has that the record settled);
- by the **driver** of a live connection, which takes the requests asked
  since (:meth:`HostLinkCore.take`), each once.

So nothing asked is left undone (a request asked while no connection is
live waits for the next reconcile; one asked while a reconcile runs is
taken after it) and nothing is done twice (a take empties what it takes).
A redial is done by the next dial: :meth:`HostLinkCore.attempt` and
:meth:`HostLinkCore.reconciling` clear it; while it is pending, a live
connection is interrupted (:meth:`HostLinkCore.interrupt`) and a backoff pause
is skipped.

**Backoff.** After a connection ends, the link pauses
(:class:`~router.host.link.Backoff`: capped, exponential, jittered) and dials
again. The backoff starts over only after a connection that stayed live
for :data:`HEALTHY_AFTER` seconds (``healthy_after``) and was then lost *by
the peer or the network*. One that ended sooner (a daemon that fails right
after ``hello``: the fault campaign saw one redialled 1.3 times a second
forever, the backoff starting over at every reconcile) and one that failed
in our own code (a store error, a bug) leave it growing: a fault that
recurs on every connection is logged on every one, with pauses that grow
to the cap, never a tight loop.

**Give-up.** With ``give_up_after`` set, the link gives up once that many
seconds pass without a connection reaching ``hello``. The Trio layer runs
the whole connect loop in one cancel scope whose deadline is
:attr:`HostLinkCore.give_up_deadline`, and moves it after every input (as
hypercorn's graceful drain moves its scope's deadline): infinite from a
``hello`` on, ``now + give_up_after`` when a connection that had one ends,
unchanged while no attempt gets one. When the scope fires,
:meth:`HostLinkCore.gave_up` says why.

**States.** ``idle`` (not started), ``connecting``, ``live`` (reconciled),
``backoff``, ``failed`` (:attr:`failure` says why), ``closed``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import attrs

from wire.container import AdapterInfo

if TYPE_CHECKING:  # types only: the link (Trio) is loaded by whoever dials
    from router.host.link import Backoff, LinkError

__all__ = ["GiveUp", "HEALTHY_AFTER", "HostLinkCore", "LinkState", "Pause", "REDIAL", "Redial", "Requests"]

LinkState = Literal["idle", "connecting", "live", "backoff", "failed", "closed"]

#: Seconds a connection stays live before its loss starts the backoff over
#: (ours: well past a reconcile and its first turns; far below a session's
#: life, so a daemon restarted once in a while is redialled at once).
HEALTHY_AFTER: Final = 10.0


@attrs.frozen(kw_only=True)
class Requests:
    """What the driver of a live connection is to do now."""

    deliver: bool = False
    configure: bool = False
    #: Operations to abort in the daemon, in the order asked.
    aborts: tuple[str, ...] = ()
    #: Answers to the adapter's asks: (ask id, "allow" | "deny"), in order.
    answers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Redial:
    """Dial again at once (a redial was asked)."""


#: The one :class:`Redial`.
REDIAL: Final = Redial()


@attrs.frozen
class Pause:
    """Wait ``seconds`` (unless a redial is asked meanwhile), then dial."""

    seconds: float


@attrs.frozen
class GiveUp:
    """Stop: the failure cannot heal by trying again."""

    error: LinkError


Decision: TypeAlias = Redial | Pause | GiveUp


class HostLinkCore:
    """One session's link state across its connections; see the module
    docstring. ``backoff`` is the link's own (its ``attempt`` counts the
    pauses since the last good connection)."""

    def __init__(
        self, *, backoff: Backoff, give_up_after: float | None = None, healthy_after: float = HEALTHY_AFTER
    ) -> None:
        self.backoff = backoff
        self.give_up_after = give_up_after
        self.healthy_after = healthy_after
        #: When the live connection was reconciled (None: none is).
        self.live_since: float | None = None
        #: How long the last connection that ended had been live, and
        #: whether that was too short to start the backoff over.
        self.last_lived: float | None = None
        self.short_lived = 0
        self.state: LinkState = "idle"
        #: Why the link gave up (``state == "failed"``).
        self.failure: LinkError | None = None
        #: Why the last connection (or attempt) ended.
        self.last_error: LinkError | None = None
        #: The live connection's runtime; None while there is none.
        self.runtime_id: str | None = None
        #: The adapter named by the last ``hello`` that was reconciled (kept
        #: across reconnects: what the session last ran on).
        self.adapter: AdapterInfo | None = None
        #: Connections reconciled, and connections that failed in our code.
        self.connections = 0
        self.internal_failures = 0
        #: Where the give-up scope's deadline stands (``math.inf``: none).
        self.give_up_deadline = math.inf
        self._unreachable_since: float | None = None
        self._deliver = False
        self._configure = False
        self._aborts: dict[str, None] = {}  # ordered, no repeats
        #: Asks' answers not sent yet (kept across a reconnect: the daemon's
        #: adapter still waits on its ask).
        self._answers: dict[str, str] = {}
        self._redial = False
        self._dropped: LinkError | None = None
        self._hello = False
        self._reached = False

    def __repr__(self) -> str:
        return (
            f"<HostLinkCore {self.state} runtime={self.runtime_id!r} connections={self.connections} "
            f"attempt={self.backoff.attempt} pending={self.pending()}>"
        )

    def pending(self) -> tuple[str, ...]:
        """The requests not done yet, by name (``redial`` included)."""
        names = [name for name, on in (("deliver", self._deliver), ("configure", self._configure)) if on]
        names += [f"abort {operation_id}" for operation_id in self._aborts]
        names += [f"answer {ask_id}" for ask_id in self._answers]
        if self._redial:
            names.append("redial")
        return tuple(names)

    # ------------------------------------------------------------------ the API's requests

    def ask_deliver(self) -> None:
        self._deliver = True

    def ask_configure(self) -> None:
        self._configure = True

    def ask_abort(self, operation_ids: list[str] | tuple[str, ...]) -> None:
        for operation_id in operation_ids:
            self._aborts[operation_id] = None

    def ask_answer(self, ask_id: str, decision: str) -> None:
        self._answers.setdefault(ask_id, decision)

    def ask_redial(self) -> None:
        self._redial = True

    @property
    def redial_asked(self) -> bool:
        return self._redial

    # ------------------------------------------------------------------ a connection's life

    def started(self, now: float) -> None:
        """The connect loop starts: unreachable from ``now``."""
        self._unreachable(now)

    def attempt(self) -> None:
        """A dial starts (health wait, connect, ``hello``)."""
        self.state = "connecting"
        self._hello = self._reached = False
        self._dropped = None
        self._redial = False

    def attempt_failed(self, error: LinkError) -> None:
        """A step of the attempt failed and will be tried again within it
        (a health check): the error to report if the give-up cuts it short."""
        self.last_error = error

    def hello_received(self) -> None:
        """The attempt got its ``hello``: no give-up while it lasts."""
        self._hello = True
        self.give_up_deadline = math.inf

    def reconciling(self) -> None:
        """The reconcile starts: it does every request asked until now."""
        self._deliver = self._configure = self._redial = False
        self._aborts.clear()

    def reconciled(self, runtime_id: str, adapter: AdapterInfo, *, now: float | None = None) -> None:
        """The reconcile committed and its messages are going out: live
        (from ``now``: a connection's health is how long it stays live)."""
        self._reached = True
        self.live_since = now
        self.runtime_id = runtime_id
        self.adapter = adapter
        self.connections += 1
        self.state = "live"

    def ping_timed_out(self, error: LinkError) -> None:
        """The heartbeat gave up on the live connection."""
        self._dropped = error

    def interrupt(self) -> LinkError | Redial | None:
        """What ends the live connection now, if anything: a redial asked,
        or the heartbeat's drop. The driver asks before each step."""
        if self._redial:
            return REDIAL
        return self._dropped

    def take(self) -> Requests | None:
        """The requests asked since the reconcile (or the last take), each
        handed out once; None when there are none."""
        if not (self._deliver or self._configure or self._aborts or self._answers):
            return None
        taken = Requests(deliver=self._deliver, configure=self._configure, aborts=tuple(self._aborts),
                         answers=tuple(self._answers.items()))
        self._deliver = self._configure = False
        self._aborts.clear()
        self._answers.clear()
        return taken

    def ended(self, error: LinkError | None, *, now: float, internal: bool = False) -> Decision:
        """The connection (or the attempt) ended: with ``error`` (None: for
        a redial), ``internal`` when our own code failed. Returns what to do."""
        self.runtime_id = None
        live_since, self.live_since = self.live_since, None
        if error is not None:
            self.last_error = error
        if internal:
            self.internal_failures += 1
        if error is not None and not error.retry:
            return self._fail(error)
        if self._reached:
            # A reconciled connection ended: the give-up clock starts again,
            # and the backoff too if it stayed live long enough and our own
            # code did not fail it.
            self._unreachable(now)
            lived = None if live_since is None else now - live_since
            self.last_lived = lived
            healthy = lived is None or lived >= self.healthy_after
            if not healthy:
                self.short_lived += 1
            if healthy and not internal:
                self.backoff.reset()
        elif self._hello:
            self._move_give_up()  # a hello without a reconcile still counts as unreachable
        if self._redial:
            self.backoff.reset()
            return REDIAL
        self.state = "backoff"
        return Pause(self.backoff.next())

    def gave_up(self) -> LinkError:
        """The give-up scope fired: the failure, built from the last error."""
        from router.host.link import LinkUnreachable

        assert self.give_up_after is not None
        last = self.last_error or LinkUnreachable("daemon-unreachable", "no daemon answered")
        decision = self._fail(
            LinkUnreachable(
                last.code, f"{last.message}; gave up after {self.give_up_after:g} s without a connection"
            )
        )
        return decision.error

    def closed(self) -> None:
        """The link's task returned."""
        self.runtime_id = None
        self.state = "failed" if self.failure is not None else "closed"

    # ------------------------------------------------------------------ inside

    def _fail(self, error: LinkError) -> GiveUp:
        self.failure = error
        self.state = "failed"
        self.runtime_id = None
        return GiveUp(error)

    def _unreachable(self, now: float) -> None:
        self._unreachable_since = now
        self._move_give_up()

    def _move_give_up(self) -> None:
        if self.give_up_after is None or self._unreachable_since is None:
            self.give_up_deadline = math.inf
        else:
            self.give_up_deadline = self._unreachable_since + self.give_up_after
