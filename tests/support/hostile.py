"""Hostile inputs, generated from a seed, and the parsers they are fed to.

The generator (:class:`Hostile`) starts from a corpus of good messages of one
target and makes, for each input, one of: random bytes; a good message with a
few bytes flipped, inserted, dropped or the text cut short; bad UTF-8 (lone
surrogates for a parser that takes text, invalid byte sequences for one that
takes bytes); a value of the wrong type at a random place of a good message;
nesting at 100, 1,000 or 10,000 levels at a random place; a huge string; an
unknown key or a dropped one. The same seed gives the same inputs.

:data:`PARSERS` is what the campaign calls "a parser": a function that takes
one input and must return, or raise only the refusal its contract names
(``None`` for the container wire, :class:`ModWireError` for the mod wire,
``BadBody`` for API bodies, a ``Refusal`` value for settings files). Anything
else it raises is a crash. A parser with a ``close`` method holds files
(the settings reader's directory): call it when done.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

#: The depths the issue names (100 / 1,000 / 10,000 levels), and the 400 it
#: measured the container parsers raising at (JSON nested deeper than about
#: 900 levels is refused by ``wire.json.loads`` before any parser sees it).
DEPTHS = (100, 400, 1000, 10_000)
#: A huge string: 2 MiB, past anything a field of either wire carries in
#: normal traffic, under the daemon's 64 MiB message limit.
HUGE = 2 * 1024 * 1024


# --------------------------------------------------------------------------- corpora

def container_host_corpus() -> list[Any]:
    return [
        {"type": "restore", "generation": 1, "entries": [{"turn": 1, "text": "hi"}, "x", 3]},
        {"type": "open", "generation": 2, "settings": {"model": "m", "options": {"effort": "high"}},
         "restore": [{"turn": 1, "text": "t"}]},
        {"type": "replay", "after": 0},
        {"type": "prompt", "operationId": "op-1", "input": "hello", "whenBusy": "followUp"},
        {"type": "prompt", "operationId": "op-2", "input": [{"type": "text", "text": "hi"},
                                                           {"type": "image", "mediaType": "image/png", "data": "QUJD"}],
         "whenBusy": "steer"},
        {"type": "abort", "operationId": "op-1"},
        {"type": "abort"},
        {"type": "configure", "settings": {"model": "x", "options": {"a": [1, 2, {"b": None}]}}},
        {"type": "ack", "seq": 12},
    ]


def container_daemon_corpus() -> list[Any]:
    op = "op-1"
    return [
        {"type": "hello", "protocol": 1, "runtimeId": "rt", "session": "s",
         "adapter": {"id": "echo", "version": "1", "capabilities": ["steer"]}, "open": 1, "lastSeq": 3,
         "operations": [{"operationId": op, "status": "settled", "outcome": {"status": "done", "text": "x"}},
                        {"operationId": "op-2", "status": "running"}]},
        {"type": "frame", "seq": 1, "frame": {"kind": "start", "operationId": op}},
        {"type": "frame", "seq": 2, "frame": {"kind": "event", "operationId": op,
                                              "event": {"type": "text-delta", "messageId": "m", "delta": "d"}}},
        {"type": "frame", "seq": 3, "frame": {"kind": "event", "operationId": None, "event": {
            "type": "message", "message": {"id": "m", "role": "assistant", "operationId": op, "createdAt": 1,
                                           "parts": [{"type": "text", "text": "t"},
                                                     {"type": "tool", "toolCallId": "c", "toolName": "Bash",
                                                      "input": {"command": "ls"}, "state": "done", "output": "o"}]}}}},
        {"type": "frame", "seq": 4, "frame": {"kind": "event", "operationId": op,
                                              "event": {"type": "raw", "value": {"any": ["json", 1]}}}},
        {"type": "frame", "seq": 5, "frame": {"kind": "persist", "entries": [{"turn": 1, "text": "t"}]}},
        {"type": "frame", "seq": 6, "frame": {"kind": "settle", "operationId": op,
                                              "outcome": {"status": "unanswered", "reason": "aborted"}}},
        {"type": "caught-up", "lastSeq": 6},
        {"type": "error", "message": "unparseable message"},
    ]


def mod_events_corpus() -> list[Any]:
    append = {"kind": "append", "uuid": "u1", "door": "prompt", "origin": {"kind": "person", "asUser": True},
              "message": {"type": "user", "content": [{"type": "text", "text": "hi"}]}}
    return [
        {"events": [{"kind": "hello", "sessionId": "s", "claudeVersion": "2.1.310", "interactive": True},
                    {"kind": "turn-start", "turnId": "t1"}, {"kind": "model", "model": "claude"},
                    {"kind": "not-yet-invented", "detail": ["kept", 1]}, append]},
        {"events": [{"kind": "step", "turnId": "t1", "index": 0, "model": "m", "done": True,
                     "parts": [{"type": "text", "text": "t"}, {"type": "tool-call", "id": "c", "name": "Bash",
                                                              "args": "{}"}]},
                    {"kind": "turn-complete", "turnId": "t1", "stopReason": "answer"},
                    {"kind": "session-end", "reason": "clear"}]},
    ]


def mod_results_corpus() -> list[Any]:
    return [
        {"results": [{"id": "r1", "ok": True, "value": {"status": "row", "uuid": "u"}},
                     {"id": "r2", "ok": False, "error": "denied"}]},
        {"results": [{"id": "r3", "ok": True, "value": None}]},
    ]


def api_corpus() -> list[Any]:
    return [
        {"text": "hello", "eventId": "e1", "kind": "person", "messageId": "m1", "wait": False},
        {"text": "a card", "kind": "card"},
        {"text": "x"},
        {"id": "s2", "instance": "default"},
        {"operationId": "op-1"},
        {},
    ]


def settings_corpus() -> list[Any]:
    return [
        {"plugins": {"harness": ["echo"], "channel": ["webui"], "limit-check": []},
         "options": {"echo": {"model": "m"}}},
        {"instances": {"default": {"harness": "echo", "fallback": {"harness": "echo"}}}},
        {"sessions": {"limit": 10, "window": "day"}, "turns": {"per-session": {"limit": 3}}},
    ]


# --------------------------------------------------------------------------- values


def nested(depth: int, rng: random.Random) -> Any:
    """A value ``depth`` levels deep (arrays or objects), built without
    recursion."""
    value: Any = rng.choice([1, "x", None, True, [], {}])
    as_object = rng.random() < 0.5
    for _ in range(depth):
        value = {"a": value} if as_object else [value]
    return value


def nested_text(depth: int, rng: random.Random) -> str:
    """The JSON text of a value ``depth`` levels deep (as :func:`nested`,
    written without ``json.dumps``' recursion)."""
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def wrong_value(rng: random.Random) -> Any:
    """A value of a random JSON type (some of them the edges of a type)."""
    return rng.choice([
        None, True, False, 0, -1, 2**53, 2**64, -(2**63), 1.5, 1e308, "", "x", "😀\u0000", [], [None], {},
        {"type": None}, [[]], "a" * rng.randint(0, 300), rng.randint(-10**6, 10**6),
    ])


def _paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = new
    return copy


_MARK = "\u0000__hostile__\u0000"


class Hostile:
    """Seeded inputs for one target, from its corpus of good values."""

    def __init__(self, corpus: list[Any], seed: int | str) -> None:
        self.rng = random.Random(seed)
        self.corpus = corpus
        self.texts = [json.dumps(value, ensure_ascii=False) for value in corpus]
        self.kinds: list[tuple[str, Callable[[], bytes | str]]] = [
            ("random-bytes", self.random_bytes),
            ("mutated", self.mutated),
            ("mutated", self.mutated),
            ("cut", self.cut),
            ("bad-utf8", self.bad_utf8),
            ("wrong-type", self.wrong_type),
            ("wrong-type", self.wrong_type),
            ("nested", self.nesting),
            ("keys", self.keys),
        ]

    def good(self) -> str:
        return self.rng.choice(self.texts)

    def random_bytes(self) -> bytes:
        n = self.rng.choice([0, 1, 2, 8, 64, 512])
        return self.rng.randbytes(n)

    def mutated(self) -> str:
        data = bytearray(self.good().encode())
        for _ in range(self.rng.randint(1, 8)):
            at = self.rng.randrange(len(data) + 1)
            action = self.rng.randrange(4)
            if action == 0 and data:
                data[min(at, len(data) - 1)] = self.rng.choice(b'{}[]",:\\0123456789-.eE tfn\x00\xff')
            elif action == 1:
                data[at:at] = self.rng.choice([b"{", b"[", b'"', b",", b"null", b"-0", b"1e999", b"\\u", b"\xc3"])
            elif action == 2:
                del data[at : at + self.rng.randint(1, 6)]
            else:
                data[at:at] = data[max(0, at - 20) : at]
        return data.decode("utf-8", errors="surrogateescape")

    def cut(self) -> str:
        text = self.good()
        return text[: self.rng.randrange(len(text) + 1)]

    def bad_utf8(self) -> bytes:
        data = bytearray(self.good().encode())
        at = self.rng.randrange(len(data) + 1)
        data[at:at] = self.rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"])
        return bytes(data)

    def wrong_type(self) -> str:
        value = self.rng.choice(self.corpus)
        path = self.rng.choice(list(_paths(value)))
        new = wrong_value(self.rng)
        if self.rng.random() < 0.01:
            new = "x" * HUGE
        return json.dumps(_replace(value, path, new), ensure_ascii=False)

    def nesting(self) -> str:
        value = self.rng.choice(self.corpus)
        path = self.rng.choice(list(_paths(value)))
        depth = self.rng.choice(DEPTHS)
        text = json.dumps(_replace(value, path, _MARK), ensure_ascii=False)
        return text.replace(json.dumps(_MARK), nested_text(depth, self.rng), 1)

    def keys(self) -> str:
        value = self.rng.choice(self.corpus)
        objects = [p for p in _paths(value) if isinstance(_get(value, p), dict)]
        path = self.rng.choice(objects)
        target = dict(_get(value, path))
        if target and self.rng.random() < 0.5:
            target.pop(self.rng.choice(list(target)))
        else:
            target[self.rng.choice(["type", "kind", "__proto__", "extra", ""])] = wrong_value(self.rng)
        return json.dumps(_replace(value, path, target), ensure_ascii=False)

    def next(self) -> tuple[str, bytes | str]:
        kind, make = self.rng.choice(self.kinds)
        return kind, make()


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def as_text(data: bytes | str) -> str:
    """What a text parser receives: a WebSocket text frame's bytes decoded,
    invalid sequences kept as lone surrogates (the worst a str can hold)."""
    return data.decode("utf-8", errors="surrogateescape") if isinstance(data, bytes) else data


def as_bytes(data: bytes | str) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", errors="surrogateescape")


# --------------------------------------------------------------------------- the parsers


def _container_host(data: bytes | str) -> None:
    from wire.container import parse_host_message

    parse_host_message(as_text(data))


def _container_daemon(data: bytes | str) -> None:
    from wire.container import parse_daemon_message

    parse_daemon_message(as_text(data))


def _mod_body(reader: Callable[[Any], Any]) -> Callable[[bytes | str], None]:
    """The mod link's reading of a body, as its server does it: UTF-8, JSON
    (refusals: ``UnicodeDecodeError``, ``JsonError``), then the route's
    reader (refusal: ``ModWireError``)."""

    def parse(data: bytes | str) -> None:
        from wire.json import JsonError, loads
        from wire.mod import ModWireError

        try:
            value = loads(as_bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, JsonError):
            return
        try:
            reader(value)
        except ModWireError:
            return

    return parse


def _mod_events(value: Any) -> None:
    from wire.mod import read_events

    read_events(value)


def _mod_results(value: Any) -> None:
    from wire.mod import CALL_RESULTS, ModWireError, read_results, structure_result

    read_results(value)
    # Each result value, typed as every call's result would be.
    items = value.get("results") if type(value) is dict else None
    for item in items if type(items) is list else []:
        if type(item) is dict and "value" in item:
            for call in CALL_RESULTS:
                try:
                    structure_result(call, item["value"])
                except ModWireError:
                    pass


def _api_body(data: bytes | str) -> None:
    """The delivery body as the API reads it: a request or a refusal value,
    never an exception."""
    from router.turns.requests import send_request_from_body

    send_request_from_body(as_bytes(data), "storm")


class _SettingsReader:
    """Settings files as the plug-in layer reads them: the file's bytes
    through :meth:`SettingsDir.read` (a refusal value for a bad file), then
    each document's interpreter (plugins, routes, limits)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="hostile-settings-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
        self.turn = 0

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def __call__(self, data: bytes | str) -> None:
        from router.plugins.limit_checks import limit_paths
        from router.plugins.routing import harness_options, parse_routes
        from router.plugins.models import LimitsSettings, PluginsSettings, RoutesSettings
        from router.plugins.settings import Document, SettingsDir, plugins_value, redact, settings_of

        self.turn += 1
        name = ("plugins.json", "routes.json", "limits.json")[self.turn % 3]
        (self.directory / name).write_bytes(as_bytes(data))
        document = SettingsDir(self.directory).read(name)
        for typed in (PluginsSettings, RoutesSettings, LimitsSettings):
            settings_of(document, typed)  # typed settings for any document, a refusal's too
        if not isinstance(document, Document):
            return  # a refusal: the contract for a file that is not JSON
        redact(document.value)
        if name == "plugins.json":
            plugins_value(document)
            harness_options(document.value, "echo")
        elif name == "routes.json":
            parse_routes(document.value, "default")
        else:
            limit_paths(document.value)


def parsers() -> dict[str, tuple[Callable[[bytes | str], None], list[Any]]]:
    """Each parser target: the function and the corpus its inputs grow from."""
    return {
        "wire.container parse_host_message": (_container_host, container_host_corpus()),
        "wire.container parse_daemon_message": (_container_daemon, container_daemon_corpus()),
        "wire.mod read_events": (_mod_body(_mod_events), mod_events_corpus()),
        "wire.mod read_results + structure_result": (_mod_body(_mod_results), mod_results_corpus()),
        "api send body": (_api_body, api_corpus()),
        "settings readers": (_SettingsReader(), settings_corpus()),
    }
