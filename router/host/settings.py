"""How a host behaves: :class:`HostSettings`, every default with its source.

Its own module because both the :class:`~router.host.host.Host` and each
session's :class:`~router.host.session_link.SessionLink` read it, and the
link must not import the host (the host starts links).
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from router.host.link import (
    CONNECT_TIMEOUT,
    HEALTH_WAIT,
    HELLO_TIMEOUT,
    RECONNECT_BASE,
    RECONNECT_CAP,
)

__all__ = ["ACK_EVERY", "LOST_POLICIES", "HostSettings", "LostPolicy"]

#: Frames between acknowledgements, so the daemon can forget them. The
#: reference's ``ACK_EVERY`` (32).
ACK_EVERY: Final = 32

LostPolicy = Literal["fail", "retry", "if-declared"]
#: What happens to an operation whose container was lost while it ran: the
#: reference's ``onContainerLost`` values (``"fail"``, its default, and
#: ``"retry"``), and ours, ``"if-declared"``: retry when the adapter of the
#: new runtime declares :data:`~router.host.reconcile.RERUN_CAPABILITY`,
#: else fail.
LOST_POLICIES: Final = ("fail", "retry", "if-declared")


@attrs.frozen(kw_only=True)
class HostSettings:
    """How a host behaves. Every default names its source."""

    #: An operation whose container was lost while it ran: ``"fail"``
    #: settles it ``unanswered``/``container_lost`` (the reference's
    #: default), ``"retry"`` runs it again in the new container (only safe
    #: when the agent's tools can be repeated), ``"if-declared"`` (ours,
    #: ``router serve``'s) retries when the new container's adapter declares
    #: the ``rerun`` capability, else fails.
    on_container_lost: LostPolicy = attrs.field(
        default="fail", validator=attrs.validators.in_(LOST_POLICIES)
    )
    #: Seconds to connect, and to receive ``hello`` (the reference's 10 s each).
    connect_timeout: float = CONNECT_TIMEOUT
    hello_timeout: float = HELLO_TIMEOUT
    #: Seconds one health wait keeps trying before the attempt counts as failed.
    health_wait: float = HEALTH_WAIT
    #: Reconnect backoff: first step and cap (the reference's 1 s and 30 s).
    reconnect_base: float = RECONNECT_BASE
    reconnect_cap: float = RECONNECT_CAP
    #: Stop trying after this many seconds without reaching ``hello`` (None:
    #: never; the daemon is disposable and may come back). ``router prompt``
    #: sets it, so an unreachable daemon is an exit status, not a hang.
    give_up_after: float | None = None
    #: Seconds between pings on a live connection, and how long a pong may
    #: take before the connection is dropped (None: no pings). Not in the
    #: reference (its platform watches the container instead); ours, so a
    #: half-open TCP connection cannot hold a session forever.
    ping_interval: float | None = 30.0
    ping_timeout: float = 10.0
    #: Frames between acks (the reference's 32).
    ack_every: int = ACK_EVERY
    #: Reattach every session with open operations when the host starts
    #: (the reference's ``onStart``).
    wake_open: bool = True
    #: ``ContainerSettings`` (wire JSON: ``model``, ``options``) a new
    #: session starts with.
    defaults: dict = attrs.field(factory=dict)
