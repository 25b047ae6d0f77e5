"""Notifications: when a session needs the person, tell them, and keep a
receipt of what happened to each notification (docs/notifications.md).

==========================  =====================================================
:mod:`.core`                sans-IO: events from state changes, the push
                            payload, routing (presence, quiet hours, mute,
                            already answered), the request bodies
:mod:`.record`              the ``notify`` tables in the delivery record's
                            database: events (the outbox), receipts,
                            subscriptions; the hook that writes an event in
                            its cause's transaction
:mod:`.config`              ``notifications.json`` and the VAPID key (0600)
:mod:`.outbox`              the Trio worker that sends after the commit
:mod:`.routes`              the HTTP routes (a Blueprint)
:mod:`.cli`                 ``router notifications [--json]``
==========================  =====================================================

This face loads the core when a name is first used: the API's status
table reads :data:`NOTIFY_STATUS` without loading the worker.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {"router.notify.core": "KINDS NOTIFY_STATUS Event Presence route",
         "router.notify.record": "NOTIFY_TABLES install"}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
