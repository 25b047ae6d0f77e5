"""A daemon cannot flood the host's log: lines from peers are cut to a
bounded length and repeats are rate-limited (``router/_peerlog.py``). The
fault campaign saw a 60 MiB ``error`` logged as one line and 700,000 lines
in 40 s."""

from __future__ import annotations

import logging

import pytest
import trio

from router._peerlog import BURST, MAX_CHARS, PeerLogFilter, guard_handlers
from router.host.host import Host, HostSettings
from router.host.link import DaemonEndpoint
from router.host.store import Store
from tests.host.conftest import FAST
from tests.host.fake_daemon import FakeConnection, FakeDaemon


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_a_long_argument_is_cut_before_it_is_formatted() -> None:
    guard = PeerLogFilter()
    record = logging.LogRecord("peer", logging.WARNING, __file__, 1, "daemon says %s (%d)", ("x" * 10_000_000, 7), None)
    assert guard.filter(record)
    line = record.getMessage()
    assert len(line) < MAX_CHARS + 100
    assert line.endswith("characters cut) (7)")
    assert guard.statistics().cut == 1


def test_repeats_pass_a_burst_per_window_and_the_next_window_says_how_many_were_dropped() -> None:
    now = [0.0]
    guard = PeerLogFilter(burst=3, window=10, clock=lambda: now[0])

    def record(text: str, session: str = "s1") -> logging.LogRecord:
        return logging.LogRecord("peer", logging.WARNING, __file__, 1, "session %r: error: %s", (session, text), None)

    passed = [guard.filter(record(f"n{i}")) for i in range(100)]
    assert passed == [True] * 3 + [False] * 97
    other = logging.LogRecord("peer", logging.WARNING, __file__, 1, "another kind", (), None)
    assert guard.filter(other)  # another kind has its own burst
    assert guard.filter(record("x", session="s2"))  # and another session's lines
    now[0] = 11.0
    later = record("again")
    assert guard.filter(later)
    assert later.getMessage() == "session 's1': error: again [97 similar lines dropped]"


def test_the_filter_remembers_a_bounded_number_of_kinds() -> None:
    guard = PeerLogFilter(max_keys=10)
    for i in range(1000):
        guard.filter(logging.LogRecord("peer", logging.WARNING, __file__, 1, f"kind {i}", (), None))
    assert guard.statistics().kinds == 10


async def test_a_daemon_flooding_errors_over_a_real_socket_leaves_a_bounded_log(
    nursery: trio.Nursery, store: Store
) -> None:
    """A daemon sends a 4 MiB ``error`` and then 3,000 small ones: the
    host's log, through the guarded handler, has each line bounded and the
    repeats cut to a burst; the turn is still answered."""
    lines = Lines()
    lines.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger("router.host")
    root.addHandler(lines)
    guard = guard_handlers(logger=root)

    async def script(connection: FakeConnection) -> None:
        await connection.greet()
        prompt = await connection.receive_type("prompt")
        await connection.send({"type": "error", "message": "E" * (4 << 20)})
        for i in range(3000):
            await connection.send({"type": "error", "message": f"again {i}"})
        op = prompt["operationId"]
        await connection.send({"type": "frame", "seq": 1, "frame": {"kind": "start", "operationId": op}})
        settle = {"kind": "settle", "operationId": op, "outcome": {"status": "done", "text": "still here"}}
        await connection.send({"type": "frame", "seq": 2, "frame": settle})
        await trio.sleep_forever()

    try:
        daemon: FakeDaemon = await nursery.start(FakeDaemon(script).run)
        host = Host(store, DaemonEndpoint(daemon.url, "t"), HostSettings(**FAST))  # type: ignore[arg-type]
        await nursery.start(host.run)
        with trio.fail_after(60):
            result, _ = await host.session().prompt("x")
    finally:
        root.removeHandler(lines)
    assert result.text == "still here"
    errors = [line for line in lines.lines if "the daemon reports an error" in line]
    assert max(len(line) for line in lines.lines) < MAX_CHARS + 300
    assert 1 <= len(errors) <= BURST
    assert guard.statistics().dropped >= 3000 - BURST


def test_router_serve_logs_through_the_filter() -> None:
    import subprocess
    import sys

    code = (
        "import logging; from router.serve import setup_logging; from router._peerlog import PeerLogFilter;"
        "setup_logging('info', 'x');"
        "print(all(any(isinstance(f, PeerLogFilter) for f in h.filters) for h in logging.getLogger().handlers))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ARGS = st.lists(st.one_of(st.text(max_size=5000), st.binary(max_size=5000), st.integers(), st.none()), max_size=4)


@settings(max_examples=200, deadline=None)
@given(template=st.text(max_size=3000), args=ARGS)
def test_any_line_comes_out_bounded_or_is_dropped_and_the_filter_never_raises(template: str, args: list) -> None:
    guard = PeerLogFilter(max_chars=500, burst=1000)
    record = logging.LogRecord("peer", logging.WARNING, __file__, 1, template, tuple(args), None)
    if guard.filter(record):
        try:
            line = record.getMessage()
        except Exception:
            return  # a template that does not fit its arguments: logging reports it, as always
        assert len(line) <= 500 + 200 + 40, len(line)
