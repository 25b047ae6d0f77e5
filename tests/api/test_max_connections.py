"""``router serve --max-connections N``: the API's cap on the connections
one listener serves at once, set from the command line (docs/turns.md,
"Connections"), on a real ``router serve`` process and real sockets.

With a cap of 2, two live streams (each holds its connection) fill it: a
third connection is answered ``503 too-many-connections``; once a stream is
closed, a new connection is served again. A value that is not a count is
refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.api.processes import REPO, ROUTER, environment, serve

PATIENCE = 60


async def _request(port: int, head: str) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(head.encode())
    return stream


async def _until_headers(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        assert chunk, f"closed before its headers: {data!r}"
        data += chunk
    return data


async def _to_eof(stream: trio.SocketStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(4096):
        data += chunk
    return data


async def _healthz(port: int) -> tuple[int, bytes]:
    stream = await _request(port, f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
    with trio.fail_after(PATIENCE):
        data = await _to_eof(stream)
    await stream.aclose()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_the_flag_sets_the_cap_each_listener_serves(tmp_path: Path) -> None:
    async with serve(tmp_path, "--max-connections", "2") as served:
        port = int(served.url.rsplit(":", 1)[1])
        live = (f"GET /board/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {served.token}\r\nAccept: text/event-stream\r\n\r\n")
        streams = [await _request(port, live) for _ in range(2)]
        for stream in streams:
            with trio.fail_after(PATIENCE):
                assert (await _until_headers(stream)).startswith(b"HTTP/1.1 200")
        status, body = await _healthz(port)
        assert status == 503 and json.loads(body)["error"] == "too-many-connections"
        await streams[0].aclose()
        # The server notices the closed stream when it next writes to it
        # (a keep-alive comment at the latest): asked again until then.
        with trio.fail_after(PATIENCE):
            while (await _healthz(port))[0] != 200:
                await trio.sleep(0.05)  # between two asks of another process, not a timing
        await streams[1].aclose()


async def test_a_cap_that_is_not_a_count_is_refused(tmp_path: Path) -> None:
    for value in ("0", "-3", "many"):
        done = await trio.run_process(
            [*ROUTER, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--settings", str(tmp_path / "s"),
             "--max-connections", value],
            capture_stdout=True, capture_stderr=True, check=False, env=environment(), cwd=REPO,
        )
        assert done.returncode == 2 and done.stdout == b"", value
        assert b"--max-connections" in done.stderr, done.stderr
