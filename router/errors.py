"""The one refusal type: a kebab-case code, a sentence, and data.

Every "no" the router gives, whichever part gives it, is a :class:`Refusal`:
the store's and the host's, the link's, the mod link's, the plug-in layer's,
the user-turn router's, the API's. A caller that only reports a refusal reads
:attr:`Refusal.code` and :attr:`Refusal.message` (and :meth:`Refusal.to_json`,
``{"error": code, "message", ...data}``, at an HTTP, SSE or MCP edge); a part subclasses it only where a caller
branches on the kind (a link failure that may heal, a call the mod timed
out).

A refusal is also a value: the plug-in layer *returns* one where the answer
is no (a loader that could not load, a limit that says stop), so a caller can
log it, show it or fall back on it without catching anything. Two refusals
are equal when their class, code, message and data are.

The code is checked once, here: kebab-case, starting with a letter
(``harness-off``, ``stale-revision``). Codes the wires fix in another shape
(the container protocol's ``container_lost``) are outcome reasons, not
refusal codes, and never pass through this class.
"""

from __future__ import annotations

import re
from typing import Any, Final, Self

__all__ = ["CODE_PATTERN", "CarriesRefusal", "Refusal", "code_of", "is_code", "refusal_of"]

#: The shape of every refusal code: kebab-case, starting with a letter.
CODE_PATTERN: Final = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


def is_code(value: object) -> bool:
    """Whether ``value`` is a refusal code (a ``str`` of the kebab-case shape)."""
    return type(value) is str and CODE_PATTERN.fullmatch(value) is not None


def code_of(exc: BaseException) -> str | None:
    """The refusal code an exception carries, or ``None`` when it carries none
    (or one that is not of the code shape, which counts as none). Plug-in
    modules may refuse with any exception that has a ``code``: they need not
    import this module."""
    code = getattr(exc, "code", None)
    return code if is_code(code) else None


class Refusal(Exception):
    """A "no": ``code`` (kebab-case), ``message`` (a sentence a person can act
    on) and ``data`` (what a program may want besides: a path, a session, a
    reset time). ``str()`` is ``"code: message"``."""

    def __init__(self, code: str, message: str, **data: Any) -> None:
        if not is_code(code):
            raise ValueError(f"refusal code {code!r} is not kebab-case")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        extra = "".join(f", {key}={value!r}" for key, value in self.data.items())
        return f"{type(self).__name__}({self.code!r}, {self.message!r}{extra})"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Refusal)
        return (self.code, self.message, self.data) == (other.code, other.message, other.data)

    def __hash__(self) -> int:
        return hash((type(self), self.code, self.message))

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self.code, self.message, self.data))

    def to_json(self) -> dict[str, Any]:
        """The refusal at a JSON edge (HTTP, server-sent events, the board's
        skipped routers): ``{"error": code, "message": sentence, ...data}``,
        the one spelling of a refusal on every wire of ours (docs/turns.md,
        "The HTTP API"). The plug-in modules' protocol is not ours to spell:
        a module answers ``{"code", "message"}`` (docs/plugins.md)."""
        return {**self.data, "error": self.code, "message": self.message}

    @classmethod
    def from_json(cls, body: object) -> Self | None:
        """The refusal :meth:`to_json` spelled (another router's answer read
        back), its data included; None for any other value."""
        if type(body) is not dict or not is_code(body.get("error")) or type(body.get("message")) is not str:
            return None
        return cls(body["error"], body["message"],
                   **{key: value for key, value in body.items() if key not in ("error", "message")})


class CarriesRefusal:
    """A value that carries a :class:`Refusal` in its ``refusal`` field (a
    delivery unanswered or refused, a limit check that could not answer, a
    plug-in the loader refused, a notifications problem): its ``code`` and ``message`` read through to it, so the value is
    spelled as the refusal is wherever it is shown."""

    __slots__ = ()

    refusal: Refusal

    @property
    def code(self) -> str:
        return self.refusal.code

    @property
    def message(self) -> str:
        return self.refusal.message


def _rebuild(cls: type[Refusal], code: str, message: str, data: dict[str, Any]) -> Refusal:
    refusal = Refusal.__new__(cls)
    Refusal.__init__(refusal, code, message, **data)
    return refusal


def refusal_of(value: object, *, only: bool = False) -> Refusal | None:
    """A plug-in's refusal as the plug-in protocol spells it in an answer,
    ``{"code": kebab-case, "message": sentence}`` (plug-in modules need not
    import this module), as a :class:`Refusal`; None for any other value.
    ``only``: the two keys and no other (an answer that must be a refusal
    or nothing)."""
    if type(value) is not dict or (only and set(value) != {"code", "message"}):
        return None
    code, message = value.get("code"), value.get("message")
    if not is_code(code) or type(message) is not str:
        return None
    return Refusal(code, message)
