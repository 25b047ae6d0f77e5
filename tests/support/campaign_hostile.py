"""The fault campaign's hostile peers (docs/reliability.md): daemons that
lie and HTTP clients that misbehave, each against a live ``router serve``
while a good client keeps sending through it.

- :func:`phase_hostile_daemons`: ``router serve --daemon URL`` where URL is
  a scripted daemon (tests/host/fake_daemon.py) that answers the good
  client's session as a real daemon does and each hostile session with its
  case (:data:`DAEMON_CASES`);
- :func:`phase_hostile_http`: ``router serve`` (its in-process daemon) and
  raw sockets doing what the API must survive (:data:`HTTP_CASES`).

Each hostile connection or session counts as one fault; the good client's
deliveries are the operations, judged from the record as every phase's
are. Each case's outcome is a sentence in the row's ``cases``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from tests.support.campaign import HANG, PHASE_DEADLINE, FaultRow, _api_client, _KeepingDaemon, _resume, judge

MIB = 1 << 20
#: The host's limit on one daemon message (router.host.link.MAX_MESSAGE_SIZE).
OVER_LIMIT = 65 * MIB


class GoodClient:
    """Sends ``good <n>`` to ``session``, one at a time, each resent with
    its event id until answered done (every other answer counted in the
    row's ``refusals``), until stopped."""

    def __init__(self, client: Any, session: str, row: FaultRow, prefix: str = "g") -> None:
        self.client, self.session, self.row, self.prefix = client, session, row, prefix
        self.expected: dict[str, str] = {}
        self.answers: dict[str, dict] = {}

    async def send(self, event_id: str, text: str) -> dict | None:
        import httpx

        self.expected[event_id] = text
        with trio.move_on_after(PHASE_DEADLINE):
            while True:
                try:
                    response = await self.client.post(f"/sessions/{self.session}/messages",
                                                      json={"text": text, "eventId": event_id, "wait": True})
                    body = response.json()
                except (httpx.HTTPError, ValueError):
                    response, body = None, None
                reply = body.get("reply") if isinstance(body, dict) else None
                if response is not None and response.status_code == 200 and isinstance(reply, dict):
                    self.answers[event_id] = reply
                    return reply
                code = body.get("error") if isinstance(body, dict) else None
                self.row.refused(f"{response.status_code} {code}" if response is not None else "connection failed")
                if code == "session-stopped":
                    await _resume(self.row, _One(self.client), "good", self.session, body)
                await trio.sleep(0.3)
        return None

    async def run(self, stop: trio.Event) -> None:
        number = 0
        while not stop.is_set() or number < 3:
            number += 1
            await self.send(f"{self.prefix}-{number}", f"good {number}")


class _One:
    """One router's client, as :func:`tests.support.campaign._resume` takes routers."""

    def __init__(self, client: Any) -> None:
        self.clients = {"good": client}


# =========================================================================== hostile daemons


class _Daemons:
    """The scripted daemon's state per session path: a good
    :class:`_KeepingDaemon` for each, and each hostile case's script."""

    def __init__(self) -> None:
        self.good: dict[str, _KeepingDaemon] = {}
        self.connections: dict[str, int] = {}
        self.cases: dict[str, Callable[[Any, _KeepingDaemon, int], Awaitable[bool]]] = {}

    async def script(self, conn: Any) -> None:
        from tests.host.fake_daemon import Closed

        session = conn.path.rsplit("/", 1)[-1]
        state = self.good.setdefault(session, _KeepingDaemon(None, session=session, runtime="h1"))
        number = self.connections[session] = self.connections.get(session, 0) + 1
        case = self.cases.get(session.split("-", 1)[0])
        try:
            if case is not None and not await case(conn, state, number):
                return  # the case ended this connection
            await state.script(conn)
        except (Closed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def _greet(conn: Any, state: _KeepingDaemon) -> None:
    from tests.host.fake_daemon import HELLO

    await conn.send({**HELLO, "runtimeId": state.runtime, "session": state.session, "lastSeq": state.last,
                     "operations": []})
    await conn.receive_type("replay")
    await conn.send({"type": "caught-up", "lastSeq": state.last})


async def case_error_flood(conn: Any, state: _KeepingDaemon, number: int) -> bool:
    """First connection: a 4 MiB ``error``, then 3,000 small ones, closed."""
    if number > 1:
        return True
    await _greet(conn, state)
    await conn.send({"type": "error", "message": "E" * (4 * MIB)})
    for i in range(3000):
        await conn.send({"type": "error", "message": f"again {i}"})
    await conn.close(1000)
    return False


async def case_closes_after_hello(conn: Any, state: _KeepingDaemon, number: int) -> bool:
    """Every connection: ``hello``, the replay answered, then closed 1011."""
    await _greet(conn, state)
    await conn.close(1011, "adapter crashed")
    return False


async def case_over_limit(conn: Any, state: _KeepingDaemon, number: int) -> bool:
    """First connection: one message past the host's limit (65 MiB)."""
    if number > 1:
        return True
    await _greet(conn, state)
    await conn.send_text("x" * OVER_LIMIT)
    await conn.receive()
    return False


async def case_garbage(conn: Any, state: _KeepingDaemon, number: int) -> bool:
    """First connection: text that is not JSON, nesting 100,000 deep, a frame
    with no seq, an unknown type; then closed."""
    if number > 1:
        return True
    await _greet(conn, state)
    for text in ("not json", "[" * 100_000, '{"type":"frame","frame":{}}', '{"type":"nonsense"}',
                 '{"type":"frame","seq":-5,"frame":{"kind":"settle"}}'):
        await conn.send_text(text)
    await conn.close(1000)
    return False


async def case_rewrites_history(conn: Any, state: _KeepingDaemon, number: int) -> bool:
    """The first connection (runtime ``h1``) answers one prompt and closes;
    the next is a new runtime (``h2``) whose replay carries ``message``
    events with that operation's ids: the person's words and the answer
    rewritten. Then it serves as a good daemon."""
    if number == 1:
        await _greet(conn, state)
        prompt = await conn.receive_type("prompt")
        operation_id = prompt["operationId"]
        state.settled[operation_id] = {"status": "done", "text": f"answered {operation_id}"}
        for frame in ({"kind": "start", "operationId": operation_id},
                      {"kind": "settle", "operationId": operation_id, "outcome": state.settled[operation_id]}):
            await conn.send_text(state._keep(frame)[1])
        with trio.move_on_after(HANG):
            await conn.receive_type("ack")
        await conn.close(1001)
        return False
    if state.runtime == "h1":
        state.runtime, state.kept = "h2", []
        for operation_id in list(state.settled):
            for role, text in (("user", "words the person never said"), ("assistant", "a rewritten answer")):
                body = {"id": f"{operation_id}:{role}", "role": role, "operationId": operation_id, "createdAt": 5,
                        "parts": [{"type": "text", "text": text}]}
                state._keep({"kind": "event", "operationId": operation_id,
                             "event": {"type": "message", "message": body}})
    return True


def poisoned_frame() -> str:
    """The issue's poisoned frame: an event whose ``raw`` nests 400 deep."""
    data = json.dumps({"kind": "event", "operationId": None, "event": {"type": "raw", "value": 0}})
    return '{"type":"frame","seq":1,"frame":' + data.replace('"value": 0', '"value": ' + "[" * 400 + "]" * 400) + "}"


#: Each hostile daemon case: its session's name, its script, and what it does.
DAEMON_CASES: dict[str, tuple[Callable[..., Awaitable[bool]], str]] = {
    "flood": (case_error_flood, "a 4 MiB error and 3,000 more on one connection"),
    "hangup": (case_closes_after_hello, "closes every connection right after hello (1011)"),
    "huge": (case_over_limit, "one 65 MiB message (past the host's 64 MiB limit)"),
    "garbage": (case_garbage, "not JSON, 100,000-deep nesting, frames without a seq, unknown types"),
    "rewrite": (case_rewrites_history, "a new runtime rewriting a settled operation's messages"),
    "poison": (None, "a kept frame nesting 400 deep, replayed until acked"),  # type: ignore[dict-item]
}


def _resident_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found.group(1)) / 1024 if found else 0.0


async def phase_hostile_daemons(target: int, seed: int, work: Path) -> FaultRow:
    """``router serve`` on the scripted daemon: the good client sends to
    session ``good``; each case's session gets a delivery, every case
    ``target`` times over (a round of sessions ``<case>-<round>``)."""
    from router.host.store import Store
    from tests.api.processes import serve
    from tests.host.fake_daemon import FakeDaemon

    row = FaultRow("hostile daemons: router serve on a lying daemon")
    row.exits, row.stopped = 0, 0
    daemons = _Daemons()
    daemons.cases = {name: script for name, (script, _) in DAEMON_CASES.items() if script is not None}
    rounds = max(1, target // len(DAEMON_CASES))
    sessions = [f"{case}-{n}" for n in range(rounds) for case in DAEMON_CASES]
    for n in range(rounds):
        daemons.good[f"poison-{n}"] = _KeepingDaemon(poisoned_frame(), session=f"poison-{n}", runtime="h1")
    (work / "data").mkdir(parents=True, exist_ok=True)
    with Store(work / "data" / "host.sqlite") as store:
        for session in ["good", *sessions]:
            store.sessions.create(session)
    async with trio.open_nursery() as nursery:
        fake: FakeDaemon = await nursery.start(FakeDaemon(daemons.script).run)
        async with serve(work, "--daemon", fake.url, env={"ROUTER_DAEMON_TOKEN": "t"}) as served:
            before = _resident_mib(served.process.pid)
            async with _api_client(served.page) as client:
                good = GoodClient(client, "good", row)
                stop = trio.Event()
                async with trio.open_nursery() as inner:
                    inner.start_soon(good.run, stop)
                    outcomes = await _daemon_cases(row, client, sessions, daemons)
                    stop.set()
                transcripts = {s: (await client.get(f"/sessions/{s}/messages")).json() for s in sessions
                               if s.startswith("rewrite-")}
            peak = _resident_mib(served.process.pid)
            if served.process.returncode is not None:
                row.exits += 1
            log = served.log()
        nursery.cancel_scope.cancel()
    _daemon_outcomes(row, outcomes, transcripts, daemons, log, peak - before, fake.paths)
    with Store(work / "data" / "host.sqlite", exclusive=False) as store:
        judge_answered(row, store, "good", good.expected)
    return row


def judge_answered(row: FaultRow, store: Any, session: str, expected: dict[str, str]) -> None:
    """The scripted daemon's good session: every delivery one operation,
    settled ``answered <id>``, its user message once in the transcript."""
    from collections import Counter

    records = {o.id: o for o in store.operations.all() if o.session == session}
    ids = Counter(m["id"] for m in store.messages.all(session))
    row.operations += len(expected)
    row.duplicated += sum(n - 1 for n in ids.values() if n > 1)
    for operation_id in expected:
        record = records.get(operation_id)
        if record is None or record.outcome is None or not ids.get(f"{operation_id}:user"):
            row.lost += 1
            row.notes.append(f"{session}/{operation_id}: not settled, or not in the transcript")
        elif record.outcome != {"status": "done", "text": f"answered {operation_id}"}:
            row.wrong += 1
            row.notes.append(f"{session}/{operation_id}: {record.outcome}")


async def _daemon_cases(row: FaultRow, client: Any, sessions: list[str], daemons: _Daemons) -> dict[str, Any]:
    """A delivery to each hostile session, all at once (a rewrite session
    gets a second once the first settled, which its new runtime carries);
    each one's answer, or None when none came within :data:`HANG` × 3."""
    outcomes: dict[str, Any] = {}

    async def one(session: str) -> None:
        row.faults += 1
        outcome = None
        # A hung-up session can never answer: its wait is only the redials'.
        with trio.move_on_after(HANG if session.startswith("hangup-") else HANG * 3):
            response = await client.post(f"/sessions/{session}/messages",
                                         json={"text": "hi", "eventId": f"{session}-1", "wait": True})
            outcome = (response.status_code, response.json())
            if session.startswith("rewrite-"):
                # The first connection ended: the next is the new runtime.
                response = await client.post(f"/sessions/{session}/messages",
                                             json={"text": "again", "eventId": f"{session}-2", "wait": True})
                outcome = (response.status_code, response.json())
        outcomes[session] = outcome

    # A round (one session of each case) at a time: a round's 65 MiB
    # message is let go before the next.
    for start in range(0, len(sessions), len(DAEMON_CASES)):
        async with trio.open_nursery() as nursery:
            for session in sessions[start : start + len(DAEMON_CASES)]:
                nursery.start_soon(one, session)
    return outcomes


def _daemon_outcomes(row: FaultRow, outcomes: dict[str, Any], transcripts: dict[str, Any], daemons: _Daemons,
                     log: str, grown: float, paths: list[str]) -> None:
    """The row's ``cases``: per case, what its sessions got and what the
    router's log shows."""
    longest = max((len(line) for line in log.splitlines()), default=0)
    tracebacks = log.count("Traceback (most recent call last)")
    for case, (_, what) in DAEMON_CASES.items():
        mine = {s: o for s, o in outcomes.items() if s.startswith(f"{case}-")}
        answered = sum(1 for o in mine.values() if o and o[0] == 200 and (o[1].get("reply") or {}).get("status")
                       == "done")
        said = f"{answered} of {len(mine)} sessions answered"
        if case == "hangup":
            dials = sum(daemons.connections.get(s, 0) for s in mine)
            said = f"no answer (none possible), the router redialled {dials} times in all, backing off"
        elif case == "rewrite":
            said += _rewritten(row, transcripts)
        else:
            said += {"flood": f"; the router's longest log line {longest:,} characters",
                     "huge": f"; the router's peak memory grew {grown:.0f} MiB"}.get(case, "")
        row.case(f"daemon: {what}", said)
    row.case("daemon: the router's log", f"{tracebacks} tracebacks, longest line {longest:,} characters")


def _rewritten(row: FaultRow, transcripts: dict[str, Any]) -> str:
    """Whether any rewrite session's transcript shows the forged words
    (counted wrong)."""
    forged = ("words the person never said", "a rewritten answer")
    kept = all(not any(word in json.dumps(t) for word in forged) for t in transcripts.values())
    row.wrong += not kept
    return "; the transcript kept its words" if kept else "; THE TRANSCRIPT WAS REWRITTEN"


# =========================================================================== hostile HTTP peers


def _head(host: str, path: str = "/healthz", *, version: str = "1.1", extra: tuple[str, ...] = ()) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/{version}", f"Host: {host}", *extra]) + "\r\n\r\n").encode()


async def _until_closed(stream: trio.SocketStream, within: float) -> tuple[bytes, float | None]:
    """What the server sends until it closes, and after how many seconds
    it closed (None: still open after ``within``)."""
    data, started = b"", trio.current_time()
    with trio.move_on_after(within):
        try:
            while chunk := await stream.receive_some(65536):
                data += chunk
        except (trio.BrokenResourceError, OSError):
            pass
        return data, trio.current_time() - started
    return data, None


def _status(data: bytes) -> str:
    first = data.split(b"\r\n", 1)[0].decode("latin-1")
    return first.split(" ", 2)[1] if first.startswith("HTTP/") and first.count(" ") >= 1 else "no answer"


async def http_close_cases(row: FaultRow, port: int, host: str) -> None:
    """``Connection: close``, HTTP/1.0, an idle keep-alive, a WebSocket
    upgrade with no token and a foreign Host, an h2c upgrade, an HTTP/2
    preface: one connection each; what came back and whether it closed."""
    cases = [
        ("Connection: close", _head(host, extra=("Connection: close",))),
        ("HTTP/1.0", _head(host, version="1.0")),
        ("an idle keep-alive after one answer", _head(host)),
        ("a WebSocket upgrade, no token, a foreign Host", _head("evil.example", "/sessions/root/live", extra=(
            "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13"))),
        ("an h2c upgrade", _head(host, extra=("Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c",
                                               "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"))),
        ("an HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ]
    outcomes: dict[str, str] = {}

    async def one(name: str, data: bytes) -> None:
        row.faults += 1
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            got, closed = await _until_closed(stream, HANG * 3)
        outcomes[name] = f"answered {_status(got)}, " + (
            f"closed after {closed:.1f} s" if closed is not None else f"still open after {HANG * 3:g} s")

    async with trio.open_nursery() as nursery:
        for name, data in cases:
            nursery.start_soon(one, name, data)
    for name, _ in cases:
        row.case(f"HTTP: {name}", outcomes[name])


async def http_slowloris(row: FaultRow, port: int, host: str, count: int) -> None:
    """``count`` connections sending a request head one byte a second:
    how many the server closed, and after how long."""
    closed: list[float] = []

    async def one() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        started = trio.current_time()
        async with stream:
            try:
                for byte in _head(host, extra=("X-Slow: " + "s" * 40,)):
                    await stream.send_all(bytes([byte]))
                    with trio.move_on_after(1.0):
                        if not await stream.receive_some(65536):
                            break
                closed.append(trio.current_time() - started)
            except (trio.BrokenResourceError, OSError):
                closed.append(trio.current_time() - started)

    with trio.move_on_after(HANG * 3):
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                row.faults += 1
                nursery.start_soon(one)
    longest = f", the last after {max(closed):.0f} s" if closed else ""
    row.case(f"HTTP: slowloris, {count} connections sending a head a byte a second",
             f"{len(closed)} of {count} closed by the server{longest}")


async def http_flood(row: FaultRow, port: int, count: int) -> None:
    """``count`` connections opened and held idle at once (past the cap of
    256): how many were refused 503 ``too-many-connections``, and that every
    one was closed (the refused at once, the rest after the idle timeout)."""
    answers: list[bytes] = []
    closed = 0

    async def one() -> None:
        nonlocal closed
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            answers.append(b"refused")
            return
        async with stream:
            got, after = await _until_closed(stream, HANG * 3)
            answers.append(got)
            closed += after is not None

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            row.faults += 1
            nursery.start_soon(one)
    refused = sum(1 for a in answers if b"too-many-connections" in a)
    row.case(f"HTTP: a flood of {count} idle connections (the cap is 256)",
             f"{refused} refused 503 too-many-connections, {closed} of {count} closed by the server")


async def http_oversized(row: FaultRow, port: int, host: str, token: str) -> None:
    """A 9 MiB message body, with the token and without."""
    for name, extra in (("with the token", (f"Authorization: Bearer {token}",)), ("without a token", ())):
        row.faults += 1
        body = b'{"text": "' + b"x" * (9 * MIB) + b'"}'
        head = "\r\n".join(["POST /sessions/root/messages HTTP/1.1", f"Host: {host}", *extra,
                            "Content-Type: application/json", f"Content-Length: {len(body)}"]) + "\r\n\r\n"
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            try:
                await stream.send_all(head.encode() + body)
            except (trio.BrokenResourceError, OSError):
                pass
            got, _ = await _until_closed(stream, 3.0)
        row.case(f"HTTP: a 9 MiB message body, {name}", f"answered {_status(got)}")


async def phase_hostile_http(target: int, seed: int, work: Path) -> FaultRow:
    """``router serve`` and :data:`HTTP_CASES`-like peers on raw sockets,
    one after another, while the good client sends to ``root``. The slow
    and flooding connections scale with ``target``; the rest are one
    connection each."""
    from urllib.parse import urlsplit

    from router.host.store import Store
    from tests.api.processes import serve

    row = FaultRow("hostile HTTP peers: router serve's API")
    row.exits, row.stopped = 0, 0
    async with serve(work) as served:
        host = urlsplit(served.url).netloc
        port = int(host.rsplit(":", 1)[1])
        async with _api_client(served.page) as client:
            good = GoodClient(client, "root", row)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(good.run, stop)
                # One after another would idle through each one's timeout:
                # all at once, but the flood alone (its refusals are counted).
                async with trio.open_nursery() as cases:
                    cases.start_soon(http_close_cases, row, port, host)
                    cases.start_soon(http_oversized, row, port, host, served.token)
                    cases.start_soon(http_slowloris, row, port, host, max(4, target // 10))
                await http_flood(row, port, max(260, target))
                stop.set()
        if served.process.returncode is not None:
            row.exits += 1
        log = served.log()
    row.case("HTTP: the router's log", f"{log.count('Traceback (most recent call last)')} tracebacks")
    with Store(work / "data" / "host.sqlite", exclusive=False) as store:
        judge(row, store, "root", good.expected)
    return row
