"""A tiny ACP agent for the ACP adapter's hostile and fault cases (standard
library only; newline-delimited JSON-RPC 2.0 on stdio, protocol version 1).

What each prompt does (its first word):

- ``tool``: a tool call, its completion, then text;
- ``ask``: a tool call and ``session/request_permission``; answers with the
  option it got (``selected allow`` / ``selected reject`` / ``cancelled``);
- ``slow``: waits for ``session/cancel`` and answers ``cancelled``;
- ``die``: says so on stderr and exits 3 mid-turn;
- ``garbage``: writes a line that is not JSON, a response to a request never
  made, a request of an unknown method, a ``session/update`` the schema
  refuses, then answers;
- ``flood N``: N text chunks, then answers;
- anything else: ``echo: <text> (turn N)`` in two chunks, with usage.

``FAKE_ACP_MODE=mute`` never answers ``initialize``. ``FAKE_ACP_STATE`` is
a directory where sessions are kept, so ``session/load`` in a new process
finds them (``loadSession`` is advertised).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid

STATE = os.environ.get("FAKE_ACP_STATE")
MODE = os.environ.get("FAKE_ACP_MODE", "")
_write_lock = threading.Lock()
_next_id = [1000]
_waiting: dict[int, dict] = {}
_events: dict[int, threading.Event] = {}
_cancelled = threading.Event()
sessions: dict[str, list[str]] = {}


def send(message: dict) -> None:
    with _write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def raw(line: str) -> None:
    with _write_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def update(session: str, update: dict) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}})


def chunk(session: str, text: str) -> None:
    update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def call(method: str, params: dict) -> dict:
    _next_id[0] += 1
    id = _next_id[0]
    event = threading.Event()
    _events[id] = event
    send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    event.wait()
    return _waiting.pop(id)


def history_path(session: str) -> str | None:
    return os.path.join(STATE, session + ".json") if STATE else None


def save(session: str) -> None:
    path = history_path(session)
    if path:
        with open(path, "w") as handle:
            json.dump(sessions[session], handle)


def prompt(id: int, params: dict) -> None:
    session = params["sessionId"]
    text = "".join(block.get("text", "") for block in params["prompt"] if block.get("type") == "text")
    history = sessions.setdefault(session, [])
    history.append(text)
    save(session)
    word = text.split(" ", 1)[0]
    stop = "end_turn"
    if word == "tool":
        update(session, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "List files", "kind": "execute",
                         "status": "pending", "rawInput": {"command": "ls"}})
        update(session, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
                         "content": [{"type": "content", "content": {"type": "text", "text": "a.txt"}}]})
        update(session, {"sessionUpdate": "plan", "entries": [
            {"content": "look", "priority": "high", "status": "completed"}]})
        chunk(session, "listed")
    elif word == "ask":
        update(session, {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Run rm", "kind": "execute",
                         "status": "pending", "rawInput": {"command": "rm x"}})
        answer = call("session/request_permission", {
            "sessionId": session,
            "toolCall": {"toolCallId": "t2", "title": "Run rm", "rawInput": {"command": "rm x"}},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "always", "name": "Always", "kind": "allow_always"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
        outcome = answer.get("result", {}).get("outcome", {})
        if outcome.get("outcome") == "selected":
            said = f"selected {outcome['optionId']}"
        else:
            said = "cancelled"
        if _cancelled.is_set():
            stop = "cancelled"
        update(session, {"sessionUpdate": "tool_call_update", "toolCallId": "t2",
                         "status": "completed" if said == "selected yes" else "failed"})
        chunk(session, said)
    elif word == "slow":
        chunk(session, "working")
        _cancelled.wait()
        stop = "cancelled"
    elif word == "die":
        chunk(session, "about to die")
        sys.stderr.write("dying on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    elif word == "garbage":
        raw("this is not json")
        send({"jsonrpc": "2.0", "id": 987654, "result": {}})
        reply = call("foo/bar", {})
        update(session, {"sessionUpdate": "tool_call", "toolCallId": 5})
        chunk(session, f"still here ({reply.get('error', {}).get('code')})")
    elif word == "flood":
        count = int(text.split()[1])
        for index in range(count):
            chunk(session, ".")
    else:
        chunk(session, f"echo: {text} ")
        chunk(session, f"(turn {len(history)})")
    _cancelled.clear()
    send({"jsonrpc": "2.0", "id": id, "result": {
        "stopReason": stop, "usage": {"totalTokens": 5, "inputTokens": 3, "outputTokens": 2}}})


def handle(message: dict) -> None:
    method = message.get("method")
    id = message.get("id")
    if method is None:
        if id in _events:
            _waiting[id] = message
            _events.pop(id).set()
        return
    params = message.get("params") or {}
    if method == "initialize":
        if MODE == "mute":
            return
        send({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": 1, "agentCapabilities": {"loadSession": bool(STATE)},
            "authMethods": [], "agentInfo": {"name": "fake-acp", "version": "1"}}})
    elif method == "session/new":
        session = uuid.uuid4().hex
        sessions[session] = []
        send({"jsonrpc": "2.0", "id": id, "result": {"sessionId": session}})
    elif method == "session/load":
        session = params["sessionId"]
        path = history_path(session)
        if not path or not os.path.exists(path):
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32002, "message": "Resource not found"}})
            return
        with open(path) as handle_:
            sessions[session] = json.load(handle_)
        for said in sessions[session]:
            update(session, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": said}})
            chunk(session, "replayed")
        send({"jsonrpc": "2.0", "id": id, "result": {}})
    elif method == "session/prompt":
        threading.Thread(target=prompt, args=(id, params), daemon=True).start()
    elif method == "session/cancel":
        _cancelled.set()
    elif id is not None:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
