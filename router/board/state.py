"""A session's state, derived from what its router knows (sans-IO).

The states are fixed names (docs/cli.md, "Fixed names"): ``idle``, ``working``, ``waiting`` (a
permission ask waits on the person), ``parked`` (the provider's usage
limit), ``stopped`` (one of our limits stopped it), ``unreachable``,
``closed``. The router knows all seven:

============  =======================================  ==============================================
state         a container session                      a Claude Code session
============  =======================================  ==============================================
closed        the host closed its link                 its mod said ``session-end`` (until a
                                                       ``session-id`` starts the next), or the
                                                       router closed the session
stopped       a limit stopped it (until resumed)       the same
parked        the provider's usage limit parked it     the same
              (until its reset; router.limits)
unreachable   the host cannot reach its daemon now     no mod has said ``hello`` on its link
              (its link is in backoff, or failed), or
              its launcher failed to start it (the
              ``daemon`` entry says why)
waiting       (never)                                  a permission ask waits on the person
                                                       (``router asks``; ``router.asks``)
working       an operation is open (queued, running)   a turn runs (``turn-start`` .. ``turn-complete``)
idle          none of the above                        none of the above
============  =======================================  ==============================================

The first row that holds wins, top to bottom: a closed session is closed
whatever else is true, and a stopped one says so before it says it is
parked, unreachable or working (the person has to act on it; a parked one
resumes by itself).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["STATES", "StampedListing", "claude_code_state", "container_state", "parked_state", "session_state", "stopped_state"]

#: Every state this router reports, in the order the table above checks them.
STATES: Final = ("closed", "stopped", "parked", "unreachable", "waiting", "working", "idle")
#: The host's link states in which its daemon cannot be reached
#: (``router.host.SessionLink.state``).
UNREACHABLE_LINKS: Final = frozenset({"backoff", "failed"})
#: The launched daemon's states (``router.host.lifecycle``) in which it cannot be reached.
UNREACHABLE_DAEMONS: Final = frozenset({"unreachable"})


def session_state(
    *, closed: bool = False, stopped: bool = False, reachable: bool = True, waiting: bool = False, busy: bool = False
) -> str:
    """The state the table gives these facts."""
    checks = (("closed", closed), ("stopped", stopped), ("unreachable", not reachable), ("waiting", waiting),
              ("working", busy))
    for state, holds in checks:
        if holds:
            return state
    return "idle"


def stopped_state(state: str) -> str:
    """The state of a session in ``state`` that a limit has stopped (the
    table's precedence: only ``closed`` says more)."""
    return state if state == "closed" else "stopped"


def parked_state(state: str) -> str:
    """The state of a session in ``state`` that the provider's usage limit
    has parked (the table's precedence: ``closed`` and ``stopped`` say more)."""
    return state if state in ("closed", "stopped") else "parked"


def container_state(*, busy: bool, stopped: bool, link_state: str | None, daemon_state: str | None = None) -> str:
    """A container session's state; ``link_state`` is its host link's state
    (None: it has no link yet, which the next delivery opens);
    ``daemon_state`` its launched daemon's (None: no launcher runs it). A
    daemon that is starting, replacing or idle-stopped is not unreachable:
    the next delivery (or the one waiting) brings it up."""
    reachable = link_state not in UNREACHABLE_LINKS and daemon_state not in UNREACHABLE_DAEMONS
    if daemon_state in ("starting", "replacing", "idle-stopped", "stopped") and link_state in UNREACHABLE_LINKS:
        reachable = True  # the link backs off while its daemon is (re)started on purpose
    return session_state(closed=link_state == "closed", stopped=stopped, reachable=reachable, busy=busy)


def claude_code_state(*, link: Any, stopped: bool, closed: bool, waiting: bool = False) -> str:
    """A Claude Code session's state; ``link`` is its mod link's
    ``LinkState``, ``closed`` whether the router closed the session,
    ``waiting`` whether a permission ask of it waits on the person."""
    return session_state(
        closed=closed or link.ended is not None,
        stopped=stopped,
        reachable=link.hello_session_id is not None,
        waiting=waiting,
        busy=link.turn_running,
    )


class StampedListing(list):  # type: ignore[type-arg]
    """A router's listing (``ContainerSessions.list``, kept by
    ``TurnRouter.list``'s in-place extend) with ``stamps``: each container
    session's ``(updated_at, settings' model)`` from the read that made it,
    so the board describes the sessions without reading the record again."""

    stamps: dict[str, tuple[int, object]]

    def __init__(self, stamps: dict[str, tuple[int, object]]) -> None:
        super().__init__()
        self.stamps = stamps
