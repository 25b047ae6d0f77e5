"""The interop scenarios: each drives a daemon process through one rule of
the protocol, asserts what the reference does, and returns the transcript of
every message each of its connections received, so the same scenario run
against our daemon and the reference daemon can be compared.

A scenario waits for conditions (a frame, a close), never for a time. Where
``caught-up`` lands among frames of a turn still running depends on timing
(in both daemons), so transcripts are compared as two sequences per
connection: the frames, and the other messages. Only
``steer_then_finish`` depends on the clock: the echo adapter shows a steered
text only in a turn that ends by itself, so the steer must land while a
``slow 2000`` turn runs; it is sent the moment that turn's ``start`` frame
arrives.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from tests.daemon.hosts import Host, connect, frames_of, seqs
from tests.support.daemons import Daemon

Transcript = dict[str, list[dict]]
Scenario = Callable[[Daemon], Awaitable[Transcript]]

SCENARIOS: dict[str, Scenario] = {}

ECHO = {"id": "echo", "version": "1", "capabilities": ["steer"]}
#: Ours also declares ``rerun`` (docs/container-protocol.md, "Where we differ").
OUR_ECHO = {**ECHO, "capabilities": ["steer", "rerun"]}
ABORTED = {"status": "unanswered", "reason": "aborted"}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def kinds(messages: list[dict]) -> list[str]:
    return [m["frame"]["kind"] for m in frames_of(messages)]


async def ready(h: Host, generation: int = 1) -> None:
    """hello, open, replay: the start every host makes."""
    await h.hello()
    await h.open(generation)
    await h.replay(0)


@scenario
async def open_and_echo(d: Daemon) -> Transcript:
    async with connect(d, "echo") as h:
        hello = await h.hello()
        assert hello == {
            "type": "hello", "protocol": 1, "runtimeId": d.runtime_id, "session": "echo",
            "adapter": OUR_ECHO if d.kind == "ours" else ECHO, "open": None, "lastSeq": 0, "operations": [],
        }
        await h.open(1)
        assert await h.replay(0) == []
        await h.prompt("a", "hi")
        got = await h.frame("settle", "a")
        assert kinds(got) == ["start", "event", "event", "persist", "settle"]
        assert seqs(got) == [1, 2, 3, 4, 5]
        start, delta, message, persist, settle = (m["frame"] for m in got)
        assert delta == {"kind": "event", "operationId": "a",
                         "event": {"type": "text-delta", "messageId": "a:assistant", "delta": "echo: hi (turn 1)"}}
        assert message["event"]["message"]["parts"] == [{"type": "text", "text": "echo: hi (turn 1)"}]
        assert message["event"]["message"]["operationId"] == "a"
        assert isinstance(message["event"]["message"]["createdAt"], int)
        assert persist == {"kind": "persist", "entries": [{"turn": 1, "text": "hi"}]}
        assert settle["outcome"] == {"status": "done", "text": "echo: hi (turn 1)"}
        # Input parts: text parts joined by newlines, an image an empty line.
        await h.prompt("b", [{"type": "text", "text": "x"}, {"type": "image", "mediaType": "image/png", "data": "AA=="}, {"type": "text", "text": "y"}])
        assert await h.settled("b") == {"status": "done", "text": "echo: x\n\ny (turn 2)"}
    return {"h": h.received}


@scenario
async def steer_then_finish(d: Daemon) -> Transcript:
    async with connect(d, "steer") as h:
        await ready(h)
        await h.prompt("a", "slow 2000 first")
        await h.frame("start", "a")
        await h.prompt("b", "more", "steer")
        await h.frame("start", "b")
        assert await h.settled("a") == {"status": "done", "text": "echo: first + more (turn 1)"}
        assert await h.settled("b") == {"status": "done", "text": "echo: first + more (turn 1)"}
        # Nothing runs twice: the next turn is turn 2.
        await h.prompt("c", "next")
        assert await h.settled("c") == {"status": "done", "text": "echo: next (turn 2)"}
    return {"h": h.received}


@scenario
async def steer_then_abort(d: Daemon) -> Transcript:
    async with connect(d, "steer-abort") as h:
        await ready(h)
        await h.prompt("a", "slow 600000 first")
        await h.frame("start", "a")
        await h.prompt("b", "more", "steer")
        await h.frame("start", "b")
        await h.send({"type": "abort", "operationId": "b"})  # the shared turn
        assert await h.settled("a") == ABORTED
        assert await h.settled("b") == ABORTED
    return {"h": h.received}


@scenario
async def follow_up_queues(d: Daemon) -> Transcript:
    async with connect(d, "follow-up") as h:
        await ready(h)
        await h.prompt("a", "slow 50 one")
        await h.prompt("b", "two")  # followUp: its own turn, after a
        assert await h.settled("a") == {"status": "done", "text": "echo: one (turn 1)"}
        assert await h.settled("b") == {"status": "done", "text": "echo: two (turn 2)"}
        assert kinds(h.received).count("start") == 2
    return {"h": h.received}


@scenario
async def slow_then_abort(d: Daemon) -> Transcript:
    async with connect(d, "abort") as h:
        await ready(h)
        await h.prompt("a", "slow 600000 x")
        await h.frame("start", "a")
        await h.send({"type": "abort", "operationId": "a"})
        assert await h.settled("a") == ABORTED
        await h.prompt("b", "hi")  # the aborted turn did not count
        assert await h.settled("b") == {"status": "done", "text": "echo: hi (turn 1)"}
        await h.send({"type": "abort", "operationId": "b"})  # settled: nothing
        await h.send({"type": "abort", "operationId": "unknown"})
        await h.prompt("c", "after")
        got = await h.frame("settle", "c")
        assert kinds(got) == ["start", "event", "event", "persist", "settle"]
    return {"h": h.received}


@scenario
async def abort_everything(d: Daemon) -> Transcript:
    async with connect(d, "abort-all") as h:
        await ready(h)
        await h.prompt("a", "slow 600000 x")
        await h.frame("start", "a")
        await h.prompt("b", "y")
        await h.prompt("c", "z")
        await h.send({"type": "abort"})
        got = await h.frame("settle", "a")
        settles = [m["frame"] for m in frames_of(got) if m["frame"]["kind"] == "settle"]
        assert [s["operationId"] for s in settles] == ["b", "c", "a"]
        assert all(s["outcome"] == ABORTED for s in settles)
    return {"h": h.received}


@scenario
async def fail(d: Daemon) -> Transcript:
    async with connect(d, "fail") as h:
        await ready(h)
        await h.prompt("a", "fail nope")
        assert await h.settled("a") == {"status": "unanswered", "reason": "nope"}
        await h.prompt("b", "fail")
        assert await h.settled("b") == {"status": "unanswered", "reason": "failed"}
        await h.prompt("c", "hi")
        assert await h.settled("c") == {"status": "done", "text": "echo: hi (turn 1)"}
    return {"h": h.received}


@scenario
async def idempotent_prompt(d: Daemon) -> Transcript:
    async with connect(d, "idempotent") as h:
        await ready(h)
        await h.prompt("a", "hi")
        await h.settled("a")
        await h.prompt("a", "again")  # settled: ignored
        await h.prompt("b", "slow 600000 b")
        await h.frame("start", "b")
        await h.prompt("b", "again")  # running: ignored
        await h.prompt("c", "c")
        await h.prompt("c", "again")  # queued: ignored
        await h.send({"type": "abort"})
        await h.settled("b")
        await h.prompt("d", "d")
        got = await h.frame("settle", "d")
        assert seqs(got)[0] == 9  # a: 1-5, b start 6, c settle 7, b settle 8
        starts = [m["frame"]["operationId"] for m in frames_of(h.received) if m["frame"]["kind"] == "start"]
        assert starts == ["a", "b", "d"]
    return {"h": h.received}


@scenario
async def restore_across_generations(d: Daemon) -> Transcript:
    async with connect(d, "restore") as h:
        await ready(h, 1)
        await h.prompt("a", "one")
        await h.settled("a")
        await h.prompt("b", "two")
        assert await h.settled("b") == {"status": "done", "text": "echo: two (turn 2)"}
        # A new generation, restored from three entries: two gathered in
        # restore messages (and one for another generation, dropped).
        await h.send({"type": "restore", "generation": 7, "entries": ["dropped"]})
        await h.send({"type": "restore", "generation": 2, "entries": [{"turn": 1, "text": "one"}]})
        await h.send({"type": "restore", "generation": 2, "entries": [{"turn": 2, "text": "two"}]})
        await h.open(2, restore=[{"turn": 3, "text": "three"}])
        await h.prompt("c", "four")
        assert await h.settled("c") == {"status": "done", "text": "echo: four (turn 4)"}
        await h.open(2, restore=["ignored"])  # the open generation: ignored
        await h.prompt("d", "five")
        assert await h.settled("d") == {"status": "done", "text": "echo: five (turn 5)"}
    async with connect(d, "restore", name="again") as again:
        hello = await again.hello()
        assert hello["open"] == 2 and hello["lastSeq"] == 20
    return {"h": h.received, "again": again.received}


@scenario
async def new_generation_aborts_the_running_turn(d: Daemon) -> Transcript:
    async with connect(d, "regen") as h:
        await ready(h, 1)
        await h.prompt("a", "slow 600000 x")
        await h.frame("start", "a")
        await h.open(2)
        assert await h.settled("a") == ABORTED
        await h.prompt("b", "hi")
        assert await h.settled("b") == {"status": "done", "text": "echo: hi (turn 1)"}
    return {"h": h.received}


@scenario
async def reconnect_and_replay_after_a_cursor(d: Daemon) -> Transcript:
    async with connect(d, "replay", name="first") as first:
        await ready(first)
        await first.prompt("a", "one")
        await first.prompt("b", "two")
        await first.settled("b")
    async with connect(d, "replay", name="second") as second:
        hello = await second.hello()
        assert hello["lastSeq"] == 10 and hello["open"] == 1
        assert hello["operations"] == [
            {"operationId": "a", "status": "settled", "outcome": {"status": "done", "text": "echo: one (turn 1)"}},
            {"operationId": "b", "status": "settled", "outcome": {"status": "done", "text": "echo: two (turn 2)"}},
        ]
        frames = await second.replay(4)
        assert seqs(frames) == [5, 6, 7, 8, 9, 10]
        assert second.received[-1] == {"type": "caught-up", "lastSeq": 10}
        frames = await second.replay(10)
        assert frames == []
        await second.prompt("c", "three")  # live after replay
        got = await second.frame("settle", "c")
        assert seqs(got)[0] == 11
    return {"first": first.received, "second": second.received}


@scenario
async def ack_then_reconnect(d: Daemon) -> Transcript:
    async with connect(d, "ack", name="first") as first:
        await ready(first)
        await first.prompt("a", "one")
        await first.settled("a")
        await first.send({"type": "ack", "seq": 3})
        await first.replay(0)  # handled after the ack: frames 4 and 5
    async with connect(d, "ack", name="second") as second:
        await second.hello()
        assert seqs(await second.replay(0)) == [4, 5]
        await second.send({"type": "ack", "seq": 99})
        assert await second.replay(0) == []
    assert seqs(first.received[-3:]) == [4, 5]
    return {"first": first.received, "second": second.received}


@scenario
async def frames_wait_for_replay(d: Daemon) -> Transcript:
    async with connect(d, "not-live", name="first") as first:
        await first.hello()
        await first.prompt("a", "queued before open")
        await first.replay(0)  # handled after the prompt: it is queued
    async with connect(d, "not-live", name="second") as second:
        hello = await second.hello()
        assert hello["open"] is None
        assert hello["operations"] == [{"operationId": "a", "status": "queued"}]
        await second.open(1)
        # Not live yet (no replay on this connection): the turn's frames are
        # only kept; the replay sends them (and any made meanwhile follow).
        await second.send({"type": "configure", "settings": {"model": "m"}})
        await second.send({"type": "replay", "after": 0})
        await second.frame("settle", "a")
        assert kinds(second.received) == ["start", "event", "event", "persist", "settle"]
        assert seqs(second.received) == [1, 2, 3, 4, 5]
    return {"first": first.received, "second": second.received}


@scenario
async def second_connection_replaces_the_first(d: Daemon) -> Transcript:
    async with connect(d, "replace", name="first") as first:
        await ready(first)
        async with connect(d, "replace", name="second") as second:
            hello = await second.hello()
            assert hello["open"] == 1
            assert await first.closed() == (4001, "replaced by a newer connection")
            await second.replay(0)
            await second.prompt("a", "hi")
            assert await second.settled("a") == {"status": "done", "text": "echo: hi (turn 1)"}
    return {"first": first.received, "second": second.received}


@scenario
async def unauthorized(d: Daemon) -> Transcript:
    async with connect(d, "s", token="wrong", name="wrong") as wrong:
        assert await wrong.closed() == (4003, "unauthorized")
    async with connect(d, "s", token="", name="empty-token") as empty_token:
        assert await empty_token.closed() == (4003, "unauthorized")
    async with connect(d, "", name="empty-id") as empty_id:
        assert await empty_id.closed() == (4003, "unauthorized")
    assert wrong.received == empty_token.received == empty_id.received == []
    return {}


@scenario
async def garbage_changes_nothing(d: Daemon) -> Transcript:
    async with connect(d, "garbage", name="first") as first:
        await ready(first)
        await first.prompt("a", "hi")
        await first.settled("a")
        for text in ["garbage", "", "{}", "[1]", '{"type":"prompt"}', '{"type":"ack","seq":-1}',
                     '{"type":"prompt","operationId":"x","input":"y","whenBusy":"later"}', "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace")]:
            await first.send(text)
            assert await first.recv() == {"type": "error", "message": "unparseable message"}
    async with connect(d, "garbage", name="second") as second:
        hello = await second.hello()
        assert hello["lastSeq"] == 5 and [op["operationId"] for op in hello["operations"]] == ["a"]
    return {"first": first.received, "second": second.received}


@scenario
async def binary_messages_are_read_as_text(d: Daemon) -> Transcript:
    async with connect(d, "binary") as h:
        await h.hello()
        await h.send(b'{"type":"open","generation":1,"settings":{},"restore":[]}')
        await h.send(b'{"type":"replay","after":0}')
        await h.until(lambda m: m["type"] == "caught-up")
        await h.send('{"type":"prompt","operationId":"a","input":"h\u00e9","whenBusy":"followUp"}'.encode())
        assert await h.settled("a") == {"status": "done", "text": "echo: h\u00e9 (turn 1)"}
    return {"h": h.received}


@scenario
async def sessions_are_separate(d: Daemon) -> Transcript:
    odd = "a b/\u00fc%?#"
    async with connect(d, odd, name="odd") as one, connect(d, "plain", name="plain") as two:
        assert (await one.hello())["session"] == odd
        assert (await two.hello())["session"] == "plain"
        await one.open(1)
        await two.open(5)
        await one.replay(0)
        await two.replay(0)
        await one.prompt("same-id", "one")
        await two.prompt("same-id", "two")
        got_one = await one.frame("settle", "same-id")
        got_two = await two.frame("settle", "same-id")
        assert seqs(got_one) == seqs(got_two) == [1, 2, 3, 4, 5]
        assert got_two[-1]["frame"]["outcome"]["text"] == "echo: two (turn 1)"
    return {"odd": one.received, "plain": two.received}
