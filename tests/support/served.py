"""Where a test finds ``router serve``'s URL and token: its first stdout
line names the URL (with the token only where no one else can read
stdout: a terminal, a pipe, a private file), and
the page's URL with the token is in ``page-url`` (0600) beside the
``api-token`` file of its settings directory (``router.serve``,
docs/cli.md "Tokens"). Every helper that starts ``router serve`` reads
them through :func:`served_page`, so none parses a token from stdout."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import attrs

#: ``router.serve.PAGE_URL_FILE``, not imported: the helpers run without the server side loaded.
PAGE_URL_FILE = "page-url"


@attrs.frozen
class ServedPage:
    #: The API's base URL (``http://127.0.0.1:PORT``), its token, and the page's URL with it.
    url: str
    token: str
    page: str


def page_url_file(settings: Path) -> Path:
    return Path(settings) / PAGE_URL_FILE


def served_page(first_line: str, settings: Path) -> ServedPage | None:
    """The URL and token of the ``router serve`` whose first stdout line is
    ``first_line`` and whose settings directory is ``settings``; None when
    the line is not a router's URL. The URL file must be 0600 and name the
    same address as the line (it is written before the line is printed)."""
    parts = urlsplit(first_line.strip())
    if parts.scheme != "http" or parts.hostname != "127.0.0.1" or parts.path != "/":
        return None
    if parts.query and not parse_qs(parts.query).get("token"):
        return None
    path = page_url_file(settings)
    info = os.stat(path)
    assert stat.S_IMODE(info.st_mode) == 0o600, f"{path} has mode {stat.S_IMODE(info.st_mode):04o}"
    page = path.read_text().strip()
    written = urlsplit(page)
    token = parse_qs(written.query).get("token")
    assert written.netloc == parts.netloc and token, (first_line, page)
    return ServedPage(url=f"http://{parts.netloc}", token=token[0], page=page)
