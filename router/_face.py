"""A package's public face, each name loaded on first use (PEP 562).

A package's ``__init__`` names what it offers (``__all__``) and where each
name lives; importing the package loads none of them, so a module inside it
(a sans-IO core, a command) loads only what it imports itself, and
``from router.host import Host`` still works as an eager ``__init__``'s
would::

    __all__ = ["Host", "Store"]
    __getattr__, __dir__ = face(__name__, {"router.host.host": "Host", "router.host.store": "Store"})

A name is looked up in its module the first time it is asked for and then
kept on the package, so the next access is a plain attribute.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def face(package: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps a
    module to the names (space-separated) the package takes from it."""
    home = {name: module for module, names in where.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__


def names(where: dict[str, str]) -> list[str]:
    """Every name of ``where`` (a face's ``__all__``), sorted."""
    return sorted(name for each in where.values() for name in each.split())
