"""A small reader of server-sent events over an httpx stream, for the live
view's tests: each event as ``{event, id, data}`` (``data`` parsed), each
comment line as ``{comment}``."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable

import httpx


class SseReader:
    def __init__(self, response: httpx.Response) -> None:
        self._lines: AsyncIterator[str] = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        event: dict[str, Any] = {"event": "message", "id": None}
        data: list[str] = []
        async for line in self._lines:
            if line == "":
                if data:
                    return {**event, "data": json.loads("\n".join(data))}
                event = {"event": "message", "id": None}
                continue
            if line.startswith(":"):
                return {"comment": line[1:].strip()}
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field in ("event", "id"):
                event[field] = value
        raise EOFError("the stream ended")

    async def until(self, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Events (comments left out) up to and including the first ``done``."""
        out = []
        while True:
            event = await self.next()
            if "comment" in event:
                continue
            out.append(event)
            if done(event):
                return out


def is_turn_end(event: dict[str, Any]) -> bool:
    return event["data"].get("type") == "turn-end"
