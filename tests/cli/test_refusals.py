"""docs/cli.md's table of refusals, checked against the code: every code
is one the source says; the HTTP commands' exit statuses are the ones
``router.turns.cli.exit_status`` (and the board's ``NO_ROUTER``) give;
every code those treat as a usage error is in the table; and the rows
with a trigger below are run, their stderr line read."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import trio

from router.board.client import NO_ROUTER
from router.turns.cli import USAGE_CODES, exit_status
from tests.api.processes import REPO, ROUTER, environment, serve

TABLE_HEAD = "| commands | code | exit | when |"
#: The commands that post to a router's API (their refusals go through exit_status).
HTTP_COMMANDS = {"send", "abort", "resume", "cancel-park", "launch"}
#: Codes these commands decide themselves, not from a router's answer.
DECIDED_HERE = {"ambiguous-router", "card-meaningless", "timeout", "unanswered", "unknown-operation"}


def table() -> list[tuple[set[str], str, int]]:
    text = (REPO / "docs" / "cli.md").read_text()
    lines = text[text.index(TABLE_HEAD):].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        commands, code, status, _ = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append(({each.strip() for each in commands.split(",")}, code.strip("`"), int(status)))
    return rows


def source() -> str:
    return "\n".join(path.read_text() for path in (REPO / "router").rglob("*.py"))


def test_the_table_is_read() -> None:
    rows = table()
    assert len(rows) > 30 and all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", code) for _, code, _ in rows)


@pytest.mark.parametrize(("commands", "code", "status"), table(), ids=lambda value: str(value))
def test_each_code_is_the_codes(commands: set[str], code: str, status: int) -> None:
    assert re.search(rf"(?<![\w-]){re.escape(code)}(?![\w-])", source()), f"{code} is nowhere in router/"
    if commands & HTTP_COMMANDS and code not in DECIDED_HERE:
        expected = 2 if code in NO_ROUTER else exit_status(409, {"error": code})
        assert status == expected, f"{code}: docs/cli.md says {status}, the code exits {expected}"


def test_every_usage_code_is_in_the_table() -> None:
    documented = {code: status for _, code, status in table()}
    for code in USAGE_CODES | NO_ROUTER:
        assert documented.get(code) == 2, f"{code} is a usage error (2) the table does not list so"
    assert documented.get("channel-off") == 3


def triggers(tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """A command line that meets each code, with its environment."""
    missing = str(tmp / "nothing-here")
    api = {"ROUTER_TOKEN": "t" * 20}
    return {
        "cannot-connect": (["send", "x", "hi", "--url", "http://127.0.0.1:1"], api),
        "no-token-file": (["send", "x", "hi", "--url", "http://127.0.0.1:1", "--token-file", missing], {}),
        "token-twice": (["abort", "x", "--url", "http://127.0.0.1:1", "--token-file", missing, "--token", "t" * 20],
                        {}),
        "unknown-router": (["send", "x", "hi", "--router", f"nobody-{uuid.uuid4().hex[:8]}"], {}),
        "unknown-ask": (["answer", f"no-ask-{uuid.uuid4().hex[:8]}", "allow"], {}),
        "no-daemon-token": (["serve", "--port", "0", "--data-dir", str(tmp / "d"), "--settings", str(tmp / "s"),
                             "--daemon", "ws://127.0.0.1:1"], {}),
        "bad-daemon-url": (["prompt", "--daemon", "ftp://127.0.0.1:1", "--store", str(tmp), "hi"],
                           {"ROUTER_DAEMON_TOKEN": "t"}),
        "no-store": (["transcript", "--store", missing], {}),
    }


async def test_the_rows_with_a_trigger(tmp_path: Path) -> None:
    documented = {(command, code): status for commands, code, status in table() for command in commands}
    for code, (argv, env) in triggers(tmp_path).items():
        done = await trio.run_process([*ROUTER, *argv], capture_stdout=True, capture_stderr=True, check=False,
                                      env=environment(env), cwd=REPO)
        err = done.stderr.decode()
        assert (argv[0], code) in documented, f"router {argv[0]} {code} is not in docs/cli.md"
        assert done.returncode == documented[(argv[0], code)], (code, done.returncode, err)
        assert err.splitlines()[-1].startswith(f"router {argv[0]}: {code}: "), err
        assert "Traceback" not in err


async def test_a_whitespace_message_is_refused_at_the_router(tmp_path: Path) -> None:
    """``empty-message`` on every surface: the CLI and the API (the page's)
    both reach the router, which refuses it; an unknown path's sentence
    names the docs' routes, not the HTML page."""
    async with serve(tmp_path) as served:
        done = await trio.run_process([*ROUTER, "send", "root", " \t ", "--url", served.url], capture_stdout=True,
                                      capture_stderr=True, check=False,
                                      env=environment({"ROUTER_TOKEN": served.token}), cwd=REPO)
        assert done.returncode == 1 and done.stderr.decode().startswith("router send: empty-message: ")
        async with served.client() as client:
            answer = await client.post("/sessions/root/messages", json={"text": "\n \n", "eventId": "w1"})
            assert answer.status_code == 400 and answer.json()["error"] == "empty-message"
            missing = await client.get("/no-such-route")
            assert missing.status_code == 404 and "see GET /" not in missing.json()["message"]
            assert "docs/turns.md" in missing.json()["message"]
