"""Modules a command's process loads on first use, not when imported.

``router mcp`` runs once per Claude Code session, so what it holds resident
is paid once per session. Trio imports :mod:`ssl` for its TLS streams
(``trio.SSLStream``), and with it OpenSSL's ``libssl``: 1.1 MiB resident
in a ``router mcp`` that never speaks TLS (a forwarded send to another
router's socket, through httpx, is the first use it may have). :func:`defer`
puts a stand-in for such a module in ``sys.modules`` before anything imports
it: ``import ssl`` then binds the stand-in, and the first attribute read
from it (``ssl.SSLContext``, ``from ssl import ...``) runs the module's own
code into the stand-in, which from then on *is* the module (the same object,
its class a plain module's again). What the import machinery reads of a
module (its ``__spec__``, and ``__path__``, which it does not have) does
not load it.

This is what :class:`importlib.util.LazyLoader` does, except that
LazyLoader loads on any attribute read, and Python 3.11's ``import``
statement reads ``__spec__`` of a module it finds in ``sys.modules``, so
a second ``import ssl`` would load it at once.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from typing import Any

__all__ = ["defer", "is_deferred"]

#: One lock for every stand-in: two threads reading one at once load it once.
_LOCK = threading.RLock()


class _Deferred(types.ModuleType):
    """A module not yet run: its first attribute read runs it."""

    def __getattr__(self, name: str) -> Any:
        if name == "__path__":  # ``from X import y`` asks whether X is a package first
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        with _LOCK:
            if type(self) is _Deferred and not self.__dict__.get("_deferred_loading", False):
                self._deferred_loading = True
                try:
                    assert self.__spec__ is not None and self.__spec__.loader is not None
                    self.__spec__.loader.exec_module(self)
                    self.__class__ = types.ModuleType
                finally:
                    del self._deferred_loading
        # Loaded (or being loaded by this thread): an ordinary module's read.
        return types.ModuleType.__getattribute__(self, name)


def defer(*names: str) -> None:
    """Put a stand-in for each of ``names`` (top-level modules) in
    ``sys.modules``, unless it is imported already; each loads on its
    first attribute read."""
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _Deferred
        sys.modules[name] = module


def is_deferred(name: str) -> bool:
    """Whether ``name`` is in ``sys.modules`` as a stand-in not yet loaded."""
    return type(sys.modules.get(name)) is _Deferred
