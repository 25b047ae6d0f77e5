"""The page at ``/``: its script parses (``node --check``), and it sets
text, never HTML."""

from __future__ import annotations

import subprocess
from pathlib import Path

from router.api.page import PAGE
from tests.support.npm import node_binary


def script() -> str:
    start = PAGE.index("<script>") + len("<script>")
    return PAGE[start : PAGE.index("</script>")]


def test_the_script_parses(tmp_path: Path) -> None:
    path = tmp_path / "page.js"
    path.write_text(script())
    done = subprocess.run([node_binary(), "--check", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_page_never_parses_what_it_shows() -> None:
    assert "innerHTML" not in PAGE and "insertAdjacentHTML" not in PAGE and "document.write" not in PAGE
    assert "textContent" in PAGE
