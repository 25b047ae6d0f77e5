"""The HTTP API over a real loopback socket: every route with good and bad
bodies, the guards, the channels, the live view as server-sent events."""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.errors import Refusal
from router.plugins import watched
from router.turns.requests import SendRequest, send_request_from_body
from tests.api.conftest import AUTH, TOKEN, Api
from tests.turns.conftest import until


def refusal(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code and isinstance(body["message"], str) and body["message"]
    return body


async def test_health_and_page(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"ok": True}
    page = await api.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<title>router</title>" in page.text and "SseParser" in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "img-src data:" in policy


async def test_sessions_list_and_create(api: Api) -> None:
    listed = (await api.client.get("/sessions")).json()
    assert listed == {"sessions": [{"id": "root", "kind": "container", "busy": False, "state": "idle"}]}
    created = await api.client.post("/sessions", json={"id": "mine"})
    assert created.status_code == 201
    assert created.json() == {"id": "mine", "kind": "container", "instance": "default", "harness": "echo"}
    fresh = await api.client.post("/sessions", content=b"", headers={"content-type": "application/json"})
    assert fresh.status_code == 201 and fresh.json()["id"]
    ids = [s["id"] for s in (await api.client.get("/sessions")).json()["sessions"]]
    assert ids == ["root", "mine", fresh.json()["id"]]


async def test_create_refusals(api: Api) -> None:
    refusal(await api.client.post("/sessions", json={"name": "x"}), 400, "bad-body")
    refusal(await api.client.post("/sessions", json=["x"]), 400, "bad-body")
    refusal(await api.client.post("/sessions", json={"instance": "nobody"}), 409, "no-route")
    api.write_plugins({"harness": [], "channel": ["cli", "webui"]})
    refusal(await api.client.post("/sessions", json={}), 409, "harness-off")


async def test_send_and_wait(api: Api) -> None:
    answered = await api.send("root", {"text": "hello", "eventId": "e1", "wait": True})
    assert answered.status_code == 200
    # The session's view task follows the host's events from its opening, so
    # the daemon's hello (the echo steers) may or may not have come yet.
    assert answered.json()["whenBusy"] in ("followUp", "steer")
    assert {**answered.json(), "whenBusy": "followUp"} == {
        "eventId": "e1",
        "session": "root",
        "status": "delivered",
        "as": "prompt",
        "operationId": "e1",
        "whenBusy": "followUp",
        "fromRecord": False,
        "reply": {"operationId": "e1", "session": "root", "status": "done", "text": "echo: hello (turn 1)"},
    }
    again = await api.send("root", {"text": "hello", "eventId": "e1"})
    assert again.status_code == 200 and again.json()["fromRecord"] is True
    minted = await api.send("root", {"text": "no id", "kind": "card"})
    assert minted.status_code == 200 and minted.json()["eventId"]
    transcript = (await api.client.get("/sessions/root/messages")).json()
    assert transcript["kind"] == "container"
    assert [m["id"] for m in transcript["messages"]][:2] == ["e1:user", "e1:assistant"]


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({}, 400, "bad-body"),
        ({"text": 3}, 400, "bad-body"),
        ({"text": "x", "event_id": "e"}, 400, "bad-body"),
        ({"text": "x", "kind": "robot"}, 400, "bad-body"),
        ({"text": "x", "wait": "yes"}, 400, "bad-body"),
        ("just text", 400, "bad-body"),
        ({"text": ""}, 400, "bad-delivery"),
        ({"text": "x", "eventId": ""}, 400, "bad-delivery"),
        ({"text": "x" * 100_001}, 400, "bad-delivery"),
    ],
)
async def test_send_bad_bodies(api: Api, body: Any, status: int, code: str) -> None:
    refusal(await api.send("root", body), status, code)


async def test_send_refusals(api: Api) -> None:
    raw = {"content-type": "application/json"}
    refusal(await api.client.post("/sessions/root/messages", content=b"{nope", headers=raw), 400, "bad-body")
    refusal(await api.client.post("/sessions/root/messages", content=b"\xff\xfe", headers=raw), 400, "bad-body")
    lone = b'{"text": "\\ud800"}'
    refusal(await api.client.post("/sessions/root/messages", content=lone, headers=raw), 400, "bad-delivery")
    refusal(
        await api.client.post("/sessions/root/messages", content=b'{"text":"x"}', headers={"content-type": "text/plain"}),
        415, "bad-content-type",
    )
    refusal(await api.send("nowhere", {"text": "x"}), 404, "unknown-session")
    await api.send("root", {"text": "first", "eventId": "e1"})
    refusal(await api.send("root", {"text": "second", "eventId": "e1"}), 409, "event-id-conflict")
    refusal(await api.client.get("/sessions/nowhere/messages"), 404, "unknown-session")
    refusal(await api.client.get("/nothing/here"), 404, "not-found")
    refusal(await api.client.delete("/sessions"), 405, "method-not-allowed")
    big = b'{"text": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    refusal(await api.client.post("/sessions/root/messages", content=big, headers=raw), 413, "too-large")


async def test_a_foreign_host_is_refused(api: Api) -> None:
    refusal(await api.client.get("/sessions", headers={"host": "evil.example:80"}), 421, "bad-host")
    port = api.server.port
    assert (await api.client.get("/healthz", headers={"host": f"localhost:{port}"})).status_code == 200


@pytest.mark.parametrize("route", ["/sessions", "/sessions/root/messages", "/sessions/root/live", "/board/live",
                                   "/nothing/here"])
async def test_every_data_route_takes_the_token(api: Api, route: str) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as bare:
        missing = refusal(await bare.get(route), 401, "no-token")
        assert "Authorization: Bearer" in missing["message"]
        assert (await bare.get(route)).headers["www-authenticate"] == "Bearer"
        refusal(await bare.get(route, headers={"authorization": "Bearer not-the-token"}), 401, "bad-token")
        refusal(await bare.get(route, headers={"authorization": f"Basic {TOKEN}"}), 401, "no-token")
        # The Host is checked first: the right token for another host's name is refused.
        refusal(await bare.get(route, headers={**AUTH, "host": "evil.example:80"}), 421, "bad-host")


async def test_posts_take_the_token(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as bare:
        refusal(await bare.post("/sessions/root/messages", json={"text": "hi"}), 401, "no-token")
        refusal(await bare.post("/sessions/root/abort", json={}), 401, "no-token")
        refusal(await bare.post("/sessions", json={"id": "x"}), 401, "no-token")
    assert [m["id"] for m in (await api.client.get("/sessions/root/messages")).json()["messages"]] == []
    assert [s["id"] for s in (await api.client.get("/sessions")).json()["sessions"]] == ["root"]


async def test_a_scope_that_is_not_one_is_refused(api: Api) -> None:
    refusal(await api.client.get("/sessions", params={"scope": "everything"}), 400, "bad-query")
    # With no board (no private socket), the router lists its own sessions either way.
    for scope in ("router", "board"):
        assert [s["id"] for s in (await api.client.get("/sessions", params={"scope": scope})).json()["sessions"]] == ["root"]


async def test_the_page_and_health_need_no_token(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as bare:
        assert (await bare.get("/healthz")).json() == {"ok": True}
        page = await bare.get("/")
        assert page.status_code == 200 and TOKEN not in page.text  # the page holds no data, nor the token
        refusal(await bare.post("/", json={}), 401, "no-token")


async def test_channels_refuse_when_switched_off(api: Api) -> None:
    api.write_plugins({"harness": ["echo"], "channel": ["cli"]})
    body = refusal(await api.client.get("/sessions"), 503, "channel-off")
    assert "router plugins" in body["message"]
    refusal(await api.send("root", {"text": "x"}), 503, "channel-off")
    refusal(await api.client.get("/sessions/root/live"), 503, "channel-off")
    cli = {"x-router-channel": "cli"}
    assert (await api.client.get("/sessions", headers=cli)).status_code == 200
    assert (await api.send("root", {"text": "via cli"}, headers=cli)).status_code == 200
    refusal(await api.client.get("/sessions", headers={"x-router-channel": "carrier-pigeon"}), 503, "channel-off")


async def test_abort(api: Api) -> None:
    sent = await api.send("root", {"text": "slow 600000 never", "eventId": "slow"})
    assert sent.status_code == 200
    aborted = await api.client.post("/sessions/root/abort", json={"operationId": "slow"})
    assert aborted.json() == {"session": "root", "aborted": True, "operationId": "slow"}
    result = await api.router.reply_of("root", "slow")
    assert result["status"] == "unanswered" and result["reason"] == "aborted"
    everything = await api.client.post("/sessions/root/abort", content=b"", headers={"content-type": "application/json"})
    assert everything.json() == {"session": "root", "aborted": True}
    refusal(await api.client.post("/sessions/root/abort", json={"operationId": 1}), 400, "bad-body")
    refusal(await api.client.post("/sessions/nowhere/abort", json={}), 404, "unknown-session")


async def read_events(response: httpx.Response, until_done: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            events.append(json.loads(line[len("data: "):]))
            if until_done(events):
                break
    return events


async def test_live_is_a_snapshot_then_items(api: Api) -> None:
    await api.send("root", {"text": "before", "eventId": "e0", "wait": True})
    async with api.client.stream("GET", "/sessions/root/live") as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = response.aiter_lines()
        snapshot = None
        async for line in lines:
            if line.startswith("data: "):
                snapshot = json.loads(line[len("data: "):])
                break
        assert snapshot is not None and snapshot["type"] == "snapshot"
        assert snapshot["session"] == "root" and snapshot["kind"] == "container"
        assert [m["id"] for m in snapshot["messages"]] == ["e0:user", "e0:assistant"]
        await api.send("root", {"text": "during", "eventId": "e1"})
        items: list[dict[str, Any]] = []
        async for line in lines:
            if line.startswith("data: "):
                items.append(json.loads(line[len("data: "):]))
                if items[-1]["type"] == "turn-end":
                    break
    kinds = [item["type"] for item in items]
    assert kinds[0] == "message" and items[0]["message"]["id"] == "e1:user"
    assert "text-delta" in kinds and "turn-start" in kinds
    assert items[-1]["result"]["text"] == "echo: during (turn 2)"
    # The client hung up: the server let go of the stream.
    session = api.router.registry.get("root")
    assert session is not None and session.target.hub is not None
    hub = session.target.hub
    await until(lambda: hub.statistics().subscribers == 0)


async def test_live_refusals(api: Api) -> None:
    refusal(await api.client.get("/sessions/nowhere/live"), 404, "unknown-session")


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=64),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
            st.sampled_from(["text", "eventId", "kind", "messageId", "wait", "other"]), inner, max_size=4
        ),
        max_leaves=8,
    ).map(lambda value: json.dumps(value).encode()),
))
def test_a_body_parses_or_is_refused(raw: bytes) -> None:
    body = send_request_from_body(raw, "s")
    if isinstance(body, Refusal):
        assert body.code == "bad-body" and body.message
    else:
        assert isinstance(body, SendRequest) and type(body.text) is str and body.session == "s"


async def test_hostile_bodies_never_crash_a_route(api: Api) -> None:
    raw = {"content-type": "application/json"}
    for content in (b"[" * 5000 + b"]" * 5000, b'{"text": 1e400}', b"\x00", b'{"text": "x", "wait": null}',
                    b'{"text": {"nested": [1, 2]}}', b"1", b'"text"', b"null"):
        for path in ("/sessions/root/messages", "/sessions", "/sessions/root/abort"):
            response = await api.client.post(path, content=content, headers=raw)
            assert response.status_code in (400, 413), (path, content[:20], response.text)
            assert response.json()["error"] == "bad-body"


CLAUDE = "9d2c5f3e-7b1a-4c8e-a1f0-3e5d7c9b2a40"


async def test_a_claude_code_session_through_the_api(api: Api, nursery: trio.Nursery, env: dict[str, str]) -> None:
    from router.modlink.sim import ModSimulator

    await api.router.open_claude_code(CLAUDE)
    sessions = (await api.client.get("/sessions")).json()["sessions"]
    assert [s["state"] for s in sessions if s["id"] == CLAUDE] == ["unreachable"]  # no mod said hello
    early = await api.send(CLAUDE, {"text": "anyone?", "eventId": "c0"})
    body = refusal(early, 503, "mod-not-connected")
    assert body["eventId"] == "c0"
    sim = ModSimulator(CLAUDE, env=env, snapshot_interval=0)
    await nursery.start(sim.run)
    sessions = (await api.client.get("/sessions")).json()["sessions"]
    mine = next(entry for entry in sessions if entry["id"] == CLAUDE)
    assert {key: mine[key] for key in ("kind", "busy", "connected", "state")} == {
        "kind": "claude-code", "busy": False, "connected": True, "state": "idle"
    }
    answered = await api.send(CLAUDE, {"text": "anyone?", "eventId": "c0"})
    assert answered.status_code == 200
    assert answered.json()["as"] == "prompt" and answered.json()["message"] == "person"
    await sim.wait_idle()
    await until(lambda: len(api.router.registry.get(CLAUDE).live.converter.messages) >= 2)
    transcript = (await api.client.get(f"/sessions/{CLAUDE}/messages")).json()
    assert transcript["kind"] == "claude-code"
    assert transcript["messages"][0]["card"] is True and transcript["messages"][0]["role"] == "user"
    assert transcript["messages"][1]["role"] == "assistant"
    refusal(await api.client.post(f"/sessions/{CLAUDE}/abort", json={}), 409, "abort-unsupported")


def _hop_name(fn: Any) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__qualname__", repr(fn))


async def test_a_delivery_reads_no_settings_while_they_stand(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """``plugins.json`` unchanged: a send takes the kept channel modules, with
    no worker-thread hop to read the file or load the modules; edited, the
    next send sees it."""
    monkeypatch.setattr(watched, "COARSE_CLOCK_NS", 0)  # keep files written a moment ago
    api.write_plugins({"channel": ["cli", "webui"]})
    for n in range(2):  # the first learns the modules' names, the second keeps the load
        assert (await api.send("root", {"text": "warm", "eventId": f"w{n}", "wait": True})).status_code == 200
    hops: list[str] = []
    real = trio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(_hop_name(fn))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    for n in range(5):
        assert (await api.send("root", {"text": "kept", "eventId": f"k{n}", "wait": True})).status_code == 200
    assert not [hop for hop in hops if "SettingsDir" in hop or "Loader" in hop], hops
    api.write_plugins({"channel": ["cli"]})  # another size: another identity
    off = await api.send("root", {"text": "off", "eventId": "off"})
    assert off.status_code == 503 and off.json()["error"] == "channel-off"
