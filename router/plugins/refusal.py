"""Refusals: the one shape every "no" of the plug-in layer takes.

A refusal is data, not an exception: the loader, the settings writers, the
launcher, the limits and the broker all *return* a :class:`Refusal` where the
answer is no, so a caller can log it, show it, or fall back on it without
catching anything. Each has a kebab-case ``code`` a program can branch on and
a ``message`` a person can act on.

A plug-in module refuses by raising :class:`PluginError` (or any exception
with a ``code`` attribute that has the code shape: a module need not import
this file). Whatever else it raises is a crash, and the core names it with a
code of its own (``check-threw``, ``search-failed`` ...).
"""

from __future__ import annotations

import re
from typing import Final

import attrs

__all__ = ["CODE_PATTERN", "PluginError", "Refusal", "is_code", "code_of"]

#: The shape of every refusal code: kebab-case, starting with a letter.
CODE_PATTERN: Final = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


def is_code(value: object) -> bool:
    """Whether ``value`` is a refusal code (a ``str`` of the kebab-case shape)."""
    return type(value) is str and CODE_PATTERN.fullmatch(value) is not None


@attrs.frozen(kw_only=True)
class Refusal:
    """A "no", with a code and a sentence a person can act on."""

    code: str
    message: str

    def __attrs_post_init__(self) -> None:
        if not is_code(self.code):
            raise ValueError(f"refusal code {self.code!r} is not kebab-case")

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class PluginError(Exception):
    """What a plug-in module raises to refuse: a code and a message.

    ``code`` must have the code shape; the core passes it through where the
    kind says a module's own code reaches the caller (a search refusal, a
    limit check's failure, a preflight).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def code_of(exc: BaseException) -> str | None:
    """The refusal code an exception carries, or ``None`` when it carries none
    (or one that is not of the code shape, which counts as none)."""
    code = getattr(exc, "code", None)
    return code if is_code(code) else None
