"""Where a command takes a secret, and where it leaves one.

A command line is public on this machine: every local user reads any
process's arguments in ``/proc/PID/cmdline``. So every token a command
takes has two ways in that stay private, and the flag is only the last
resort (kept for scripts; its help says why not to use it):

- an environment variable (``/proc/PID/environ`` is readable by the
  process's own user only);
- ``--…-file FILE``: a regular file of this user's with mode exactly 0600
  (a symbolic link, another owner or a wider mode is refused with
  ``token-file-unsafe`` and a sentence saying what to change).

The names, one vocabulary across the commands (docs/cli.md, "Tokens"):

================================  ===================  ==========================
what                              environment          file flag
================================  ===================  ==========================
the TCP API's token (``send`` …)  ``ROUTER_TOKEN``     ``--token-file``
a daemon's token (``serve``,      ``ROUTER_DAEMON_``   ``--daemon-token-file``
``mcp``)                          ``TOKEN``
a daemon's token (``prompt``,     ``ROUTER_DAEMON_``   ``--token-file``
whose ``--token`` is a fixed      ``TOKEN``
name: docs/cli.md)
================================  ===================  ==========================

Precedence: the flag, then the file, then the environment; a flag and a
file both given is a usage error (``token-twice``).

Where one is left: :func:`write_private` writes a file 0600 whatever the
umask (a temporary file made 0600, then renamed into place), which is how
``router serve`` leaves the page's URL with its token (``page-url`` beside
the ``api-token`` file) when its stdout is not a terminal.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final, Mapping

from router.errors import Refusal

__all__ = ["API_TOKEN_VARIABLE", "DAEMON_TOKEN_VARIABLE", "read_secret", "secret_from", "write_private"]

#: The TCP API's token (``router send``, ``abort``, ``resume``, ``cancel-park``, ``launch`` with ``--url``).
API_TOKEN_VARIABLE: Final = "ROUTER_TOKEN"
#: A container daemon's token (``router serve --daemon``, ``router mcp --daemon``, ``router prompt``).
DAEMON_TOKEN_VARIABLE: Final = "ROUTER_DAEMON_TOKEN"
#: The most a secret file may hold (ours: a token is tens of characters).
MAX_SECRET_BYTES: Final = 4096


def check_private(path: Path | str, info: os.stat_result) -> None:
    """Refuse (``token-file-unsafe``) a file that is not a regular file of
    this user's with mode 0600."""
    if not stat.S_ISREG(info.st_mode):
        raise Refusal("token-file-unsafe", f"the token file {path} is not a regular file", path=str(path))
    if info.st_uid != os.geteuid():
        raise Refusal("token-file-unsafe", f"the token file {path} is owned by uid {info.st_uid}, not by this user "
                      f"(uid {os.geteuid()})", path=str(path))
    mode = stat.S_IMODE(info.st_mode)
    if mode != 0o600:
        raise Refusal("token-file-unsafe", f"the token file {path} has mode {mode:04o}; it must be 0600, so that "
                      f"only you can read it (chmod 600 {path})", path=str(path), mode=f"{mode:04o}")


def read_secret(path: Path | str) -> str:
    """The secret in ``path``: its text with surrounding whitespace
    stripped. Refuses ``no-token-file``, ``token-file-unsafe`` (see
    :func:`check_private`; a symbolic link too) and ``token-file-bad``
    (empty, not text, or longer than :data:`MAX_SECRET_BYTES`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refusal("no-token-file", f"there is no token file {path}", path=str(path)) from None
    except OSError as exc:
        raise Refusal("token-file-unsafe", f"the token file {path} cannot be opened ({exc.strerror}); it must be "
                      "a regular file of yours, not a symbolic link", path=str(path)) from None
    with os.fdopen(fd, "rb") as file:
        check_private(path, os.fstat(file.fileno()))
        raw = file.read(MAX_SECRET_BYTES + 1)
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        text = ""
    if not text or len(raw) > MAX_SECRET_BYTES or any(ch.isspace() for ch in text):
        raise Refusal("token-file-bad", f"the token file {path} holds no token (one line of text, at most "
                      f"{MAX_SECRET_BYTES} bytes)", path=str(path))
    return text


def secret_from(*, flag: str | None, file: str | None, env: Mapping[str, str], variable: str,
                flag_name: str = "--token", file_name: str = "--token-file") -> str | None:
    """The secret a command was given (see the module docstring for the
    order), or None when it was given none. Refuses ``token-twice`` and
    what :func:`read_secret` refuses."""
    if flag and file:
        raise Refusal("token-twice", f"give {flag_name} or {file_name}, not both ({file_name} keeps it off the "
                      "command line)")
    if flag:
        return flag
    if file:
        return read_secret(file)
    return env.get(variable) or None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, mode 0600 whatever the umask, replacing
    the file atomically (readers see the old text or the new, never a
    part). Raises ``OSError``."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(text.encode("utf-8"))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
