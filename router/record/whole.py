"""Open the router's three records from one ``--store`` value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from router.store.db import StoreTarget
from router.host import Store
from router.plugins.usage import JsonlRecords, TableRecords
from router.turns.delivery_log import DeliveryLog

#: The files of a SQLite data directory (the names ``router serve`` has
#: always used).
HOST_FILE = "host.sqlite"
TURNS_FILE = "turns.sqlite"
RECORDS_FILE = "usage.jsonl"


@attrs.define
class Record:
    """The three records, open; :meth:`close` closes them (each once)."""

    target: StoreTarget
    store: Store
    deliveries: DeliveryLog
    #: A :class:`router.plugins.usage.RecordStore`.
    records: Any

    def close(self) -> None:
        close = getattr(self.records, "close", None)
        if close is not None:
            close()
        self.deliveries.close()
        self.store.close()


def open_record(target: StoreTarget | None, data_dir: Path, records: Path | None = None) -> Record:
    """Open the records at ``target`` (None: the SQLite data directory
    ``data_dir``). ``records`` names a turn-records file to use instead of
    the target's (``JobConfig.records``). A record that cannot open raises
    its :class:`router.errors.Refusal` with nothing left open."""
    if target is None:
        target = StoreTarget("sqlite", str(data_dir))
    location: Any = target if target.kind == "postgresql" else None
    opened: list[Any] = []
    try:
        if location is None:
            directory = Path(target.location)
            directory.mkdir(parents=True, exist_ok=True)
            store = Store(directory / HOST_FILE)
            opened.append(store)
            deliveries = DeliveryLog(directory / TURNS_FILE)
            opened.append(deliveries)
            turns: Any = JsonlRecords(records or directory / RECORDS_FILE)
        else:
            store = Store(location)
            opened.append(store)
            deliveries = DeliveryLog(location)
            opened.append(deliveries)
            turns = JsonlRecords(records) if records is not None else TableRecords(target.location)
    except BaseException:
        for each in reversed(opened):
            each.close()
        raise
    return Record(target=target, store=store, deliveries=deliveries, records=turns)
