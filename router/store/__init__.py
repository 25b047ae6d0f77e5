"""The router's durable record as a whole, on either backend.

Three records make it up: the host's store (:class:`router.host.Store`),
the delivery record (:class:`router.turns.delivery_log.DeliveryLog`) and the
turn records the limits count (:mod:`router.plugins.usage`). Where they
live is one ``--store`` value (:func:`router._db.parse_target`):

- a SQLite data directory (the default: ``--data-dir``): ``host.sqlite``,
  ``turns.sqlite`` and ``usage.jsonl`` in it, one router at a time (each
  SQLite file is locked by the router that has it open);
- ``postgresql://…``: the three as tables of one PostgreSQL database, which
  any number of routers share.

:func:`open_record` opens the three; :func:`copy_record` (``router store
copy``) copies a SQLite data directory into a PostgreSQL database.
docs/store.md says how it is built and what it costs.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router._db": "Target parse_target redact",
    "router.store.copy": "copy_record",
    "router.store.record": "Record open_record",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
