"""A scripted daemon for link tests: real TCP, a real WebSocket handshake
(wsproto), and whatever a test's script says on the session socket.

``GET /healthz`` answers 200 (or ``health_status``); any other request is
upgraded and handed to ``script(connection)``. Every request path is kept in
``paths``; every upgraded connection counts in ``connections``.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Awaitable, Callable

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    Request,
)

from wire.json import dumps

HELLO = {
    "type": "hello",
    "protocol": 1,
    "runtimeId": "fake",
    "session": "root",
    "adapter": {"id": "fake", "version": "0", "capabilities": []},
    "open": None,
    "lastSeq": 0,
    "operations": [],
}


class Closed(Exception):
    pass


class FakeConnection:
    def __init__(self, stream: trio.SocketStream, ws: WSConnection, path: str = "") -> None:
        self.stream = stream
        self.ws = ws
        #: The request's path (``/sessions/<id>``): a script may answer per session.
        self.path = path
        self._text = ""

    async def send_text(self, text: str) -> None:
        from wsproto.events import TextMessage

        await self.stream.send_all(self.ws.send(TextMessage(data=text)))

    async def send(self, message: dict) -> None:
        await self.send_text(dumps(message))

    async def receive(self) -> dict:
        while True:
            for event in self.ws.events():
                if isinstance(event, Message):
                    self._text += event.data
                    if event.message_finished:
                        text, self._text = self._text, ""
                        return json.loads(text)
                elif isinstance(event, CloseConnection):
                    raise Closed()
                elif isinstance(event, Ping):
                    await self.stream.send_all(self.ws.send(event.response()))
            data = await self.stream.receive_some(65536)
            if not data:
                raise Closed()
            self.ws.receive_data(data)

    async def receive_type(self, kind: str) -> dict:
        """The next message of type ``kind`` (others skipped)."""
        while True:
            message = await self.receive()
            if message["type"] == kind:
                return message

    async def greet(self, hello: dict = HELLO) -> dict:
        """``hello``; then, at the host's ``replay``, ``caught-up`` (nothing
        kept). Returns the replay."""
        await self.send(hello)
        replay = await self.receive_type("replay")
        await self.send({"type": "caught-up", "lastSeq": hello["lastSeq"]})
        return replay

    async def close(self, code: int, reason: str = "") -> None:
        await self.stream.send_all(self.ws.send(CloseConnection(code=code, reason=reason)))
        await self.stream.aclose()


Script = Callable[[FakeConnection], Awaitable[Any]]


class FakeDaemon:
    def __init__(self, script: Script, *, health_status: int = 200) -> None:
        self.script = script
        self.health_status = health_status
        self.paths: list[str] = []
        self.connections = 0
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[FakeDaemon] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    data += chunk
                path = data.split(b" ", 2)[1].decode()
                self.paths.append(path)
                if data.startswith(b"GET /healthz "):
                    await stream.send_all(
                        f"HTTP/1.1 {self.health_status} X\r\ncontent-length: 0\r\n"
                        "connection: close\r\n\r\n".encode()
                    )
                    return
                ws = WSConnection(ConnectionType.SERVER)
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, Request):
                        await stream.send_all(ws.send(AcceptConnection()))
                        break
                else:
                    return
                self.connections += 1
                await self.script(FakeConnection(stream, ws, path))
            except (Closed, trio.BrokenResourceError, trio.ClosedResourceError):
                return
