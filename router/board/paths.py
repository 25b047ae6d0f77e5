"""Where this user's routers meet: the local directory and the names in it
(light: the CLI reads this without loading the server side; see
:mod:`router.board.local` for why the names are what they are)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Mapping

__all__ = ["BINDING_SUFFIX", "INFO_ROUTE", "LOCAL_HOST", "SOCKET_SUFFIX", "local_directory", "socket_path"]

#: The ``Host`` a client names a router's Unix socket by (ours; any name
#: would do, the socket is the address).
LOCAL_HOST: Final = "localhost"
#: A router's socket file: ``<name>.sock``; while binding, ``<name>.binding``.
SOCKET_SUFFIX: Final = ".sock"
BINDING_SUFFIX: Final = ".binding"
#: The route that says who a router is.
INFO_ROUTE: Final = "/router"


def local_directory(env: Mapping[str, str]) -> Path:
    """The directory every router of this user binds its socket in:
    ``$XDG_RUNTIME_DIR/router`` when ``XDG_RUNTIME_DIR`` is absolute, else
    ``run`` in the data directory the environment names (never
    ``--data-dir``: every router of the user meets in the same one)."""
    from router.dirs import default_data_dir

    runtime = env.get("XDG_RUNTIME_DIR") or ""
    if os.path.isabs(runtime):
        return Path(runtime) / "router"
    return default_data_dir(env) / "run"


def uses_runtime_dir(env: Mapping[str, str]) -> bool:
    """Whether :func:`local_directory` is under ``$XDG_RUNTIME_DIR``."""
    return os.path.isabs(env.get("XDG_RUNTIME_DIR") or "")


def socket_path(env: Mapping[str, str], name: str) -> Path:
    """The socket of the router named ``name``."""
    return local_directory(env) / f"{name}{SOCKET_SUFFIX}"
