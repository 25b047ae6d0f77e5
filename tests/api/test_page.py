"""The page at ``/``: its script parses (``node --check``), it sets text and
never HTML (an answer's Markdown comes rendered and sanitized by the server,
``tests/api/test_shell.py``, and is copied through an allow-list), and its
deciding parts (``page.js``: the server-sent events parser, the outbox of
pending sends, what an answer means, what a session waits on, the board's
order) do what they say, run in node. The whole page in a browser is
``tests/browser/``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from router.api.page import PAGE, SCRIPT
from tests.support.npm import node_binary

PAGE_JS = Path(__file__).resolve().parents[2] / "router" / "api" / "page.js"


def node(body: str) -> Any:
    """Run ``body`` in node with page.js's exports in scope; the JSON it
    prints with ``out(value)``."""
    program = (
        f"const page = require({json.dumps(str(PAGE_JS))});\n"
        "const out = (value) => process.stdout.write(JSON.stringify(value));\n" + body
    )
    done = subprocess.run([node_binary(), "-e", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_script_parses(tmp_path: Path) -> None:
    path = tmp_path / "page.js"
    path.write_text(SCRIPT)
    done = subprocess.run([node_binary(), "--check", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_script_is_inline_whole_and_cannot_end_its_own_element() -> None:
    assert SCRIPT in PAGE and "/*PAGE_SCRIPT*/" not in PAGE
    assert "</script" not in SCRIPT.lower()


def test_the_page_never_parses_what_it_shows() -> None:
    assert "innerHTML" not in PAGE and "insertAdjacentHTML" not in PAGE and "document.write" not in PAGE
    assert "outerHTML" not in PAGE and "eval(" not in SCRIPT and "new Function" not in SCRIPT
    assert "textContent" in PAGE
    # The one parse: the server's sanitized Markdown, in an inert document,
    # copied through the allow-list.
    assert SCRIPT.count("parseFromString(") == 1 and "sanitizedNodes(parser.parseFromString(" in SCRIPT


def test_what_a_session_waits_on_in_words() -> None:
    got = node(
        "const now = 1796107200000;\n"
        "out([{state: 'waiting', ask: {tool: 'Bash', summary: 'rm -r x'}}, {state: 'working'}, {state: 'idle'},"
        " {state: 'stopped', stopped: {reason: 'tokens'}}, {state: 'unreachable'}].map((s) => page.waitsOn(s, now)));"
    )
    assert got == ["waiting on you: Bash · rm -r x", "working: the agent has the turn", "idle: waits for a message",
                   "stopped (tokens): waits for a resume", "unreachable: waits for its agent to come back"]


def test_the_board_puts_the_asks_waiting_on_you_first() -> None:
    got = node(
        "out(page.boardOrder([{id: 'a', state: 'idle'}, {id: 'b', state: 'waiting', ask: {id: '1'}},"
        " {id: 'c', state: 'working'}, {id: 'd', state: 'waiting'}]).map((s) => s.id));"
    )
    assert got == ["b", "d", "a", "c"]


def test_last_activity_in_words_and_the_blocked_notice() -> None:
    got = node(
        "const now = 1796107200000;\n"
        "out({times: [now - 10000, now - 300000, now - 7200000, undefined].map((t) => page.ago(t, now)),"
        " none: page.blockedText('no-token'), bad: page.blockedText('bad-token')});"
    )
    assert got["times"] == ["now", "5 min ago", "2 h ago", ""]
    assert "no access key" in got["none"] and "router serve" in got["none"]
    assert "revoked" in got["bad"] and "bad-token" in got["bad"]


def test_the_sse_parser_follows_the_rules_across_any_chunking() -> None:
    stream = "id: 1\ndata: {\"a\":1}\n\n: comment\nevent: snapshot\ndata: x\ndata: y\nid: 2\n\nid: 3\n\r\ndata: z\r\n\r\n"
    # Every way of cutting the stream into two chunks gives the same events.
    results = node(
        f"const s = {json.dumps(stream)}; const all = [];\n"
        "for (let cut = 0; cut <= s.length; cut++) { const got = [];\n"
        "  const p = new page.SseParser((e) => got.push(e)); p.feed(s.slice(0, cut)); p.feed(s.slice(cut));\n"
        "  all.push(got); }\nout(all);"
    )
    expected = [
        {"event": "message", "data": '{"a":1}', "id": "1"},
        {"event": "snapshot", "data": "x\ny", "id": "2"},
        {"event": "message", "data": "z", "id": "3"},
    ]
    assert all(events == expected for events in results), results[0]


def test_the_outbox_keeps_sends_until_they_are_answered() -> None:
    got = node(
        "const store = new Map(); const storage = { getItem: (k) => store.has(k) ? store.get(k) : null,"
        " setItem: (k, v) => store.set(k, v) };\n"
        "const box = new page.Outbox(storage);\n"
        "box.add('s1', 'hello', 'e1', 1); box.add('s2', 'other', 'e2', 2); box.tried('e1', 'offline');\n"
        "const again = new page.Outbox(storage);  // a reloaded page reads the same storage\n"
        "const before = again.all(); again.settle('e1'); const after = again.all(); const of = box.of('s2');\n"
        "storage.setItem(page.OUTBOX_KEY, 'not json'); const broken = again.all();\n"
        "out({before, after, of, broken});"
    )
    assert [(p["eventId"], p["tries"], p.get("note")) for p in got["before"]] == [("e1", 1, "offline"), ("e2", 0, None)]
    assert [p["eventId"] for p in got["after"]] == ["e2"] and [p["text"] for p in got["of"]] == ["other"]
    assert got["broken"] == []


@pytest.mark.parametrize(
    ("status", "body", "final", "words"),
    [
        (0, {}, False, "unreachable"),
        (503, {"error": "no-answer", "eventId": "e"}, False, "sent again"),
        (409, {"error": "session-stopped", "message": "a limit stopped it"}, True, "refused: session-stopped"),
        (200, {"status": "dropped", "reason": "busy"}, True, "dropped it: busy"),
        (200, {"status": "delivered", "as": "row"}, True, "written into the running turn"),
        (200, {"status": "delivered", "as": "prompt", "whenBusy": "steer"}, True, "steered into the running turn, if"),
        (200, {"status": "delivered", "as": "prompt", "whenBusy": "followUp"}, True, "queued as a follow-up, if"),
        (200, {"status": "delivered", "as": "prompt"}, True, "started as a prompt"),
        (200, {"status": "parked", "account": "default", "resetsAt": 1_796_107_200_000,
               "resumeAt": 1_796_107_205_000}, True, "kept: parked: the provider's usage limit of account default"),
    ],
)
def test_each_answer_is_told_in_words(status: int, body: dict, final: bool, words: str) -> None:
    outcome = node(f"out(page.outcomeText({status}, {json.dumps(body)}));")
    assert outcome["final"] is final and words in outcome["text"]


def test_a_park_is_told_with_its_reset_in_utc() -> None:
    text = node("out(page.parkedText({account: 'default', resetsAt: 1796107200000, resumeAt: 1796107205000}));")
    assert "resets" in text and "(06:40 UTC)" in text and "go in at about" in text


def test_the_board_state_of_a_session() -> None:
    states = node(
        "out([{state: 'parked'}, {stopped: {reason: 'x'}}, {busy: true}, {busy: false}].map(page.stateOf));"
    )
    assert states == ["parked", "stopped", "working", "idle"]


def test_the_board_follows_its_live_stream() -> None:
    got = node(
        "let board = [];\n"
        "const a = {id: 'root', router: {name: 'serve-1'}, state: 'idle'};\n"
        "const b = {id: 'root', router: {name: 'serve-2'}, state: 'idle'};\n"
        "board = page.applyBoard(board, {type: 'snapshot', sessions: [a]});\n"
        "board = page.applyBoard(board, {type: 'session-added', session: b});\n"
        "board = page.applyBoard(board, {type: 'session-changed', session: {...a, state: 'working'}});\n"
        "const changed = board.map((s) => s.router.name + ':' + s.state);\n"
        "board = page.applyBoard(board, {type: 'session-removed', session: {id: 'root', router: {name: 'serve-1'}}});\n"
        "board = page.applyBoard(board, {type: 'routers-skipped', skipped: []});\n"
        "out({changed, after: board.map((s) => s.router.name), keys: page.keyOf(a) !== page.keyOf(b)});"
    )
    assert got == {"changed": ["serve-1:working", "serve-2:idle"], "after": ["serve-2"], "keys": True}
