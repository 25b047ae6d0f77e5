"""The router's durable record as a whole: its three records opened, closed
and copied as one, above the records themselves.

Three records make the whole: the host's store (:class:`router.host.Store`),
the delivery record (:class:`router.turns.delivery_log.DeliveryLog`) and the
turn records the limits count (:mod:`router.plugins.usage`), each over the
storage layer (:mod:`router.store`). Where they live is one ``--store``
value (:func:`router.store.parse_target`):

- a SQLite data directory (the default: ``--data-dir``): ``host.sqlite``,
  ``turns.sqlite`` and ``usage.jsonl`` in it, one router at a time (each
  SQLite file is locked by the router that has it open);
- ``postgresql://…``: the three as tables of one PostgreSQL database, which
  any number of routers share.

The modules inside:

``whole``  :func:`open_record`: the three opened from one ``--store`` value (:class:`Record`)
``copy``   :func:`copy_record`: a SQLite data directory copied into a PostgreSQL database
``cli``    ``router store copy``
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.record.copy": "copy_record",
    "router.record.whole": "HOST_FILE RECORDS_FILE TURNS_FILE Record open_record",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
