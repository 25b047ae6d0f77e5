"""Parse and write rates of the container wire: ours against the reference.

Runs our parsers and the reference's (npm agents@0.32.0, in Node, timing
itself) over the same corpus of realistic traffic: what an echo turn and a
streaming model turn put on the wire (text deltas, messages, usage, persist
entries, settles, hellos) and what a host sends (prompts, acks, opens with
restore entries). Prints messages per second for both and the ratio.

    .venv/bin/python bench/wire_parse.py [--rounds N]

The sans-IO cost only: no sockets. Node is a JIT and our side is CPython, so
the ratio says how much of a daemon's or host's budget parsing can take.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.npm import AGENTS_SPEC, npm_package  # noqa: E402
from wire import container  # noqa: E402
from wire.json import dumps, loads  # noqa: E402


def corpus() -> dict[str, list[str]]:
    frames = []
    seq = 0

    def frame(body: dict) -> None:
        nonlocal seq
        seq += 1
        frames.append(json.dumps({"type": "frame", "seq": seq, "frame": body}, ensure_ascii=False))

    for turn in range(20):
        op = f"op-{turn:04d}-7c1e2f"
        mid = f"{op}:assistant"
        frame({"kind": "start", "operationId": op})
        for i in range(30):
            frame({"kind": "event", "operationId": op, "event": {"type": "text-delta", "messageId": mid, "delta": f"word {i} of a streamed answer, é😀 "}})
        frame({"kind": "event", "operationId": op, "event": {"type": "message", "message": {
            "id": mid, "role": "assistant", "operationId": op, "createdAt": 1795996714007,
            "parts": [{"type": "text", "text": "a full answer " * 40},
                      {"type": "tool", "toolCallId": "toolu_01", "toolName": "Bash", "input": {"command": "ls -la"}, "state": "done", "output": "total 0\n" * 10}]}}})
        frame({"kind": "event", "operationId": op, "event": {"type": "usage", "inputTokens": 1520, "outputTokens": 312, "costUsd": 0.0123}})
        frame({"kind": "persist", "entries": [{"kind": "file", "path": "projects/x/session.jsonl", "offset": turn * 4096, "data": "QUJD" * 256}]})
        frame({"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": "a full answer " * 40}})
    hello = json.dumps({"type": "hello", "protocol": 1, "runtimeId": "rt-1", "session": "s-1",
                        "adapter": {"id": "echo", "version": "1", "capabilities": ["steer"]}, "open": 1, "lastSeq": seq,
                        "operations": [{"operationId": f"op-{i}", "status": "settled", "outcome": {"status": "done", "text": "x"}} for i in range(50)]})
    host = []
    for i in range(200):
        host.append(json.dumps({"type": "prompt", "operationId": f"op-{i}", "input": "please summarise the file", "whenBusy": "steer"}))
        host.append(json.dumps({"type": "ack", "seq": i * 32}))
    host.append(json.dumps({"type": "open", "generation": 3, "settings": {"model": "claude-x", "options": {"effort": "high"}},
                            "restore": [{"turn": i, "text": "remember this"} for i in range(100)]}))
    return {"parseDaemonMessage": frames + [hello], "parseHostMessage": host, "stringify": frames}


def ours(fn: str, texts: list[str], rounds: int) -> float:
    if fn == "parseDaemonMessage":
        f = container.parse_daemon_message
    elif fn == "parseHostMessage":
        f = container.parse_host_message
    else:
        def f(text: str) -> str:
            return dumps(loads(text))
    for text in texts:
        assert fn == "stringify" or f(text) is not None, text
    start = time.perf_counter()
    for _ in range(rounds):
        for text in texts:
            f(text)
    return time.perf_counter() - start


def reference(texts: dict[str, list[str]], rounds: int) -> dict[str, dict[str, float]]:
    package = npm_package(AGENTS_SPEC)
    stdin = "".join(json.dumps({"fn": fn, "arg": t}) + "\n" for fn, ts in texts.items() for t in ts)
    done = subprocess.run(
        ["node", str(REPO / "tests/support/refbench.mjs"), str(package), str(rounds)],
        input=stdin.encode(), capture_output=True, check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    texts = corpus()
    ref = reference(texts, args.rounds)
    print(f"{'what':<22}{'msgs':>7}{'avg bytes':>11}{'ours msg/s':>13}{'ref msg/s':>13}{'ours/ref':>10}")
    for fn, ts in texts.items():
        seconds = ours(fn, ts, args.rounds)
        calls = args.rounds * len(ts)
        mine = calls / seconds
        theirs = ref[fn]["calls"] / ref[fn]["seconds"]
        size = sum(len(t.encode()) for t in ts) / len(ts)
        label = {"parseDaemonMessage": "parse daemon → host", "parseHostMessage": "parse host → daemon",
                 "stringify": "parse + stringify"}[fn]
        print(f"{label:<22}{len(ts):>7}{size:>11.0f}{mine:>13,.0f}{theirs:>13,.0f}{mine / theirs:>10.2f}")


if __name__ == "__main__":
    main()
