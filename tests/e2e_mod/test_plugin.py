"""The plug-in as Claude Code 2.1.332 reads it: ``claude plugin validate``
refuses nothing, the mod's own tests pass under ``claude plugin test``, and
the mod's protocol module (``plugin/hooks/protocol.ts``) agrees with
``wire.mod`` on thousands of generated session ids, environments, versions
and unread-message sets, run in the environment a mod runs in."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_mod.helpers import PLUGIN, copy_plugin
from wire import mod

#: How many cases of each kind the parity test generates (seeded: a failure
#: reproduces).
CASES = 3000
SEED = 13


def run_claude(claude: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(claude), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_validate_refuses_nothing_and_reads_the_plugin_as_written(claude_binary: Path, tmp_path: Path) -> None:
    copy = copy_plugin(tmp_path / "plugin")
    done = run_claude(claude_binary, "plugin", "validate", "--json", str(copy))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["success"] is True and report["manifest"]["errors"] == []
    assert all(item["errors"] == [] for item in report["contents"])
    assert report["provides"]["modules"] == [{"path": "hooks/mod.ts"}]
    (server,) = report["provides"]["mcpServers"]
    assert server["name"] == "router" and server["target"] == "router"
    assert server["args"] == ["mcp", "--claude-session-from-env"]
    (module,) = next(item for item in report["contents"] if item["file"].endswith("hooks.json"))["modules"]
    # $.env.get takes literals: the three a socket's base comes from, no other.
    assert sorted(module["uses"]["env"]["reads"]) == ["CLAUDE_CONFIG_DIR", "HOME", "XDG_RUNTIME_DIR"]
    assert module["uses"]["env"]["writes"] == []
    assert set(module["uses"]["events"]) == {
        "session.start", "session.end", "session.append", "turn.start", "turn.step", "turn.complete",
        # The asks: the permission mode of each prompt, and the ask itself.
        "classic.UserPromptSubmit", "tool.check",
        # The provider's usage limit, from the session's measure (docs/limits.md).
        "session.measure",
    }  # fmt: skip


def test_the_manifest_names_this_project_and_the_mod(claude_binary: Path) -> None:
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "router" and not manifest["name"].startswith("claude-")
    assert json.loads((PLUGIN / "hooks" / "hooks.json").read_text()) == {"modules": ["./mod.ts"]}
    protocol = (PLUGIN / "hooks" / "protocol.ts").read_text()
    assert f'export const PLUGIN_NAME = "{manifest["name"]}"' in protocol


def test_the_mods_own_tests_pass(claude_binary: Path, tmp_path: Path) -> None:
    copy = copy_plugin(tmp_path / "plugin")
    done = run_claude(claude_binary, "plugin", "test", str(copy))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    passed = re.search(r"(\d+) pass\b", output)
    assert passed and int(passed.group(1)) >= 10 and re.search(r"\b0 fail\b", output), output


# --------------------------------------------------------------------------- parity


def _text(rng: random.Random, *, max_len: int = 24) -> str:
    pools = [
        "abcdef0123456789-",
        "ABCxyz._ ",
        "/\\.\0",
        "éßü€漢字",
        "\U0001f600\U00010348",
        "\ud800\udfff",  # lone surrogates: a JSON string may hold one
    ]
    out = []
    for _ in range(rng.randint(0, max_len)):
        pool = pools[rng.choices(range(len(pools)), weights=[40, 10, 3, 4, 2, 1])[0]]
        out.append(rng.choice(pool))
    return "".join(out)


def _session_id(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.4:
        return str(__import__("uuid").UUID(int=rng.getrandbits(128)))
    if pick < 0.5:
        return rng.choice(["", ".", "..", "a/b", "a\\b", "nul\0id", "..."])
    return _text(rng, max_len=60)


def _base(rng: random.Random) -> str | None:
    pick = rng.random()
    if pick < 0.2:
        return None
    if pick < 0.3:
        return rng.choice(["", "relative/dir", "/", "//", "/run/user/1000/", "~/x"])
    depth = "/".join(_text(rng, max_len=12).replace("/", "") or "d" for _ in range(rng.randint(1, 6)))
    return "/" + depth + "/" * rng.randint(0, 2)


def _env(rng: random.Random) -> dict[str, str]:
    env = {}
    for name in ("XDG_RUNTIME_DIR", "CLAUDE_CONFIG_DIR", "HOME"):
        value = _base(rng)
        if value is not None:
            env[name] = value
    return env


def _version(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.1:
        return rng.choice(["", "v2.1.310", "2.1.310-dev.20260920.t1", "2..1", "2.1.", "99999999999999999999.1"])
    parts = [str(rng.choice([0, 1, 2, 3, 9, 10, 309, 310, 311, rng.randint(0, 10**6)])) for _ in range(rng.randint(1, 5))]
    version = ".".join(parts)
    if rng.random() < 0.2:
        version += rng.choice(["-dev.1", "-beta", "x", ".rc1", "+build"])
    return version


def _unread(rng: random.Random) -> list[Any]:
    out: list[Any] = []
    for _ in range(rng.randint(1, 4)):
        text = _text(rng, max_len=80)
        if rng.random() < 0.5:
            out.append(mod.ModUnreadPerson(text=text, message_id=_text(rng, max_len=12) or "dm"))
        else:
            out.append(mod.ModUnreadCard(text=text))
    return out


_FENCE = re.compile(r"Each label starts with the mark \[([0-9a-z]{8})\]\.")


def parity_cases() -> dict[str, Any]:
    rng = random.Random(SEED)
    sockets = []
    for _ in range(CASES):
        session_id, env = _session_id(rng), _env(rng)
        sockets.append({"id": session_id, "env": env, "path": mod.resolve_mod_socket_path(session_id, env).path})
    versions = []
    for _ in range(CASES):
        left, right = _version(rng), rng.choice([mod.MOD_MIN_CLAUDE_VERSION, _version(rng)])
        versions.append({"version": left, "minimum": right, "ok": mod.mod_version_at_least(left, right)})
    prompts = []
    for _ in range(CASES // 10):
        unread = _unread(rng)
        text = mod.unread_row_prompt(unread)
        fence = _FENCE.search(text)
        assert fence is not None, text
        prompts.append(
            {"unread": [mod.converter.unstructure(each) for each in unread], "fence": fence.group(1), "prompt": text}
        )
    constants = {
        name: getattr(mod, name)
        for name in (
            "MOD_HEALTH_MARKER", "MOD_POLL_HOLD_MS", "MOD_MIN_CLAUDE_VERSION", "MOD_URL_BASE", "MOD_ROUTE_HEALTH",
            "MOD_ROUTE_EVENTS", "MOD_ROUTE_RESULTS", "MOD_ROUTE_REQUESTS", "MOD_SOCKET_PATH_MAX_BYTES",
            "MOD_STATUS_TAKEN", "MOD_INSTANCE_HEADER", "MOD_PLUGIN_NAME", "MOD_CAPABILITY_ASKS",
        )
    }  # fmt: skip
    constants["MOD_APPEND_DOORS"] = list(mod.MOD_APPEND_DOORS)
    return {"sockets": sockets, "versions": versions, "prompts": prompts, "constants": constants}


PARITY_TEST = """\
import { expect, test } from "claude-code/testing"

import * as protocol from "../hooks/protocol"

const DATA = %s

test("constants", () => {
  const mine: Record<string, unknown> = {}
  for (const name of Object.keys(DATA.constants)) mine[name] = (protocol as Record<string, unknown>)[name]
  expect(mine).toEqual(DATA.constants)
})

test("socket paths", () => {
  const wrong = DATA.sockets.filter((c: any) => (protocol.resolveModSocketPath(c.id, c.env).path ?? null) !== c.path)
  expect(wrong.slice(0, 5)).toEqual([])
})

test("refusals carry a reason and no path", () => {
  for (const c of DATA.sockets) {
    const resolved = protocol.resolveModSocketPath(c.id, c.env)
    expect(resolved.path === undefined).toBe(typeof resolved.refusal === "string")
  }
})

test("versions", () => {
  const wrong = DATA.versions.filter((c: any) => protocol.modVersionAtLeast(c.version, c.minimum) !== c.ok)
  expect(wrong.slice(0, 5)).toEqual([])
})

test("unread-row prompts", () => {
  const wrong = DATA.prompts.filter((c: any) => protocol.unreadRowPrompt(c.unread, () => c.fence) !== c.prompt)
  expect(wrong.slice(0, 2)).toEqual([])
})

test("a fence a message holds is drawn again", () => {
  const unread = [{ kind: "card" as const, text: "holds aaaaaaaa here" }]
  const draws = ["aaaaaaaa", "bbbbbbbb"]
  expect(protocol.unreadRowPrompt(unread, () => draws.shift()!)).toContain("[bbbbbbbb]")
})
"""


def test_the_protocol_module_agrees_with_wire_mod(claude_binary: Path, tmp_path: Path) -> None:
    copy = copy_plugin(tmp_path / "plugin")
    tests = copy / "tests"
    shutil.rmtree(tests)
    tests.mkdir()
    cases = parity_cases()
    assert sum(case["path"] is None for case in cases["sockets"]) > CASES // 10  # refusals are exercised
    assert sum(case["path"] is not None for case in cases["sockets"]) > CASES // 10  # and paths
    assert len({case["ok"] for case in cases["versions"]}) == 2
    (tests / "parity.test.ts").write_text(PARITY_TEST % json.dumps(cases))
    done = run_claude(claude_binary, "plugin", "test", str(copy))
    output = done.stdout + done.stderr
    assert done.returncode == 0 and re.search(r"\b6 pass\b", output), output[-6000:]


@pytest.mark.parametrize("mutant", ["0x811c9dc5", "MOD_SOCKET_PATH_MAX_BYTES) return"])
def test_the_parity_test_catches_a_wrong_protocol_module(claude_binary: Path, tmp_path: Path, mutant: str) -> None:
    """The parity test can fail: a protocol module with a changed hash basis,
    or a path bound off by one, is caught."""
    copy = copy_plugin(tmp_path / "plugin")
    protocol = copy / "hooks" / "protocol.ts"
    source = protocol.read_text()
    assert mutant in source
    replacement = {"0x811c9dc5": "0x811c9dc6", "MOD_SOCKET_PATH_MAX_BYTES) return": "MOD_SOCKET_PATH_MAX_BYTES - 1) return"}
    protocol.write_text(source.replace(mutant, replacement[mutant]))
    tests = copy / "tests"
    shutil.rmtree(tests)
    tests.mkdir()
    (tests / "parity.test.ts").write_text(PARITY_TEST % json.dumps(parity_cases()))
    done = run_claude(claude_binary, "plugin", "test", str(copy))
    assert done.returncode != 0 and "socket paths" in done.stdout + done.stderr
