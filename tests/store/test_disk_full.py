"""A full disk under a running ``router serve`` (real process, SQLite store
on a small tmpfs of the test's own; root only, since it mounts):

- filled while it runs, with a limit plug-in on (``token-limit`` over the
  ``frames`` source): sends answer 503 ``store-unavailable`` (the turn's
  record, too, cannot be written: the session is not stopped for it);
  freed, the same event ids are resent and succeed, and the transcript
  holds each event once (nothing lost, nothing doubled); the router never
  exits;
- a ``router serve`` started on the full disk refuses with a sentence on
  stderr and a non-zero exit, no traceback.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.api.processes import REPO, ROUTER, environment, serve

BUDGET = "1"


def _mount(folder: Path, size: str) -> str | None:
    """A tmpfs of ``size`` at ``folder``, or why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"


def _fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
    return filler


@pytest.fixture
def disk(tmp_path: Path):  # noqa: ANN201
    folder = tmp_path / "disk"
    reason = _mount(folder, "3m")
    if reason is not None:
        pytest.skip(reason)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


async def _send(client, event_id: str):  # noqa: ANN001, ANN202
    response = await client.post("/sessions/root/messages", json={"text": f"hi {event_id}", "eventId": event_id,
                                                                  "wait": True})
    return response.status_code, response.json()


async def test_a_full_disk_answers_503_and_heals_when_freed(tmp_path: Path, disk: Path) -> None:
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "usage-source": ["frames"], "limit-check": ["token-limit"],
                    "channel": ["cli", "webui"]}, "options": {}}))
    os.environ["ROUTER_STORE_RETRY_BUDGET"] = BUDGET  # read by environment() for the child
    try:
        async with serve(tmp_path, "--data-dir", str(disk / "data"), "--settings", str(settings)) as served:
            async with served.client(timeout=60) as client:
                assert (await _send(client, "e1"))[0] == 200
                filler = _fill(disk)
                # Until a write needs a page the files do not have: 503, the code, the sentence.
                refused = None
                for n in range(2, 30):
                    status, body = await _send(client, f"e{n}")
                    if status != 200:
                        refused = (f"e{n}", status, body)
                        break
                assert refused is not None, "no write met the full disk"
                event, status, body = refused
                assert status == 503 and body["error"] == "store-unavailable", body
                assert "resend with the same event id" in body["message"] and body.get("eventId") == event
                # Resent on the full disk: refused again, nothing stopped, nothing lost.
                status, body = await _send(client, event)
                assert status == 503 and body["error"] == "store-unavailable", body
                filler.unlink()
                status, body = await _send(client, event)
                assert status == 200 and body["reply"]["status"] == "done", body
                last = int(event[1:])
                status, body = await _send(client, f"e{last + 1}")
                assert status == 200, body  # the session was not stopped (no session-stopped)
                messages = (await client.get("/sessions/root/messages")).json()["messages"]
                answers = [m["id"] for m in messages if m["id"].endswith(":assistant")]
                assert answers == [f"e{n}:assistant" for n in range(1, last + 2)], answers
                sessions = (await client.get("/sessions")).json()
                root = next(s for s in (sessions["sessions"] if isinstance(sessions, dict) else sessions)
                            if s["id"] == "root")
                assert root.get("state") != "stopped", root
            assert served.process.returncode is None, served.log()[-3000:]
    finally:
        os.environ.pop("ROUTER_STORE_RETRY_BUDGET", None)


async def test_a_start_on_a_full_disk_is_refused_with_a_sentence(tmp_path: Path, disk: Path) -> None:
    settings = tmp_path / "settings"
    # Made once with room (its files exist), then started again on the full disk.
    async with serve(tmp_path, "--data-dir", str(disk / "data"), "--settings", str(settings)):
        pass
    _fill(disk)
    done = await trio.run_process(
        [*ROUTER, "serve", "--port", "0", "--data-dir", str(disk / "data"), "--settings", str(settings)],
        capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
    )
    stderr = done.stderr.decode()
    assert done.returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    assert "store-unavailable" in stderr and "free space" in stderr, stderr


async def test_a_turn_record_on_a_full_disk_does_not_stop_the_session(tmp_path: Path, disk: Path) -> None:
    """The limit plug-in's turn end meets a full disk (the turn records'
    file, ``usage.jsonl``, is on it): tried again, then logged; no limit
    said no, so the session is not stopped and takes its next turn; freed,
    the records are written again."""
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "usage-source": ["frames"], "limit-check": ["token-limit"],
                    "channel": ["cli", "webui"]}, "options": {}}))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "usage.jsonl").symlink_to(disk / "usage.jsonl")
    filler = _fill(disk)
    os.environ["ROUTER_STORE_RETRY_BUDGET"] = BUDGET
    try:
        async with serve(tmp_path, "--settings", str(settings)) as served:
            async with served.client(timeout=60) as client:
                for n in (1, 2, 3):
                    status, body = await _send(client, f"e{n}")
                    assert status == 200 and body["reply"]["status"] == "done", body  # never session-stopped
                with trio.fail_after(30):
                    while "could not be stored or checked" not in served.log():
                        await trio.sleep(0.05)
                filler.unlink()
                status, body = await _send(client, "e4")
                assert status == 200, body
                with trio.fail_after(30):
                    while not (disk / "usage.jsonl").exists() or not (disk / "usage.jsonl").read_text().strip():
                        await trio.sleep(0.05)
                assert "session stops" not in served.log() and "stopped:" not in served.log(), served.log()[-3000:]
            assert served.process.returncode is None
    finally:
        os.environ.pop("ROUTER_STORE_RETRY_BUDGET", None)
