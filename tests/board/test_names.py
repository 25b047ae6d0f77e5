"""A router's name on the board: stable across restarts (from its data
directory, or ``--name``), refused while a live router holds it, reclaimed
from a router that died (SIGKILL)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from router.board.local import check_name, stable_name
from router.errors import Refusal
from tests.api.processes import serve
from tests.board.test_processes import router


def test_the_default_name_comes_from_the_data_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert stable_name("serve", tmp_path / "a") == stable_name("serve", tmp_path / "link")
    assert stable_name("serve", tmp_path / "a") != stable_name("serve", tmp_path / "b")
    assert stable_name("serve", tmp_path / "a").startswith("serve-")


@pytest.mark.parametrize("bad", ["", "-x", "a/b", "a b", "x" * 65, "name.sock", "é", "a\nb", ".hidden"])
def test_a_name_that_cannot_be_a_socket_stem_is_refused(bad: str) -> None:
    with pytest.raises(Refusal) as refused:
        check_name(bad)
    assert refused.value.code == "bad-router-name"


async def _names() -> list[str]:
    status, out, err = await router("sessions", "--json")
    assert status == 0, err
    return sorted({item["router"]["name"] for item in json.loads(out)})


async def test_a_router_keeps_its_name_across_a_kill_and_a_restart(tmp_path: Path) -> None:
    async with serve(tmp_path) as first:
        names = await _names()
        assert names == [stable_name("serve", tmp_path / "data")]
        first.process.send_signal(signal.SIGKILL)  # leaves its socket file behind
        await first.process.wait()
    async with serve(tmp_path, name="again"):
        assert await _names() == names  # the dead router's socket was reclaimed
        status, out, err = await router("send", "root", "hi", "--router", names[0])
        assert status == 0 and out == "echo: hi (turn 1)\n", err


async def test_a_given_name_is_used_and_a_live_one_is_not_taken(tmp_path: Path) -> None:
    async with serve(tmp_path, "--name", "desk"):
        assert await _names() == ["desk"]
        status, out, err = await router("serve", "--port", "0", "--data-dir", str(tmp_path / "other"),
                                        "--settings", str(tmp_path / "settings"), "--name", "desk")
        assert status == 2 and out == "" and "router-name-taken" in err, err
        assert await _names() == ["desk"]
    status, out, err = await router("serve", "--port", "0", "--name", "no/slash")
    assert status == 2 and "bad-router-name" in err
