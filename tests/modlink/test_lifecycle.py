"""Starting and stopping a link: the private directory, stale and live
sockets, the socket file's removal; and hostile bodies over a real socket."""

from __future__ import annotations

import os
import socket
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.modlink import ModLink, ModLinkRefused, probe_health
from router.modlink.sim import ModSimulator
from wire.json import dumps
from wire.mod import MOD_CAPABILITY_ASKS, MOD_HEALTH_MARKER, ModSetEffortArgs, ModSetEffortResult, resolve_mod_socket_path

from .conftest import SESSION, _open_client


async def _start(link: ModLink, nursery: trio.Nursery) -> None:
    await nursery.start(link.run)


def _directory(env: dict[str, str]) -> str:
    path = resolve_mod_socket_path(SESSION, env).path
    assert path is not None
    return os.path.dirname(path)


# --------------------------------------------------------------------------- the directory


async def test_the_directory_is_created_private(env: dict[str, str], nursery: trio.Nursery) -> None:
    link = ModLink(SESSION, env=env)
    old = os.umask(0o022)
    try:
        await _start(link, nursery)
    finally:
        os.umask(old)
    info = os.stat(_directory(env))
    assert info.st_mode & 0o777 == 0o700 and info.st_uid == os.geteuid()


@pytest.mark.parametrize("mode", [0o770, 0o750, 0o701, 0o755, 0o500])
async def test_a_directory_that_is_not_0700_is_refused(env: dict[str, str], mode: int) -> None:
    directory = _directory(env)
    os.mkdir(directory)
    os.chmod(directory, mode)
    link = ModLink(SESSION, env=env)
    with pytest.raises(ModLinkRefused) as caught:
        await link.run()
    assert caught.value.code == "unsafe-directory"
    assert directory in str(caught.value) and f"{mode:04o}" in str(caught.value)
    assert os.listdir(directory) == []  # nothing bound
    os.chmod(directory, 0o700)


async def test_a_foreign_owned_directory_is_refused(env: dict[str, str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory another user owns needs root (chown); this run is not root")
    directory = _directory(env)
    os.mkdir(directory, 0o700)
    os.chown(directory, 54321, 54321)
    link = ModLink(SESSION, env=env)
    with pytest.raises(ModLinkRefused) as caught:
        await link.run()
    assert caught.value.code == "unsafe-directory"
    assert "uid 54321" in str(caught.value) and directory in str(caught.value)
    assert os.listdir(directory) == []


async def test_a_symlinked_directory_is_refused(env: dict[str, str], runtime_dir: str) -> None:
    real = os.path.join(runtime_dir, "real")
    os.mkdir(real, 0o700)
    os.symlink(real, _directory(env))
    with pytest.raises(ModLinkRefused) as caught:
        await ModLink(SESSION, env=env).run()
    assert "symbolic link" in str(caught.value)


async def test_a_file_where_the_directory_goes_is_refused(env: dict[str, str]) -> None:
    with open(_directory(env), "w"):
        pass
    with pytest.raises(ModLinkRefused) as caught:
        await ModLink(SESSION, env=env).run()
    assert "not a directory" in str(caught.value)


async def test_a_missing_base_is_refused(runtime_dir: str) -> None:
    env = {"XDG_RUNTIME_DIR": os.path.join(runtime_dir, "gone")}
    with pytest.raises(ModLinkRefused) as caught:
        await ModLink(SESSION, env=env).run()
    assert "does not exist" in str(caught.value)


def test_no_socket_path_is_refused_at_once() -> None:
    with pytest.raises(ModLinkRefused) as caught:
        ModLink(SESSION, env={"TMPDIR": "/tmp"})
    assert caught.value.code == "no-socket-path"


# --------------------------------------------------------------------------- the socket file


async def test_the_socket_is_removed_when_the_link_stops(env: dict[str, str]) -> None:
    link = ModLink(SESSION, env=env)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run)
        assert os.path.exists(link.path)
        nursery.cancel_scope.cancel()
    assert not os.path.exists(link.path)


async def test_a_stale_socket_is_replaced(env: dict[str, str], nursery: trio.Nursery) -> None:
    directory = _directory(env)
    os.mkdir(directory, 0o700)
    path = resolve_mod_socket_path(SESSION, env).path
    assert path is not None
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)
    dead.close()  # the file stays; nothing listens: a crashed server's leftover
    os.chmod(path, 0o644)
    assert not await probe_health(path)
    link = ModLink(SESSION, env=env)
    await _start(link, nursery)
    # (An inode number may be reused at once, so the mode tells the new file.)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert await probe_health(path)


async def test_a_socket_answering_something_else_is_stale(env: dict[str, str], nursery: trio.Nursery) -> None:
    os.mkdir(_directory(env), 0o700)
    path = resolve_mod_socket_path(SESSION, env).path
    assert path is not None
    impostor = trio.socket.socket(socket.AF_UNIX)
    await impostor.bind(path)
    impostor.listen()

    async def answer_wrongly() -> None:
        while True:
            conn, _ = await impostor.accept()
            with conn:
                await conn.recv(65536)
                await conn.send(b'HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n{"link":"else"}')

    with trio.CancelScope() as impostor_scope:
        async with trio.open_nursery() as inner:
            inner.start_soon(answer_wrongly)
            assert not await probe_health(path)
            link = ModLink(SESSION, env=env)
            await _start(link, nursery)
            assert await probe_health(path)
            impostor_scope.cancel()
    impostor.close()


async def test_a_socket_that_never_answers_is_stale(env: dict[str, str], nursery: trio.Nursery) -> None:
    os.mkdir(_directory(env), 0o700)
    path = resolve_mod_socket_path(SESSION, env).path
    assert path is not None
    mute = socket.socket(socket.AF_UNIX)
    mute.bind(path)
    mute.listen()  # accepts into the backlog, never answers
    try:
        link = ModLink(SESSION, env=env, probe_timeout=0.2)
        await _start(link, nursery)
        assert await probe_health(path)
    finally:
        mute.close()


async def test_a_live_servers_socket_is_refused(env: dict[str, str], nursery: trio.Nursery) -> None:
    first = ModLink(SESSION, env=env)
    await _start(first, nursery)
    bound = os.stat(first.path)
    second = ModLink(SESSION, env=env)
    with pytest.raises(ModLinkRefused) as caught:
        await second.run()
    assert caught.value.code == "link-in-use" and first.path in str(caught.value)
    # The refused server touched nothing of the live one's.
    assert os.stat(first.path).st_ino == bound.st_ino
    assert await probe_health(first.path)


async def test_a_plain_file_at_the_socket_path_is_refused(env: dict[str, str]) -> None:
    os.mkdir(_directory(env), 0o700)
    path = resolve_mod_socket_path(SESSION, env).path
    assert path is not None
    with open(path, "w") as file:
        file.write("not a socket")
    with pytest.raises(ModLinkRefused) as caught:
        await ModLink(SESSION, env=env).run()
    assert caught.value.code == "not-a-socket"
    assert open(path).read() == "not a socket"


async def test_a_replaced_socket_is_not_removed_by_the_old_server(env: dict[str, str]) -> None:
    link = ModLink(SESSION, env=env)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run)
        # Another server took the path over (as after a stale probe).
        os.unlink(link.path)
        other = socket.socket(socket.AF_UNIX)
        other.bind(link.path)
        nursery.cancel_scope.cancel()
    try:
        assert os.path.exists(link.path)
    finally:
        other.close()
        os.unlink(link.path)


# --------------------------------------------------------------------------- hostile bodies

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["kind", "events", "results", "id", "ok", "value", "error", "turnId", "parts"]) | st.text(max_size=5),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=15,
)
event_like = st.fixed_dictionaries(
    {"kind": st.sampled_from(["hello", "step", "append", "turn-complete", "session-id", "model", "new-kind"])},
    optional={"turnId": json_values, "index": json_values, "parts": json_values, "sessionId": json_values, "model": json_values},
)
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: dumps(v).encode()),
    st.builds(lambda events: dumps({"events": events}).encode(), st.lists(st.one_of(event_like, json_values), max_size=5)),
    st.builds(lambda results: dumps({"results": results}).encode(), st.lists(json_values, max_size=5)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(posts=st.lists(st.tuples(st.sampled_from(["/events", "/results", "/requests"]), bodies), min_size=1, max_size=6))
def test_hostile_bodies_never_crash_the_server(runtime_dir: str, posts: list[tuple[str, bytes]]) -> None:
    env = {"XDG_RUNTIME_DIR": runtime_dir}

    async def scenario() -> None:
        link = ModLink(SESSION, env=env, hold=0.01)
        async with trio.open_nursery() as nursery:
            await nursery.start(link.run)
            async with _open_client(link.path) as client:
                for route, raw in posts:
                    response = await client.post(route, raw=raw)
                    assert response.status_code in (200, 400), response.text
                    if response.status_code == 400:
                        body = response.json()
                        assert set(body) == {"error", "message"} and body["message"]
            # The link still serves: a simulator gets a call answered.
            sim = ModSimulator(SESSION, env=env, instance="mod-a")
            await nursery.start(sim.run)
            assert sim.stopped is None
            assert await link.call("set-effort", ModSetEffortArgs(effort="low"), deadline=10) == ModSetEffortResult(effort="low")
            nursery.cancel_scope.cancel()
        assert not os.path.exists(link.path)

    trio.run(scenario)


async def test_health_marker_is_the_mod_protocols(env: dict[str, str], nursery: trio.Nursery) -> None:
    link = ModLink(SESSION, env=env)
    await _start(link, nursery)
    async with _open_client(link.path) as client:
        assert (await client.get("/healthz")).json() == {"link": MOD_HEALTH_MARKER, "capabilities": [MOD_CAPABILITY_ASKS]}
