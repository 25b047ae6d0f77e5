"""A generated corpus of container-protocol message texts, good and bad.

Each text starts as a valid message of a random type and then, most of the
time, is damaged in one or more ways that the reference parsers care about:
a field removed, a value swapped for a hostile one (null, a bool where a
count goes, a fraction, 2**53, a non-finite literal, a string that looks like
a number), an unknown field added (sometimes holding a non-finite number), the
tag changed, the top level made a non-object, the text cut short or made not
JSON at all. The same seed always gives the same corpus.

Texts are written by :func:`emit`, not by a JSON library, so they can hold
what no library writes: ``1e400`` (a non-finite number after parsing), ``1.0``
and ``1e3`` spellings of counts, ``-0``, and lone surrogate escapes.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any, Iterator


class NonFinite:
    """Written as a literal that parses to ±Infinity."""

    def __init__(self, negative: bool = False) -> None:
        self.negative = negative


class Spelled:
    """A number written exactly as given (``1.0``, ``1e3``, ``-0``)."""

    def __init__(self, text: str) -> None:
        self.text = text


INF = NonFinite()
NEG_INF = NonFinite(negative=True)

STRINGS = [
    "", "a", "op-1", "session 1", "é", "😀", "\u2028", 'with "quote"', "\\", "\n",
    "slow 5 hi", "fail", "fail boom", "\ud800", "x" * 40, "text", "image", "settled",
]
HOSTILE = [
    None, True, False, 0, 1, -1, 1.5, "x", "1", [], {}, [1], {"a": 1}, INF, NEG_INF,
    2**53, 2**53 - 1, Spelled("1.0"), Spelled("1e3"), Spelled("-0"), Spelled("1E2"),
    Spelled("9007199254740993"), Spelled("0.5e1"),
]


def emit(value: Any, rng: random.Random | None = None) -> str:
    """A JSON text for ``value``, with the markers above written literally.

    Without ``rng`` every non-ASCII character is escaped (so a lone surrogate
    survives a trip through UTF-8); with it, some strings are escaped and
    some are not.
    """
    if isinstance(value, NonFinite):
        return "-1e400" if value.negative else "1e400"
    if isinstance(value, Spelled):
        return value.text
    if value is None or isinstance(value, (bool, int, float, str)):
        return json.dumps(value, ensure_ascii=rng is None or rng.random() < 0.2)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(emit(item, rng) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{emit(v, rng)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    # ----------------------------------------------------------------- leaves
    def string(self) -> str:
        r = self.rng
        if r.random() < 0.7:
            return r.choice(STRINGS)
        return "".join(r.choice("ab é😀\"\\\n\t\x01") for _ in range(r.randrange(12)))

    def count(self) -> Any:
        r = self.rng
        return r.choice([0, 1, 2, 3, 7, 42, 1000, 2**53 - 1, Spelled("1.0"), Spelled("2e1"), Spelled("-0")])

    def json(self, depth: int = 0, finite: bool = True) -> Any:
        r = self.rng
        roll = r.random()
        if depth >= 3 or roll < 0.5:
            choices: list[Any] = [None, True, False, 0, -3, 2.5, 1e-7, 1e21, self.string(), Spelled("1.0")]
            if not finite:
                choices.append(INF)
            return r.choice(choices)
        if roll < 0.75:
            return [self.json(depth + 1, finite) for _ in range(r.randrange(4))]
        return {self.string(): self.json(depth + 1, finite) for _ in range(r.randrange(4))}

    def payload(self) -> Any:
        """A JSON payload; now and then one holding a non-finite number."""
        return self.json(finite=self.rng.random() < 0.85)

    def entries(self) -> list[Any]:
        return [self.payload() for _ in range(self.rng.randrange(4))]

    def settings(self) -> dict[str, Any]:
        r = self.rng
        settings: dict[str, Any] = {}
        if r.random() < 0.5:
            settings["model"] = self.string()
        if r.random() < 0.5:
            settings["options"] = self.payload()
        if r.random() < 0.2:
            settings["extra"] = self.json(finite=False)
        return settings

    def input(self) -> Any:
        r = self.rng
        if r.random() < 0.5:
            return self.string()
        parts = []
        for _ in range(r.randrange(4)):
            if r.random() < 0.6:
                part: dict[str, Any] = {"type": "text", "text": self.string()}
            else:
                part = {"type": "image", "mediaType": "image/png", "data": "aGk="}
            if r.random() < 0.15:
                part["note"] = self.json()
            parts.append(part)
        return parts

    def outcome(self) -> dict[str, Any]:
        if self.rng.random() < 0.5:
            return {"status": "done", "text": self.string()}
        return {"status": "unanswered", "reason": self.rng.choice(["aborted", "container_lost", self.string()])}

    def event(self) -> dict[str, Any]:
        r = self.rng
        kind = r.choice(["text-delta", "reasoning-delta", "message", "usage", "log", "raw"])
        if kind in ("text-delta", "reasoning-delta"):
            return {"type": kind, "messageId": self.string(), "delta": self.string()}
        if kind == "message":
            return {
                "type": "message",
                "message": {
                    "id": self.string(),
                    "role": r.choice(["user", "assistant"]),
                    "parts": [{"type": "text", "text": self.string()}],
                    "operationId": self.string(),
                    "createdAt": 1795996714007,
                },
            }
        if kind == "usage":
            return {"type": "usage", "inputTokens": r.randrange(1000), "outputTokens": r.randrange(100), "costUsd": 0.25}
        if kind == "log":
            return {"type": "log", "level": r.choice(["info", "warn", "error"]), "message": self.string()}
        return {"type": "raw", "value": self.payload()}

    def frame(self) -> dict[str, Any]:
        r = self.rng
        kind = r.choice(["start", "event", "persist", "settle"])
        if kind == "start":
            return {"kind": "start", "operationId": self.string()}
        if kind == "event":
            return {"kind": "event", "operationId": r.choice([None, self.string()]), "event": self.event()}
        if kind == "persist":
            return {"kind": "persist", "entries": self.entries()}
        return {"kind": "settle", "operationId": self.string(), "outcome": self.outcome()}

    def operation(self) -> dict[str, Any]:
        status = self.rng.choice(["queued", "running", "settled"])
        operation: dict[str, Any] = {"operationId": self.string(), "status": status}
        if status == "settled":
            operation["outcome"] = self.outcome()
        return operation

    # --------------------------------------------------------------- messages
    def host_message(self) -> dict[str, Any]:
        r = self.rng
        kind = r.choice(["restore", "open", "replay", "prompt", "abort", "configure", "ack"])
        if kind == "restore":
            return {"type": "restore", "generation": self.count(), "entries": self.entries()}
        if kind == "open":
            return {"type": "open", "generation": self.count(), "settings": self.settings(), "restore": self.entries()}
        if kind == "replay":
            return {"type": "replay", "after": self.count()}
        if kind == "prompt":
            return {
                "type": "prompt",
                "operationId": self.string(),
                "input": self.input(),
                "whenBusy": r.choice(["followUp", "steer"]),
            }
        if kind == "abort":
            return {"type": "abort"} if r.random() < 0.5 else {"type": "abort", "operationId": self.string()}
        if kind == "configure":
            return {"type": "configure", "settings": self.settings()}
        return {"type": "ack", "seq": self.count()}

    def daemon_message(self) -> dict[str, Any]:
        r = self.rng
        kind = r.choice(["hello", "frame", "frame", "frame", "caught-up", "error"])
        if kind == "hello":
            return {
                "type": "hello",
                "protocol": 1,
                "runtimeId": self.string(),
                "session": self.string(),
                "adapter": {"id": "echo", "version": "1", "capabilities": r.choice([[], ["steer"]])},
                "open": r.choice([None, self.count()]),
                "lastSeq": self.count(),
                "operations": [self.operation() for _ in range(r.randrange(3))],
            }
        if kind == "frame":
            return {"type": "frame", "seq": self.count(), "frame": self.frame()}
        if kind == "caught-up":
            return {"type": "caught-up", "lastSeq": self.count()}
        return {"type": "error", "message": self.string()}

    # --------------------------------------------------------------- damage
    def _paths(self, value: Any, path: tuple = ()) -> Iterator[tuple]:
        yield path
        if isinstance(value, dict):
            for key, item in value.items():
                yield from self._paths(item, path + (key,))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from self._paths(item, path + (index,))

    def damage(self, message: dict[str, Any]) -> Any:
        r = self.rng
        paths = [p for p in self._paths(message) if p]
        action = r.choice(["delete", "replace", "replace", "add", "tag", "top"])
        if action == "top":
            return r.choice([None, 1, "x", [message], True])
        if action == "tag":
            message["type" if "type" in message else "kind"] = r.choice(
                ["frame", "hello", "prompt", "open", "ack", "bogus", "", 1, None]
            )
            return message
        if not paths:
            return message
        path = r.choice(paths)
        *head, last = path
        parent: Any = message
        for step in head:
            parent = parent[step]
        if action == "delete":
            if isinstance(parent, dict):
                del parent[last]
            else:
                parent.pop(last)
        elif action == "replace":
            parent[last] = copy.deepcopy(r.choice(HOSTILE))
        elif isinstance(parent, dict):
            parent[r.choice(["x", "extra", "__proto__", "constructor", "value", "1"])] = copy.deepcopy(r.choice(HOSTILE))
        return message

    def text(self, message: dict[str, Any]) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.25:
            value: Any = message
        else:
            value = message
            for _ in range(r.choice([1, 1, 1, 2, 3])):
                value = self.damage(value) if isinstance(value, dict) else value
        text = emit(value, r)
        roll = r.random()
        if roll < 0.03:
            return text[: r.randrange(len(text) + 1)]
        if roll < 0.05:
            return r.choice(["NaN", "Infinity", "{\"type\":\"ack\",\"seq\":NaN}", "", " ", "{", "'x'", "\ufeff{}", text + " x"])
        if roll < 0.07:
            return " \n" + text + "\t "
        return text

    def host_texts(self, n: int) -> list[str]:
        return [self.text(self.host_message()) for _ in range(n)]

    def daemon_texts(self, n: int) -> list[str]:
        return [self.text(self.daemon_message()) for _ in range(n)]
