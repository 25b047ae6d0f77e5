"""The shared h11 server loop (router/_http11.py) at what neither of its
servers' own tests reach: the cap on connections served at once."""

from __future__ import annotations

import logging

import trio
import trio.testing

from router._http11 import HttpLimits, accept_loop
from tests.support.polling import until


async def test_past_the_connection_cap_accepting_waits_for_one_to_end(nursery: trio.Nursery) -> None:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    served: list[trio.SocketStream] = []
    release = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        served.append(stream)
        await release.wait()
        await stream.aclose()

    limits = HttpLimits(first_wait=1, idle=1, head=1, body=1, max_head=1024, max_body=1024, connections=1)
    nursery.start_soon(accept_loop, listener, nursery, serve, logging.getLogger("test"), limits)
    first = await trio.open_tcp_stream("127.0.0.1", port)
    with trio.fail_after(10):
        await until(lambda: len(served) == 1)
    second = await trio.open_tcp_stream("127.0.0.1", port)  # waits in the listen backlog
    await trio.testing.wait_all_tasks_blocked()
    assert len(served) == 1
    release.set()
    with trio.fail_after(10):
        await until(lambda: len(served) == 2)
    await first.aclose()
    await second.aclose()
