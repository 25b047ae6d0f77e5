"""``ambiguous-session`` counts sessions, not routers: a cluster's one
session, which every router of the cluster lists, is one holder
(router.board.client.Board.holders)."""

from __future__ import annotations

from router.board.client import Board, Reached


def reached(name: str, *sessions: dict) -> Reached:
    return Reached(info={"name": name, "socket": f"/run/{name}.sock"}, sessions=list(sessions))


def test_a_cluster_root_counts_once_beside_another_routers_root() -> None:
    cluster_root = {"id": "root", "kind": "container", "clustered": True}
    board = Board(directory="/run", reached=[
        reached("a", cluster_root), reached("b", cluster_root), reached("c", {"id": "root", "kind": "container"}),
    ])
    assert [each.name for each in board.holders("root")] == ["a", "c"]


def test_a_cluster_session_alone_has_one_holder() -> None:
    item = {"id": "s", "clustered": True}
    board = Board(directory="/run", reached=[reached("a", item), reached("b", item), reached("c", item)])
    assert [each.name for each in board.holders("s")] == ["a"]


def test_routers_of_their_own_each_count() -> None:
    board = Board(directory="/run", reached=[reached("a", {"id": "s"}), reached("b", {"id": "s"}),
                                             reached("c", {"id": "t"})])
    assert [each.name for each in board.holders("s")] == ["a", "b"]
