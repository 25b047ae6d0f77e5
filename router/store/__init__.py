"""The router's storage layer: below every record, importing none of them.

The layer (docs/store.md): :mod:`router.store.db` (one connection face over
SQLite and PostgreSQL, targets, errors, migrations), :mod:`router.store.sqlite`
(the file lock and the WAL connection), :mod:`router.store.worker` (one
worker per database: the thread every call hops to, group commit, close).
The host's store, the delivery record, the usage records, the devices and
the cluster each open their database here; the record as a whole (the
three opened from one ``--store`` value, copied) is :mod:`router.record`,
above them.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.store.db": "StoreTarget parse_target redact",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
