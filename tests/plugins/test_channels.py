"""Channels: operations pass through unchanged; an off channel refuses with
the recovery command, and the recovery needs no channel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from router.cli import main
from router.plugins.broker import Answer, Broker
from router.plugins.channels import SESSION_OPERATIONS, Channels
from router.plugins.loader import Loader
from router.plugins.settings import SettingsDir


class Core:
    """The core's caller: records calls and answers a fresh object each time."""

    def __init__(self) -> None:
        self.calls: list = []
        self.answers: list = []

    async def __call__(self, operation, args):
        self.calls.append((operation, dict(args)))
        answer = {"operation": operation, "sessions": [{"id": "s-1"}]}
        self.answers.append(answer)
        return answer


def channels(settings_dir: Path) -> Channels:
    return Channels(settings=SettingsDir(settings_dir),
                    loader=Loader(log=lambda entry: None), broker=Broker(log=lambda e: None))


def set_channels(settings_dir: Path, names) -> None:
    settings = SettingsDir(settings_dir)
    settings.ensure("plugins.json")
    doc = settings.read("plugins.json")
    value = doc.value
    value["plugins"]["channel"] = names
    (settings_dir / "plugins.json").write_text(json.dumps(value))


@pytest.mark.parametrize("channel", ["cli", "webui"])
@pytest.mark.parametrize("operation", SESSION_OPERATIONS)
async def test_operations_pass_through_unchanged(settings_dir: Path, channel, operation) -> None:
    core = Core()
    answer = await channels(settings_dir).dispatch(channel, operation, {"session": "s-1"}, core)
    assert isinstance(answer, Answer)
    assert answer.value is core.answers[0]  # the very object the core answered
    assert core.calls == [(operation, {"session": "s-1"})]


async def test_an_operation_a_channel_does_not_carry(settings_dir: Path) -> None:
    core = Core()
    answer = await channels(settings_dir).dispatch("cli", "delete", {}, core)
    assert answer.code == "unknown-operation"
    assert core.calls == []


async def test_an_off_channel_names_the_recovery(settings_dir: Path) -> None:
    set_channels(settings_dir, ["webui"])
    core = Core()
    answer = await channels(settings_dir).dispatch("cli", "list", {}, core)
    assert answer.code == "channel-off"
    assert "router plugins --json" in answer.message
    assert "router plugins set --file" in answer.message
    assert '"channel": ["webui", "cli"]' in answer.message
    assert core.calls == []
    # The web channel still works.
    assert isinstance(await channels(settings_dir).dispatch("webui", "list", {}, core), Answer)


async def test_no_channel_at_all_and_the_recovery_needs_none(settings_dir: Path, capsys) -> None:
    set_channels(settings_dir, [])
    surface = channels(settings_dir)
    assert (await surface.dispatch("cli", "list", {}, Core())).code == "channel-off"
    # The recovery: `router plugins --json`, then `router plugins set`.
    assert main(["plugins", "--settings", str(settings_dir), "--json"]) == 0
    revision = json.loads(capsys.readouterr().out)["revision"]
    patch = settings_dir / "patch.json"
    patch.write_text(json.dumps({"revision": revision, "plugins": {"channel": ["cli", "webui"]}}))
    assert main(["plugins", "set", "--settings", str(settings_dir), "--file", str(patch)]) == 0
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), Answer)


async def test_a_broken_settings_file_keeps_the_last_good_selection(settings_dir: Path) -> None:
    surface = channels(settings_dir)
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), Answer)
    (settings_dir / "plugins.json").write_text("{torn")
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), Answer)
    # A first load that meets a broken file has nothing switched on.
    assert (await channels(settings_dir).dispatch("cli", "list", {}, Core())).code == "channel-off"


async def test_a_slow_send_does_not_hold_up_a_list(settings_dir: Path) -> None:
    release = trio.Event()
    order: list = []

    async def core(operation, args):
        if operation == "send":
            await release.wait()
        order.append(operation)
        return operation

    surface = channels(settings_dir)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(surface.dispatch, "cli", "send", {"text": "hi"}, core)
        await trio.testing.wait_all_tasks_blocked()
        answer = await surface.dispatch("webui", "list", {}, core)
        assert answer.value == "list"
        release.set()
    assert order == ["list", "send"]


async def test_a_file_without_plugins_switches_every_channel_off(settings_dir: Path) -> None:
    surface = channels(settings_dir)
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), Answer)
    (settings_dir / "plugins.json").write_text("{}")
    assert (await surface.dispatch("cli", "list", {}, Core())).code == "channel-off"
