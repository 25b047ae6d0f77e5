#!/usr/bin/env python3
"""A stand-in for an agent CLI, for the CLI adapter's tests. Standard library only.

It behaves like ``claude -p --output-format stream-json`` as far as the
adapter can tell: it reads the prompt from stdin, prints stream-json lines,
keeps a session file under ``$HOME/.claude/projects/<project>/<id>.jsonl``
(appending one line per turn), and refuses ``--resume <id>`` when that file
is missing, as Claude Code does ("No conversation found with session ID").

``FAKE_CLI_MODE`` picks the behaviour:

- ``answer`` (default): a session line, partial text deltas, the assistant
  message, the ``result`` line; the answer quotes the prompt and the number
  of turns in the session file.
- ``replay``: print the lines of the file ``FAKE_CLI_FIXTURE`` as they are.
- ``garbage``: like ``answer``, with lines that are not JSON among them.
- ``fail``: write to stderr and exit with status 3, printing nothing.
- ``hang``: print the session line and one delta, then wait; on ``SIGINT``
  print an interrupted ``result`` line and exit 0 (what Claude Code does).
- ``stubborn``: like ``hang``, but start a child ``sleep`` in its process
  group and ignore ``SIGINT``: only a kill ends it.

``FAKE_CLI_RECORD``, when set, names a file to which each run appends one
JSON line: argv, stdin, cwd, ``$HOME``, pid, child pid, and signals seen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

SESSION_DIR = os.path.join(os.environ.get("HOME", "."), ".claude", "projects", "-workspace")


def emit(value: dict) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def record(**fields: object) -> None:
    path = os.environ.get("FAKE_CLI_RECORD")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(fields) + "\n")


def option(name: str) -> str | None:
    argv = sys.argv[1:]
    if name in argv and argv.index(name) + 1 < len(argv):
        return argv[argv.index(name) + 1]
    return None


def main() -> int:
    mode = os.environ.get("FAKE_CLI_MODE", "answer")
    prompt = sys.stdin.read()
    base = dict(argv=sys.argv[1:], stdin=prompt, cwd=os.getcwd(), home=os.environ.get("HOME"), pid=os.getpid(), mode=mode)
    if mode == "fail":
        record(**base)
        sys.stderr.write("fake-cli: something went wrong\nfake-cli: giving up\n")
        return 3
    if mode == "replay":
        record(**base)
        with open(os.environ["FAKE_CLI_FIXTURE"]) as handle:
            for line in handle:
                sys.stdout.write(line)
        sys.stdout.flush()
        return 0

    resume = option("--resume")
    session = resume or str(uuid.uuid4())
    session_file = os.path.join(SESSION_DIR, f"{session}.jsonl")
    if resume and not os.path.exists(session_file):
        record(**base, refused=True)
        sys.stderr.write(f"No conversation found with session ID: {resume}\n")
        return 1
    os.makedirs(SESSION_DIR, exist_ok=True)
    with open(session_file, "a") as handle:
        handle.write(json.dumps({"prompt": prompt}) + "\n")
    with open(session_file) as handle:
        turns = sum(1 for _ in handle)

    emit({"type": "system", "subtype": "init", "session_id": session, "model": option("--model") or "fake"})
    message_id = f"msg_{uuid.uuid4().hex[:12]}"
    emit({"type": "stream_event", "session_id": session, "event": {"type": "message_start", "message": {"id": message_id}}})

    if mode in ("hang", "stubborn"):
        child = None
        if mode == "stubborn":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            child = subprocess.Popen(["sleep", "3600"])
            record(**base, child=child.pid)
        else:
            interrupted = []

            def on_interrupt(signum: int, frame: object) -> None:
                interrupted.append(signum)

            signal.signal(signal.SIGINT, on_interrupt)
            record(**base)
        emit({"type": "stream_event", "session_id": session, "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "thinking about it"}}})
        while True:
            if mode == "hang" and interrupted:
                emit({"type": "user", "session_id": session, "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]}})
                emit({"type": "result", "subtype": "error_during_execution", "is_error": True, "session_id": session, "errors": ["interrupted"]})
                record(pid=os.getpid(), signal="SIGINT")
                return 0
            time.sleep(0.05)

    record(**base)
    answer = f"You said: {prompt.strip()} (turn {turns})"
    half = len(answer) // 2
    for piece in (answer[:half], answer[half:]):
        if mode == "garbage":
            sys.stdout.write("this line is not JSON\n")
        emit({"type": "stream_event", "session_id": session, "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}})
    emit({"type": "assistant", "session_id": session, "uuid": str(uuid.uuid4()), "message": {"id": message_id, "role": "assistant", "content": [{"type": "text", "text": answer}]}})
    emit({"type": "result", "subtype": "success", "is_error": False, "session_id": session, "result": answer, "total_cost_usd": 0.001, "usage": {"input_tokens": 11, "output_tokens": 7}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
