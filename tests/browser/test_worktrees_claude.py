"""A Claude Code session in a git worktree, from the page at a phone's size:
the real Claude Code in tmux against the fake Messages API (the world of
``tests/worktrees/test_claude.py``: its prepared home, trust, plug-in copy,
``ROUTER_CLAUDE_ARGS``), a real ``router serve``, headless Chromium at
390×844 (mobile, touch).

From the page: the new-session form starts it (harness ``claude-code``, a
first message); the answer shows in the session view and the first message
went to the model once; the changes view shows the file the agent wrote;
"end" is refused for that unsaved work (409) and "end anyway" ends it: its
worktree, its branch and its tmux session are gone.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.browser.test_page import artifact
from tests.browser.test_phone import PHONE, open_at
from tests.e2e_mod.helpers import last_user_text
from tests.fakes.anthropic import FakeAnthropic
from tests.support.chromium import chromium
from tests.support.polling import until
from tests.worktrees import test_claude as claude
from tests.worktrees.helpers import Bench, git

# The fixtures of the CLI test: the fake Messages API, and the bench with the real binary.
fake = claude.fake
bench = claude.bench

SHEET = "document.getElementById('sheet')"
START = claude.START


async def test_a_claude_code_session_from_the_page_its_answer_changes_and_forced_end(bench: Bench,
                                                                                      fake: FakeAnthropic) -> None:
    code, _, err = await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    assert code == 0, err
    async with bench.serve(), chromium() as browser:
        page = await open_at(browser, f"{bench.url}/?token={bench.token}", PHONE)
        await page.wait_for("document.querySelector('#board li[data-session=\"root\"]') !== null")
        await page.wait_for("document.getElementById('connection').dataset.state === 'live'")
        await page.evaluate("document.getElementById('new').click()")
        await page.wait_for("document.querySelector('#sheet select option[value=proj]') !== null")
        for name, value in (("name", "cc"), ("harness", "claude-code"), ("prompt", claude.MARK)):
            await page.evaluate(f"document.querySelector('#sheet [name={name}]').value = {value!r}")
        await page.evaluate(f"{SHEET}.querySelector('button.primary').click()")
        # The session view opens on it: its id is Claude Code's own, its place the project's worktree.
        await page.wait_for(f"!{SHEET}.open", timeout=START)
        entry = await page.wait_for(
            "(JSON.parse(localStorage.getItem('router.board')) || []).find(s => s.project === 'proj' && s.worktree"
            " && document.getElementById('title').innerText.startsWith(s.id))", timeout=60)
        session, worktree = entry["id"], Path(entry["worktree"])
        assert entry["kind"] == "claude-code", entry

        # The agent ran the tool call (the file is in its worktree) and its answer shows in the session view.
        with trio.fail_after(START):
            await until(lambda: (worktree / claude.FILE).exists(), step=0.1)
        with trio.fail_after(START):
            while not (listed := (await bench.listed()).get(session)) or not listed.get("connected"):
                await trio.sleep(0.2)
        # The page opened the session's view on the 201, before Claude Code's plug-in connected: the
        # live stream is asked again after a refusal, and the view follows the session to the router
        # the board lists it under (the plug-in's), with no tap from the person.
        await page.wait_for(f"document.getElementById('title').innerText.startsWith({session!r})"
                            " && document.getElementById('connection').dataset.state === 'live'", timeout=60)
        # Its answer: the tool call done, and the fake model's text after it (its words depend on what
        # Claude Code's follow-up request ends with: the CLI test's fake answers either way).
        answered = ("(() => { const a = [...document.querySelectorAll('#log .assistant')].map(d => d.innerText.trim());"
                    " const i = a.findIndex(t => t.includes('Bash') && t.includes('done'));"
                    " return i >= 0 && a.slice(i).some(t => /The greeting file is written\\.|(^|\\n)ok$/.test(t)); })()")
        await page.wait_for(answered, timeout=START)
        await page.wait_for("!document.getElementById('changes').hidden && !document.getElementById('end').hidden")
        await page.screenshot(artifact("phone-worktree-claude-answered.png"))
        # The first message went in once: one request carries it, none twice.
        asked = [r for r in fake.messages_requests() if claude.MARK in last_user_text(r)]
        assert asked and all(json.dumps(r.messages()).count(claude.MARK) == 1 for r in fake.messages_requests()), \
            [json.dumps(r.messages())[:300] for r in asked]

        await page.evaluate("document.getElementById('changes').click()")
        text = await page.wait_for(f"{SHEET}.open && {SHEET}.innerText.includes({claude.FILE!r}) && {SHEET}.innerText",
                                   timeout=60)
        assert f"{claude.FILE} +1 −0" in text and "router/cc" in text, text
        await page.evaluate(f"{SHEET}.close()")

        await page.evaluate("document.getElementById('end').click()")
        await page.wait_for(f"{SHEET}.open")
        assert str(worktree) in await page.evaluate(f"{SHEET}.innerText")
        await page.evaluate(f"{SHEET}.querySelector('button.deny').click()")
        lost = await page.wait_for(f"{SHEET}.innerText.includes('would lose') && {SHEET}.innerText", timeout=60)
        assert claude.FILE in lost, lost
        assert worktree.is_dir() and await bench.tmux_has("cc")
        await page.evaluate(f"[...{SHEET}.querySelectorAll('button.deny')].find((b) => b.innerText === 'end anyway').click()")
        await page.wait_for(f"document.getElementById('outcome').innerText.startsWith({session + ' ended; its worktree removed'!r})",
                            timeout=START)
        assert not worktree.exists()
        assert "router/cc" not in git(bench.repo, "branch", "--list")
        assert not await bench.tmux_has("cc")
        await page.wait_for(f"document.querySelector('#board li[data-session=\"{session}\"]') === null", timeout=60)
        assert page.errors == []
