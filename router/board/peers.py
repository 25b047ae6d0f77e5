"""What each router of this router's cluster last answered for its own
sessions outside the record, kept until it tells of a change (sans-IO).

A router of a cluster lists the record's sessions itself; of the other
routers of its cluster it needs only what they alone hold (their Claude
Code sessions: ``GET /sessions?scope=unshared``), most often nothing. It
asked each of them over its socket on every survey: two HTTP requests a
router per ``GET /sessions`` and per change the live board shows.
:class:`PeerAnswers` keeps each one's last answer; a router announces a
change of its own sessions to the cluster (``cluster_router``, its id as
the payload: :meth:`router.cluster.ClusterNode.announce`), which drops its
answer here (:meth:`PeerAnswers.changed`), and it is asked again at the
next survey.

An answer is used only while it can be trusted: taken on the listener's
connection that is still live (notifications sent while it was away are
gone), younger than ``max_age`` seconds (a change that no announcement
tells of, say a limit stopping one of its Claude Code sessions, shows
within that), from the router of that id at that socket, and not
announced as changed while it was being asked (:meth:`PeerAnswers.marks`
before the survey, checked by :meth:`PeerAnswers.answered` after it).
Only answers are kept; a router skipped is asked again every survey.

``statistics()``: ``kept`` (answers used instead of asking), ``asked``
(answers stored), ``changed`` (announcements taken).
"""

from __future__ import annotations

from typing import Any, Final, Iterable, Mapping

import attrs

__all__ = ["PEER_MAX_AGE", "PeerAnswers", "PeerAnswersStatistics"]

#: Seconds a peer's answer is used at most (ours: the live board's
#: fallback survey interval, ``router.board.service.BOARD_INTERVAL``).
PEER_MAX_AGE: Final = 1.0


@attrs.frozen
class PeerAnswersStatistics:
    kept: int
    asked: int
    changed: int
    answers: int


class PeerAnswers:
    """The cluster peers' last answers (see the module docstring)."""

    def __init__(self, *, max_age: float = PEER_MAX_AGE) -> None:
        self.max_age = max_age
        #: socket -> (router id, its answer, listener's connection, when)
        self._answers: dict[str, tuple[str, Any, int, float]] = {}
        #: router id -> announcements taken
        self._told: dict[str, int] = {}
        self.kept = 0
        self.asked = 0
        self.announced = 0

    def __repr__(self) -> str:
        return f"<PeerAnswers {len(self._answers)} answers kept={self.kept} asked={self.asked}>"

    def statistics(self) -> PeerAnswersStatistics:
        return PeerAnswersStatistics(kept=self.kept, asked=self.asked, changed=self.announced,
                                     answers=len(self._answers))

    def changed(self, router: str) -> None:
        """Router ``router`` announced a change of its own sessions."""
        self.announced += 1
        self._told[router] = self._told.get(router, 0) + 1
        self._answers = {socket: kept for socket, kept in self._answers.items() if kept[0] != router}

    def known(self, peers: Mapping[str, str], *, epoch: int, live: bool, now: float) -> dict[str, Any]:
        """The answers to use instead of asking, of the routers ``peers``
        (socket -> id): see the module docstring."""
        if not live:
            return {}
        out = {}
        for socket, router in peers.items():
            kept = self._answers.get(socket)
            if kept is not None and kept[0] == router and kept[2] == epoch and now - kept[3] < self.max_age:
                out[socket] = kept[1]
        self.kept += len(out)
        return out

    def marks(self, peers: Mapping[str, str]) -> dict[str, int]:
        """Each peer's announcements taken so far (before asking it)."""
        return {router: self._told.get(router, 0) for router in peers.values()}

    def answered(self, peers: Mapping[str, str], marks: Mapping[str, int], answers: Iterable[Any], *,
                 epoch: int, live: bool, now: float) -> None:
        """Keep the ``answers`` (each with ``socket``) of the routers
        ``peers`` asked since ``marks``, unless one announced a change
        meanwhile (its answer may be older than the change)."""
        if not live:
            return
        for answer in answers:
            socket = answer.socket
            router = peers.get(socket)
            if router is None or router not in marks or self._told.get(router, 0) != marks[router]:
                continue
            if socket in self._answers and self._answers[socket][1] is answer:
                continue  # the kept answer, used: it keeps its age
            self.asked += 1
            self._answers[socket] = (router, answer, epoch, now)
        gone = set(self._answers) - set(peers)
        for socket in gone:
            del self._answers[socket]
