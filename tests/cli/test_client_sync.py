"""The command line's blocking client (router._client_sync): its parser
takes any bytes to an answer or a refusal, never a traceback or a hang, and
one request over a real Unix socket and loopback TCP does what it names."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router._client_sync import MAX_HEAD, ClientExchange, ClientResponse, refusal_of, request
from router.errors import Refusal

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": [1]}\n"


def _answer(chunks: list[bytes], *, max_body: int = 1 << 20) -> ClientResponse | Refusal:
    """Feed ``chunks`` then the peer's close: the response or the refusal."""
    exchange = ClientExchange("GET", "/sessions", host="localhost", max_body=max_body)
    try:
        for chunk in chunks:
            if chunk:
                response = exchange.feed(chunk)
                if response is not None:
                    return response
        response = exchange.feed(b"")
    except Refusal as refused:
        return refused
    assert response is not None, "the peer's close must end the exchange"
    return response


def test_a_whole_answer_in_any_chunks() -> None:
    for size in (1, 2, 7, len(OK)):
        answer = _answer([OK[i:i + size] for i in range(0, len(OK), size)])
        assert isinstance(answer, ClientResponse) and answer.status == 200 and answer.json() == {"a": [1]}
        assert answer.header("content-type") == "application/json"


@pytest.mark.parametrize("raw, why", [
    (OK[:30], "peer unexpectedly closed"),  # a truncated head
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (MAX_HEAD + 10), "too long"),  # a huge header
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "complete message body"),  # a short body
    (b"\x00\xff garbage \r\n\r\n", "illegal status line"),
    (b"", ""),  # closed with nothing said
])
def test_hostile_answers_are_refused(raw: bytes, why: str) -> None:
    answer = _answer([raw])
    assert isinstance(answer, Refusal) and answer.code == "bad-answer" and why in answer.message


def test_a_body_over_the_limit_is_refused() -> None:
    answer = _answer([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100], max_body=99)
    assert isinstance(answer, Refusal) and answer.code == "bad-answer" and "over 99 bytes" in answer.message


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=64), st.sampled_from([OK[:17], OK[17:40], b"\r\n", b"\r\n\r\n",
                                                                      b"Content-Length: 99999\r\n",
                                                                      b"Transfer-Encoding: chunked\r\n",
                                                                      b"HTTP/1.1 200 OK\r\n"])), max_size=12))
def test_any_bytes_end_in_an_answer_or_a_refusal(chunks: list[bytes]) -> None:
    answer = _answer(chunks)
    assert isinstance(answer, (ClientResponse, Refusal))
    if isinstance(answer, Refusal):
        assert answer.code == "bad-answer"


def test_a_router_refusal_is_read() -> None:
    body = b'{"error": "channel-off", "message": "the cli channel is off", "channel": "cli"}'
    refused = refusal_of(ClientResponse(403, [], body))
    assert refused == Refusal("channel-off", "the cli channel is off", channel="cli")
    assert refusal_of(ClientResponse(500, [], b"<html>")) is None
    assert refusal_of(ClientResponse(500, [], b'{"error": "Not Kebab", "message": "x"}')) is None


# --------------------------------------------------------------------------- over real sockets


def _serve(listener: socket.socket, answer: Callable[[socket.socket, bytes], None]) -> threading.Thread:
    """Accept one connection, read the request's head, and ``answer`` it."""

    def run() -> None:
        connection, _ = listener.accept()
        with connection:
            seen = b""
            while b"\r\n\r\n" not in seen:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                seen += chunk
            answer(connection, seen)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def unix_listener(tmp_path: Path):
    path = str(tmp_path / "r.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    yield path, listener
    listener.close()


def test_one_request_over_a_unix_socket(unix_listener) -> None:
    path, listener = unix_listener
    seen: list[bytes] = []

    def answer(connection: socket.socket, head: bytes) -> None:
        seen.append(head)
        connection.sendall(OK)

    thread = _serve(listener, answer)
    response = request("POST", "/sessions/a%20b/messages", socket_path=path, headers={"x-router-channel": "cli"},
                       body=b'{"text": "hi"}', timeout=10)
    thread.join(10)
    assert response.status == 200 and response.json() == {"a": [1]}
    head = seen[0].lower()
    assert head.startswith(b"post /sessions/a%20b/messages http/1.1\r\n")
    assert b"host: localhost\r\n" in head and b"x-router-channel: cli\r\n" in head
    assert b"content-length: 14\r\n" in head and b"connection: close\r\n" in head


def test_one_request_over_loopback_tcp_with_a_token() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[bytes] = []

    def answer(connection: socket.socket, head: bytes) -> None:
        seen.append(head)
        connection.sendall(b'HTTP/1.1 401 Unauthorized\r\nContent-Length: 48\r\n\r\n'
                           b'{"error": "bad-token", "message": "wrong token"}')

    with listener:
        thread = _serve(listener, answer)
        response = request("GET", "/sessions", base_url=f"http://127.0.0.1:{port}/api/",
                           headers={"authorization": "Bearer s3cret"}, timeout=10)
        thread.join(10)
    assert response.status == 401 and refusal_of(response) == Refusal("bad-token", "wrong token")
    assert seen[0].startswith(b"GET /api/sessions HTTP/1.1\r\n")
    assert b"authorization: Bearer s3cret\r\n" in seen[0]
    assert f"host: 127.0.0.1:{port}\r\n".encode() in seen[0]


def test_a_peer_that_never_answers_ends_at_the_deadline(unix_listener) -> None:
    path, listener = unix_listener
    release = threading.Event()

    def answer(connection: socket.socket, head: bytes) -> None:
        connection.sendall(OK[:20])  # a head begun, never ended
        release.wait(30)

    thread = _serve(listener, answer)
    with pytest.raises(Refusal) as refused:
        request("GET", "/router", socket_path=path, timeout=0.5)
    release.set()
    thread.join(10)
    assert refused.value.code == "no-answer"


def test_a_peer_that_closes_mid_answer_is_refused(unix_listener) -> None:
    path, listener = unix_listener
    thread = _serve(listener, lambda connection, head: connection.sendall(OK[:-3]))
    with pytest.raises(Refusal) as refused:
        request("GET", "/router", socket_path=path, timeout=10)
    thread.join(10)
    assert refused.value.code == "bad-answer"


def test_nothing_listening_cannot_connect(tmp_path: Path) -> None:
    path = str(tmp_path / "gone.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()  # the file stays, nothing listens: what a SIGKILLed router leaves
    with pytest.raises(Refusal) as refused:
        request("GET", "/router", socket_path=path, timeout=5)
    assert refused.value.code == "cannot-connect" and refused.value.data.get("errno") == 111
    with pytest.raises(Refusal) as missing:
        request("GET", "/router", socket_path=str(tmp_path / "none.sock"), timeout=5)
    assert missing.value.code == "cannot-connect"
    assert os.path.exists(path)


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(Refusal) as refused:
        request("GET", "/x", base_url="ftp://127.0.0.1:1", timeout=1)
    assert refused.value.code == "bad-url"
