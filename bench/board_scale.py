"""The board at scale: many sessions over three routers on one PostgreSQL.
Prints a table.

    .venv/bin/python bench/board_scale.py [--sessions 1000] [--routers 3] [--samples 40] [--changes 30]
                                          [--py-spy PATH [--py-spy-seconds 20] [--py-spy-phase sessions|changes]]
                                          [--against TREE]

It starts a private PostgreSQL 15 (tests/support/postgres.py, the tests'
settings), one ``router daemon --adapter echo`` and ``--routers`` ``router
serve --store postgresql://…`` dialling it (the shared-daemon cluster
mode), makes ``--sessions`` container sessions in the shared record and
waits until every one has a holder. Then, against the first router:

- **``GET /sessions``**: ``--samples`` requests one after another on one
  keep-alive connection (the board: every session of every router), their
  p50, p90, p99 and the body's size; beside it ``GET /healthz`` on the same
  connection, the HTTP stack's own cost in the same run; and the CPU the
  routers (all of them: the others answer the first's survey) used per
  request meanwhile, from ``/proc`` (their background work, the lease
  rounds, included: load stretches it least).
- **The page**: a headless Chromium (``tests/support/chromium.py``) opens
  the page, at a desktop's size and at a phone's (390×844, scale 3, mobile,
  touch; no throttling: the figure is the page's own work on this
  machine): first paint, first contentful paint and the time the board
  lists every session, from the navigation's start, each in a fresh
  browser context; and the page's JavaScript heap once it lists them and
  again after it was left open ``HEAP_AFTER`` seconds (after a garbage
  collection): what the live board costs a tab that stays open.
- **A state change shown**: with the desktop page open, ``--changes``
  deliveries, one at a time, each to a session that had none yet, posted to
  another router than the page's (relayed through the cluster's inbox when
  that router does not hold it), ``wait`` off. The page stamps, with its
  own clock, the moment its board's row for that session first shows the
  change (its state or its last activity: the row's ``data-last-activity``,
  or on a page without it the row's "5 min ago", which stays "now" for a
  session active in the last 45 s), and the table gives the time from
  the POST's start (the bench's clock: one machine, one wall clock, read
  with ``Date.now()`` and ``time.time()``, both milliseconds) to then.
  Beside it, ``GET /board/live`` read by the bench on the page's router: the
  time to the stream's event that changes the row. Both include the
  delivery's own write of the record (relayed through the cluster's inbox
  to the holder, which writes it): the row "the session's record written"
  is that part (the ``lastActivity`` the stream's row carries, the
  holder's clock, the same machine's), and the two rows "the board: ..."
  the rest, per change: from that write to the stream's event and to the
  page's row (what the board itself takes to show a change).

``--against TREE`` measures the routers of another source tree first (an
export of main, say), then this tree's, in one run: the routers run from
that tree (their working directory and ``PYTHONPATH``); the daemon, the
bench and the database are this tree's.

The targets (docs/bench.md, "The board at scale"): ``GET /sessions`` at most
100 ms, first paint at most 1 s, a change shown within 200 ms at p99.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster.processes import board, cluster, holder_of, make_sessions  # noqa: E402
from tests.support.chromium import Browser, Page, chromium  # noqa: E402
from tests.support.postgres import Cluster  # noqa: E402

#: How long a change may take to show before it is counted as not shown (s).
SHOWN_WITHIN = 30
#: How long the page is left open before its heap is read again (s).
HEAP_AFTER = 30

PAINTS = "Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]))"

#: Resolves, in the page's clock (ms since the navigation), once the board
#: lists ``count`` sessions.
LISTED = """(count) => new Promise((done) => {
  const seen = () => document.querySelectorAll('#board li').length >= count ? performance.now() : null;
  const now = seen(); if (now !== null) return done(now);
  new MutationObserver((_, observer) => { const at = seen(); if (at !== null) { observer.disconnect(); done(at); } })
    .observe(document.getElementById('board'), {childList: true, subtree: true});
})"""

#: Starts watching one session's row; ``window.changedAt`` becomes the
#: wall-clock time (ms) when the row first differs from what it shows now.
WATCH = """(id) => {
  const row = () => document.querySelector(`#board li[data-session="${CSS.escape(id)}"]`);
  const look = () => { const r = row(); return r ? r.dataset.state + '|' + (r.dataset.lastActivity ?? r.querySelector('.when').textContent) : null; };
  const before = look();
  window.changedAt = null;
  const observer = new MutationObserver(() => {
    const now = look();
    if (now !== null && now !== before) { window.changedAt = Date.now(); observer.disconnect(); }
  });
  observer.observe(document.getElementById('board'), {childList: true, subtree: true, attributes: true, characterData: true});
  return before;
}"""


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return at(0.5), at(0.9), at(0.99)


async def wait_spread(members: list[Any], count: int) -> None:
    """Until the first router's board names a holder for every session."""
    with trio.fail_after(300):
        while True:
            listed = await board(members[0])
            held = sum(1 for entry in listed if entry.get("kind") == "container" and holder_of(entry))
            if held >= count:
                return
            await trio.sleep(0.5)


async def timed_gets(url: str, headers: dict[str, str], path: str, samples: int) -> tuple[list[float], int]:
    times, size = [], 0
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        await client.get(path)  # the connection made; not timed
        for _ in range(samples):
            started = time.perf_counter()
            response = await client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code, response.text[:200])
            size = len(response.content)
    return times, size


def cpu_ms(members: list[Any]) -> float:
    """The routers' CPU so far (user and system, ms), from ``/proc``."""
    import os

    total = 0
    for member in members:
        with open(f"/proc/{member.process.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (the 14th and 15th of the whole line)
    return total * 1000 / os.sysconf("SC_CLK_TCK")


async def open_page(browser: Browser, url: str, *, phone: bool) -> Page:
    context = await browser.send("Target.createBrowserContext", {"disposeOnDetach": True})
    target = await browser.send("Target.createTarget", {"url": "about:blank",
                                                        "browserContextId": context["browserContextId"]})
    attached = await browser.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
    page = Page(browser, attached["sessionId"])
    for domain in ("Page", "Runtime", "Network"):
        await page.send(f"{domain}.enable")
    if phone:
        await page.emulate(390, 844, mobile=True)
    else:
        await page.emulate(1280, 800, mobile=False)
    await page.send("Page.navigate", {"url": url})
    await page.wait_for("document.readyState === 'complete' && location.href.startsWith('http')", timeout=60)
    return page


async def first_paint(browser: Browser, url: str, sessions: int, *, phone: bool) -> dict[str, float]:
    page = await open_page(browser, url, phone=phone)
    with trio.fail_after(300):
        listed = await page.evaluate(f"({LISTED})({sessions})")
    paints = await page.wait_for(f"(() => {{ const p = {PAINTS}; return p['first-contentful-paint'] ? p : null; }})()")
    heap_listed = (await page.send("Runtime.getHeapUsage"))["usedSize"] / 1e6
    await trio.sleep(HEAP_AFTER)  # the page left open: what the live board's surveys cost it
    await page.send("HeapProfiler.collectGarbage")
    heap_later = (await page.send("Runtime.getHeapUsage"))["usedSize"] / 1e6
    await page.send("Target.closeTarget",
                    {"targetId": (await page.send("Target.getTargetInfo"))["targetInfo"]["targetId"]})
    return {"first paint": paints["first-paint"], "first contentful paint": paints["first-contentful-paint"],
            "every session listed": listed, "heap listed": heap_listed, "heap later": heap_later}


class Stream:
    """``GET /board/live`` read beside the page (no browser): when each
    session's row (state, last activity) changed in the stream, by the
    bench's clock: the server's part of a change shown."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Any, Any]] = {}
        self.changes: dict[str, list[tuple[float, tuple[Any, Any]]]] = {}
        self.ready = trio.Event()

    async def read(self, member: Any) -> None:
        async with member.client(timeout=None) as client:
            async with client.stream("GET", "/board/live", headers={"accept": "text/event-stream"}) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    at = time.time() * 1000
                    event = json.loads(line[5:])
                    if event.get("type") == "snapshot":
                        self.rows = {each["id"]: (each.get("state"), each.get("lastActivity"))
                                     for each in event["sessions"]}
                        self.ready.set()
                    elif event.get("type") in ("session-changed", "session-added"):
                        each = event["session"]
                        seen = (each.get("state"), each.get("lastActivity"))
                        if self.rows.get(each["id"]) != seen:
                            self.changes.setdefault(each["id"], []).append((at, seen))
                        self.rows[each["id"]] = seen

    def changed_after(self, session: str, started: float) -> tuple[float, Any] | None:
        """When the stream first changed ``session``'s row after
        ``started``, and the row's last activity then."""
        return next(((at, seen[1]) for at, seen in self.changes.get(session, []) if at >= started), None)


@attrs.define
class Shown:
    """The changes' figures (ms), each from the POST: ``shown`` on the page,
    ``streamed`` in ``GET /board/live``, ``written`` the record's write
    (the delivery's part); ``board_shown``, ``board_streamed``: from that
    write to the page's row and to the stream's event (the board's part),
    for the changes whose write the stream's row carried."""

    shown: list[float] = attrs.Factory(list)
    streamed: list[float] = attrs.Factory(list)
    written: list[float] = attrs.Factory(list)
    board_shown: list[float] = attrs.Factory(list)
    board_streamed: list[float] = attrs.Factory(list)
    missed: list[str] = attrs.Factory(list)


async def changes_shown(browser: Browser, url: str, members: list[Any], fresh: list[str], sessions: int) -> Shown:
    sender = members[-1]
    page = await open_page(browser, url, phone=False)
    with trio.fail_after(300):
        await page.evaluate(f"({LISTED})({sessions})")
    out = Shown()
    stream = Stream()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.read, members[0])
        with trio.fail_after(300):
            await stream.ready.wait()
        async with sender.client() as client:
            for session in fresh:
                before = await page.evaluate(f"({WATCH})({json.dumps(session)})")
                assert before is not None, f"the page does not list {session}"
                started = time.time() * 1000
                response = await client.post(f"/sessions/{session}/messages",
                                             json={"text": "hello", "eventId": str(uuid.uuid4())})
                assert response.status_code in (200, 202), (response.status_code, response.text[:200])
                try:
                    changed = await page.wait_for("window.changedAt", timeout=SHOWN_WITHIN)
                except AssertionError:  # counted, and the run goes on
                    out.missed.append(session)
                    continue
                out.shown.append(changed - started)
                found = stream.changed_after(session, started)
                if found is not None:
                    out.streamed.append(found[0] - started)
                    if isinstance(found[1], int) and found[1] >= started:  # the record's write the row carries
                        out.written.append(found[1] - started)
                        out.board_shown.append(changed - found[1])
                        out.board_streamed.append(found[0] - found[1])
        nursery.cancel_scope.cancel()
    return out


async def profile(member: Any, path: str, seconds: int) -> None:
    """py-spy's collapsed stacks of ``member`` for ``seconds``, to ``path``."""
    await trio.run_process(["py-spy", "record", "--pid", str(member.process.pid), "--format", "raw", "--output", path,
                            "--duration", str(seconds), "--nonblocking"], capture_stdout=True, capture_stderr=True)


def row(name: str, values: list[float], extra: str = "") -> str:
    p50, p90, p99 = percentiles(values)
    return f"| {name} | {len(values)} | {p50:.1f} | {p90:.1f} | {p99:.1f} | {max(values):.1f} | {extra} |"


async def main(args: argparse.Namespace) -> None:
    if args.against:
        import tests.cluster.processes as processes

        ours = processes.REPO
        for label, tree in ((f"against: {args.against}", Path(args.against).resolve()), (f"this tree: {ours}", ours)):
            print(f"\n# {label}\n", flush=True)
            processes.REPO = tree  # the routers' working directory: `python -m router` imports from it first
            await run(args, {"PYTHONPATH": str(tree)}, py_spy=None if args.py_spy is None
                      else f"{args.py_spy}.{'against' if tree != ours else 'this'}")
        return
    await run(args, {}, py_spy=args.py_spy)


async def run(args: argparse.Namespace, env: dict[str, str], *, py_spy: str | None) -> None:
    args = argparse.Namespace(**{**vars(args), "py_spy": py_spy})
    with tempfile.TemporaryDirectory(prefix="bench-board-") as tmp:
        work = Path(tmp)
        database = Cluster().start()
        try:
            store = database.create_database()
            ids = [f"board-{index:04d}" for index in range(args.sessions)]
            started = time.monotonic()
            await trio.to_thread.run_sync(make_sessions, store, ids)
            # The routers' own socket directory: the board surveys every
            # router of the directory, and the user's default one holds
            # every other router this user runs on the machine.
            runtime = work / "runtime"
            runtime.mkdir(mode=0o700)
            async with cluster(work, store, args.routers,
                               env={"XDG_RUNTIME_DIR": str(runtime), **env}) as (members, _daemon):
                await wait_spread(members, args.sessions)
                print(f"{args.sessions} sessions over {args.routers} routers, every one held after "
                      f"{time.monotonic() - started:.1f} s", flush=True)
                await measure(args, members, ids)
        finally:
            database.stop()


async def measure(args: argparse.Namespace, members: list[Any], ids: list[str]) -> None:
    first = members[0]
    async with trio.open_nursery() as nursery:
        if args.py_spy and args.py_spy_phase == "sessions":
            nursery.start_soon(profile, first, args.py_spy, args.py_spy_seconds)
        cpu = cpu_ms(members)
        sessions_ms, size = await timed_gets(first.url, first.headers, "/sessions", args.samples)
        cpu_sessions = (cpu_ms(members) - cpu) / args.samples
    cpu = cpu_ms(members)
    health_ms, _ = await timed_gets(first.url, first.headers, "/healthz", args.samples)
    cpu_health = (cpu_ms(members) - cpu) / args.samples
    ratio = statistics.median(sessions_ms) / statistics.median(health_ms)
    print(f"\n## {args.sessions} sessions, {args.routers} routers on one PostgreSQL (ms)\n")
    print("| what | n | p50 | p90 | p99 | max | note |\n|---|---:|---:|---:|---:|---:|---|")
    per_session = statistics.median(sessions_ms) * 1000 / max(1, args.sessions)
    print(row("GET /sessions", sessions_ms, f"{size:,} B; {ratio:.1f}× /healthz's p50; "
              f"{per_session:.0f} µs a session at p50"))
    print(row("GET /healthz (the stack's floor)", health_ms), flush=True)
    print(f"\nthe routers' CPU (all {len(members)}, ms a request, their background work included): "
          f"GET /sessions {cpu_sessions:.1f}, GET /healthz {cpu_health:.1f}\n", flush=True)
    page_url = f"{first.url.rstrip('/')}/?token={first.token}"
    async with chromium() as browser, trio.open_nursery() as nursery:
        if args.py_spy and args.py_spy_phase == "changes":
            nursery.start_soon(profile, first, args.py_spy, args.py_spy_seconds)
        got = await changes_shown(browser, page_url, members, ids[: args.changes], args.sessions)
        nan = [float("nan")]
        print(row("the session's record written", got.written or nan,
                  "from the POST to the lastActivity the stream's row carries (the holder's write: the delivery's part)"))
        print(row("a change in GET /board/live", got.streamed or nan,
                  "from the POST to the stream's event"))
        print(row("a change shown on the page", got.shown or nan,
                  f"from the POST to the row changing; {len(got.missed)} not shown within {SHOWN_WITHIN} s"
                  + (f" ({', '.join(got.missed)})" if got.missed else "")))
        print(row("the board: the write to GET /board/live", got.board_streamed or nan,
                  "from the record's write to the stream's event (the board's part)"))
        print(row("the board: the write shown on the page", got.board_shown or nan,
                  "from the record's write to the row changing (the board's part)"), flush=True)
        print("\n## the page's first paint (ms from the navigation) and its JS heap\n")
        print("| profile | first paint | first contentful paint | every session listed | heap listed (MB) "
              f"| heap {HEAP_AFTER} s later (MB) |\n|---|---:|---:|---:|---:|---:|")
        for name, phone in (("desktop 1280×800", False), ("phone 390×844", True)):
            figures = await first_paint(browser, page_url, args.sessions, phone=phone)
            print(f"| {name} | {figures['first paint']:.0f} | {figures['first contentful paint']:.0f} "
                  f"| {figures['every session listed']:.0f} | {figures['heap listed']:.1f} "
                  f"| {figures['heap later']:.1f} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--routers", type=int, default=3)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--py-spy", metavar="PATH", help="profile the first router while it answers GET /sessions "
                        "(py-spy's collapsed stacks to PATH)")
    parser.add_argument("--py-spy-seconds", type=int, default=20)
    parser.add_argument("--py-spy-phase", choices=("sessions", "changes"), default="sessions",
                        help="what --py-spy profiles: the GET /sessions samples, or the changes shown on the page")
    parser.add_argument("--against", metavar="TREE", help="first measure the routers of the source tree TREE "
                        "(an export of main, say: `git archive main | tar -x -C TREE`), then this tree's, in one run")
    trio.run(main, parser.parse_args())
