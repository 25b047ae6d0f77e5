"""The mod link's body budget (docs/modlink.md, "The body budget"): large
bodies sent at once over the real Unix socket hold no more than the budget;
one that does not fit waits, then is refused 503 ``link-busy``; room given
back lets the next one in."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import trio

from router.modlink import ModLink
from router.modlink.http import MAX_BODY_BYTES, BodyBudget
from tests.modlink.test_http import HOST, read_answer
from tests.support.polling import until

#: A body of the route's shape, padded with white space to ``size`` bytes.
EMPTY_EVENTS = b'{"events": []}'
MIB = 1024 * 1024


def head(size: int) -> bytes:
    return (b"POST /events HTTP/1.1\r\n" + HOST + b"x-claude-envoy-mod: mod-a\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size)


def body(size: int) -> bytes:
    return EMPTY_EVENTS + b" " * (size - len(EMPTY_EVENTS))


async def test_concurrent_large_bodies_hold_no_more_than_the_budget(
    make_link: Callable[..., Awaitable[ModLink]],
) -> None:
    budget = BodyBudget(3 * MIB, wait=0.2)
    link = await make_link(hold=0.3, body_budget=budget)
    size = MIB + MIB // 2  # two fit in three MiB, a third does not
    streams = [await trio.open_unix_socket(link.path) for _ in range(4)]
    answers: dict[int, tuple[int, bytes]] = {}

    async def post(n: int, stream: trio.SocketStream, finish: trio.Event) -> None:
        buffer = bytearray()
        await stream.send_all(head(size) + body(size)[: size // 2])  # half a body: held while read
        if n < 2:
            await finish.wait()
            await stream.send_all(body(size)[size // 2:])
        status, _, content = await read_answer(stream, buffer)
        answers[n] = (status, content)

    finish = trio.Event()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for n, stream in enumerate(streams[:2]):
                nursery.start_soon(post, n, stream, finish)
            await until(lambda: budget.used == 2 * size)
            for n, stream in enumerate(streams[2:], start=2):
                nursery.start_soon(post, n, stream, finish)
            await until(lambda: len(answers) == 2)  # the two past the budget, refused
            finish.set()
    assert [answers[n][0] for n in range(4)] == [200, 200, 503, 503]
    assert b'"link-busy"' in answers[2][1] and b'"message"' in answers[2][1]
    assert budget.statistics().peak <= budget.total and budget.refused == 2
    await until(lambda: budget.used == 0)  # given back once answered
    # Room again: the next body goes in.
    for stream in streams:
        await stream.aclose()
    async with await trio.open_unix_socket(link.path) as stream:
        await stream.send_all(head(size) + body(size))
        assert (await read_answer(stream, bytearray()))[0] == 200


async def test_a_body_that_does_not_fit_waits_for_room(make_link: Callable[..., Awaitable[ModLink]]) -> None:
    budget = BodyBudget(2 * MIB, wait=60)
    link = await make_link(hold=0.3, body_budget=budget)
    first, second = [await trio.open_unix_socket(link.path) for _ in range(2)]
    size = MIB + MIB // 2
    answers: list[int] = []

    async def post(stream: trio.SocketStream, data: bytes) -> None:
        await stream.send_all(data)
        answers.append((await read_answer(stream, bytearray()))[0])

    with trio.fail_after(60):
        await first.send_all(head(size) + body(size)[:100])
        await until(lambda: budget.used == size)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, second, head(size) + body(size))
            await until(lambda: budget.waiting == 1)
            await first.send_all(body(size)[100:])
            answers.append((await read_answer(first, bytearray()))[0])
    assert answers == [200, 200] and budget.refused == 0 and budget.peak <= budget.total


def test_one_body_of_the_largest_size_always_fits() -> None:
    budget = BodyBudget()
    assert budget.try_take(MAX_BODY_BYTES) and budget.try_take(MAX_BODY_BYTES)


async def test_a_chunked_body_past_the_budget_is_refused(make_link: Callable[..., Awaitable[ModLink]]) -> None:
    budget = BodyBudget(MIB, wait=0)
    link = await make_link(hold=0.3, body_budget=budget)
    stream = await trio.open_unix_socket(link.path)
    chunk = b" " * (256 * 1024)
    buffer = bytearray()
    async with stream:
        await stream.send_all(b"POST /events HTTP/1.1\r\n" + HOST + b"x-claude-envoy-mod: mod-a\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n")

        async def send_body() -> None:
            for _ in range(8):
                await stream.send_all(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            await stream.send_all(b"0\r\n\r\n")

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_body)
                status, _, content = await read_answer(stream, buffer)
        assert status == 503 and b'"link-busy"' in content
    await until(lambda: budget.used == 0)
    _: Any = link
