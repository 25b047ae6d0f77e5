"""The user-turn router's seams: what it needs of the parts it is handed.

:class:`~router.turns.router.TurnRouter` is built over two parts it does not
own and does not import: the plug-in layer (``router.plugins.PluginLayer``,
which brackets turns and may stop a session) and the cluster
(``router.cluster.ClusterNode``, which holds leases and relays deliveries to
the router that holds a session). Each is named here by what the router
calls on it, as hypercorn's ``typing.py`` names its server's parts, so a test
can hand a small double and a type checker sees the seam.

Typing only: nothing here runs, and it imports no Trio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:
    from router.errors import Refusal
    from router.plugins.limit_checks import MustStop
    from router.plugins.routing import LaunchRecord
    from router.turns.core import Delivery, Reply

__all__ = ["Remote", "Settings", "TurnLayer"]


class Settings(Protocol):
    """The settings directory, as far as the router reads it."""

    def read(self, name: str) -> Any:
        """The document ``name`` (a ``Document``), or a :class:`Refusal`."""
        ...


class TurnLayer(Protocol):
    """The plug-in layer, as the router and its turn brackets call it."""

    settings: Settings

    async def begin_turn(self, launch: LaunchRecord, *, transcript: str | None = None) -> Any:
        """A turn starts: its bracket (the usage sources' marks)."""
        ...

    async def end_turn(self, bracket: Any) -> tuple[dict[str, Any], MustStop | None]:
        """A turn ended: its record, and a stop when a limit check says so."""
        ...

    async def may_continue(self, subject: Mapping[str, Any]) -> Refusal | None:
        """Whether a stopped session may take messages again (None: yes)."""
        ...


class Remote(Protocol):
    """The cluster, as the router calls it for sessions another router holds."""

    def holds(self, session: str) -> bool:
        """Whether this router holds the session's lease."""
        ...

    async def relay(self, delivery: Delivery) -> Reply:
        """Deliver through the router that holds the session."""
        ...

    async def refused(self, delivery: Delivery, error: BaseException) -> Reply | None:
        """The reply for a write the lease's fence refused (None: not the fence's)."""
        ...
