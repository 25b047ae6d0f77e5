"""The host store's message versions (schema version 6), the live view's
durable resume point: a change bumps it, a same-data rewrite does not, an
older store is backfilled in order."""

from __future__ import annotations

from pathlib import Path

from router.host import Store
from tests.host.test_store import old_store


def _message(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def test_a_change_bumps_the_version_and_a_same_rewrite_does_not(tmp_path: Path) -> None:
    with Store(tmp_path / "host.db") as store:
        store.sessions.create("s")
        store.sessions.create("t")
        store.messages.put("s", 1, _message("a", "one"))
        store.messages.put("s", 1, _message("b", "two"))
        store.messages.put("t", 1, _message("x", "other session"))
        first = store.messages.log("s")
        assert [(v, m["id"]) for v, m in first.messages] == [(1, "a"), (2, "b")] and first.version == 2
        store.messages.put("s", 1, _message("a", "one"))  # the same data: no change
        assert store.messages.log("s").version == 2
        store.messages.put("s", 1, _message("a", "one, edited"))
        since = store.messages.log("s", 2)
        assert since.version == 3 and [(v, m["parts"][0]["text"]) for v, m in since.messages] == [(3, "one, edited")]
        # In transcript order when read whole; by change when read since.
        assert [m["id"] for _, m in store.messages.log("s").messages] == ["a", "b"]
        assert [m["id"] for _, m in store.messages.log("s", 0).messages] == ["b", "a"]
        now = store.messages.versions("s", ["a", "zzz", "a"])
        assert (now.generation, now.version, now.messages) == (1, 3, [(3, _message("a", "one, edited"))])
        assert store.messages.log("t").version == 1


def test_a_v5_store_is_backfilled_in_order(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    db = old_store(path, 5)
    db.execute("INSERT OR IGNORE INTO sessions (id, ordinal, created_at, updated_at) VALUES ('s', 1, 0, 0)")
    for position, mid in enumerate(["a", "b"], 1):
        db.execute(
            "INSERT INTO messages (session, generation, id, position, data, created_at, updated_at)"
            " VALUES ('s', 1, ?, ?, ?, 0, 0)",
            (mid, position, '{"id": "%s", "role": "user", "parts": []}' % mid),
        )
    db.commit()
    db.close()
    with Store(path) as store:
        before = store.messages.log("s")
        assert [m["id"] for _, m in before.messages] == ["a", "b"]
        assert before.messages[0][0] < before.messages[1][0] == before.version
        store.messages.put("s", 1, _message("c", "three"))
        after = store.messages.log("s", before.version)
        assert [(v, m["id"]) for v, m in after.messages] == [(before.version + 1, "c")]
