"""Private Unix sockets: the 0700 directory they live in, binding one, and
removing it again.

Both socket servers of the router put their socket in a directory only this
user can enter: the mod link (``<base>/claude-envoy``, docs/modlink.md "Where
the socket is") and every router's local socket (``router.board.local``). The
directory is the lock on the door: a socket in it is reachable only by
someone who can enter it, so before anything is bound in it (or, for a
client, trusted in it) it must be a real directory (not a symbolic link),
owned by this user, mode exactly 0700. Anything else is refused with
``unsafe-directory`` and a sentence that says what to change.

The checks raise ``refusal(code, message, path=...)``: a
:class:`router.errors.Refusal` by default, or the caller's subclass of it
(the mod link's ``ModLinkRefused``).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from typing import Callable

from router.errors import Refusal

__all__ = ["bind_private_socket", "check_private_directory", "listener_gone", "make_private_directory",
           "remove_if_bound"]

#: The longest path a Unix socket can be bound at on Linux: ``sun_path`` is
#: 108 bytes, one of them the terminating NUL (``man 7 unix``).
MAX_SOCKET_PATH_BYTES = 107

#: How a caller builds its refusal: ``refusal(code, message, path=...)``.
RefusalType = Callable[..., Refusal]


def make_private_directory(directory: str, *, refusal: RefusalType = Refusal) -> None:
    """Create ``directory`` (mode 0700) when it is missing, then check it
    (:func:`check_private_directory`). Its parent must exist."""
    try:
        os.mkdir(directory, 0o700)
        os.chmod(directory, 0o700)  # whatever the umask took away or not
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise refusal(
            "unsafe-directory",
            f"{os.path.dirname(directory)} does not exist, so the private directory "
            f"{directory} cannot be made in it; create it (mode 0700) or set XDG_RUNTIME_DIR",
            path=directory,
        ) from None
    except OSError as exc:
        raise refusal(
            "unsafe-directory", f"could not create {directory}: {os.strerror(exc.errno or 0)}", path=directory
        ) from exc
    check_private_directory(directory, refusal=refusal)


def check_private_directory(directory: str, *, refusal: RefusalType = Refusal) -> None:
    """Refuse (``unsafe-directory``) unless ``directory`` is a real directory,
    owned by this user, mode 0700. A missing one raises
    ``FileNotFoundError``."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise refusal(
            "unsafe-directory", f"{directory} is {kind}; a socket only goes in a real directory", path=directory
        )
    if info.st_uid != os.geteuid():
        raise refusal(
            "unsafe-directory",
            f"{directory} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}); "
            "another user could read the sessions through it",
            path=directory,
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode != 0o700:
        raise refusal(
            "unsafe-directory",
            f"{directory} has mode {mode:04o}, not 0700; run 'chmod 700 {directory}' if it is yours",
            path=directory,
        )


def bind_private_socket(path: str, *, refusal: RefusalType = Refusal) -> socket.socket:
    """A Unix socket bound at ``path`` (mode 0600), listening, non-blocking.
    The caller checked the directory and cleared the path. Refuses
    ``bind-failed`` and leaves nothing bound."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fsencode(path))
        # The directory is already 0700; the socket is the user's alone too.
        os.chmod(path, 0o600)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        why = "another server bound it first" if exc.errno == errno.EADDRINUSE else os.strerror(exc.errno or 0)
        raise refusal("bind-failed", f"could not bind {path}: {why}", path=path) from exc
    return sock


def remove_if_bound(path: str, bound: os.stat_result) -> None:
    """Remove the socket file at ``path`` if it is still the one ``bound``
    describes: after a stale takeover another server may own the path."""
    try:
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino):
            os.unlink(path)
    except FileNotFoundError:
        pass


def listener_gone(path: str) -> bool:
    """Whether nothing listens on the socket file at ``path``, provably: a
    connect is refused (``ECONNREFUSED``: no process holds a listening socket
    bound to that file; a process killed with SIGKILL leaves exactly that)
    or the file is gone. A connect that is accepted, or that would wait
    (``EAGAIN``: a live listener whose backlog is full), is not gone. Never
    blocks: the connect is non-blocking, and a Unix connect never waits on
    the network."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(os.fsencode(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False
