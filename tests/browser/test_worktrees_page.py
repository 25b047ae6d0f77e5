"""The page with sessions in git worktrees (``router/worktrees/``, its
routes ``router/api/routes/places.py``), at a phone's size: a real
``router serve``, real git and tmux, the echo harness, headless Chromium.

From the page: a new session in a project (the form over ``GET /projects``
and ``POST /sessions {project, ...}``), its changes (``GET
/sessions/<id>/diff``), and its end (``POST /sessions/<id>/end``): refused
first with what would be lost (409 ``unsaved-work``), then ended anyway
(``force``), its worktree gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.browser.test_page import artifact
from tests.browser.test_phone import PHONE, open_at
from tests.support.chromium import chromium
from tests.worktrees.helpers import Bench

SHEET = "document.getElementById('sheet')"


@pytest.fixture
async def bench(tmp_path: Path) -> AsyncIterator[Bench]:
    made = Bench.make(tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def test_a_worktree_session_from_the_page_its_changes_and_its_end(bench: Bench) -> None:
    code, _, err = await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    assert code == 0, err
    async with bench.serve(), chromium() as browser:
        page = await open_at(browser, f"{bench.url}/?token={bench.token}", PHONE)
        await page.wait_for("document.querySelector('#board li[data-session=\"root\"]') !== null")
        # Projects answer: the new-session button opens the form.
        await page.wait_for("document.getElementById('connection').dataset.state === 'live'")
        await page.evaluate("document.getElementById('new').click()")
        await page.wait_for("document.querySelector('#sheet select option[value=proj]') !== null")
        for name, value in (("name", "one"), ("harness", "echo"), ("prompt", "hello there")):
            await page.evaluate(f"document.querySelector('#sheet [name={name}]').value = {value!r}")
        # The form fits the phone: a project's long path does not widen it past the screen.
        assert await page.evaluate(f"{SHEET}.querySelector('#sheet-body').scrollWidth <= "
                                   f"{SHEET}.querySelector('#sheet-body').clientWidth")
        await page.screenshot(artifact("phone-worktree-new.png"))
        await page.evaluate(f"{SHEET}.querySelector('button.primary').click()")
        await page.wait_for(f"!{SHEET}.open && document.getElementById('title').innerText === 'one'", timeout=60)
        # The first prompt went in: the echo answers it; the session's place shows its buttons.
        await page.wait_for("[...document.querySelectorAll('#log .assistant')].some(d => d.innerText.includes('hello there'))",
                            timeout=60)
        await page.wait_for("!document.getElementById('changes').hidden && !document.getElementById('end').hidden")
        # The board the page keeps (written at most once a second): the session's worktree.
        worktree = Path(await page.wait_for(
            "((JSON.parse(localStorage.getItem('router.board')) || []).find(s => s.id === 'one') || {}).worktree"))
        assert worktree.is_dir()
        (worktree / "notes.txt").write_text("one\ntwo\n")

        await page.evaluate("document.getElementById('changes').click()")
        text = await page.wait_for(f"{SHEET}.open && {SHEET}.innerText.includes('notes.txt') && {SHEET}.innerText")
        assert "+2 −0" in text and "router/one" in text
        await page.evaluate(f"{SHEET}.close()")

        await page.evaluate("document.getElementById('end').click()")
        await page.wait_for(f"{SHEET}.open")
        assert str(worktree) in await page.evaluate(f"{SHEET}.innerText")
        await page.evaluate(f"{SHEET}.querySelector('button.deny').click()")
        lost = await page.wait_for(f"{SHEET}.innerText.includes('would lose') && {SHEET}.innerText")
        assert "notes.txt" in lost
        assert worktree.is_dir()
        await page.screenshot(artifact("phone-worktree-end-refused.png"))
        await page.evaluate(f"[...{SHEET}.querySelectorAll('button.deny')].find((b) => b.innerText === 'end anyway').click()")
        await page.wait_for("document.getElementById('outcome').innerText.startsWith('one ended; its worktree removed')",
                            timeout=60)
        assert not worktree.exists()
        await page.wait_for("document.querySelector('#board li[data-session=\"one\"]') === null", timeout=30)
        assert page.errors == []
