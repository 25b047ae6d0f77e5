"""Small Trio helpers shared across the router."""

from __future__ import annotations

from typing import Any

import trio


def sole_error(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one error in ``group`` (``Cancelled`` set aside, nested groups
    walked), or None when there are none or several. Lets a component report
    "it failed because X" for the common case of one task failing, without
    unwrapping groups by hand."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)

    walk(group)
    return leaves[0] if len(leaves) == 1 else None
