"""``router new`` with the real Claude Code 2.1.332 in tmux, against the fake
Messages API: the session starts in a fresh worktree with the plug-in, its
first prompt is answered once, the file it writes shows in ``router diff``,
``router end`` refuses while that is uncommitted; a ``router serve`` killed
with SIGKILL and started again adopts the running session; once the work
is committed and merged, ``router end`` removes the worktree, the branch
and the tmux session, and the session leaves the board."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from tests.e2e_claude.helpers import started_binary
from tests.e2e_mod.helpers import API_KEY, copy_plugin, last_user_text, require_tmux
from tests.fakes.anthropic import FakeAnthropic, RecordedRequest, Reply, Respond, text_reply, tool_reply
from tests.support.polling import until
from tests.worktrees.helpers import Bench, git, kill

#: The words of the first prompt, and the file the fake model has Claude Code write.
MARK = "please write the greeting file"
FILE = "hello.txt"
#: Bounds on waits for the real binary; they bound a wait, they time nothing.
START = 90


def _answer(request: RecordedRequest) -> Reply:
    """The fake model: asked for the greeting, it runs one Bash command;
    given the command's result, it says it is done; anything else (a title,
    a summary) gets a line of text."""
    last = last_user_text(request)
    messages = request.messages()
    has_result = any(isinstance(block, dict) and block.get("type") == "tool_result"
                     for message in messages[-1:] if isinstance(message, dict)
                     for block in (message.get("content") if isinstance(message.get("content"), list) else []))
    if has_result:
        return text_reply("The greeting file is written.")
    if MARK in last:
        return tool_reply("Bash", {"command": f"echo hello >> {FILE}", "description": "write the greeting"})
    return text_reply("ok")


def _seed_home(home: Path, trusted: list[Path]) -> None:
    (home / ".claude").mkdir(parents=True)
    state = {"hasCompletedOnboarding": True,
             "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
             "projects": {str(each): {"hasTrustDialogAccepted": True} for each in trusted}}
    (home / ".claude.json").write_text(json.dumps(state))
    (home / ".claude" / "settings.json").write_text(json.dumps({"skipDangerousModePermissionPrompt": True}))


@pytest.fixture
async def fake(nursery: trio.Nursery) -> FakeAnthropic:
    made = FakeAnthropic(fallback=Respond(_answer))
    await nursery.start(made.run)
    return made


@pytest.fixture
async def bench(fake: FakeAnthropic) -> AsyncIterator[Bench]:
    require_tmux()
    claude = started_binary()
    root = Path(tempfile.mkdtemp(prefix="wt-", dir="/tmp"))
    os.chmod(root, 0o700)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(claude)
    home = root / "home"
    extra = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MAX_RETRIES": "0",
        "ROUTER_PLUGIN_DIR": str(copy_plugin(root / "plugin")),
        "ROUTER_CLAUDE_ARGS": "--dangerously-skip-permissions",
        **({"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}),
    }
    made = Bench.make(root, extra)
    _seed_home(home, [made.repo])  # Claude Code takes a worktree's trust from its main repository
    try:
        yield made
    finally:
        await made.close()
        with trio.move_on_after(20):
            await until(lambda: not _processes_in(root), step=0.1)
        shutil.rmtree(root, ignore_errors=True)


def _processes_in(root: Path) -> list[int]:
    from tests.e2e_claude.helpers import processes_in

    return processes_in(root)


async def test_new_prompt_diff_restart_end(bench: Bench, fake: FakeAnthropic) -> None:
    await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    async with bench.serve():
        code, made, err = await bench.router_json("new", "proj", "--name", "cc", "--prompt", MARK, "--json")
        assert code == 0, (err, bench.log())
        session, worktree = made["session"], Path(made["worktree"])
        assert made["harness"] == "claude-code" and made["tmux"] == "cc" and made["branch"] == "router/cc"
        with trio.fail_after(START):
            await until(lambda: (worktree / FILE).exists(), step=0.1)
        with trio.fail_after(START):
            while not (listed := (await bench.listed()).get(session)) or not listed.get("connected"):
                await trio.sleep(0.2)
        assert listed["kind"] == "claude-code" and listed["project"] == "proj" and listed["worktree"] == str(worktree)
        code, diff, err = await bench.router_json("diff", session, "--json")
        assert code == 0, err
        assert [(f["path"], f["added"], f["removed"]) for f in diff["files"]] == [(FILE, 1, 0)]
        code, _, err = await bench.router("end", session)
        assert code == 1 and "unsaved-work" in err and FILE in err, err
        kill(bench.process)
        await bench.process.wait()
    assert await bench.tmux_has("cc")
    async with bench.serve():
        with trio.fail_after(60):
            await until(lambda: f"adopted {session}" in bench.log(), step=0.1)
        git(worktree, "add", FILE)
        git(worktree, "commit", "-q", "-m", "the greeting")
        git(bench.repo, "merge", "-q", "--ff-only", "router/cc")
        code, out, err = await bench.router("end", "cc")
        assert code == 0 and "removed its worktree and branch" in out, (err, bench.log())
        assert not worktree.exists() and "router/cc" not in git(bench.repo, "branch", "--list")
        assert not await bench.tmux_has("cc")
        with trio.fail_after(60):
            while session in await bench.listed():
                await trio.sleep(0.2)
    # The first prompt went in once: one user message with its words, one line written.
    assert (bench.repo / FILE).read_text() == "hello\n"
    asked = [r for r in fake.messages_requests() if MARK in last_user_text(r)]
    assert asked and all(json.dumps(r.messages()).count(MARK) == 1 for r in fake.messages_requests()), \
        [json.dumps(r.messages())[:300] for r in asked]
