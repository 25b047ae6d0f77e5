"""The page at ``/``: the board of every session, one session's live view,
and a send box whose messages are never lost.

One self-contained document (no external resources: the server's
``Content-Security-Policy`` allows none, images only as ``data:``): the
markup and style in ``page.html``, the script in ``page.js``, put inline
here once at import. What the script does is said at the top of
``page.js``; its deciding parts (the Markdown subset, the server-sent events
parser, the outbox of pending sends, what an answer means) are plain
functions that ``tests/api/test_page.py`` runs in node, and
``tests/browser/`` drives the whole page in a headless Chromium.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

__all__ = ["PAGE", "SCRIPT"]

_HERE = files(__package__)
#: The page's script, as ``page.js`` holds it.
SCRIPT: Final = _HERE.joinpath("page.js").read_text(encoding="utf-8")
#: The document served at ``/``.
PAGE: Final = _HERE.joinpath("page.html").read_text(encoding="utf-8").replace("/*PAGE_SCRIPT*/", SCRIPT)
