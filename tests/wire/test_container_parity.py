"""Our container parsers against the reference parsers, on a generated corpus.

The reference (npm ``agents@0.32.0``'s ``parseHostMessage``,
``parseDaemonMessage``, ``chunkEntries``, ``inputText`` and ``JSON.stringify``)
runs in Node over the same texts; every answer must be the same object, or
``undefined`` where we answer ``None``. Drift from the reference fails here.
"""

from __future__ import annotations

import collections
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.npm import AGENTS_SPEC, node_binary, require_npm_package
from tests.wire.corpus import Generator, emit
from wire import container
from wire.json import dumps, js_length, loads

REFPARSE = Path(__file__).resolve().parent.parent / "support" / "refparse.mjs"
HOST_TEXTS = 3000
DAEMON_TEXTS = 3000


def _canonical(value: Any) -> Any:
    """A value as the Node side writes it: non-finite numbers marked."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"$number": "Infinity" if value > 0 else "-Infinity"}
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    return value


UNDEFINED = {"$undefined": True}


def _ours(fn: str, arg: Any) -> Any:
    if fn == "parseHostMessage":
        message = container.parse_host_message(arg)
        return UNDEFINED if message is None else _canonical(container.converter.unstructure(message))
    if fn == "parseDaemonMessage":
        message = container.parse_daemon_message(arg)
        return UNDEFINED if message is None else _canonical(container.converter.unstructure(message))
    if fn == "chunkEntries":
        return container.chunk_entries(arg)
    if fn == "inputText":
        return container.input_text(arg)
    if fn == "stringify":
        return dumps(arg)
    if fn == "length":
        return js_length(dumps(arg))
    raise AssertionError(fn)


def _chunk_cases(gen: Generator) -> list[list[Any]]:
    r = gen.rng
    limit = container.MAX_CHUNK_CHARS
    cases: list[list[Any]] = [[], [1], ["x" * (limit - 2)], ["x" * (limit - 1)], ["x" * limit]]
    # Entries whose JSON lengths straddle the limit, in BMP and astral text
    # (an astral character is two UTF-16 units) and with escapes that grow.
    for _ in range(60):
        entries: list[Any] = []
        for _ in range(r.randrange(1, 6)):
            unit = r.choice(["a", "é", "😀", "\n", '"', "\u2028"])
            entries.append({"t": unit * r.randrange(limit // 8, limit // 2)})
        cases.append(entries)
    for _ in range(40):
        cases.append([gen.json() for _ in range(r.randrange(8))])
    return cases


@pytest.fixture(scope="module")
def compared() -> dict[str, list[tuple[Any, Any, Any]]]:
    package = require_npm_package(AGENTS_SPEC)
    node = node_binary()
    gen = Generator(seed=20261129)
    calls: list[tuple[str, Any]] = []
    calls += [("parseHostMessage", text) for text in gen.host_texts(HOST_TEXTS)]
    calls += [("parseDaemonMessage", text) for text in gen.daemon_texts(DAEMON_TEXTS)]
    calls += [("chunkEntries", entries) for entries in _chunk_cases(gen)]
    calls += [("inputText", gen.input()) for _ in range(300)]
    values = [gen.json() for _ in range(500)] + [0.1, 1e21, 1e-7, -0.0, 123456789012345680000.0, 5e-324]
    calls += [("stringify", value) for value in values] + [("length", value) for value in values]

    # Arguments are written escaped (lone surrogates stay escapes), so both
    # sides see the same JavaScript string or value.
    texts = [emit(arg) for _, arg in calls]
    stdin = "".join(f'{{"fn":{json.dumps(fn)},"arg":{text}}}\n' for (fn, _), text in zip(calls, texts))
    done = subprocess.run(
        [node, str(REFPARSE), str(package)],
        input=stdin.encode(),
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    # split on "\n" only: JSON text may hold U+2028 and other line breaks
    lines = done.stdout.decode("utf-8", errors="surrogatepass").split("\n")[:-1]
    assert len(lines) == len(calls)

    results: dict[str, list[tuple[Any, Any, Any]]] = collections.defaultdict(list)
    for (fn, _), text, line in zip(calls, texts, lines):
        arg = loads(text)  # the argument as the Node side parsed it
        results[fn].append((arg, _ours(fn, arg), loads(line)))
    return results


def _differences(rows: list[tuple[Any, Any, Any]]) -> list[str]:
    return [f"{arg!r:.200}\n  ours:      {ours!r:.300}\n  reference: {ref!r:.300}" for arg, ours, ref in rows if ours != ref]


@pytest.mark.parametrize("fn", ["parseHostMessage", "parseDaemonMessage"])
def test_parsers_agree_with_the_reference(compared, fn):
    rows = compared[fn]
    differences = _differences(rows)
    assert not differences, f"{len(differences)} of {len(rows)} differ:\n" + "\n".join(differences[:10])


@pytest.mark.parametrize("fn", ["parseHostMessage", "parseDaemonMessage"])
def test_the_corpus_exercises_both_answers_for_every_type(compared, fn):
    """A corpus the parser refused wholesale would prove nothing."""
    accepted: collections.Counter[str] = collections.Counter()
    refused = 0
    for _, ours, _ in compared[fn]:
        if ours == UNDEFINED:
            refused += 1
        else:
            accepted[ours["type"] if ours["type"] != "frame" else "frame:" + ours["frame"]["kind"]] += 1
    expected = (
        {"restore", "open", "replay", "prompt", "abort", "configure", "ack"}
        if fn == "parseHostMessage"
        else {"hello", "frame:start", "frame:event", "frame:persist", "frame:settle", "caught-up", "error"}
    )
    assert set(accepted) == expected
    assert min(accepted.values()) >= 20, accepted
    assert refused >= len(compared[fn]) // 5


@pytest.mark.parametrize("fn", ["chunkEntries", "inputText", "stringify", "length"])
def test_rules_agree_with_the_reference(compared, fn):
    differences = _differences(compared[fn])
    assert not differences, f"{len(differences)} differ:\n" + "\n".join(differences[:5])


def test_chunking_cases_reach_several_groups(compared):
    assert max(len(ours) for _, ours, _ in compared["chunkEntries"]) >= 3
