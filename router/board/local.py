"""Each router's private Unix socket: the API its TCP port serves, for this
user alone.

Every router of this user on this machine (``router serve``, each Claude
Code session's ``router mcp``) binds one socket in one shared directory, so
that ``router sessions`` and ``router send`` find them all with no URL:

- **Where.** :func:`local_directory`: ``$XDG_RUNTIME_DIR/router`` when
  ``XDG_RUNTIME_DIR`` names an absolute directory (the user's private run
  directory, emptied at logout), else ``<data dir>/run`` with the data
  directory from the environment (``$ROUTER_DATA_DIR``, else
  ``$XDG_DATA_HOME/router``, else ``~/.local/share/router``). It depends on
  the environment only, never on ``--data-dir``: every router of the user
  meets in the same one.
- **Who may.** The directory is created 0700 and checked before anything
  is bound in it (``router._unix``, the check the mod link makes): a real
  directory, owned by this user, mode 0700, else ``unsafe-directory`` and
  nothing bound. The socket itself is 0600.
- **Name.** ``<name>.sock``: the router's name, which ``router sessions``
  shows and ``--router`` takes. A ``router serve`` is named by ``--name``,
  else ``serve-<6 hex>`` from a hash of its data directory, so its name
  survives a restart (and a user service's restart, ``router service``);
  two routers cannot share a data directory, so two defaults never
  collide. A ``router mcp`` is ``mcp-<pid>-<4 hex>``: it lives and dies
  with its Claude Code session. A stable name's socket may be left by a
  router that died: :func:`claim_name` removes it only when
  :func:`router._unix.listener_gone` proves nobody listens there, and
  refuses (``router-name-taken``) while a live router holds the name.
- **No half-born socket.** The socket is bound at ``<name>.<pid>.binding``, made
  listening, and only then linked as ``<name>.sock`` (a Unix socket is
  reached through its file's inode, which the link shares; a link, unlike a
  rename, fails when the name exists). A client that
  finds a ``.sock`` whose connect is refused therefore knows nobody will
  ever listen there (the router died, SIGKILL included) and may remove it;
  before the link it would have raced a router between ``bind`` and
  ``listen``. A SIGKILL between those two calls can leave a ``.binding``
  file; clients never read them.
- **What it serves.** The API app (:class:`router.api.server.LocalServer`
  binds the socket with the names and the directory made here and serves
  the app on it, as :class:`router.api.server.ApiServer` serves it on TCP),
  plus ``GET /router``: who this router is (:class:`RouterInfo`).

This module names and places the socket only; it imports nothing of the
API, so the board's package stays below it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from pathlib import Path
from typing import Any, Final, Mapping

import attrs

from router._unix import listener_gone, make_private_directory
from router.board.paths import BINDING_SUFFIX, SOCKET_SUFFIX, local_directory, uses_runtime_dir
from router.errors import Refusal

__all__ = ["RouterInfo", "check_name", "claim_name", "make_local_directory", "router_name", "stable_name"]

def make_local_directory(env: Mapping[str, str]) -> Path:
    """:func:`local_directory`, created (0700) when missing and checked:
    a :class:`~router.errors.Refusal` (``unsafe-directory``) unless it is
    a real directory of this user's with mode 0700. Under the data
    directory its parents are made as the data directory is; a missing
    ``$XDG_RUNTIME_DIR`` is not ours to make, and is refused."""
    directory = local_directory(env)
    if not uses_runtime_dir(env):
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # the check says what is wrong
    make_private_directory(str(directory))
    return directory


def router_name(command: str) -> str:
    """A name for a router that lives with its process: ``<command>-<pid>-<4 hex>``."""
    return f"{command}-{os.getpid()}-{secrets.token_hex(2)}"


#: A name a person gives (``router serve --name``): a file name's safe
#: letters, at most 64 (ours: it is a socket file's stem and a URL query value).
NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name: str) -> str:
    """``name`` when it can name a router, else ``bad-router-name``."""
    if NAME_PATTERN.fullmatch(name) is None or name.endswith((SOCKET_SUFFIX, BINDING_SUFFIX)):
        raise Refusal("bad-router-name", f"{name!r} cannot name a router: use 1 to 64 letters, digits, '.', '_' "
                      "or '-', starting with a letter or digit", name=name)
    return name


def stable_name(command: str, data_dir: Path) -> str:
    """The name a router keeps across restarts: ``<command>-<6 hex>`` from
    its data directory's resolved path."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(data_dir))).hexdigest()
    return f"{command}-{digest[:6]}"


def claim_name(path: str) -> None:
    """Make ``path`` (a stable name's socket) free to take: absent, or a
    dead router's socket, which is removed; ``router-name-taken`` while a
    live router listens there."""
    if not os.path.lexists(path):
        return
    if not listener_gone(path):
        name = os.path.basename(path)[: -len(SOCKET_SUFFIX)]
        raise Refusal("router-name-taken", f"a router named {name} is already running ({path}); stop it, or give "
                      "this one another name with --name", path=path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@attrs.frozen(kw_only=True)
class RouterInfo:
    """Who a router is, as ``GET /router`` answers."""

    name: str
    command: str
    pid: int
    socket: str
    data_dir: str
    #: Its TCP API, when it serves one.
    url: str | None = None
    #: Its working directory (a ``router mcp`` runs where its Claude Code session does).
    cwd: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "command": self.command, "pid": self.pid, "socket": self.socket,
                               "dataDir": self.data_dir}
        if self.url is not None:
            out["url"] = self.url
        if self.cwd is not None:
            out["cwd"] = self.cwd
        return out
