"""Each session's board row, made once and kept until what it is made of
changes (sans-IO).

The board of a thousand sessions answered ``GET /sessions`` by describing
every session again on every survey and encoding every row's JSON again,
though between two surveys one session changes, or none. :class:`Kept`
keeps, per session id, the row made last time with the *key* it was made
from (everything the row depends on: the router's listing entry, the
record's stamp, the launch, the holder...): a survey whose key for a
session equals the kept one takes the kept row (the same object), any
other key makes the row again. Equality of the keys is the whole rule, so
a row cannot go stale while its inputs are read afresh: what the cache
saves is the making and the encoding, never a read it should have made.

Each kept row's JSON text is made on first use (:meth:`Kept.text`) and
kept with it; :func:`listing_text` joins the kept texts of a listing's rows
(encoding afresh any row not kept: another router's) into the body
``dumps`` would give. A row is known by identity (``is``): a row equal to
a kept one but made elsewhere is encoded afresh.

Rows of sessions no longer listed are dropped at each survey
(:meth:`Kept.only`), so what is kept is bounded by the board's size.

``statistics()``: ``made`` (rows made, a describe each), ``kept`` (rows
taken as they were), ``encoded`` (rows whose JSON was made), ``rows``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import attrs

from wire.json import dumps

__all__ = ["Kept", "KeptStatistics", "listing_text"]


@attrs.frozen
class KeptStatistics:
    made: int
    kept: int
    encoded: int
    rows: int


class Kept:
    """Rows kept by session id with the key each was made from (see the
    module docstring)."""

    def __init__(self) -> None:
        #: id -> [key, row, its JSON text or None]
        self._rows: dict[str, list[Any]] = {}
        self.made = 0
        self.kept = 0
        self.encoded = 0

    def __repr__(self) -> str:
        return f"<Kept {len(self._rows)} rows made={self.made} kept={self.kept}>"

    def statistics(self) -> KeptStatistics:
        return KeptStatistics(made=self.made, kept=self.kept, encoded=self.encoded, rows=len(self._rows))

    def row(self, session: str, key: Any, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The row of ``session`` for ``key``: the kept one when it was made
        from an equal key, else ``make()`` (kept from now on). The row is
        shared: callers never change it."""
        kept = self._rows.get(session)
        if kept is not None and kept[0] == key:
            self.kept += 1
            return kept[1]
        row = make()
        self._rows[session] = [key, row, None]
        self.made += 1
        return row

    def only(self, sessions: Iterable[str]) -> None:
        """Forget the rows of every session but ``sessions``."""
        wanted = set(sessions)
        if len(self._rows) > len(wanted) or any(session not in wanted for session in self._rows):
            self._rows = {session: kept for session, kept in self._rows.items() if session in wanted}

    def text(self, row: dict[str, Any]) -> str:
        """``dumps(row)``, made once for a kept row."""
        kept = self._rows.get(row.get("id"))  # type: ignore[arg-type]
        if kept is None or kept[1] is not row:
            self.encoded += 1
            return dumps(row)
        if kept[2] is None:
            self.encoded += 1
            kept[2] = dumps(row)
        return kept[2]


def listing_text(rows: list[dict[str, Any]], rest: dict[str, Any], texts: Callable[[dict[str, Any]], str]) -> str:
    """``dumps({"sessions": rows, **rest})``, each row's text from
    ``texts`` (:meth:`Kept.text`)."""
    body = '{"sessions":[' + ",".join(map(texts, rows)) + "]"
    if rest:
        body += "," + dumps(rest)[1:-1]
    return body + "}"
