"""The TCP API's access token: made once, kept in a 0600 file, checked in
constant time (light: ``router send --url`` reads it without loading the
server side).

Who may use the API on ``127.0.0.1``: anyone on the machine can connect to
a loopback port, so the port alone admits every local user and process. The
token narrows that to whoever can read one file: ``api-token`` in the
user's settings directory (``--settings``, else ``$ROUTER_SETTINGS_DIR``,
else ``$XDG_CONFIG_HOME/router``, else ``~/.config/router``).

- **Made once.** The first router to start writes 32 random bytes
  (:func:`secrets.token_urlsafe`, 43 characters) to a temporary file made
  0600, then links it into place (``link`` fails when the name exists, so
  two routers starting at once agree on one token: the loser reads the
  winner's). Every later start reuses it, so a page opened once keeps
  working across restarts.
- **Refused when it is not private.** A token file that is not a regular
  file of this user's with mode exactly 0600 (a symbolic link included) is
  refused with ``token-file-unsafe`` and a sentence that says what to
  change; nothing is served then. A file whose content is not a token is
  ``token-file-bad``.
- **Checked in constant time.** :func:`check_bearer` compares with
  :func:`hmac.compare_digest`; ``Authorization: Bearer TOKEN`` is the only
  form taken (``no-token`` when absent or not of that form, ``bad-token``
  when it does not match).

The private Unix socket takes no token: its 0700 directory is the check
(:mod:`router.board.local`).
"""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import secrets
from pathlib import Path
from typing import Final, Mapping

from router.errors import Refusal
from router.tokens import check_private

__all__ = ["TOKEN_FILE", "check_bearer", "load_or_create_token", "read_token", "token_path"]

#: The token's file, in the settings directory.
TOKEN_FILE: Final = "api-token"
#: Random bytes in a new token (ours: 256 bits, as ``secrets`` advises for tokens).
TOKEN_BYTES: Final = 32
#: What a token file may hold: the URL-safe base64 ``token_urlsafe`` writes
#: (and the trailing newline a person may have added).
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{16,256}")


def new_token() -> str:
    """A fresh token: ``token_urlsafe``'s alphabet, but never starting with
    ``-`` (or ``_``): a person pastes it after an option (``--token T``),
    and argparse reads a value that starts with ``-`` as another option
    (1 token in 32 did before)."""
    while True:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if token[0].isalnum():
            return token


def token_path(settings_dir: Path) -> Path:
    return Path(settings_dir) / TOKEN_FILE


def read_token(path: Path) -> str:
    """The token in ``path``. Raises :class:`~router.errors.Refusal`:
    ``no-token-file`` (missing), ``token-file-unsafe`` (not a regular file
    of this user's with mode 0600), ``token-file-bad`` (not a token)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refusal("no-token-file", f"there is no token file {path}; `router serve` makes it on its first "
                      "start (or give --token)", path=str(path)) from None
    except OSError as exc:
        raise Refusal("token-file-unsafe", f"the token file {path} cannot be opened ({exc.strerror}); it must be "
                      "a regular file, not a symbolic link", path=str(path)) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        check_private(path, info)
        raw = file.read(1024)
    text = raw.decode("ascii", errors="replace").strip()
    if not _TOKEN.fullmatch(text):
        raise Refusal("token-file-bad", f"the token file {path} holds no token; remove it and start `router serve` "
                      "again to make a new one", path=str(path))
    return text


def load_or_create_token(settings_dir: Path) -> str:
    """The token of ``settings_dir``, made (0600) when there is none yet;
    the refusals of :func:`read_token` otherwise, and
    ``token-file-unsafe`` when it cannot be written."""
    path = token_path(settings_dir)
    try:
        return read_token(path)
    except Refusal as refused:
        if refused.code != "no-token-file":
            raise
    try:
        Path(settings_dir).mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                os.fchmod(file.fileno(), 0o600)  # whatever the umask did
                file.write(new_token().encode() + b"\n")
                file.flush()
                os.fsync(file.fileno())
            with contextlib.suppress(FileExistsError):  # another router made it first: use theirs
                os.link(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    except OSError as exc:
        raise Refusal("token-file-unsafe", f"could not write the token file {path}: {exc.strerror or exc}",
                      path=str(path)) from None
    return read_token(path)


def check_bearer(headers: Mapping[str, str], token: str) -> Refusal | None:
    """None when ``headers`` carry ``Authorization: Bearer <token>``; the
    refusal otherwise (``no-token``, ``bad-token``)."""
    value = headers.get("authorization")
    scheme, _, given = (value or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return Refusal("no-token", "this API takes `Authorization: Bearer TOKEN`; the token is in the URL "
                       "`router serve` prints first, and in the api-token file of your settings directory")
    if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode()):
        return Refusal("bad-token", "the token is not this router's; use the one in the URL `router serve` "
                       "printed first (the api-token file of your settings directory)")
    return None
