"""A fake Anthropic Messages API on loopback, scripted per test.

Claude Code (and anything else built on the Anthropic SDK) talks to whatever
``ANTHROPIC_BASE_URL`` names. This server answers there the way the real API
does, so the real ``claude`` binary can run a whole turn with no network:

- ``POST /v1/messages`` with ``"stream": true``: server-sent events in the
  order the API documents (``message_start``; for each content block
  ``content_block_start``, its deltas, ``content_block_stop``;
  ``message_delta`` with the stop reason and the output usage;
  ``message_stop``). Text streams as ``text_delta``s, thinking as
  ``thinking_delta``s followed by one ``signature_delta``, a tool call as
  ``input_json_delta``s carrying its input's JSON in pieces.
- ``POST /v1/messages`` without ``stream``: the same reply as one message
  object.
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": n}``, a rough count
  (a quarter of the request body's length).
- Anything else: 404 with an API-shaped error body. It is recorded like every
  other request, so a test can see what the client tried to reach.

What each ``/v1/messages`` call answers comes from a queue the test fills
with :meth:`FakeAnthropic.script`: a :class:`Reply` (text, thinking and tool
calls; optionally slow, or cut mid-stream), an :class:`ApiError` (529
overload, 400 bad request, ...), or a :class:`Respond` that builds either from
the request it answers. When the queue is empty the server answers with
:attr:`FakeAnthropic.fallback` (by default a 500 error saying the script ran
out, so an unexpected extra call is loud, not silently answered).

Every request is recorded (:attr:`FakeAnthropic.requests`), in arrival order,
before it is answered.

Use from a test or a benchmark::

    fake = FakeAnthropic()
    fake.script(text_reply("Hello"))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.run)      # "http://127.0.0.1:PORT"
        ...                                       # ANTHROPIC_BASE_URL=url
        nursery.cancel_scope.cancel()

The wire shapes follow the Messages API reference (streaming events, error
shapes: ``{"type": "error", "error": {"type", "message"}}``; 529 is
``overloaded_error``, 400 ``invalid_request_error``).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections import deque
from typing import Any, Callable, Iterator, Sequence, Union

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio

from tests.fakes.serving import serve_on_loopback

__all__ = [
    "ApiError",
    "FakeAnthropic",
    "RecordedRequest",
    "Reply",
    "Respond",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Usage",
    "bad_request",
    "cut_reply",
    "limited_until",
    "overloaded",
    "slow_reply",
    "sse_events",
    "text_reply",
    "tool_reply",
    "usage_limit",
]

log = logging.getLogger(__name__)

#: The model named in replies when the request names none.
DEFAULT_MODEL = "claude-fake-1"


# --------------------------------------------------------------------------
# What a reply is made of


@attrs.frozen
class TextBlock:
    text: str


@attrs.frozen
class ThinkingBlock:
    thinking: str
    #: Extended thinking blocks end with a ``signature_delta``; clients keep
    #: the signature and send it back with the block on the next request.
    signature: str = "fake-signature"


@attrs.frozen
class ToolUseBlock:
    name: str
    input: dict[str, Any]
    #: ``toolu_...`` like the API's; generated when not given.
    id: str | None = None


Block = Union[TextBlock, ThinkingBlock, ToolUseBlock]


@attrs.frozen(kw_only=True)
class Usage:
    input_tokens: int = 21
    #: ``None``: estimated from the reply's length (about four characters a
    #: token), so a test can still assert the figure it scripted.
    output_tokens: int | None = None
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@attrs.frozen(kw_only=True)
class Reply:
    """A model answer: content blocks, streamed (or returned whole)."""

    blocks: tuple[Block, ...]
    #: ``None``: ``tool_use`` when a block is a tool call, else ``end_turn``.
    stop_reason: str | None = None
    usage: Usage = Usage()
    #: Characters (of text, thinking, or tool input JSON) per delta event.
    chunk_chars: int = 16
    #: Seconds the stream waits before each delta: the slow stream. The wait
    #: is the fake's behaviour, not a test's stand-in for a condition.
    delay: float = 0.0
    #: Close the connection after this many SSE events, without the rest
    #: (no ``message_stop``): the connection cut mid-stream.
    cut_after: int | None = None
    #: ``msg_...``; generated when not given.
    message_id: str | None = None

    def resolved_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        if any(isinstance(block, ToolUseBlock) for block in self.blocks):
            return "tool_use"
        return "end_turn"

    def output_tokens(self) -> int:
        if self.usage.output_tokens is not None:
            return self.usage.output_tokens
        size = 0
        for block in self.blocks:
            if isinstance(block, TextBlock):
                size += len(block.text)
            elif isinstance(block, ThinkingBlock):
                size += len(block.thinking)
            else:
                size += len(json.dumps(block.input))
        return max(1, size // 4)


@attrs.frozen(kw_only=True)
class ApiError:
    """An error answer: an HTTP status with the API's error body."""

    status: int
    error_type: str
    message: str
    #: The ``x-should-retry`` header, which the Anthropic SDKs obey before
    #: their own status rules; ``None`` sends no header.
    should_retry: bool | None = None
    #: More response headers (a usage limit's ``anthropic-ratelimit-unified-*``).
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Respond:
    """A reply built from the request it answers (e.g. one that quotes the
    tool result the client sent back)."""

    build: Callable[["RecordedRequest"], Union[Reply, ApiError]]


Scripted = Union[Reply, ApiError, Respond]


# --------------------------------------------------------------------------
# Shorthands for the usual script items


def text_reply(text: str, *, thinking: str | None = None, **options: Any) -> Reply:
    """Plain text, optionally after a thinking block."""
    blocks: list[Block] = []
    if thinking is not None:
        blocks.append(ThinkingBlock(thinking))
    blocks.append(TextBlock(text))
    return Reply(blocks=tuple(blocks), **options)


def tool_reply(
    name: str, input: dict[str, Any], *, text: str | None = None, id: str | None = None, **options: Any
) -> Reply:
    """A tool call (optionally after some text); the client runs the tool and
    calls again with its result."""
    blocks: list[Block] = []
    if text is not None:
        blocks.append(TextBlock(text))
    blocks.append(ToolUseBlock(name, input, id))
    return Reply(blocks=tuple(blocks), **options)


def slow_reply(text: str = "slow " * 400, *, delay: float = 0.05, chunk_chars: int = 5) -> Reply:
    """A long stream that takes its time: 400 words at five characters a
    delta and 50 ms a delta take 20 s, far longer than any abort test waits."""
    return text_reply(text, delay=delay, chunk_chars=chunk_chars)


def cut_reply(text: str = "This answer is cut off in the middle", *, after: int = 4) -> Reply:
    """A text stream whose connection closes after ``after`` events."""
    return text_reply(text, cut_after=after, chunk_chars=4)


def overloaded(message: str = "Overloaded", **options: Any) -> ApiError:
    """The API's 529 ``overloaded_error``."""
    return ApiError(status=529, error_type="overloaded_error", message=message, **options)


def usage_limit(resets_at: int, *, claim: str = "five_hour") -> ApiError:
    """The subscriber's usage limit as the provider answers it: 429
    ``rate_limit_error`` with ``anthropic-ratelimit-unified-status:
    rejected``, ``-reset`` (epoch seconds) and ``-representative-claim``
    (the headers the real Claude Code 2.1.332 reads; only a subscriber's
    sign-in, ``CLAUDE_CODE_OAUTH_TOKEN``, reads them as a usage limit)."""
    window = {"five_hour": "5h", "seven_day": "7d"}.get(claim)
    # The window's own reading (utilization 1.0 at its reset), which Claude
    # Code's session measure reports to a mod as 100 % (`session.measure`).
    readings = () if window is None else (
        (f"anthropic-ratelimit-unified-{window}-utilization", "1.0"),
        (f"anthropic-ratelimit-unified-{window}-reset", str(resets_at)),
        (f"anthropic-ratelimit-unified-{window}-status", "rejected"),
    )
    return ApiError(
        status=429,
        error_type="rate_limit_error",
        message="This request would exceed your account's rate limit. Please try again later.",
        headers=(
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", str(resets_at)),
            ("anthropic-ratelimit-unified-representative-claim", claim),
            *readings,
        ),
    )


def limited_until(resets_at: float, after: Callable[["RecordedRequest"], Union[Reply, ApiError]],
                  *, clock: Callable[[], float] | None = None) -> Respond:
    """Until the epoch second ``resets_at`` (wall clock: the provider's
    reset is an epoch), a usage limit; from then on what ``after`` builds.
    Put it in :attr:`FakeAnthropic.fallback` to answer every call so."""
    import time

    now = time.time if clock is None else clock

    def build(recorded: "RecordedRequest") -> Union[Reply, ApiError]:
        return usage_limit(int(resets_at)) if now() < resets_at else after(recorded)

    return Respond(build)


def bad_request(message: str = "messages: text content blocks must be non-empty", **options: Any) -> ApiError:
    """The API's 400 ``invalid_request_error``."""
    return ApiError(status=400, error_type="invalid_request_error", message=message, **options)


# --------------------------------------------------------------------------
# The wire, as pure functions


def _pieces(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for at in range(0, len(text), size):
        yield text[at : at + size]


def message_object(reply: Reply, *, model: str, message_id: str, tool_ids: Sequence[str]) -> dict[str, Any]:
    """The whole message, as a non-streaming call returns it."""
    content: list[dict[str, Any]] = []
    ids = iter(tool_ids)
    for block in reply.blocks:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            content.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        else:
            content.append({"type": "tool_use", "id": next(ids), "name": block.name, "input": block.input})
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.resolved_stop_reason(),
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "cache_creation_input_tokens": reply.usage.cache_creation_input_tokens,
            "cache_read_input_tokens": reply.usage.cache_read_input_tokens,
            "output_tokens": reply.output_tokens(),
        },
    }


def sse_events(
    reply: Reply, *, model: str, message_id: str, tool_ids: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event name, data)`` pairs of a streamed reply, in order."""
    usage = reply.usage
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": usage.input_tokens,
                        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                        "cache_read_input_tokens": usage.cache_read_input_tokens,
                        "output_tokens": 1,
                    },
                },
            },
        )
    ]
    ids = iter(tool_ids)
    for index, block in enumerate(reply.blocks):
        if isinstance(block, TextBlock):
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block.text, reply.chunk_chars)]
        elif isinstance(block, ThinkingBlock):
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": piece}
                for piece in _pieces(block.thinking, reply.chunk_chars)
            ]
            deltas.append({"type": "signature_delta", "signature": block.signature})
        else:
            start = {"type": "tool_use", "id": next(ids), "name": block.name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in _pieces(json.dumps(block.input), reply.chunk_chars)
            ]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        for delta in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.resolved_stop_reason(), "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens()},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def error_body(error: ApiError, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error.error_type, "message": error.message},
        "request_id": request_id,
    }


# --------------------------------------------------------------------------
# The server


@attrs.frozen(kw_only=True)
class RecordedRequest:
    """One request the fake received, as it arrived."""

    method: str
    path: str
    query: str
    #: Header names lower-cased; a repeated header keeps its last value.
    headers: dict[str, str]
    body: bytes
    #: The body parsed as JSON, or ``None`` when it is not JSON.
    json: Any
    #: What the fake answered: the HTTP status.
    status: int = 0

    @property
    def is_messages(self) -> bool:
        return self.method == "POST" and self.path == "/v1/messages"

    @property
    def stream(self) -> bool:
        return isinstance(self.json, dict) and self.json.get("stream") is True

    def messages(self) -> list[dict[str, Any]]:
        """The conversation the request carries (``messages``), or ``[]``."""
        if isinstance(self.json, dict) and isinstance(self.json.get("messages"), list):
            return self.json["messages"]
        return []

    def texts(self) -> list[str]:
        """Every text the conversation carries, in order: user strings and
        text blocks, assistant text blocks, and tool results' text."""
        out: list[str] = []

        def visit(content: Any) -> None:
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                for block in content:
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "text" and isinstance(block.get("text"), str):
                        out.append(block["text"])
                    elif block.get("type") == "tool_result":
                        visit(block.get("content"))

        for message in self.messages():
            if isinstance(message, dict):
                visit(message.get("content"))
        return out


class FakeAnthropic:
    """The fake API. Script it, start :meth:`run` in a nursery, point the
    client at the URL it reports.

    Resource handling: everything the server owns lives in the nursery
    :meth:`run` is started in; cancelling that nursery closes the listener
    and every open connection (a slow stream included).
    """

    def __init__(self, *, fallback: Scripted | None = None) -> None:
        self.requests: list[RecordedRequest] = []
        self.url: str | None = None
        self.fallback: Scripted = fallback or ApiError(
            status=500, error_type="api_error", message="fake-anthropic: the script has no reply left for this request"
        )
        self._script: deque[Scripted] = deque()
        self._ids = itertools.count(1)
        self._arrived = trio.Event()
        self.app = self._build_app()

    def __repr__(self) -> str:
        return f"<FakeAnthropic {self.url or 'not serving'} requests={len(self.requests)} scripted={len(self._script)}>"

    # -- the script --------------------------------------------------------

    def script(self, *items: Scripted) -> None:
        """Queue answers for the next ``/v1/messages`` calls, in order."""
        self._script.extend(items)

    @property
    def pending(self) -> int:
        """Scripted answers not yet given."""
        return len(self._script)

    # -- what arrived --------------------------------------------------------

    def messages_requests(self) -> list[RecordedRequest]:
        return [each for each in self.requests if each.is_messages]

    async def wait_for_requests(self, count: int, *, predicate: Callable[[RecordedRequest], bool] | None = None) -> list[RecordedRequest]:
        """Wait until at least ``count`` recorded requests match ``predicate``
        (all requests when ``None``); returns the matching ones."""
        while True:
            matching = [each for each in self.requests if predicate is None or predicate(each)]
            if len(matching) >= count:
                return matching
            await self._arrived.wait()

    def _record(self, recorded: RecordedRequest) -> int:
        self.requests.append(recorded)
        self._arrived.set()
        self._arrived = trio.Event()
        return len(self.requests) - 1

    def _set_status(self, index: int, status: int) -> None:
        self.requests[index] = attrs.evolve(self.requests[index], status=status)

    # -- serving -----------------------------------------------------------

    async def run(self, *, host: str = "127.0.0.1", task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the base URL (``http://host:port``)
        through ``task_status`` once the socket listens."""
        async with trio.open_nursery() as nursery:
            self.url = await nursery.start(
                functools.partial(serve_on_loopback, self.app, host=host, logger=f"{__name__}.server")
            )
            task_status.started(self.url)

    def _build_app(self) -> QuartTrio:
        app = QuartTrio(__name__)
        # Slow streams outlive Quart's default 60 s response timeout.
        app.config["RESPONSE_TIMEOUT"] = None
        app.config["BODY_TIMEOUT"] = None
        fake = self

        @app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
        @app.route("/<path:path>", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
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
                headers={name.lower(): value for name, value in request.headers.items()},
                body=body,
                json=parsed,
            )
            index = fake._record(recorded)
            response = fake._answer(recorded)
            fake._set_status(index, response.status_code)
            return response

        return app

    def _next(self, recorded: RecordedRequest) -> Reply | ApiError:
        item = self._script.popleft() if self._script else self.fallback
        if isinstance(item, Respond):
            item = item.build(recorded)
        return item

    def _answer(self, recorded: RecordedRequest) -> Response:
        number = next(self._ids)
        request_id = f"req_fake_{number:06d}"
        if recorded.method == "POST" and recorded.path == "/v1/messages/count_tokens":
            return _json_response({"input_tokens": max(1, len(recorded.body) // 4)}, 200, request_id)
        if not recorded.is_messages:
            error = ApiError(status=404, error_type="not_found_error", message=f"fake-anthropic: no route {recorded.method} {recorded.path}")
            return _json_response(error_body(error, request_id), 404, request_id)
        if not isinstance(recorded.json, dict):
            error = bad_request("fake-anthropic: the body is not a JSON object")
            return _json_response(error_body(error, request_id), 400, request_id)
        item = self._next(recorded)
        if isinstance(item, ApiError):
            response = _json_response(error_body(item, request_id), item.status, request_id)
            if item.should_retry is not None:
                response.headers["x-should-retry"] = "true" if item.should_retry else "false"
            for name, value in item.headers:
                response.headers[name] = value
            return response
        model = recorded.json.get("model") if isinstance(recorded.json.get("model"), str) else DEFAULT_MODEL
        message_id = item.message_id or f"msg_fake_{number:06d}"
        tool_ids = [
            block.id or f"toolu_fake_{number:06d}_{index}"
            for index, block in enumerate(item.blocks)
            if isinstance(block, ToolUseBlock)
        ]
        if not recorded.stream:
            return _json_response(message_object(item, model=model, message_id=message_id, tool_ids=tool_ids), 200, request_id)
        events = sse_events(item, model=model, message_id=message_id, tool_ids=tool_ids)
        return _stream_response(events, item, request_id)


def _json_response(value: Any, status: int, request_id: str) -> Response:
    return Response(
        json.dumps(value),
        status=status,
        content_type="application/json",
        headers={"request-id": request_id},
    )


class _CutStream(Exception):
    """Raised inside a stream's body to drop the connection mid-response."""


def _stream_response(events: list[tuple[str, dict[str, Any]]], reply: Reply, request_id: str) -> Response:
    async def body() -> Any:
        for sent, (name, data) in enumerate(events):
            if reply.cut_after is not None and sent >= reply.cut_after:
                # Hypercorn closes a connection whose app fails after the
                # response started: the client sees the body end early,
                # with no terminating chunk.
                raise _CutStream("fake-anthropic: connection cut mid-stream, as scripted")
            if reply.delay and name == "content_block_delta":
                await trio.sleep(reply.delay)
            yield encode_sse(name, data)

    response = Response(body(), status=200, content_type="text/event-stream; charset=utf-8")
    response.headers["request-id"] = request_id
    response.headers["cache-control"] = "no-cache"
    response.timeout = None
    return response
