"""Refusals in the plug-in layer: the router's one refusal type.

Every "no" of the plug-in layer is a :class:`router.errors.Refusal`, and it is
*returned* where the answer is no (the loader, the settings writers, the
launcher, the limits and the broker), so a caller can log it, show it, or
fall back on it without catching anything: a refusal is a value, equal to
another of its class with the same code, message and data.

A plug-in module refuses by *raising* one. :data:`PluginError` is the name
modules have always raised it by, kept so that they need not change; it is
the same class. A module may also raise any exception with a ``code``
attribute of the code shape (it need not import this file). Whatever else it
raises is a crash, and the core names it with a code of its own
(``check-threw``, ``search-failed`` ...).
"""

from __future__ import annotations

from router.errors import CODE_PATTERN, Refusal, code_of, is_code

__all__ = ["CODE_PATTERN", "PluginError", "Refusal", "code_of", "is_code"]

#: What a plug-in module raises to refuse: the one refusal type, by the name
#: the modules' documentation gives it.
PluginError = Refusal
