"""The fake Messages API answers as scripted, over a real loopback socket."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from tests.fakes.anthropic import (
    FakeAnthropic,
    Respond,
    bad_request,
    cut_reply,
    overloaded,
    text_reply,
    tool_reply,
)

BODY = {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def parse_sse(raw: str) -> list[tuple[str, dict]]:
    events = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.fixture
async def fake(nursery):
    fake = FakeAnthropic()
    await nursery.start(fake.run)
    return fake


async def post(fake: FakeAnthropic, path: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(base_url=fake.url) as client:
        return await client.post(path, json=body)


async def test_streams_thinking_text_and_usage_in_api_order(fake):
    fake.script(text_reply("Hello there", thinking="hmm", chunk_chars=4))
    response = await post(fake, "/v1/messages", {**BODY, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["model"] == "claude-test"
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta") == "hmm"
    assert [d["type"] for d in deltas].count("signature_delta") == 1
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == "Hello there"
    starts = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    assert starts == ["thinking", "text"]
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["output_tokens"] >= 1


async def test_tool_use_streams_partial_json_that_adds_up(fake):
    fake.script(tool_reply("Bash", {"command": "echo hi", "description": "say hi"}, chunk_chars=3))
    events = parse_sse((await post(fake, "/v1/messages", {**BODY, "stream": True})).text)
    start = next(data for name, data in events if name == "content_block_start")
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["name"] == "Bash"
    partial = "".join(
        data["delta"]["partial_json"] for name, data in events if name == "content_block_delta"
    )
    assert json.loads(partial) == {"command": "echo hi", "description": "say hi"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_non_streaming_returns_the_whole_message(fake):
    fake.script(tool_reply("Read", {"path": "x"}, text="reading"))
    response = await post(fake, "/v1/messages", BODY)
    message = response.json()
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert [block["type"] for block in message["content"]] == ["text", "tool_use"]
    assert message["content"][1]["input"] == {"path": "x"}


async def test_errors_carry_the_api_error_body(fake):
    fake.script(overloaded(should_retry=False), bad_request("nope"))
    first = await post(fake, "/v1/messages", {**BODY, "stream": True})
    assert first.status_code == 529
    assert first.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert first.headers["x-should-retry"] == "false"
    second = await post(fake, "/v1/messages", BODY)
    assert second.status_code == 400
    assert second.json()["error"]["type"] == "invalid_request_error"


async def test_an_empty_script_answers_the_fallback_loudly(fake):
    response = await post(fake, "/v1/messages", BODY)
    assert response.status_code == 500
    assert "no reply left" in response.json()["error"]["message"]


async def test_cut_stream_ends_before_message_stop(fake):
    fake.script(cut_reply(after=3))
    async with httpx.AsyncClient(base_url=fake.url) as client:
        received = b""
        with pytest.raises(httpx.HTTPError):
            async with client.stream("POST", "/v1/messages", json={**BODY, "stream": True}) as response:
                async for chunk in response.aiter_raw():
                    received += chunk
    names = [name for name, _ in parse_sse(received.decode())]
    assert names == ["message_start", "content_block_start", "content_block_delta"]


async def test_respond_builds_the_reply_from_the_request(fake):
    fake.script(Respond(lambda request: text_reply(f"you said {request.texts()[-1]}")))
    message = (await post(fake, "/v1/messages", BODY)).json()
    assert message["content"][0]["text"] == "you said hi"


async def test_count_tokens_and_unknown_routes_are_answered_and_recorded(fake):
    counted = await post(fake, "/v1/messages/count_tokens", BODY)
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    missing = await post(fake, "/v1/unknown", {"x": 1})
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    assert [(r.method, r.path, r.status) for r in fake.requests] == [
        ("POST", "/v1/messages/count_tokens", 200),
        ("POST", "/v1/unknown", 404),
    ]
    assert fake.requests[1].json == {"x": 1}
    assert fake.messages_requests() == []


async def test_a_slow_stream_is_closed_when_the_server_stops():
    fake = FakeAnthropic()
    fake.script(text_reply("x" * 100, delay=3600, chunk_chars=1))
    received: list[str] = []
    async with trio.open_nursery() as servers:
        await servers.start(fake.run)
        async with httpx.AsyncClient(base_url=fake.url) as client:
            async with client.stream("POST", "/v1/messages", json={**BODY, "stream": True}) as response:
                async for line in response.aiter_lines():
                    received.append(line)
                    if line.startswith("event: content_block_start"):
                        servers.cancel_scope.cancel()
                        break
    assert fake.requests[0].stream
    assert await fake.wait_for_requests(1) == fake.requests
