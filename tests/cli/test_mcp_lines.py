"""``router mcp`` answers every request that has an id, and never a
notification, whatever the line (router.mcp_wire, JSON-RPC 2.0 sections 4
and 5.1): the line check on its own under hypothesis, then hostile lines
against the real ``router mcp`` process, each followed by a ``ping`` that
marks where its answers end."""

from __future__ import annotations

import json
import select
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.mcp_wire import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, check_line
from tests.api.processes import REPO, ROUTER, environment

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner,
                                                                                            max_size=3), max_leaves=8)
SURROGATE = st.sampled_from(["\ud800", "a\udfffb", "\udc00x"])
METHODS = st.sampled_from(["ping", "tools/list", "tools/call", "no/such", "resources/list"])
TOOLS = st.sampled_from(["list_sessions", "read_messages", "abort", "limits_report", "nope"])
TRAILERS = st.sampled_from([b"", b"\x00", b" \x00", b"x", b"}", b"\r", b"\t "])


@st.composite
def hostile(draw: Any, *, with_id: bool | None = None) -> tuple[bytes, Any]:
    """A line and the id it carries (None: a notification)."""
    message: dict[str, Any] = {}
    if draw(st.integers(0, 9)) > 0:
        message["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "1.0", 2, None]))
    if draw(st.integers(0, 9)) > 0:
        message["method"] = draw(METHODS | JSON)
    shape = draw(st.integers(0, 5))
    if shape == 1:
        message["params"] = draw(JSON)
    elif shape == 2:
        message["params"] = {"name": draw(TOOLS), "arguments": draw(st.dictionaries(st.text(max_size=8), JSON,
                                                                                    max_size=3))}
    elif shape == 3:
        message["params"] = {"name": draw(TOOLS), "arguments": {"session": draw(SURROGATE)}}
    elif shape == 4:
        message["params"] = draw(st.lists(JSON, max_size=2) | st.text() | st.integers())
    request_id = None
    if with_id if with_id is not None else draw(st.booleans()):
        request_id = draw(st.integers(1, 10**9) | st.text(min_size=1, max_size=8).filter(
            lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)))
        message["id"] = request_id
    if not message.get("method") and "jsonrpc" in message and draw(st.booleans()):
        message.pop("method", None)
    line = json.dumps(message, ensure_ascii=True).encode() + draw(TRAILERS)
    return line, request_id


@given(hostile())
@settings(max_examples=400, deadline=None)
def test_the_line_check_answers_every_request_and_no_notification(drawn: tuple[bytes, Any]) -> None:
    line, request_id = drawn
    checked = check_line(line)
    assert (checked.forward is None) or (checked.answer is None)
    if request_id is None:
        assert checked.answer is None  # a notification is never answered
        return
    if checked.forward is not None:
        # Handed on only when the SDK reads it as a request it answers.
        message = json.loads(checked.forward)
        assert message["jsonrpc"] == "2.0" and type(message["method"]) is str
        assert type(message.get("params", {})) is dict
        checked.forward.encode("utf-8")  # no lone surrogate
        return
    assert checked.answer is not None
    answer = json.loads(checked.answer)
    assert answer["id"] == request_id and answer["jsonrpc"] == "2.0"
    assert answer["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS)
    assert answer["error"]["message"].startswith("bad-request: ")


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_the_line_check_never_raises(line: bytes) -> None:
    checked = check_line(line)
    if checked.answer is not None:
        assert json.loads(checked.answer)["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS)


# --------------------------------------------------------------------------- the real process


class Mcp:
    """A ``router mcp`` process, spoken to one line at a time (unbuffered,
    so ``select`` sees every byte not yet read)."""

    def __init__(self, tmp: Path) -> None:
        self.process = subprocess.Popen(
            [*ROUTER, "mcp", "--data-dir", str(tmp / "data"), "--settings", str(tmp / "settings")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp / "mcp.stderr", "wb"), cwd=REPO, bufsize=0,
            env=environment())
        self.marks = 0

    def write(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def read(self, timeout: float = 60) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        assert ready, "router mcp answered nothing"
        line = self.process.stdout.readline()
        assert line, "router mcp closed its stdout"
        return json.loads(line)

    def answers_to(self, line: bytes, request_id: Any = None) -> list[dict[str, Any]]:
        """Every answer ``line`` gets: what comes before the answer to the
        ``ping`` sent right after it, and, for a request (``request_id``),
        until its own answer. JSON-RPC lets a server answer in any order: a
        ``tools/call`` runs as a task while the ``ping`` is answered at once.
        An answer that came late to a notification shows up among a later
        line's answers, where its id is wrong."""
        self.marks += 1
        mark = f"mark-{self.marks}"
        self.write(line)
        self.write(json.dumps({"jsonrpc": "2.0", "id": mark, "method": "ping"}).encode())
        got: list[dict[str, Any]] = []
        marked = False
        while not (marked and (request_id is None or any(answer.get("id") == request_id for answer in got))):
            answer = self.read()
            if answer.get("id") == mark:
                marked = True
            else:
                got.append(answer)
        return got

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mcp]:
    server = Mcp(tmp_path_factory.mktemp("mcp"))
    try:
        server.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode())
        assert server.read()["id"] == 0
        server.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield server
    finally:
        server.close()


#: Each line the SDK alone dropped unanswered, and the error it gets now.
CASES = [
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}', 1, INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":"x"}', 2, INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_messages","arguments":'
     b'{"session":"\\ud800"}}}', 3, INVALID_PARAMS),
    (b'{"jsonrpc":"1.0","id":4,"method":"tools/list"}', 4, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":5}', 5, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":6,"method":"tools/list"}\x00', 6, PARSE_ERROR),
    (b"not json", None, PARSE_ERROR),
    (b"\xff\xfe", None, PARSE_ERROR),
    (b"[1, 2]", None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":9,"method":"no/such"}', 9, -32601),
]


@pytest.mark.parametrize(("line", "request_id", "code"), CASES)
def test_router_mcp_answers_each_request_once(mcp: Mcp, line: bytes, request_id: Any, code: int) -> None:
    answers = mcp.answers_to(line, request_id)
    assert len(answers) == 1, answers
    assert answers[0]["id"] == request_id and answers[0]["error"]["code"] == code, answers


def test_router_mcp_never_answers_a_notification(mcp: Mcp) -> None:
    for line in (b'{"jsonrpc":"2.0","method":"no/such"}', b'{"jsonrpc":"1.0","method":"x","params":[]}',
                 b'{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\\ud800"}}', b'{"method":1}\x00'):
        assert mcp.answers_to(line) == []


@given(hostile())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_router_mcp_under_hostile_lines(mcp: Mcp, drawn: tuple[bytes, Any]) -> None:
    line, request_id = drawn
    answers = mcp.answers_to(line, request_id)
    if request_id is None:
        assert answers == []
    else:
        assert [answer["id"] for answer in answers] == [request_id], answers
    assert mcp.process.poll() is None
