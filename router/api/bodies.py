"""The API's request bodies: frozen classes, structured by one converter.

Each ``POST`` route but ``.../messages`` takes one of the classes here; the
send's body is the send request's own (:mod:`router.turns.requests`,
shared with the MCP tool). The converter (:data:`converter`, from
:func:`make_converter` on the wires' ``Builder``) keeps the wire's rules:
camelCase keys, strict leaves (a ``by`` of ``1`` is refused, never read as
text), unknown keys refused, an optional key either absent or of its type
(``null`` is refused). Code after :func:`read_body` trusts the types: a
field is what its annotation says.

A bad body refuses ``bad-body`` (400) with a sentence that names the
route's shape and the failing key::

    bad-body: POST /sessions takes {id?, instance?, harness?}: unknown field(s) 'name'

Hostile input: every field is a leaf, so a value nested 10,000 levels deep
is refused by its type at the top, and the bytes are read by
``wire.json.loads``, which refuses a text nested past the interpreter's
limit as not JSON.
"""

from __future__ import annotations

from typing import Final, TypeVar

import attrs
import cattrs

from router._body import json_object
from router.errors import Refusal
from router.turns.requests import structuring_problem
from wire._convert import Builder, camel

__all__ = ["AbortBody", "AskAnswerBody", "CreateSessionBody", "EmptyBody", "EndBody", "NewSessionBody",
           "converter", "make_converter", "read_body", "shape_of"]

T = TypeVar("T")


class BodyShapeError(ValueError):
    """A body's key of the wrong type."""


@attrs.frozen(kw_only=True)
class CreateSessionBody:
    """``POST /sessions``; an empty body is ``{}``."""

    id: str | None = None
    instance: str | None = None
    harness: str | None = None


@attrs.frozen(kw_only=True)
class AbortBody:
    """``POST /sessions/<id>/abort``; an empty body is ``{}``."""

    operation_id: str | None = None


@attrs.frozen(kw_only=True)
class NewSessionBody:
    """``POST /sessions`` with ``project``: a session in a new git worktree
    (:mod:`router.api.routes.places`)."""

    project: str
    name: str | None = None
    branch: str | None = None
    from_: str | None = None
    harness: str | None = None
    where: str | None = None
    prompt: str | None = None


@attrs.frozen(kw_only=True)
class EndBody:
    """``POST /sessions/<id>/end``; an empty body is ``{}``."""

    keep_worktree: bool = False
    force: bool = False


@attrs.frozen(kw_only=True)
class EmptyBody:
    """``POST /sessions/<id>/resume`` and ``.../cancel-park``: ``{}`` or nothing."""


@attrs.frozen(kw_only=True)
class AskAnswerBody:
    """``POST /asks/<id>`` and ``POST /sessions/<id>/asks/<ask>``."""

    decision: str
    by: str | None = None


#: Whether an empty body (nothing but white space) is ``{}``.
_EMPTY_OK: Final = {CreateSessionBody: True, AbortBody: True, EmptyBody: True, AskAnswerBody: False,
                    NewSessionBody: False, EndBody: True}


def make_converter() -> cattrs.Converter:
    """The API's converter: strict leaves, camelCase keys, no unknown key."""
    builder = Builder(BodyShapeError, tags={}, detailed=True)
    builder.conv.forbid_extra_keys = True
    builder.classes(*_EMPTY_OK)
    return builder.conv


converter: Final = make_converter()


def shape_of(cls: type) -> str:
    """How a refusal names the body ``cls`` is: ``{id?, instance?}``."""
    keys = [camel(field.name) + ("" if field.default is attrs.NOTHING else "?") for field in attrs.fields(cls)]
    return "{" + ", ".join(keys) + "}"


def read_body(raw: bytes, cls: type[T], route: str) -> T:
    """``raw`` as a ``cls``; raises ``bad-body`` naming ``route``'s shape
    and what is wrong, and nothing else."""
    shape = f"{route} takes {shape_of(cls)}"
    if _EMPTY_OK[cls] and not raw.strip():
        return cls()
    value = json_object(raw, what=shape)
    try:
        return converter.structure(value, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        raise Refusal("bad-body", f"{shape}: {structuring_problem(exc, camel)}") from None
