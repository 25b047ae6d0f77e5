"""The sans-IO decisions of sessions in worktrees: ids, names, plans, what
ending may remove, git's output read; and the refusals a local session gets
before anything is made (tmux or the agent's program missing)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.daemon.cli import ADAPTERS
from router.errors import Refusal
from router.worktrees import Worktrees
from router.worktrees.core import (DAEMON_HARNESSES, MAX_SESSION_ID, end_verdict, harness_refusal, name_refusal,
                                   parse_log, parse_numstat, parse_status, plan_new, session_id_refusal, split_patch)


@pytest.mark.parametrize("bad", ["", "a\x00b", "tab\there", "new\nline", "del\x7f", "c1\x85", "ls\u2028",
                                 "x" * (MAX_SESSION_ID + 1), None, 3])
def test_ids_that_cannot_be_one_are_refused(bad: object) -> None:
    refused = session_id_refusal(bad)
    assert refused is not None and refused.code == "bad-session-id"


@pytest.mark.parametrize("good", ["a", "team/a b", "bad id/!", "x" * MAX_SESSION_ID, "héllo", "0c6d1f2e-8a7b"])
def test_any_printable_id_is_one(good: str) -> None:
    assert session_id_refusal(good) is None


@given(st.text(max_size=300))
def test_an_id_is_refused_exactly_when_it_is_empty_long_or_has_a_control(text: str) -> None:
    import unicodedata

    bad = not text or len(text) > MAX_SESSION_ID or any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)
    assert (session_id_refusal(text) is not None) == bad


@pytest.mark.parametrize("bad", ["", "-x", ".x", "a/b", "a b", "x..y", "x.lock", "x" * 65, "a:b"])
def test_bad_names(bad: str) -> None:
    refused = name_refusal(bad)
    assert refused is not None and refused.code == "bad-name"


def test_the_plan() -> None:
    plan = plan_new(project="p", name="fix.v2", branch=None, where="local", worktrees=Path("/d/worktrees"))
    assert not isinstance(plan, Refusal)
    assert (plan.branch, plan.worktree, plan.tmux) == ("router/fix.v2", Path("/d/worktrees/p/fix.v2"), "fix-v2")
    plan = plan_new(project="p", name="x", branch="mine", where="container", worktrees=Path("/w"))
    assert not isinstance(plan, Refusal) and plan.branch == "mine" and plan.tmux is None
    refused = plan_new(project="p", name="x", branch=None, where="moon", worktrees=Path("/w"))
    assert isinstance(refused, Refusal) and refused.code == "bad-where"


def test_what_ending_removes() -> None:
    saved = end_verdict(dirty=[], unsaved=[], branch="b", keep_worktree=False, force=False)
    assert (saved.remove_worktree, saved.remove_branch, saved.refusal) == (True, True, None)
    kept = end_verdict(dirty=["a"], unsaved=["c1 x"], branch="b", keep_worktree=True, force=False)
    assert (kept.remove_worktree, kept.remove_branch, kept.refusal) == (False, False, None)
    forced = end_verdict(dirty=["a"], unsaved=["c1 x"], branch="b", keep_worktree=False, force=True)
    assert (forced.remove_worktree, forced.remove_branch) == (True, True)
    refused = end_verdict(dirty=[f"f{i}" for i in range(12)], unsaved=["c1 fix it"], branch="router/b",
                          keep_worktree=False, force=False).refusal
    assert refused is not None and refused.code == "unsaved-work"
    assert "12 uncommitted file(s)" in refused.message and "f9" in refused.message and "and 2 more" in refused.message
    assert "1 commit(s) on router/b" in refused.message and "c1 fix it" in refused.message


def test_git_output_read() -> None:
    assert parse_status(b" M a.txt\0?? new file\0R  new.txt\0old.txt\0") == ["a.txt", "new file", "new.txt"]
    assert parse_numstat(b"2\t0\tnotes.txt\0-\t-\tpic.png\0junk\0") == [
        parse_numstat(b"2\t0\tnotes.txt\0")[0], parse_numstat(b"-\t-\tpic.png\0")[0]]
    [binary] = parse_numstat(b"-\t-\tpic.png\0")
    assert (binary.added, binary.removed) == (None, None)
    assert [(c.sha, c.subject) for c in parse_log(b"abc\0first\0def\0second line\0")] == [
        ("abc", "first"), ("def", "second line")]
    patch = "diff --git a/x y b/x y\n+1\ndiff --git a/z b/z\n-2\n"
    assert split_patch(patch, ["x y", "z"]) == {"x y": "diff --git a/x y b/x y\n+1\n", "z": "diff --git a/z b/z\n-2\n"}


@given(st.binary(max_size=200))
def test_git_readers_never_raise(data: bytes) -> None:
    parse_status(data)
    parse_numstat(data)
    parse_log(data)
    split_patch(data.decode("utf-8", "replace"), ["a"])


def test_harnesses_are_the_daemons() -> None:
    assert set(DAEMON_HARNESSES) == set(ADAPTERS) - {"replay"}  # recorded turns for benchmarks, not an agent
    cases = [("echo", "in-process", None), ("nonsense", "docker", "unknown-harness"),
             ("claude-code", "docker", "harness-off"), ("codex", "in-process", "harness-unsupported"),
             ("codex", "docker", None), ("no.such:thing", "docker", "unknown-harness")]
    for name, launcher, code in cases:
        refused = harness_refusal(name, plugin_harnesses=["echo", "claude-code"], switched_on=["echo"],
                                  launcher=launcher, module_found=False)
        assert getattr(refused, "code", None) == code, (name, launcher, refused)


async def test_tmux_or_the_agent_missing_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    def worktrees(path: str) -> Worktrees:
        return Worktrees(router=None, layer=None, board=None, host=None, launcher=None, settings_dir=tmp_path,
                         data_dir=tmp_path, env={"PATH": path})

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Refusal) as refused:
        await worktrees(str(empty)).local_argv("claude-code")
    assert refused.value.code == "tmux-missing"
    tmux = subprocess.run(["which", "tmux"], capture_output=True, text=True).stdout.strip()
    if not tmux:
        pytest.skip("tmux is not installed")
    if (Path(tmux).parent / "claude").exists():
        pytest.skip("claude is installed beside tmux")
    with pytest.raises(Refusal) as refused:
        await worktrees(str(Path(tmux).parent)).local_argv("claude-code")
    assert refused.value.code == "agent-missing"
    with pytest.raises(Refusal) as refused:
        await worktrees(str(Path(tmux).parent)).local_argv("codex")
    assert refused.value.code == "harness-unsupported"


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=3), max_leaves=10)
_bodies = st.one_of(st.binary(max_size=100), _json_values.map(lambda v: json.dumps(v).encode()),
                    st.fixed_dictionaries({}, optional={"project": _json_values, "name": _json_values,
                                                        "from": _json_values, "force": _json_values,
                                                        "keepWorktree": _json_values}).map(
                        lambda v: json.dumps(v).encode()))


@given(_bodies)
def test_hostile_bodies_are_refused_bad_body_or_read(raw: bytes) -> None:
    from router.api.bodies import EndBody, NewSessionBody, read_body

    for cls in (NewSessionBody, EndBody):
        try:
            body = read_body(raw, cls, "POST /x")
        except Refusal as refused:
            assert refused.code == "bad-body"
            continue
        if cls is NewSessionBody:
            assert type(body.project) is str and all(type(getattr(body, f)) in (str, type(None))
                                                     for f in ("name", "branch", "from_", "harness", "where", "prompt"))
        else:
            assert type(body.force) is bool and type(body.keep_worktree) is bool
