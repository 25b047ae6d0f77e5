"""Faults, against both daemons as real processes: the host's socket dropped
at many points of a session's life, and hostile bytes on raw sockets.

After every hostile input the daemon must still answer its health check and
serve another session end to end: nothing a peer sends takes down the
daemon or a session it does not own.
"""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import wsproto.events as wse

from tests.daemon.hosts import RawSocket, connect, masked_frame_bytes
from tests.support.daemons import KINDS, Daemon, spawn_daemon

pytestmark = pytest.mark.parametrize("kind", KINDS)

#: The operations every dropping host delivers: quick, slow (so drops land
#: mid-turn), failing.
OPERATIONS = {"a": "hi", "b": "slow 30 b", "c": "fail c", "d": "slow 10 d", "e": "e"}


async def still_serves(daemon: Daemon, session: str = "canary") -> None:
    """The daemon answers its health check and runs a turn end to end."""
    # A bound on a hang, not a figure: after a flood the reference daemon
    # (Node) on a loaded machine once took longer than 20 s to answer.
    async with httpx.AsyncClient(timeout=60) as client:
        with trio.fail_after(90):
            assert (await client.get(f"{daemon.http_url}/healthz")).status_code == 200
    async with connect(daemon, session) as h:
        hello = await h.hello()
        await h.open(1)
        await h.replay(hello["lastSeq"])
        op = f"canary-{hello['lastSeq']}"
        await h.prompt(op, "still here")
        outcome = await h.settled(op)
        assert outcome["status"] == "done"


class DroppingHost:
    """A host that applies frames exactly once by its cursor, acks every
    three, and drops its socket (no close frame) after a given number of
    messages on each connection, then reconnects and replays from the
    cursor, as the real host does."""

    def __init__(self, daemon: Daemon, session: str) -> None:
        self.daemon = daemon
        self.session = session
        self.cursor = 0
        self.applied: dict[int, dict] = {}
        self.duplicates: list[int] = []
        self.settled: dict[str, dict] = {}

    async def run(self, drops: list[int]) -> None:
        drops = list(drops)
        while len(self.settled) < len(OPERATIONS):
            limit = drops.pop(0) if drops else None
            await self._connection(limit)

    async def _connection(self, limit: int | None) -> None:
        raw = await RawSocket.open(self.daemon.port, f"/sessions/{self.session}", self.daemon.token)
        received = 0
        hello = await raw.text()
        assert hello is not None and hello["type"] == "hello"
        received += 1
        if limit is not None and received > limit:
            await raw.drop()
            return
        await raw.send_text(json.dumps({"type": "open", "generation": 1, "settings": {}, "restore": []}))
        await raw.send_text(json.dumps({"type": "replay", "after": self.cursor}))
        for op, text in OPERATIONS.items():  # idempotent: every connection delivers all
            if op not in self.settled:
                await raw.send_text(json.dumps({"type": "prompt", "operationId": op, "input": text, "whenBusy": "followUp"}))
        while len(self.settled) < len(OPERATIONS):
            if limit is not None and received >= limit:
                await raw.drop()
                return
            message = await raw.text()
            assert message is not None, "the daemon closed the socket"
            received += 1
            if message["type"] != "frame":
                continue
            seq = message["seq"]
            if seq <= self.cursor:
                self.duplicates.append(seq)
                continue
            assert seq == self.cursor + 1, f"gap: {self.cursor} then {seq}"
            self.cursor = seq
            self.applied[seq] = message["frame"]
            if message["frame"]["kind"] == "settle":
                self.settled[message["frame"]["operationId"]] = message["frame"]["outcome"]
            if seq % 3 == 0:
                await raw.send_text(json.dumps({"type": "ack", "seq": seq}))
        await raw.drop()


async def test_socket_dropped_at_every_point_then_every_frame_exactly_once(kind):
    async with spawn_daemon(kind) as daemon:
        for point in range(0, 32):
            host = DroppingHost(daemon, f"drop-{point}")
            await host.run([point])
            check_exactly_once(host)
        host = DroppingHost(daemon, "drop-often")
        await host.run([3, 1, 0, 5, 2, 2, 7, 1, 4, 0, 6])
        check_exactly_once(host)
        await still_serves(daemon)


def check_exactly_once(host: DroppingHost) -> None:
    assert host.duplicates == []
    assert sorted(host.applied) == list(range(1, host.cursor + 1))
    assert host.settled == {
        "a": {"status": "done", "text": "echo: hi (turn 1)"},
        "b": {"status": "done", "text": "echo: b (turn 2)"},
        "c": {"status": "unanswered", "reason": "c"},
        "d": {"status": "done", "text": "echo: d (turn 3)"},
        "e": {"status": "done", "text": "echo: e (turn 4)"},
    }
    starts = [f["operationId"] for f in host.applied.values() if f["kind"] == "start"]
    assert starts == list(OPERATIONS)


async def test_half_handshakes_and_http_garbage(kind):
    async with spawn_daemon(kind) as daemon:
        heads = [
            b"GET /sessions/x HTTP/1.1\r\nHost: a\r\n",  # stops mid-head
            b"GET /sessions/x HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",  # no key
            b"\x00\xff\xfe not http at all\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nContent-Length: 99999\r\n\r\nabc",  # body cut short
            b"POST /sessions/y HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            b"GET /other HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            b"GET /sessions/z HTTP/1.1\r\n" + b"X-Long: " + b"a" * 70000 + b"\r\n\r\n",  # head too large
        ]
        for head in heads:
            raw = await RawSocket.open(daemon.port, "/", None, handshake=False)
            await raw.send_bytes(head)
            await raw.drop()
        await still_serves(daemon)


async def test_truncated_and_broken_frames(kind):
    async with spawn_daemon(kind) as daemon:
        attacks = [
            masked_frame_bytes(b"x" * 10, length=100),  # claims more than it sends
            masked_frame_bytes(b'{"type":"ack"', fin=False),  # a message never finished
            masked_frame_bytes(b"", opcode=0x3),  # reserved opcode
            bytes([0x81, 0x05]) + b"hello",  # unmasked client frame
            masked_frame_bytes(b"\xff\xfe\xfd"),  # not UTF-8
            masked_frame_bytes(b"x" * 200, opcode=0x9),  # control frame too long
            b"\x81",  # half a frame header
        ]
        for attack in attacks:
            raw = await RawSocket.open(daemon.port, "/sessions/victim", daemon.token)
            assert raw.accepted
            assert (await raw.text())["type"] == "hello"
            await raw.send_bytes(attack)
            await raw.drop()
        await still_serves(daemon, "victim")
        await still_serves(daemon)


async def test_oversized_message_is_refused_and_the_daemon_goes_on(kind):
    async with spawn_daemon(kind) as daemon:
        raw = await RawSocket.open(daemon.port, "/sessions/big", daemon.token)
        assert (await raw.text())["type"] == "hello"
        payload = b'"' + b"x" * (64 * 1024 * 1024) + b'"'  # one byte over 64 MiB
        await raw.send_bytes(masked_frame_bytes(payload))
        assert await raw.close_code() == 1009
        await raw.drop()
        await still_serves(daemon, "big")


async def test_a_message_just_under_the_limit_is_accepted(kind):
    async with spawn_daemon(kind) as daemon:
        async with connect(daemon, "large") as h:
            await h.hello()
            entry = "x" * (64 * 1024 * 1024 - 200)
            await h.send({"type": "restore", "generation": 1, "entries": [entry]})
            await h.open(1, restore=[1, 2])
            await h.replay(0)
            await h.prompt("a", "hi")
            # Three restored entries: this is turn 4.
            assert await h.settled("a") == {"status": "done", "text": "echo: hi (turn 4)"}


async def test_bad_utf8_never_reaches_a_session(kind):
    """Ours fails the connection (RFC 6455 §8.1: wsproto reports 1007 and the
    TCP connection is closed, without a close frame); the reference decodes
    with replacement characters and answers ``unparseable message``. Either
    way the session is untouched."""
    async with spawn_daemon(kind) as daemon:
        raw = await RawSocket.open(daemon.port, "/sessions/utf8", daemon.token)
        assert (await raw.text())["type"] == "hello"
        await raw.send_bytes(masked_frame_bytes(b'{"type":"replay","after":\xff}'))
        if kind == "ours":
            assert await raw.close_code() in (None, 1007)
            assert raw.accepted and await raw.stream.receive_some(1) == b""
        else:
            assert await raw.text() == {"type": "error", "message": "unparseable message"}
        await raw.drop()
        await still_serves(daemon, "utf8")


async def test_ping_is_answered_and_quiet_sockets_stay(kind):
    async with spawn_daemon(kind) as daemon:
        raw = await RawSocket.open(daemon.port, "/sessions/ping", daemon.token)
        assert (await raw.text())["type"] == "hello"
        await raw.send_bytes(raw.ws.send(wse.Ping(payload=b"are you there")))
        pong = await raw.next_event(lambda e: isinstance(e, wse.Pong))
        assert pong is not None and pong.payload == b"are you there"
        await raw.send_text(json.dumps({"type": "replay", "after": 0}))
        assert (await raw.text())["type"] == "caught-up"
        await raw.drop()


async def test_sigterm_closes_sockets_with_1001_and_exits_0(kind):
    # Raw sockets, which close their end once the daemon's close frame is
    # in: a trio-websocket client keeps its TCP half open after a close the
    # server started, and the reference waits for every connection to end
    # before it exits.
    async with spawn_daemon(kind) as daemon:
        one = await RawSocket.open(daemon.port, "/sessions/one", daemon.token)
        two = await RawSocket.open(daemon.port, "/sessions/two", daemon.token)
        assert (await one.text())["type"] == (await two.text())["type"] == "hello"
        for message in [
            {"type": "open", "generation": 1, "settings": {}, "restore": []},
            {"type": "replay", "after": 0},
            {"type": "prompt", "operationId": "a", "input": "slow 600000 x", "whenBusy": "followUp"},
        ]:
            await one.send_text(json.dumps(message))
        assert (await one.text())["type"] == "caught-up"
        assert (await one.text())["frame"]["kind"] == "start"
        daemon.terminate()
        for raw in (one, two):
            close = await raw.next_event(lambda e: isinstance(e, wse.CloseConnection))
            assert (close.code, close.reason) == (1001, "shutting down")
            await raw.drop()
        with trio.fail_after(20):
            assert await daemon.process.wait() == 0
