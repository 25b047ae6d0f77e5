"""The cluster peers' last answers (router/board/peers.py), kept until a
peer announces a change of its own sessions, the listener reconnects or
they age; and the board's survey using them (LocalBoard)."""

from __future__ import annotations

from typing import Any, Mapping

import trio

from router.board.client import Board, Reached
from router.board.peers import PeerAnswers
from router.board.service import Facts, LocalBoard

PEERS = {"/run/b.sock": "b", "/run/c.sock": "c"}


def _answer(socket: str, *sessions: str) -> Reached:
    return Reached({"name": socket, "socket": socket}, [{"id": each, "kind": "claude-code"} for each in sessions])


def _asked(answers: PeerAnswers, at: float = 0.0, epoch: int = 1) -> dict[str, Reached]:
    replies = {socket: _answer(socket) for socket in PEERS}
    marks = answers.marks(PEERS)
    answers.answered(PEERS, marks, replies.values(), epoch=epoch, live=True, now=at)
    return replies


def test_an_answer_is_used_until_its_router_announces_a_change() -> None:
    answers = PeerAnswers(max_age=1.0)
    replies = _asked(answers)
    assert answers.known(PEERS, epoch=1, live=True, now=0.5) == replies
    answers.changed("b")
    assert answers.known(PEERS, epoch=1, live=True, now=0.5) == {"/run/c.sock": replies["/run/c.sock"]}
    assert answers.statistics().kept == 3 and answers.statistics().changed == 1


def test_an_answer_is_not_used_past_its_age_on_another_connection_or_while_not_listening() -> None:
    answers = PeerAnswers(max_age=1.0)
    _asked(answers)
    assert answers.known(PEERS, epoch=1, live=True, now=1.0) == {}  # aged
    assert answers.known(PEERS, epoch=2, live=True, now=0.1) == {}  # the listener reconnected
    assert answers.known(PEERS, epoch=1, live=False, now=0.1) == {}  # not listening now
    assert answers.known({"/run/b.sock": "another"}, epoch=1, live=True, now=0.1) == {}  # another router there


def test_an_answer_announced_changed_while_it_was_asked_is_not_kept() -> None:
    answers = PeerAnswers()
    marks = answers.marks(PEERS)
    answers.changed("b")  # the change came while b was being asked: its answer may be older
    answers.answered(PEERS, marks, [_answer(socket) for socket in PEERS], epoch=1, live=True, now=0.0)
    assert set(answers.known(PEERS, epoch=1, live=True, now=0.1)) == {"/run/c.sock"}


def test_a_kept_answer_used_again_keeps_its_age_and_a_router_gone_is_forgotten() -> None:
    answers = PeerAnswers(max_age=1.0)
    replies = _asked(answers, at=0.0)
    used = answers.known(PEERS, epoch=1, live=True, now=0.9)
    answers.answered(PEERS, answers.marks(PEERS), used.values(), epoch=1, live=True, now=0.9)
    assert answers.known(PEERS, epoch=1, live=True, now=1.0) == {}  # aged from when it was asked
    _asked(answers, at=2.0)
    answers.answered({"/run/c.sock": "c"}, {"c": 0}, [], epoch=1, live=True, now=2.0)
    assert answers.statistics().answers == 1 and replies


class _Cluster:
    """A cluster's face for the board's survey of its peers."""

    id = "a"

    def __init__(self) -> None:
        self.epoch = 1
        self.tell: Any = None

    async def routers(self) -> dict[str, str]:
        return dict(PEERS)

    def listening(self) -> tuple[int, bool]:
        return self.epoch, True

    def on_router_changed(self, callback: Any) -> None:
        self.tell = callback

    def board_changed(self) -> trio.Event:
        return trio.Event()

    async def holders(self) -> dict[str, Any]:
        return {}


class _Router:
    async def list(self, *, containers: bool = True) -> list[dict[str, Any]]:
        return []


class _Board(LocalBoard):
    """A LocalBoard whose other routers answer from memory, counting whom
    it asked."""

    asked: list[str]

    async def others(self, *, unshared: frozenset[str] = frozenset(),
                     known: Mapping[str, Reached] | None = None) -> Board:
        known = known or {}
        self.asked += [socket for socket in sorted(unshared) if socket not in known]
        return Board("/run", reached=[known.get(socket) or _answer(socket, f"{PEERS[socket]}-cc")
                                      for socket in sorted(unshared)])


async def test_the_board_asks_a_peer_again_only_once_it_announced_a_change() -> None:
    cluster = _Cluster()
    board = _Board(_Router(), env={}, facts=Facts(cluster=cluster))
    board.asked = []
    board.peers.max_age = 3600.0  # no answer ages within the test
    first = await board.listing()
    assert board.asked == ["/run/b.sock", "/run/c.sock"]
    assert sorted(item["id"] for item in first.sessions) == ["b-cc", "c-cc"]
    await board.listing()
    assert board.asked == ["/run/b.sock", "/run/c.sock"]  # both kept
    cluster.tell("c")  # c's own sessions changed (its announcement)
    await board.listing()
    assert board.asked[2:] == ["/run/c.sock"]
    cluster.epoch = 2  # the listener reconnected: what was said meanwhile is gone
    await board.listing()
    assert board.asked[3:] == ["/run/b.sock", "/run/c.sock"]
