"""``router prompt`` and ``router transcript`` as a person runs them: real
processes, real daemons."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import trio

from tests.support.daemons import REPO, Daemon

ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


async def router(*args: str) -> tuple[int, str, str]:
    done = await trio.run_process(
        [sys.executable, "-m", "router", *args],
        env=ENV,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def prompt_args(daemon: Daemon, store: Path, *more: str) -> list[str]:
    return ["prompt", "--daemon", daemon.url, "--token", daemon.token, "--store", str(store), *more]


async def test_prompt_prints_the_outcome_and_exits_by_status(daemon: Daemon, tmp_path: Path) -> None:
    store = tmp_path / "host.db"
    code, out, err = await router(*prompt_args(daemon, store, "hello"))
    assert (code, json.loads(out), err) == (0, {"status": "done", "text": "echo: hello (turn 1)"}, "")
    code, out, _ = await router(*prompt_args(daemon, store, "--session", "other", "fail no luck"))
    assert (code, json.loads(out)) == (1, {"status": "unanswered", "reason": "no luck"})
    code, out, _ = await router(*prompt_args(daemon, store, "--when-busy", "steer", "--id", "k", "again"))
    assert (code, json.loads(out)["text"]) == (0, "echo: again (turn 2)")
    # The same key is the same operation: answered from the store.
    code, out, _ = await router(*prompt_args(daemon, store, "--id", "k", "ignored"))
    assert (code, json.loads(out)["text"]) == (0, "echo: again (turn 2)")

    code, out, _ = await router("transcript", "--store", str(store))
    assert code == 0
    messages = json.loads(out)
    assert [(m["role"], m["parts"][0]["text"]) for m in messages] == [
        ("user", "hello"),
        ("assistant", "echo: hello (turn 1)"),
        ("user", "again"),
        ("assistant", "echo: again (turn 2)"),
    ]
    code, out, _ = await router("transcript", "--store", str(store), "--session", "other")
    assert (code, [m["id"].split(":")[1] for m in json.loads(out)]) == (0, ["user"])


async def test_connection_and_usage_errors_exit_2_with_a_code(daemon: Daemon, tmp_path: Path) -> None:
    store = tmp_path / "host.db"
    code, out, err = await router(
        "prompt", "--daemon", daemon.url, "--token", "wrong", "--store", str(store), "x"
    )
    assert (code, out) == (2, "") and err.startswith("router prompt: unauthorized: ")
    code, _, err = await router("prompt", "--daemon", "ftp://nowhere", "--token", "t", "--store", str(store), "x")
    assert code == 2 and err.startswith("router prompt: bad-daemon-url: ")
    with trio.socket.socket() as probe:  # a port nobody listens on
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = await router(
        "prompt", "--daemon", f"ws://127.0.0.1:{port}", "--token", "t", "--store", str(store),
        "--connect-timeout", "0.5", "x",
    )  # fmt: skip
    assert code == 2 and err.startswith("router prompt: daemon-unreachable: ")
    code, _, err = await router("prompt", "--daemon", daemon.url, "--store", str(store), "x")
    assert code == 2 and err.startswith("router prompt: no-daemon-token: ")
    code, _, err = await router("transcript", "--store", str(tmp_path / "none.db"))
    assert code == 2 and err.startswith("router transcript: no-store: ")
    code, _, err = await router("transcript", "--store", str(store), "--session", "nobody")
    assert code == 2 and err.startswith("router transcript: unknown-session: ")
    # A --store that cannot be a store is a usage error (2), not a crash
    # (whose exit status, 1, would read as "unanswered").
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("hello\n" * 100)
    code, out, err = await router(*prompt_args(daemon, not_a_store, "x"))
    assert (code, out) == (2, "") and err.startswith("router prompt: bad-store: ")
    code, _, err = await router(*prompt_args(daemon, tmp_path / "missing" / "host.db", "x"))
    assert code == 2 and err.startswith("router prompt: bad-store: ")
    code, _, err = await router("transcript", "--store", str(not_a_store))
    assert code == 2 and err.startswith("router transcript: bad-store: ")
