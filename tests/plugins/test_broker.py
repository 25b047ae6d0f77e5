"""The broker's deadlines and refusals, and search: fixture modules, and the
real HTTP path to a fake SearXNG on loopback."""

from __future__ import annotations

import json
import urllib.parse
from functools import partial
from pathlib import Path

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from router.plugins.broker import Broker, BrokerStatistics, check_search_answer
from router.plugins.loader import Loader
from router.errors import Refusal

from .conftest import write_module

SEARCH_FIXTURES = {
    "hangs": """
        import trio
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            deps["events"].append("started")
            try:
                await trio.sleep_forever()
            finally:
                deps["events"].append("cancelled")
    """,
    "stubborn": """
        import trio
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                pass  # swallows its cancellation, and answers anyway
            return {"query": query, "total": 0, "results": []}
    """,
    "fails-while-cancelled": """
        import trio
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                try:
                    await trio.sleep_forever()
                finally:
                    raise RuntimeError("cleanup failed")
    """,
    "groups": """
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            raise ExceptionGroup("two failures", [ValueError("a"), KeyError("b")])
    """,
    "refuses": """
        from router.errors import Refusal
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            raise Refusal("quota-exhausted", "the search quota is used up for today")
    """,
    "crashes": """
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            return 1 / 0
    """,
    "sloppy": """
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            return {"query": query, "total": 1, "results": [{"title": "t", "url": "u"}]}
    """,
    "echoes": """
        INTERFACE_VERSION = 1
        async def search(options, query, deps):
            return {"query": query, "total": 7, "results": [
                {"title": options.get("title", "T"), "url": "https://example.invalid/",
                 "snippet": "s"}]}
    """,
}


@pytest.fixture
def loader_for(tree: Path):
    for name, source in SEARCH_FIXTURES.items():
        write_module(tree, "search-source", name, source)

    def make(name: str | None) -> Loader:
        loader = Loader(root=str(tree), log=lambda entry: None)
        if name is not None:
            result = loader.load({"search-source": name}, only=["search-source"])
            assert result.refused == ()
        return loader

    return make


async def test_a_hanging_module_is_cancelled_at_the_deadline(loader_for, autojump_clock) -> None:
    events: list = []
    broker = Broker(deadlines={"search": 5}, log=lambda e: None)
    start = trio.current_time()
    answer = await broker.search(loader_for("hangs"), "trio", deps={"events": events})
    assert isinstance(answer, Refusal) and answer.code == "deadline"
    assert "within 5 s" in answer.message
    assert events == ["started", "cancelled"]  # it saw the cancellation, and stopped
    assert trio.current_time() - start == pytest.approx(5)
    assert broker.statistics() == BrokerStatistics(calls=1, refusals=1)


async def test_a_module_that_answers_after_its_deadline_is_refused(loader_for, autojump_clock) -> None:
    broker = Broker(deadlines={"search": 5}, log=lambda e: None)
    answer = await broker.search(loader_for("stubborn"), "trio")
    assert isinstance(answer, Refusal) and answer.code == "deadline"


async def test_a_module_failing_while_cancelled_is_a_deadline(loader_for, autojump_clock) -> None:
    broker = Broker(deadlines={"search": 5}, log=lambda e: None)
    answer = await broker.search(loader_for("fails-while-cancelled"), "trio")
    assert isinstance(answer, Refusal) and answer.code == "deadline"


async def test_the_caller_cancelling_is_not_swallowed(loader_for, autojump_clock) -> None:
    broker = Broker(deadlines={"search": 60}, log=lambda e: None)
    with trio.move_on_after(1) as outer:
        await broker.search(loader_for("hangs"), "trio", deps={"events": []})
        pytest.fail("the broker returned instead of being cancelled")
    assert outer.cancelled_caught


@pytest.mark.parametrize(
    "name, code",
    [("refuses", "quota-exhausted"), ("crashes", "search-failed"), ("groups", "search-failed"),
     ("sloppy", "malformed-answer")],
)
async def test_module_refusals(loader_for, name: str, code: str) -> None:
    log: list = []
    answer = await Broker(log=log.append).search(loader_for(name), "trio")
    assert isinstance(answer, Refusal) and answer.code == code
    assert log[-1]["event"] == "search-refused" and log[-1]["code"] == code


async def test_an_answer_passes_with_the_modules_options(loader_for) -> None:
    answer = await Broker().search(loader_for("echoes"), "trio",
                                   options={"echoes": {"title": "from options"}})
    assert answer == {"query": "trio", "total": 7, "results": [
        {"title": "from options", "url": "https://example.invalid/", "snippet": "s"}]}


async def test_search_off_and_empty_queries(loader_for) -> None:
    assert (await Broker().search(loader_for(None), "trio")).code == "search-off"
    assert (await Broker().search(loader_for("echoes"), "   ")).code == "empty-query"


async def test_harness_builtin_always_refuses() -> None:
    loader = Loader(log=lambda e: None)
    loader.load({"search-source": "harness-builtin"}, only=["search-source"])
    answer = await Broker().search(loader, "trio")
    assert answer.code == "harness-searches"
    assert "searxng-url" in answer.message


@pytest.mark.parametrize("value, ok", [
    ({"query": "q", "total": 0, "results": []}, True),
    ({"query": "q", "total": 1, "results": [{"title": "", "url": "u", "snippet": ""}]}, True),
    ({"query": "q", "total": 0, "results": [{"title": "", "url": "u", "snippet": ""}]}, False),
    ({"query": "q", "total": -1, "results": []}, False),
    ({"query": "q", "total": True, "results": []}, False),
    ({"query": 1, "total": 0, "results": []}, False),
    ({"query": "q", "total": 0, "results": [], "extra": 1}, False),
    ([], False),
])
def test_check_search_answer(value, ok: bool) -> None:
    assert (check_search_answer(value) is None) == ok


# --------------------------------------------------------------------------- fake SearXNG


class FakeSearxng:
    """A SearXNG JSON API on loopback, as a raw ASGI app under Hypercorn."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        query = urllib.parse.parse_qs(scope["query_string"].decode())
        self.requests.append({"path": scope["path"], "query": query})
        if self.mode == "hang":
            await trio.sleep_forever()
        status, body = 200, b""
        if self.mode == "ok":
            body = json.dumps({
                "query": query["q"][0], "number_of_results": 0,
                "results": [
                    {"title": "Trio", "url": "https://trio.readthedocs.io/",
                     "content": "async I/O for humans", "engine": "x"},
                    {"title": "no url", "content": "dropped"},
                    {"title": "Nurseries", "url": "https://vorpus.org/", "content": None},
                ],
            }).encode()
        elif self.mode == "forbidden":
            status, body = 403, b"Forbidden"
        elif self.mode == "garbage":
            body = b"<html>not json</html>"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def searxng(nursery):
    app = FakeSearxng()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    binds = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
    app.url = binds[0]
    yield app


def searxng_loader() -> Loader:
    loader = Loader(log=lambda e: None)
    loader.load({"search-source": "searxng-url"}, only=["search-source"])
    return loader


async def test_searxng_over_real_http(searxng) -> None:
    answer = await Broker().search(searxng_loader(), "structured concurrency",
                                   options={"searxng-url": {"url": searxng.url}})
    assert answer == {
        "query": "structured concurrency", "total": 2,
        "results": [
            {"title": "Trio", "url": "https://trio.readthedocs.io/", "snippet": "async I/O for humans"},
            {"title": "Nurseries", "url": "https://vorpus.org/", "snippet": ""},
        ],
    }
    assert searxng.requests == [{"path": "/search",
                                 "query": {"q": ["structured concurrency"], "format": ["json"]}}]


async def test_searxng_max_results(searxng) -> None:
    answer = await Broker().search(searxng_loader(), "q",
                                   options={"searxng-url": {"url": searxng.url, "max_results": 1}})
    assert [r["title"] for r in answer["results"]] == ["Trio"]


@pytest.mark.parametrize("mode, code", [("forbidden", "searxng-http-error"),
                                        ("garbage", "searxng-bad-answer")])
async def test_searxng_failures(searxng, mode: str, code: str) -> None:
    searxng.mode = mode
    answer = await Broker().search(searxng_loader(), "q",
                                   options={"searxng-url": {"url": searxng.url}})
    assert answer.code == code


async def test_searxng_that_never_answers_is_cancelled(searxng) -> None:
    searxng.mode = "hang"
    # A real deadline, short: the server holds the request until the client
    # is cancelled; no timing is asserted, only the refusal.
    answer = await Broker(deadlines={"search": 0.5}).search(
        searxng_loader(), "q", options={"searxng-url": {"url": searxng.url}})
    assert answer.code == "deadline"
    assert len(searxng.requests) == 1


async def test_searxng_unreachable_and_unset() -> None:
    # A port nothing listens on: bind one, note it, close it.
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    answer = await Broker().search(searxng_loader(), "q",
                                   options={"searxng-url": {"url": f"http://127.0.0.1:{port}"}})
    assert answer.code == "searxng-unreachable"
    assert (await Broker().search(searxng_loader(), "q")).code == "searxng-url-missing"
