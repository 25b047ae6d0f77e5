"""A session's state from what its router knows: the table, row by row."""

from __future__ import annotations

import itertools

import pytest

from router.board.state import STATES, claude_code_state, container_state, session_state
from router.modlink import LinkState


@pytest.mark.parametrize("closed,stopped,reachable,waiting,busy", list(itertools.product([False, True], repeat=5)))
def test_the_first_row_that_holds_wins(closed: bool, stopped: bool, reachable: bool, waiting: bool, busy: bool) -> None:
    state = session_state(closed=closed, stopped=stopped, reachable=reachable, waiting=waiting, busy=busy)
    assert state in STATES
    expected = ("closed" if closed else "stopped" if stopped else "unreachable" if not reachable
                else "waiting" if waiting else "working" if busy else "idle")
    assert state == expected


@pytest.mark.parametrize("link_state,busy,stopped,expected", [
    (None, False, False, "idle"),  # no link yet: the next delivery opens it
    ("live", True, False, "working"),
    ("connecting", False, False, "idle"),
    ("backoff", True, False, "unreachable"),
    ("failed", False, False, "unreachable"),
    ("failed", False, True, "stopped"),
    ("closed", True, True, "closed"),
])
def test_a_container_session(link_state: str | None, busy: bool, stopped: bool, expected: str) -> None:
    assert container_state(busy=busy, stopped=stopped, link_state=link_state) == expected


@pytest.mark.parametrize("daemon_state,link_state,busy,expected", [
    ("unreachable", None, False, "unreachable"),  # its launcher failed to start it
    ("unreachable", "connecting", False, "unreachable"),
    ("starting", "connecting", True, "working"),
    ("replacing", "backoff", True, "working"),  # the link backs off while its daemon is replaced on purpose
    ("idle-stopped", "backoff", False, "idle"),  # the next delivery starts it
    ("running", "backoff", False, "unreachable"),  # it runs, and cannot be reached
    ("unreachable", "closed", False, "closed"),
])
def test_a_launched_container_session(daemon_state: str, link_state: str | None, busy: bool, expected: str) -> None:
    assert container_state(busy=busy, stopped=False, link_state=link_state, daemon_state=daemon_state) == expected


def test_a_claude_code_session() -> None:
    fresh = LinkState()
    assert claude_code_state(link=fresh, stopped=False, closed=False) == "unreachable"
    hello = LinkState(hello_session_id="s", session_id="s")
    assert claude_code_state(link=hello, stopped=False, closed=False) == "idle"
    turn = LinkState(hello_session_id="s", session_id="s", turn_running=True, turn_id="t")
    assert claude_code_state(link=turn, stopped=False, closed=False) == "working"
    assert claude_code_state(link=turn, stopped=True, closed=False) == "stopped"
    ended = LinkState(hello_session_id="s", session_id="s", ended="exit")
    assert claude_code_state(link=ended, stopped=False, closed=False) == "closed"
    assert claude_code_state(link=hello, stopped=False, closed=True) == "closed"


def test_a_claude_code_session_waiting_on_an_ask() -> None:
    turn = LinkState(hello_session_id="s", session_id="s", turn_running=True, turn_id="t")
    assert claude_code_state(link=turn, stopped=False, closed=False, waiting=True) == "waiting"
    assert claude_code_state(link=turn, stopped=True, closed=False, waiting=True) == "stopped"
    assert claude_code_state(link=LinkState(), stopped=False, closed=False, waiting=True) == "unreachable"
