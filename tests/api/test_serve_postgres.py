"""``router serve --store postgresql://…`` as a real process: a delivery
answered, its rows in PostgreSQL (and no SQLite file in the data dir), a
restart on the same database with the history intact."""

from __future__ import annotations

import signal
from pathlib import Path

import psycopg
import trio

from router.host import Store
from tests.api.processes import REPO, ROUTER, environment, send, serve, stop
from tests.support.postgres import postgres, postgres_url  # noqa: F401  (fixtures)


async def test_serve_keeps_its_record_in_postgresql(tmp_path: Path, postgres_url: str) -> None:
    async with serve(tmp_path, "--store", postgres_url) as served:
        status, answer, _ = await send(served.url, "root", "hello", "--event-id", "e1", token=served.token)
        assert status == 0 and answer["reply"]["text"] == "echo: hello (turn 1)", answer
        assert await stop(served.process, signal.SIGINT) == 130, served.log()  # SIGINT: 128 + 2
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT state FROM deliveries WHERE event_id = 'e1'").fetchone() == ("answered",)
        assert db.execute("SELECT status FROM operations WHERE id = 'e1'").fetchone() == ("done",)
        assert db.execute("SELECT count(*) FROM turn_records").fetchone() == (1,)
    assert not list((tmp_path / "data").glob("*.sqlite")) and not (tmp_path / "data" / "usage.jsonl").exists()
    async with serve(tmp_path, "--store", postgres_url, name="again") as served:
        status, again, _ = await send(served.url, "root", "hello", "--event-id", "e1", token=served.token)
        assert status == 0 and again["fromRecord"] is True
        status, later, _ = await send(served.url, "root", "later", token=served.token)
        assert status == 0 and later["reply"]["text"] == "echo: later (turn 2)"  # the session's entries restored
        assert await stop(served.process, signal.SIGINT) == 130, served.log()  # SIGINT: 128 + 2
    with Store(postgres_url) as store:
        texts = [message.get("text") or message.get("content") for message in store.messages.all("root")]
        assert len(texts) == 4, store.messages.all("root")


async def test_serve_refuses_a_store_it_cannot_use(tmp_path: Path, postgres: object) -> None:
    for store, code in (("mysql://h/db", "bad-store-url"), ("postgresql://postgres@127.0.0.1:1/none", "bad-store")):
        with trio.fail_after(60):
            done = await trio.run_process(
                [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--settings", str(tmp_path / "s"),
                 "--store", store],
                capture_stdout=True, capture_stderr=True, env=environment(), cwd=REPO, check=False,
            )
        assert done.returncode == 2 and code in done.stderr.decode(), done.stderr
