"""What the host's store asks its database: the statements a piece of work
runs, for tests that explain them (no read of a turn may walk the
history)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from router.host.store import Store

#: The tables that grow with every turn.
HISTORY_TABLES = ("operations", "messages", "entries", "usage")

#: Rows of a file or database at schema 7 (before the history indexes): a
#: session's settled and open operation, and a usage event of the settled one.
V7_ROWS = (
    "INSERT INTO sessions (id, ordinal, created_at, updated_at) VALUES ('s', 1, 0, 0)",
    "INSERT INTO operations (session, id, ordinal, generation, input, when_busy, status, created_at)"
    " VALUES ('s', 'old', 1, 1, '\"x\"', 'followUp', 'done', 0), ('s', 'open', 2, 1, '\"y\"', 'followUp', 'queued', 0)",
    "INSERT INTO usage (session, runtime, seq, operation_id, input_tokens, output_tokens, cost_usd, raw, at)"
    " VALUES ('s', 'r', 1, 'old', 4, 1, NULL, '{}', 0)",
)


@contextlib.contextmanager
def tracing(store: Store) -> Iterator[list[tuple[str, tuple]]]:
    """The statements run through the store's connection while inside
    (from any thread), with their parameters, in order."""
    ran: list[tuple[str, tuple]] = []
    execute = store._db.execute

    def traced(sql: str, params: Any = ()) -> Any:
        ran.append((sql, tuple(params)))
        return execute(sql, params)

    store._db.execute = traced  # type: ignore[method-assign]
    try:
        yield ran
    finally:
        del store._db.execute


def statements(store: Store, work: Callable[[Store], Any]) -> list[tuple[str, tuple]]:
    """Each statement ``work(store)`` ran through the store's connection,
    with its parameters, in order (to explain a statement as it ran: a plan
    may depend on which terms are literals)."""
    with tracing(store) as ran:
        work(store)
    return [(sql, params) for sql, params in ran
            if sql.split(None, 1)[0].upper() in ("SELECT", "INSERT", "UPDATE", "DELETE")]


def check_v7_migrated(store: Store) -> None:
    """A store opened on :data:`V7_ROWS` reads them through schema 8."""
    assert [op.id for op in store.operations.all(session="s", statuses=("running", "queued"))] == ["open"]
    assert store.usage.after("s", 0).input_tokens == 4  # the old usage counts from the mark 0
    mark = store.usage.after("s").mark
    store.usage.record("s", "open", "r", 2, {"type": "usage", "inputTokens": 6})
    after = store.usage.after("s", mark)
    assert (after.input_tokens, after.events) == (6, 1)
