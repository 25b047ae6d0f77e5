"""A request body's bytes as a JSON object, or the refusal that says why not.

The first step of every route that takes a JSON object (the API's bodies
and a delivery's, the pairing and device routes, the notifications'
routes), before its own converter structures the object: one place for
the decoding, the depth limit (:func:`wire.json.loads`) and the two
sentences a person reads when a body is not what a route takes.
"""

from __future__ import annotations

from typing import Any

from router.errors import Refusal
from wire._convert import type_name
from wire.json import JsonError, loads

__all__ = ["json_object"]


def json_object(raw: bytes, *, what: str, code: str = "bad-body", empty: bool = False) -> dict[str, Any]:
    """``raw`` as a JSON object (nothing but white space is ``{}`` when
    ``empty``); else the refusal ``code``, its sentence starting with
    ``what`` (the route, and the shape it takes)."""
    if empty and not raw.strip():
        return {}
    try:
        value = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, JsonError, RecursionError) as exc:
        raise Refusal(code, f"{what}: the body is not JSON text ({exc})") from None
    if type(value) is not dict:
        raise Refusal(code, f"{what}: expected a JSON object, got {type_name(value)}")
    return value
