"""A poll whose answer is not written gives its requests back (h11's
``send_failed`` idea): the next poll gets them, and the caller is answered
instead of waiting out its deadline.

Before this, ``POST /requests`` took the requests off the queue and then
Hypercorn wrote the answer to a client that had gone away; the write failed
silently and the call sat until its deadline.
"""

from __future__ import annotations

from typing import Any

import trio

from router.modlink import ModLink
from router.modlink.core import LinkCore
from wire.mod import MOD_INSTANCE_HEADER


# --------------------------------------------------------------------------- the core


def test_send_failed_puts_requests_back_first_in_order() -> None:
    core = LinkCore()
    a = core.start_call("session.model")
    b = core.start_call("config.list")
    assert core.take_requests() == [a, b]
    c = core.start_call("session.model")
    assert core.send_failed([a, b]) == [a, b]
    assert core.take_requests() == [a, b, c]  # back at the front, in order
    assert core.statistics().pending == 3


def test_send_failed_leaves_out_what_was_answered_or_abandoned_or_is_queued() -> None:
    from wire.mod import ModResultOk

    core = LinkCore()
    a, b, c = (core.start_call("session.model") for _ in range(3))
    taken = core.take_requests()
    core.accept_results([ModResultOk(id=a.id, value="m")])
    core.abandon_call(b.id)
    assert core.send_failed(taken) == [c]
    assert core.send_failed(taken) == []  # c is queued already: not twice
    assert core.take_requests() == [c]


# --------------------------------------------------------------------------- over the socket


async def _held_poll(path: str) -> trio.SocketStream:
    stream = await trio.open_unix_socket(path)
    await stream.send_all(
        b"POST /requests HTTP/1.1\r\nHost: claude-envoy\r\nContent-Length: 0\r\n"
        + MOD_INSTANCE_HEADER.encode() + b": mod-a\r\n\r\n"
    )
    return stream


async def test_a_call_whose_poll_client_went_away_reaches_the_next_poll(
    make_link: Any, open_client: Any, wait_until: Any
) -> None:
    """Many times over, because it is a race: the poll's client closes while
    the poll is held, and a call is queued at that same moment. Whichever
    the server meets first (the close, or the work), every call is answered
    by the next poll, long before its deadline."""
    link: ModLink = await make_link(hold=30.0)
    rounds = 25
    answered: list[str] = []
    async with open_client(link.path, "mod-a") as mod:
        for number in range(rounds):
            stream = await _held_poll(link.path)
            await wait_until(lambda: link.statistics().polls_waiting == 1)
            await stream.aclose()  # the client goes away mid-hold...
            async with trio.open_nursery() as nursery:

                async def caller() -> None:
                    # ...while a call is queued for it.
                    answered.append(await link.call("session.model", deadline=60))

                nursery.start_soon(caller)
                await wait_until(lambda: link.statistics().core.pending == 1)
                with trio.fail_after(30):  # the next poll gets the request
                    requests: list[Any] = []
                    while not requests:
                        requests = (await mod.post("/requests")).json()["requests"]
                (request,) = requests
                assert request["call"] == "session.model"
                response = await mod.post("/results", {"results": [{"id": request["id"], "ok": True, "value": f"m{number}"}]})
                assert response.json() == {"ok": True}
    assert answered == [f"m{number}" for number in range(rounds)]
    stats = link.statistics()
    assert stats.core.pending == 0 and stats.core.queued == 0
