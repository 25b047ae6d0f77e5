"""The local directory and socket, checked directly: who may use the
directory (mode, owner, symbolic link), the socket's mode and removal, and
the survey's answers for a live, a dead and a hung router. In process: a
router's :class:`LocalServer` over the API fixture's router."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router._unix import check_private_directory, listener_gone
from router.board.client import Reached, Skipped, holder, read_answer, reached, router_sockets, survey
from router.api.server import LocalServer
from router.board.local import make_local_directory
from router.board.paths import local_directory
from router.errors import Refusal
from tests.api.conftest import Api, api  # noqa: F401  (the fixture)


def _env(runtime_dir: str) -> dict[str, str]:
    return {"XDG_RUNTIME_DIR": runtime_dir}


# --------------------------------------------------------------------------- where


def test_the_directory_is_under_the_run_directory_else_the_data_directory() -> None:
    assert local_directory({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path("/run/user/7/router")
    # Not absolute: passed over, as the mod link passes it over.
    assert local_directory({"XDG_RUNTIME_DIR": "run", "HOME": "/home/ann"}) == Path(
        "/home/ann/.local/share/router/run")
    assert local_directory({"ROUTER_DATA_DIR": "/data/r"}) == Path("/data/r/run")
    assert local_directory({"XDG_DATA_HOME": "/x", "HOME": "/home/ann"}) == Path("/x/router/run")


def test_without_a_run_directory_the_data_directory_is_made(tmp_path: Path) -> None:
    env = {"ROUTER_DATA_DIR": str(tmp_path / "deep" / "data")}
    old = os.umask(0o022)
    try:
        directory = make_local_directory(env)
    finally:
        os.umask(old)
    assert directory == tmp_path / "deep" / "data" / "run"
    assert directory.stat().st_mode & 0o777 == 0o700


def test_a_missing_run_directory_is_not_made(runtime_dir: str) -> None:
    with pytest.raises(Refusal) as caught:
        make_local_directory({"XDG_RUNTIME_DIR": os.path.join(runtime_dir, "gone")})
    assert caught.value.code == "unsafe-directory" and "does not exist" in caught.value.message
    assert not os.path.exists(os.path.join(runtime_dir, "gone"))


# --------------------------------------------------------------------------- who may


@pytest.mark.parametrize("mode", [0o770, 0o750, 0o755, 0o701, 0o500])
async def test_a_directory_that_is_not_0700_is_refused_by_router_and_client(runtime_dir: str, mode: int) -> None:
    directory = os.path.join(runtime_dir, "router")
    os.mkdir(directory)
    os.chmod(directory, mode)
    try:
        server = LocalServer(None, None, env=_env(runtime_dir), command="serve", data_dir=Path(runtime_dir))
        with pytest.raises(Refusal) as caught:
            await server.run()
        assert caught.value.code == "unsafe-directory"
        assert f"{mode:04o}" in caught.value.message and directory in caught.value.message
        assert os.listdir(directory) == []  # nothing bound
        with pytest.raises(Refusal) as asked:
            await survey(_env(runtime_dir))
        assert asked.value == caught.value
    finally:
        os.chmod(directory, 0o700)


def test_a_directory_another_user_owns_is_refused(runtime_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = os.path.join(runtime_dir, "router")
    os.mkdir(directory, 0o700)
    if os.geteuid() == 0:
        os.chown(directory, 54321, 54321)  # a real other owner
        owner = 54321
    else:
        # Not root: the directory cannot be given away, so this process
        # pretends to be another user.
        owner = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(Refusal) as caught:
        make_local_directory(_env(runtime_dir))
    assert caught.value.code == "unsafe-directory" and f"uid {owner}" in caught.value.message
    with pytest.raises(Refusal):
        router_sockets(directory)


def test_a_symbolic_link_or_a_file_is_refused(runtime_dir: str) -> None:
    real = os.path.join(runtime_dir, "real")
    os.mkdir(real, 0o700)
    os.symlink(real, os.path.join(runtime_dir, "router"))
    with pytest.raises(Refusal) as caught:
        make_local_directory(_env(runtime_dir))
    assert "symbolic link" in caught.value.message
    with pytest.raises(Refusal):
        router_sockets(os.path.join(runtime_dir, "router"))
    os.unlink(os.path.join(runtime_dir, "router"))
    Path(runtime_dir, "router").write_text("")
    with pytest.raises(Refusal) as caught:
        check_private_directory(os.path.join(runtime_dir, "router"))
    assert "not a directory" in caught.value.message


def test_only_sockets_of_this_user_are_asked(runtime_dir: str) -> None:
    directory = str(make_local_directory(_env(runtime_dir)))
    Path(directory, "plain.sock").write_text("")  # not a socket
    Path(directory, "notes.txt").write_text("")
    with _bound(os.path.join(directory, "half.binding")), _bound(os.path.join(directory, "r.sock")):
        assert router_sockets(directory) == [os.path.join(directory, "r.sock")]


# --------------------------------------------------------------------------- dead, hung, live


@pytest.fixture
def directory(runtime_dir: str) -> str:
    return str(make_local_directory(_env(runtime_dir)))


class _bound:
    """A socket bound at ``path``; listening when asked; closed (and its file
    left, as a SIGKILL leaves it) on exit."""

    def __init__(self, path: str, *, listen: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        if listen:
            self.sock.listen(8)

    def __enter__(self) -> socket.socket:
        return self.sock

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_a_socket_nobody_listens_on_is_gone(directory: str) -> None:
    path = os.path.join(directory, "r.sock")
    with _bound(path, listen=True):
        assert not listener_gone(path)
    assert os.path.exists(path)  # the file outlives its listener
    assert listener_gone(path)
    with _bound(os.path.join(directory, "unlistened.sock")):
        assert listener_gone(os.path.join(directory, "unlistened.sock"))
    assert listener_gone(os.path.join(directory, "missing.sock"))


async def test_a_dead_router_is_removed_and_a_hung_one_left_out(directory: str, runtime_dir: str) -> None:
    dead = os.path.join(directory, "serve-1-dead.sock")
    with _bound(dead, listen=True):
        pass  # its process died: the file stays, nothing listens
    hung = os.path.join(directory, "serve-2-hung.sock")
    with _bound(hung, listen=True):  # accepts (the kernel does), never answers
        board = await survey(_env(runtime_dir), timeout=0.5)
        assert board.reached == [] and board.removed == [dead]
        assert [(s.socket, s.refusal.code) for s in board.skipped] == [(hung, "no-answer")]
        assert not os.path.exists(dead) and os.path.exists(hung)  # a hung router may be alive: left alone
        with pytest.raises(Refusal) as caught:
            await holder(_env(runtime_dir), "root", timeout=0.5)
        assert caught.value.code == "unknown-session" and "did not answer" in caught.value.message


async def test_no_router_at_all(runtime_dir: str) -> None:
    board = await survey(_env(runtime_dir))  # the directory does not even exist
    assert (board.reached, board.skipped, board.removed) == ([], [], [])
    with pytest.raises(Refusal) as caught:
        await holder(_env(runtime_dir), "root")
    assert caught.value.code == "no-router"


async def test_a_router_on_its_socket(api: Api, runtime_dir: str) -> None:  # noqa: F811
    env = _env(runtime_dir)
    server = LocalServer(api.router, api.server.layer, env=env, command="serve", data_dir=Path(runtime_dir),
                         url=api.url)
    async with trio.open_nursery() as nursery:
        path = await nursery.start(server.run)
        directory = os.path.dirname(path)
        assert os.listdir(directory) == [os.path.basename(path)]  # no `.binding` left
        assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(directory).st_mode & 0o777 == 0o700
        board = await survey(env)
        assert board.skipped == [] and len(board.reached) == 1
        assert board.sessions() == [{
            "id": "root", "kind": "container", "busy": False, "state": "idle",
            "router": {"name": server.name, "command": "serve", "pid": os.getpid(), "socket": path,
                       "dataDir": runtime_dir, "url": api.url, "cwd": os.getcwd()},
        }]
        found, _ = await holder(env, "root")
        assert found.name == server.name
        named, _ = await holder(env, "anything", router=server.name)
        assert named.name == server.name
        with pytest.raises(Refusal) as caught:
            await holder(env, "root", router="serve-0-none")
        assert caught.value.code == "unknown-router"
        nursery.cancel_scope.cancel()
    assert not os.path.exists(path)  # removed on exit


# --------------------------------------------------------------------------- not a router


def _response(status: int, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


@pytest.mark.parametrize("answer,code", [
    (_response(200, b"not json"), "not-a-router"),
    (_response(200, b"[1, 2]"), "not-a-router"),
    (_response(200, b'{"sessions": 3}'), "not-a-router"),
    (_response(200, b"\xff\xfe"), "not-a-router"),
    (_response(503, b'{"error": "channel-off", "message": "the cli channel is off"}'), "channel-off"),
    (_response(500, b'{"error": "Not A Code", "message": "x"}'), "not-a-router"),
    (_response(404, b"{}"), "not-a-router"),
    (b"SSH-2.0-OpenSSH\r\n", "cannot-connect"),
    (b"", "cannot-connect"),
])
async def test_a_socket_that_answers_but_not_as_a_router_is_left_out(
    directory: str, runtime_dir: str, answer: bytes, code: str
) -> None:
    path = os.path.join(directory, "serve-3-odd.sock")
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen(8)

    async def answer_every_request(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            await stream.send_all(answer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, answer_every_request, [trio.SocketListener(listener)])
        board = await survey(_env(runtime_dir))
        assert board.reached == [] and board.removed == []
        assert [(s.socket, s.refusal.code) for s in board.skipped] == [(path, code)]
        nursery.cancel_scope.cancel()
    os.unlink(path)


# --------------------------------------------------------------------------- hostile answers

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
        ["error", "message", "sessions", "name", "id", "x"]) | st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(status=st.integers(100, 599), content=st.binary(max_size=64) | _json.map(lambda v: json.dumps(v).encode())
       | st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth))
def test_any_answer_is_json_or_a_refusal(status: int, content: bytes) -> None:
    try:
        read_answer("r", "/sessions", status, content)
    except Refusal as refused:
        assert refused.code  # a code, whatever came in


@settings(max_examples=300, deadline=None)
@given(info=_json, sessions=_json)
def test_any_two_answers_are_a_router_or_a_skip(info: Any, sessions: Any) -> None:
    answer = reached("/d/serve-1-ab.sock", info, sessions)
    assert isinstance(answer, (Reached, Skipped))
    if isinstance(answer, Reached):
        assert answer.name == "serve-1-ab" and all(type(item) is dict for item in answer.sessions)
