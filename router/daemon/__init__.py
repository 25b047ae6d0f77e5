"""The container daemon: the side of the container protocol that runs inside
a container and drives an agent through an adapter.

This package is one program. It imports :mod:`wire` and the shared helpers in
:mod:`router` (``router._trio`` and the like), never :mod:`router.host`, the
other end of the protocol. Its public face is what this module exports, plus
the adapter implementations in :mod:`router.daemon.adapters`, which are named
by module (``router daemon --adapter MODULE:ATTR``):

- :class:`Daemon` serves any number of sessions with one adapter (``runner``);
- :class:`DaemonServer` puts a daemon on one TCP port (``transport``);
- :class:`Adapter`, :class:`AdapterContext`, :class:`AdapterTurn` are the
  interface an adapter implements (``adapter``).

The modules inside:

``core``       sans-IO: one daemon session (numbering, kept frames, queue,
               steering, replay)
``runner``     the Trio runner: a nursery per session, an inbox task, a
               turn task (its turns' cancel scope shared until one is cancelled)
``transport``  one port: the shared h11 loop for ``/healthz``, the shared
               WebSocket (``router/_websocket.py``) for ``/sessions/<id>``
``adapter``    the adapter interface
``adapters/``  echo (the reference's), the CLI adapter and its Claude Code
               and Codex presets
``cli``        ``router daemon``
"""

from router.daemon.adapter import (
    Adapter,
    AdapterContext,
    AdapterSession,
    AdapterTurn,
    ConfigurableSession,
    SteeringSession,
)
from router.daemon.runner import Daemon, DaemonClosed
from router.daemon.transport import DaemonServer

__all__ = [
    "Adapter",
    "AdapterContext",
    "AdapterSession",
    "AdapterTurn",
    "ConfigurableSession",
    "Daemon",
    "DaemonClosed",
    "DaemonServer",
    "SteeringSession",
]
