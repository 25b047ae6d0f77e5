"""A fake OpenAI Responses API on loopback, enough for ``codex exec``.

Codex (``codex exec --json``) talks to a model provider whose ``base_url``
the Codex preset sets from ``$OPENAI_BASE_URL`` (``wire_api="responses"``).
This server answers ``POST <base>/responses`` with a server-sent event stream
in the Responses API's order (``response.created``; per output item
``response.output_item.added``, its deltas, ``response.output_item.done``;
``response.completed`` with usage), from a per-test script of
:class:`ResponsesReply` (assistant text, optionally after a shell call), or
an :class:`~tests.fakes.anthropic.ApiError`. Every request is recorded;
anything else answers 404 (recorded too).

Use it like :class:`tests.fakes.anthropic.FakeAnthropic`:
``url = await nursery.start(fake.run)``; the base URL to give Codex is
``url + "/v1"``.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import deque
from typing import Any, Union

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio

from tests.fakes.anthropic import ApiError, RecordedRequest, encode_sse
from tests.fakes.serving import serve_on_loopback

__all__ = ["FakeResponses", "ResponsesReply"]


@attrs.frozen(kw_only=True)
class ResponsesReply:
    """One model response: an optional function call, then optional text."""

    text: str | None = None
    #: A function call: (tool name, arguments as a JSON object).
    call: tuple[str, dict[str, Any]] | None = None
    input_tokens: int = 50
    output_tokens: int = 10
    chunk_chars: int = 8


Scripted = Union[ResponsesReply, ApiError]


def response_events(reply: ResponsesReply, *, number: int, model: str) -> list[tuple[str, dict[str, Any]]]:
    response_id = f"resp_fake_{number:06d}"
    base = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
    events: list[tuple[str, dict[str, Any]]] = [("response.created", {"type": "response.created", "response": base})]
    output: list[dict[str, Any]] = []
    index = 0
    if reply.call is not None:
        name, arguments = reply.call
        item = {
            "type": "function_call",
            "id": f"fc_fake_{number:06d}",
            "call_id": f"call_fake_{number:06d}",
            "name": name,
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}))
        output.append(item)
        index += 1
    if reply.text is not None:
        message_id = f"msg_fake_{number:06d}"
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": index, "item": {"type": "message", "id": message_id, "role": "assistant", "status": "in_progress", "content": []}}))
        for at in range(0, len(reply.text), max(1, reply.chunk_chars)):
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": message_id, "output_index": index, "content_index": 0, "delta": reply.text[at : at + reply.chunk_chars]}))
        item = {"type": "message", "id": message_id, "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}))
        output.append(item)
    usage = {
        "input_tokens": reply.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    events.append(("response.completed", {"type": "response.completed", "response": {**base, "status": "completed", "output": output, "usage": usage}}))
    return events


class FakeResponses:
    """The fake Responses API; see the module docstring."""

    def __init__(self, *, fallback: Scripted | None = None) -> None:
        self.requests: list[RecordedRequest] = []
        self.url: str | None = None
        self.fallback: Scripted = fallback or ApiError(status=500, error_type="server_error", message="fake-openai: the script has no reply left")
        self._script: deque[Scripted] = deque()
        self._ids = itertools.count(1)
        self.app = self._build_app()

    def script(self, *items: Scripted) -> None:
        self._script.extend(items)

    async def run(self, *, host: str = "127.0.0.1", task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.url = await nursery.start(
                functools.partial(serve_on_loopback, self.app, host=host, logger=f"{__name__}.server")
            )
            task_status.started(self.url)

    def _build_app(self) -> QuartTrio:
        app = QuartTrio(__name__)
        app.config["RESPONSE_TIMEOUT"] = None
        fake = self
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

        @app.route("/", defaults={"path": ""}, methods=methods)
        @app.route("/<path:path>", methods=methods)
        async def everything(path: str) -> Response:
            body = await request.get_data(as_text=False)
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            recorded = RecordedRequest(
                method=request.method,
                path=request.path,
                query=request.query_string.decode("latin-1"),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                json=parsed,
            )
            fake.requests.append(recorded)
            number = next(fake._ids)
            if not (request.method == "POST" and request.path.endswith("/responses")):
                return _error(ApiError(status=404, error_type="not_found", message=f"fake-openai: no route {request.method} {request.path}"))
            item = fake._script.popleft() if fake._script else fake.fallback
            if isinstance(item, ApiError):
                return _error(item)
            model = parsed.get("model", "gpt-fake") if isinstance(parsed, dict) else "gpt-fake"
            events = response_events(item, number=number, model=model)

            async def body_stream() -> Any:
                for name, data in events:
                    yield encode_sse(name, data)

            response = Response(body_stream(), status=200, content_type="text/event-stream")
            response.timeout = None
            return response

        return app


def _error(error: ApiError) -> Response:
    body = {"error": {"type": error.error_type, "message": error.message, "code": None, "param": None}}
    return Response(json.dumps(body), status=error.status, content_type="application/json")
