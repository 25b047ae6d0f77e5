"""``Loader.load_async``: files are checked and executed in a worker thread,
loads queue one at a time, and a load is applied all at once."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from router.plugins.loader import Loader

from .conftest import USAGE_SOURCE_OK, write_module

SEARCH_OK = """
    INTERFACE_VERSION = 1
    async def search(options, query, deps):
        return {"query": query, "total": 0, "results": []}
"""


async def test_a_modules_top_level_code_runs_off_the_trio_thread(tree: Path, log: list) -> None:
    write_module(tree, "usage-source", "where", USAGE_SOURCE_OK + """
import threading
ON_MAIN = threading.current_thread() is threading.main_thread()
""")
    loader = Loader(root=str(tree), log=log.append)
    result = await loader.load_async({"usage-source": ["where"]}, only=["usage-source"])
    assert result.refused == () and log == []
    assert loader.module("usage-source", "where").module.ON_MAIN is False
    assert threading.current_thread() is threading.main_thread()


async def test_the_loop_runs_while_a_module_imports(tree: Path, log: list) -> None:
    """A module that blocks at import until a Trio task lets it go: had the
    import run on the Trio thread, the task could never run."""
    gate = threading.Event()
    write_module(tree, "usage-source", "blocks", USAGE_SOURCE_OK + """
import builtins
RELEASED = builtins._router_test_gate.wait(10)
""")
    import builtins

    builtins._router_test_gate = gate  # type: ignore[attr-defined]
    loader = Loader(root=str(tree), log=log.append)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loader.load_async, {"usage-source": ["blocks"]})
            await trio.sleep(0)
            gate.set()
    finally:
        del builtins._router_test_gate  # type: ignore[attr-defined]
    assert loader.module("usage-source", "blocks").module.RELEASED is True


async def test_a_load_is_applied_all_at_once(tree: Path, log: list) -> None:
    write_module(tree, "usage-source", "good", USAGE_SOURCE_OK)
    write_module(tree, "search-source", "finds", SEARCH_OK)
    loader = Loader(root=str(tree), log=log.append)
    both = {"usage-source": ["good"], "search-source": "finds"}
    seen = set()
    done = trio.Event()

    async def watch() -> None:
        while not done.is_set():
            seen.add((loader.loaded()["usage-source"] == ["good"],
                      loader.loaded()["search-source"] == ["finds"]))
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        for _ in range(20):
            await loader.load_async(both, only=["usage-source", "search-source"])
            await loader.load_async({}, only=["usage-source", "search-source"])
        done.set()
    assert seen <= {(True, True), (False, False)}
    assert log == []


async def test_concurrent_loads_all_complete_one_at_a_time(tree: Path, log: list) -> None:
    write_module(tree, "usage-source", "good", USAGE_SOURCE_OK)
    loader = Loader(root=str(tree), log=log.append)
    results = []

    async def one(names: list[str]) -> None:
        results.append(await loader.load_async({"usage-source": names}, only=["usage-source"]))

    async with trio.open_nursery() as nursery:
        for n in range(10):
            nursery.start_soon(one, ["good"] if n % 2 else [])
    assert len(results) == 10 and all(r.refused == () for r in results)
    assert repr(loader).startswith("<Loader loads=10 ")
