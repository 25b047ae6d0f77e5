"""The host: the side of the container protocol that drives daemons and owns
the durable record (what the reference calls the object).

This package is one program. It imports :mod:`wire` and the shared helpers in
:mod:`router`, never :mod:`router.daemon`, the other end of the protocol: a
host drives any daemon that speaks the wire, ours or the reference's. Its
public face is what this module exports:

- :class:`Host` and :class:`HostSession`: submit, prompt, steer, wait, abort,
  reset, set model, messages, events, sessions (``host``);
- :class:`Store`: the durable record in SQLite (``store``);
- :class:`DaemonEndpoint` and the link's errors (``link``);
- :class:`Launcher` and :class:`Supervisor`: a daemon per session, started,
  replaced, stopped by a launcher module (``supervisor``, over the sans-IO
  ``lifecycle``);
- the typed events a session's subscribers receive (``events``).

The modules inside:

``events``        the typed events and operation results the host hands out
``reconcile``     reconcile on ``hello``, deliver, apply frames, acks (in a store transaction)
``connection``    sans-IO: a session link's state across connections (requests,
                  backoff, give-up, what to do when a connection ends)
``link``          dialling a daemon (the WebSocket: ``router/_websocket.py``): health wait, connect and hello deadlines,
                  backoff
``session_link``  one session's link task (connect loop, reader, driver), and
                  the ``LinkOwner`` protocol it needs from the host
``lifecycle``     sans-IO: a launched session's daemon (start on demand, replace
                  on loss, idle stop, unreachable after failed starts)
``supervisor``    the Trio layer over it: one task per launched session
``settings``      ``HostSettings``
``host``          the ``Host`` API
``store``         the durable record: SQLite, WAL, one writer thread
``cli``           ``router prompt``, ``router transcript``
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.host.events": (
        "AdapterEvent ContainerLost DaemonChanged FrameSkipped HostEvent "
        "MessageStored OperationEnded OperationStarted event_json"
    ),
    "router.host.host": (
        "ROOT_SESSION EventStream Host HostSession HostSessions HostSettings Receipt"
    ),
    "router.host.reconcile": "OperationResult",
    "router.host.session_link": "EventsLagged",
    "router.host.lifecycle": "LifecycleCore",
    "router.host.record.base": "UsageAfter",
    "router.host.link": "DaemonEndpoint EndpointError LinkError LinkRefused probe",
    "router.host.store": "DaemonRecord Refused SessionRecord SkippedFrame Store StoreMisuse",
    "router.host.supervisor": "Launcher Supervisor workspace_name",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
