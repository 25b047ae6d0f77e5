"""The board with real processes: ``router serve`` behind its token, two
routers on one board (``GET /sessions``, ``GET /board/live``), a send and an
abort forwarded to the router that holds the session, the CLI's outputs and
exit statuses, ``router serve --daemon`` checking its daemon, the MCP tools,
and a token limit tried on the main job with the echo's usage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import pytest
import trio

from tests.api.processes import REPO, ROUTER, Served, environment, serve
from tests.plugins.test_broker import searxng  # noqa: F401  (the fixture)
from tests.support.daemons import spawn_daemon


async def router(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """``router ARGS``: exit status, stdout, stderr (text)."""
    done = await trio.run_process([*ROUTER, *args], stdin=stdin, capture_stdout=True, capture_stderr=True,
                                  check=False, env=environment(), cwd=REPO)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Server-sent events, each as ``{id?, event?, data}`` (data as JSON)."""
    event: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in event:
                yield event
            event = {}
            continue
        field, _, value = line.partition(": ")
        event[field] = json.loads(value) if field == "data" else value


async def wait_for_state(served: Served, session: str, state: str) -> None:
    """Until ``served``'s router lists ``session`` in ``state`` (another
    process's state: polled, bounded)."""
    async with served.client() as client:
        with trio.fail_after(60):
            while True:
                listed = (await client.get("/sessions", params={"scope": "router"})).json()["sessions"]
                if any(item["id"] == session and item["state"] == state for item in listed):
                    return
                await trio.sleep(0.05)


# --------------------------------------------------------------------------- access


async def test_the_tcp_api_takes_the_token_and_keeps_it(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        token_file = tmp_path / "settings" / "api-token"
        assert os.stat(token_file).st_mode & 0o777 == 0o600
        assert token_file.read_text().strip() == served.token
        assert served.page == f"{served.url}/?token={served.token}"  # from the 0600 page-url file
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as bare:
            for headers, status, code in [
                ({}, 401, "no-token"),
                ({"authorization": "Bearer wrong-token-wrong-token"}, 401, "bad-token"),
                ({"authorization": f"Bearer {served.token}", "host": "evil.example:80"}, 421, "bad-host"),
            ]:
                for method, route in [("GET", "/sessions"), ("POST", "/sessions/root/messages"),
                                      ("GET", "/board/live")]:
                    answer = await bare.request(method, route, headers=headers, json={"text": "hi"})
                    assert answer.status_code == status and answer.json()["error"] == code, (route, answer.text)
                    assert answer.json()["message"]
            assert (await bare.get("/")).status_code == 200  # the page: no data
        async with served.client() as client:
            assert (await client.get("/sessions/root/messages")).json()["messages"] == []  # nothing got in
        # `router send --url` reads the token file of --settings ...
        status, out, err = await router("send", "root", "hi", "--url", served.url, "--settings",
                                        str(tmp_path / "settings"))
        assert status == 0 and out == "echo: hi (turn 1)\n", err
        # ... or takes --token; a wrong one is a usage error (2).
        status, out, err = await router("send", "root", "hi", "--url", served.url, "--token", "not-it-not-it-not-it")
        assert status == 2 and out == "" and "bad-token" in err
    async with serve(tmp_path, name="again") as again:
        assert again.token == served.token  # reused, so an open page keeps working


async def test_a_token_file_that_is_not_private_is_refused(tmp_path: Path) -> None:
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "api-token").write_text("a" * 43 + "\n")
    (settings / "api-token").chmod(0o644)
    done = await trio.run_process(
        [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--settings", str(settings)],
        capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
    )
    assert done.returncode == 2 and done.stdout == b""
    assert b"token-file-unsafe" in done.stderr and b"0644" in done.stderr and b"chmod 600" in done.stderr


# --------------------------------------------------------------------------- the board


def _where(listed: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(item["router"]["name"], item["id"]): item for item in listed}


async def _name(served: Served) -> str:
    async with served.client() as client:
        listed = (await client.get("/sessions", params={"scope": "router"})).json()["sessions"]
    return listed[0]["router"]["name"]


async def test_two_routers_are_one_board_and_forward_to_each_other(tmp_path: Path) -> None:
    for each in ("one", "two"):
        (tmp_path / each).mkdir()
    async with serve(tmp_path / "one", name="one") as one, serve(tmp_path / "two", name="two") as two, \
            one.client() as via_one, two.client() as via_two:
        assert (await via_one.post("/sessions", json={"id": "alpha"})).status_code == 201
        assert (await via_two.post("/sessions", json={"id": "beta"})).status_code == 201
        first, second = await _name(one), await _name(two)

        # Either router's GET /sessions is the whole board.
        for client in (via_one, via_two):
            answer = (await client.get("/sessions")).json()
            assert "skipped" not in answer
            board = _where(answer["sessions"])
            assert set(board) == {(first, "root"), (first, "alpha"), (second, "root"), (second, "beta")}
            for item in board.values():
                assert item["kind"] == "container" and item["state"] == "idle" and item["harness"] == "echo"
                assert item.get("model") == ("echo" if item["id"] != "root" else None)
                assert type(item["lastActivity"]) is int and item["lastActivity"] > 1_700_000_000_000
            assert board[(second, "beta")]["router"]["pid"] == two.process.pid

        # A send through one for two's session is forwarded, once by event id.
        sent = await via_one.post("/sessions/beta/messages", json={"text": "via one", "eventId": "f1", "wait": True})
        assert sent.status_code == 200, sent.text
        assert sent.json()["reply"]["text"] == "echo: via one (turn 1)" and sent.json()["fromRecord"] is False
        again = await via_one.post("/sessions/beta/messages", json={"text": "via one", "eventId": "f1", "wait": True})
        assert again.json()["fromRecord"] is True and again.json()["reply"] == sent.json()["reply"]
        held = (await via_two.get("/sessions/beta/messages")).json()["messages"]
        assert [m["id"] for m in held] == ["f1:user", "f1:assistant"]
        # Reading it through one is forwarded too: the messages, and the live view as it streams.
        assert (await via_one.get("/sessions/beta/messages")).json()["messages"] == held
        async with via_one.stream("GET", "/sessions/beta/live", timeout=None) as live:
            assert live.status_code == 200 and live.headers["content-type"].startswith("text/event-stream")
            stream = events(live)
            with trio.fail_after(60):
                snapshot = await stream.__anext__()
                assert snapshot["data"]["type"] == "snapshot"
                assert [m["id"] for m in snapshot["data"]["messages"]] == ["f1:user", "f1:assistant"]
                assert (await via_two.post("/sessions/beta/messages", json={"text": "live", "eventId": "f2"})).status_code == 200
                async for event in stream:
                    if event["data"].get("type") == "message" and event["data"]["message"]["id"] == "f2:assistant":
                        break
        refused = await via_one.get("/sessions/nowhere/live")
        assert refused.status_code == 404 and refused.json()["error"] == "unknown-session"
        # Each has a root: this router's own, unless another is named.
        named = await via_one.post("/sessions/root/messages", params={"router": second},
                                   json={"text": "to two's root", "eventId": "r1", "wait": True})
        assert named.json()["reply"]["text"] == "echo: to two's root (turn 1)"
        assert (await via_one.get("/sessions/root/messages")).json()["messages"] == []
        refused = await via_one.post("/sessions/root/messages", params={"router": "serve-1-none"},
                                     json={"text": "x", "eventId": "r2"})
        assert refused.status_code == 404 and refused.json()["error"] == "unknown-router"
        assert refused.json()["eventId"] == "r2"

        # An abort through two for one's session is forwarded too.
        slow = await via_two.post("/sessions/alpha/messages", json={"text": "slow 60000 long", "eventId": "s1"})
        assert slow.status_code == 200 and slow.json()["status"] == "delivered", slow.text
        await wait_for_state(one, "alpha", "working")
        aborted = await via_two.post("/sessions/alpha/abort", json={})
        assert aborted.status_code == 200 and aborted.json() == {"session": "alpha", "aborted": True}, aborted.text
        settled = await via_two.post("/sessions/alpha/messages",
                                     json={"text": "slow 60000 long", "eventId": "s1", "wait": True})
        assert settled.json()["reply"]["status"] == "unanswered" and settled.json()["reply"]["reason"] == "aborted"

        # A resume is forwarded: alpha was never stopped.
        resumed = await via_two.post("/sessions/alpha/resume", json={})
        assert resumed.json() == {"session": "alpha", "resumed": False}


async def test_the_board_live_stream_shows_a_session_created_anywhere(tmp_path: Path) -> None:
    for each in ("one", "two"):
        (tmp_path / each).mkdir()
    async with serve(tmp_path / "one", name="one") as one, serve(tmp_path / "two", name="two") as two, \
            one.client(timeout=None) as via_one, two.client() as via_two:
        second = await _name(two)
        async with via_one.stream("GET", "/board/live") as live:
            assert live.headers["content-type"].startswith("text/event-stream")
            stream = events(live)
            with trio.fail_after(60):
                snapshot = await stream.__anext__()
            assert snapshot["event"] == "snapshot" and snapshot["id"].endswith("-1")
            assert {(s["router"]["name"], s["id"]) for s in snapshot["data"]["sessions"]} >= {(second, "root")}
            assert (await via_two.post("/sessions", json={"id": "gamma"})).status_code == 201
            with trio.fail_after(60):
                async for event in stream:
                    if event["event"] == "session-added" and event["data"]["session"]["id"] == "gamma":
                        break
            assert event["data"]["session"]["router"]["name"] == second and event["data"]["session"]["state"] == "idle"
            # A send makes gamma work, then idle: both seen as changes.
            sent = await via_two.post("/sessions/gamma/messages", json={"text": "slow 1500 hi", "eventId": "g1"})
            assert sent.status_code == 200
            states = []
            with trio.fail_after(60):
                async for event in stream:
                    if event["event"] == "session-changed" and event["data"]["session"]["id"] == "gamma":
                        states.append(event["data"]["session"]["state"])
                        if states[-1] == "idle" and "working" in states:
                            break
        # A reconnection (Last-Event-ID) gets the reset, then a fresh snapshot.
        async with via_one.stream("GET", "/board/live", headers={"last-event-id": snapshot["id"]}) as live:
            stream = events(live)
            with trio.fail_after(60):
                reset, fresh = await stream.__anext__(), await stream.__anext__()
        assert reset["event"] == "reset" and reset["data"]["lastEventId"] == snapshot["id"]
        assert fresh["event"] == "snapshot"
        assert (second, "gamma") in {(s["router"]["name"], s["id"]) for s in fresh["data"]["sessions"]}


async def test_a_sessions_row_follows_its_record_and_is_kept_while_it_does_not_change(tmp_path: Path) -> None:
    """The board keeps each row between listings (router/board/kept.py) and
    reads the record once per listing: a turn's write shows at once in
    ``lastActivity``, and a listing with nothing changed answers the same."""
    async with serve(tmp_path) as served, served.client() as client:
        assert (await client.post("/sessions", json={"id": "kept"})).status_code == 201

        async def row() -> dict[str, Any]:
            listed = (await client.get("/sessions")).json()["sessions"]
            [item] = [item for item in listed if item["id"] == "kept"]
            return item

        first = await row()
        assert type(first["lastActivity"]) is int and first["state"] == "idle"
        assert await row() == first
        sent = await client.post("/sessions/kept/messages", json={"text": "hi", "eventId": "k1", "wait": True})
        assert sent.status_code == 200
        after = await row()  # no wait: the record's write is read by this listing
        assert after["lastActivity"] > first["lastActivity"] and after["state"] == "idle"
        assert "daemon" in after  # its first turn started its daemon: the row says so
        assert await row() == after


# --------------------------------------------------------------------------- the CLI


async def test_send_and_abort_outputs_and_exit_statuses(tmp_path: Path) -> None:
    status, out, err = await router("--version")
    assert status == 0 and out.startswith("router ") and out.strip() != "router"
    status, out, err = await router("abort", "root")
    assert status == 2 and out == "" and "no-router" in err
    async with serve(tmp_path) as served:
        status, out, err = await router("send", "root", "hello")
        assert (status, out) == (0, "echo: hello (turn 1)\n"), err
        # From stdin ('-' or no TEXT): the trailing newline is not the message's.
        status, out, err = await router("send", "root", "-", stdin=b"from stdin\n")
        assert (status, out) == (0, "echo: from stdin (turn 2)\n"), err
        status, out, err = await router("send", "root", stdin=b"two lines\nof it\r\n")
        assert (status, out) == (0, "echo: two lines\nof it (turn 3)\n"), err
        status, out, err = await router("send", "root", "as json", "--json", "--event-id", "j1")
        assert status == 0 and json.loads(out)["reply"]["text"] == "echo: as json (turn 4)"
        status, out, err = await router("send", "root", "as json", "--event-id", "j1")
        assert status == 0 and out == "echo: as json (turn 4)\n"  # the record's answer
        status, out, err = await router("send", "root", "quick", "--no-wait", "--event-id", "q1")
        assert status == 0 and out.startswith("delivered to root as operation q1")
        # --card means nothing to a container session.
        status, out, err = await router("send", "root", "a card", "--card")
        assert status == 2 and out == "" and "card-meaningless" in err
        status, out, err = await router("send", "root", "a card", "--card", "--url", served.url, "--token",
                                        served.token)
        assert status == 2 and out == "" and "card-meaningless" in err
        # Refusals go to stderr (and as JSON to stdout with --json only).
        status, out, err = await router("send", "root", "fail on purpose", "--event-id", "x1")
        assert status == 1 and out == "" and "unanswered: on purpose" in err
        status, out, err = await router("send", "nowhere", "hi")
        assert status == 1 and out == "" and "unknown-session" in err
        status, out, err = await router("send", "nowhere", "hi", "--json")
        assert status == 1 and json.loads(out)["error"] == "unknown-session" and "unknown-session" in err
        status, out, err = await router("send", "root", "other words", "--event-id", "j1")
        assert status == 1 and out == "" and "event-id-conflict" in err
        # router abort: nothing running, then a slow turn stopped.
        status, out, err = await router("abort", "root", "no-such-operation")
        assert (status, out) == (1, "") and err.startswith("router abort: unknown-operation: "), err
        status, out, err = await router("send", "root", "slow 60000 long", "--no-wait", "--event-id", "s1")
        assert status == 0, err
        await wait_for_state(served, "root", "working")
        status, out, err = await router("abort", "root", "s1", "--json")
        assert status == 0 and json.loads(out) == {"session": "root", "aborted": True, "operationId": "s1"}, err
        status, out, err = await router("send", "root", "slow 60000 long", "--event-id", "s1")
        assert status == 1 and "unanswered: aborted" in err
        status, out, err = await router("abort", "nowhere")
        assert status == 1 and out == "" and "unknown-session" in err
        status, out, err = await router("abort", "root", "--url", served.url, f"--token={served.token}")
        assert (status, out) == (0, "stopped every open operation of root (if any ran)\n"), err
        # The cli channel switched off: 3.
        (tmp_path / "settings" / "plugins.json").write_text(
            json.dumps({"plugins": {"harness": ["echo"], "channel": ["webui"]}, "options": {}}))
        status, out, err = await router("send", "root", "hi")
        assert status == 3 and out == "" and "channel-off" in err


# --------------------------------------------------------------------------- router serve --daemon


async def test_serve_checks_its_daemon_before_it_starts(tmp_path: Path) -> None:
    async def serve_with(*args: str, token: str = "t") -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--settings",
             str(tmp_path / "settings"), *args],
            capture_stdout=True, capture_stderr=True, check=False, env=environment({"ROUTER_DAEMON_TOKEN": token}),
            cwd=REPO,
        )

    nothing = await serve_with("--daemon", "ws://127.0.0.1:1")
    assert nothing.returncode == 2 and nothing.stdout == b""
    assert b"daemon-check-failed" in nothing.stderr and b"daemon-unreachable" in nothing.stderr
    bad_url = await serve_with("--daemon", "ftp://127.0.0.1:1")
    assert bad_url.returncode == 2 and bad_url.stdout == b"" and b"bad-daemon-url" in bad_url.stderr
    async with spawn_daemon("ours", token="the-right-token") as daemon:
        wrong = await serve_with("--daemon", daemon.url, token="a-wrong-token")
        assert wrong.returncode == 2 and wrong.stdout == b""
        assert b"daemon-check-failed" in wrong.stderr and b"unauthorized" in wrong.stderr
        async with serve(tmp_path, "--daemon", daemon.url, env={"ROUTER_DAEMON_TOKEN": "the-right-token"}) as served:
            status, out, err = await router("send", "root", "through the daemon")
            assert (status, out) == (0, "echo: through the daemon (turn 1)\n"), err
            assert "daemon ws://127.0.0.1:" in served.log() and "protocol 1" in served.log()


# --------------------------------------------------------------------------- MCP


def _mcp(tmp_path: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "router", "mcp", "--data-dir", str(tmp_path / "mcp"), "--settings", str(tmp_path / "settings")],
        env=environment(),
        cwd=str(REPO),
    )


async def _call(client: Any, name: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    result = await client.call_tool(name, arguments)
    text = result.content[0].text
    return result.is_error, (text if result.is_error else json.loads(text))


async def test_the_mcp_tools_on_the_board(tmp_path: Path, searxng: Any) -> None:  # noqa: F811
    from mcp import Client

    (tmp_path / "settings").mkdir()
    (tmp_path / "settings" / "plugins.json").write_text(json.dumps({
        "plugins": {"harness": ["echo"], "usage-source": ["frames"], "limit-check": ["token-limit"],
                    "search-source": "searxng-url", "channel": ["cli", "webui"]},
        "options": {"search-source": {"searxng-url": {"url": searxng.url}}},
    }))
    async with serve(tmp_path) as served, Client(_mcp(tmp_path)) as client:
        error, listed = await _call(client, "list_sessions", {})
        assert not error
        [root] = listed["sessions"]  # router serve's root; the embedded router's is not on the board
        assert root["id"] == "root" and root["router"]["command"] == "serve" and root["harness"] == "echo"
        # A send to root goes to the router that lists it, once by event id.
        error, sent = await _call(client, "send_message", {"session": "root", "text": "from mcp", "event_id": "m1",
                                                           "wait": True})
        assert not error and sent["reply"]["text"] == "echo: from mcp (turn 1)", sent
        error, again = await _call(client, "send_message", {"session": "root", "text": "from mcp", "event_id": "m1"})
        assert not error and again["fromRecord"] is True
        error, read = await _call(client, "read_messages", {"session": "root"})
        assert not error and [m["id"] for m in read["messages"]] == ["m1:user", "m1:assistant"]
        async with served.client() as http:
            held = (await http.get("/sessions/root/messages")).json()["messages"]
        assert [m["id"] for m in held] == ["m1:user", "m1:assistant"]
        error, aborted = await _call(client, "abort", {"session": "root"})
        assert not error and aborted == {"session": "root", "aborted": True}  # with no id, always (the reference)
        error, refused = await _call(client, "abort", {"session": "nowhere"})
        assert error and refused.startswith("unknown-session: ")
        error, refused = await _call(client, "send_message", {"session": "root", "text": "x",
                                                              "router": "serve-1-none"})
        assert error and refused.startswith("unknown-router: ")
        # A second router serve: two roots on the board, and `root` must be named.
        (tmp_path / "other").mkdir()
        async with serve(tmp_path / "other", name="other") as other:
            other_name = await _name(other)
            error, listed = await _call(client, "list_sessions", {})
            assert sorted(s["router"]["pid"] for s in listed["sessions"]) == sorted(
                [served.process.pid, other.process.pid])
            error, refused = await _call(client, "send_message", {"session": "root", "text": "which?"})
            assert error and refused.startswith("ambiguous-session: ") and other_name in refused
            error, sent = await _call(client, "send_message", {"session": "root", "text": "to the other",
                                                               "router": other_name, "wait": True})
            assert not error and sent["reply"]["text"] == "echo: to the other (turn 1)", sent
        # The plug-in layer's tools.
        error, found = await _call(client, "web_search", {"query": "structured concurrency"})
        assert not error and [r["title"] for r in found["results"]] == ["Trio", "Nurseries"]
        error, refused = await _call(client, "web_search", {"query": ""})
        assert error and refused.startswith("bad-arguments: ")
        error, report = await _call(client, "limits_report", {})
        assert not error and report == {"report": []}  # no limits set


# --------------------------------------------------------------------------- a limit on the main job


async def test_a_token_limit_stops_a_session_of_router_serve(tmp_path: Path) -> None:
    """The echo reports words as tokens: ``hi`` is 1 in, ``echo: hi (turn
    n)`` 4 out; a limit of 12 is reached by the third turn (5, 10, 15)."""
    settings = str(tmp_path / "settings")
    async with serve(tmp_path) as served:
        status, out, err = await router("limits", "--settings", settings, "--json")
        assert status == 0, err
        patch = tmp_path / "patch.json"
        patch.write_text(json.dumps({"revision": json.loads(out)["revision"],
                                     "limits": {"tokens": {"instances": {"default": {"limit": 12}}}}}))
        status, out, err = await router("limits", "--settings", settings, "set", "--file", str(patch))
        assert status == 0, err
        for n in (1, 2, 3):
            status, out, err = await router("send", "root", "hi")
            assert (status, out) == (0, f"echo: hi (turn {n})\n"), err
        await wait_for_state(served, "root", "stopped")
        status, out, err = await router("send", "root", "hi")
        assert status == 1 and out == "" and "session-stopped" in err and "limit 12 count 15" in err
        status, out, err = await router("limits", "--settings", settings, "--records",
                                        str(tmp_path / "data" / "usage.jsonl"), "--json")
        [entry] = json.loads(out)["report"]
        assert entry["status"] == "counted" and entry["count"] == 15
        assert entry["kinds"] == {"input": 3, "output": 12, "cache_creation": 0, "cache_read": 0}


async def test_send_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    """stderr a terminal (a pseudo-terminal here): a line saying how long it
    has waited, cleared at the end; stdout still gets the answer alone."""
    import pty

    async with serve(tmp_path):
        controller, terminal = pty.openpty()
        try:
            done = await trio.run_process([*ROUTER, "send", "root", "slow 2500 patience"], stderr=terminal,
                                          capture_stdout=True, check=False, env=environment(), cwd=REPO)
            os.close(terminal)
            terminal = -1
            shown = b""
            while True:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the terminal's other end is closed and drained
                    break
                if not chunk:
                    break
                shown += chunk
        finally:
            os.close(controller)
            if terminal != -1:
                os.close(terminal)
        assert done.returncode == 0 and done.stdout == b"echo: patience (turn 1)\n"
        assert b"router send: waiting for root (0 s)" in shown and shown.endswith(b"\r\x1b[K")
        status, out, err = await router("send", "root", "slow 1500 piped")  # stderr not a terminal: quiet
        assert status == 0 and err == "" and out == "echo: piped (turn 2)\n"


async def test_a_holder_that_dies_mid_send_is_holder_unreachable(tmp_path: Path) -> None:
    """The router the send was forwarded to is killed while it waits for
    the reply: the forwarding router answers 503 ``holder-unreachable``
    with the event id (resend it), and goes on."""
    import signal

    for each in ("one", "two"):
        (tmp_path / each).mkdir()
    async with serve(tmp_path / "one", name="one") as one, serve(tmp_path / "two", name="two") as two, \
            one.client(timeout=None) as via_one, two.client() as via_two:
        assert (await via_two.post("/sessions", json={"id": "beta"})).status_code == 201
        answers: list[httpx.Response] = []

        async def slow_send() -> None:
            answers.append(await via_one.post("/sessions/beta/messages",
                                              json={"text": "slow 60000 long", "eventId": "d1", "wait": True}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_send)
            await wait_for_state(two, "beta", "working")
            two.process.send_signal(signal.SIGKILL)
        [answer] = answers
        assert answer.status_code == 503 and answer.json()["error"] == "holder-unreachable"
        assert answer.json()["eventId"] == "d1" and "resend" in answer.json()["message"]
        # One goes on: its board no longer lists two's sessions.
        listed = (await via_one.get("/sessions")).json()["sessions"]
        assert {item["router"]["pid"] for item in listed} == {one.process.pid}
