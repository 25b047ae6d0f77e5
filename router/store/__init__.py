"""The router's storage layer, and its durable record as a whole.

The layer (docs/store.md): :mod:`router.store.db` (one connection face over
SQLite and PostgreSQL, targets, errors, migrations), :mod:`router.store.sqlite`
(the file lock and the WAL connection), :mod:`router.store.worker` (one
worker per database: the thread every call hops to, group commit, close).

Three records make the whole: the host's store (:class:`router.host.Store`),
the delivery record (:class:`router.turns.delivery_log.DeliveryLog`) and the
turn records the limits count (:mod:`router.plugins.usage`). Where they
live is one ``--store`` value (:func:`router.store.db.parse_target`):

- a SQLite data directory (the default: ``--data-dir``): ``host.sqlite``,
  ``turns.sqlite`` and ``usage.jsonl`` in it, one router at a time (each
  SQLite file is locked by the router that has it open);
- ``postgresql://…``: the three as tables of one PostgreSQL database, which
  any number of routers share.

:func:`open_record` opens the three; :func:`copy_record` (``router store
copy``) copies a SQLite data directory into a PostgreSQL database. Both are
loaded when first named (this package's base modules are imported by the
records themselves, so its face must not import them back).
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.store.db": "StoreTarget parse_target redact",
    "router.store.copy": "copy_record",
    "router.store.record": "Record open_record",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
