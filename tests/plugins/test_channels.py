"""Channels: operations pass through unchanged; an off channel refuses with
the recovery command, and the recovery needs no channel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from router.cli import main
from router.plugins.broker import Broker, ModuleAnswer
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
    assert isinstance(answer, ModuleAnswer)
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
    assert isinstance(await channels(settings_dir).dispatch("webui", "list", {}, core), ModuleAnswer)


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
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), ModuleAnswer)


async def test_a_broken_settings_file_keeps_the_last_good_selection(settings_dir: Path) -> None:
    surface = channels(settings_dir)
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), ModuleAnswer)
    (settings_dir / "plugins.json").write_text("{torn")
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), ModuleAnswer)
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
    assert isinstance(await surface.dispatch("cli", "list", {}, Core()), ModuleAnswer)
    (settings_dir / "plugins.json").write_text("{}")
    assert (await surface.dispatch("cli", "list", {}, Core())).code == "channel-off"


# ----------------------------------------------------------------- the kept load
# The channel modules are loaded again only when plugins.json or a named
# module's files change (router.plugins.watched). ``coarse_ns=0`` lets the
# tests keep a load of files written a moment ago; each edit below changes
# the file's size, so its identity changes whatever the clock's tick.


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "plugin-tree"
    for name in ("cli", "webui"):
        (root / "channel" / name).mkdir(parents=True)
        source = Path(__file__).resolve().parents[2] / "router" / "plugins" / "channel" / name / "__init__.py"
        (root / "channel" / name / "__init__.py").write_bytes(source.read_bytes())
    return root


def kept_channels(settings_dir: Path, root: Path, **extra) -> Channels:
    return Channels(settings=SettingsDir(settings_dir), loader=Loader(root=str(root), log=lambda entry: None),
                    broker=Broker(log=lambda e: None), **extra)


class Hops:
    """Counts worker-thread hops (``trio.to_thread.run_sync``)."""

    def __init__(self, monkeypatch) -> None:
        self.count = 0
        real = trio.to_thread.run_sync

        async def counted(*args, **kwargs):
            self.count += 1
            return await real(*args, **kwargs)

        monkeypatch.setattr(trio.to_thread, "run_sync", counted)


async def test_unchanged_settings_are_not_read_again(settings_dir: Path, tmp_path: Path, monkeypatch) -> None:
    set_channels(settings_dir, ["cli", "webui"])
    surface = kept_channels(settings_dir, tree(tmp_path), coarse_ns=0)
    core = Core()
    for _ in range(2):  # the first learns which modules the file names, the second keeps
        assert isinstance(await surface.dispatch("cli", "list", {}, core), ModuleAnswer)
    loads = surface.loads
    hops = Hops(monkeypatch)
    for _ in range(20):
        assert isinstance(await surface.dispatch("webui", "list", {}, core), ModuleAnswer)
    assert surface.loads == loads
    assert hops.count == 0


async def test_plugins_json_edited_is_seen_by_the_next_request(settings_dir: Path, tmp_path: Path) -> None:
    set_channels(settings_dir, ["cli", "webui"])
    surface = kept_channels(settings_dir, tree(tmp_path), coarse_ns=0)
    core = Core()
    for _ in range(3):
        assert isinstance(await surface.dispatch("cli", "list", {}, core), ModuleAnswer)
    set_channels(settings_dir, ["webui"])
    assert (await surface.dispatch("cli", "list", {}, core)).code == "channel-off"
    set_channels(settings_dir, ["cli", "webui"])
    assert isinstance(await surface.dispatch("cli", "list", {}, core), ModuleAnswer)


async def test_a_module_edited_is_seen_by_the_next_request(settings_dir: Path, tmp_path: Path) -> None:
    set_channels(settings_dir, ["cli", "webui"])
    root = tree(tmp_path)
    surface = kept_channels(settings_dir, root, coarse_ns=0)
    core = Core()
    for _ in range(3):
        assert isinstance(await surface.dispatch("cli", "list", {}, core), ModuleAnswer)
    init = root / "channel" / "cli" / "__init__.py"
    init.write_text(init.read_text() + "\n\nasync def dispatch(request, core):\n    raise RuntimeError('edited')\n")
    assert (await surface.dispatch("cli", "list", {}, core)).code == "channel-failed"


async def test_a_named_module_that_appears_is_seen(settings_dir: Path, tmp_path: Path) -> None:
    root = tree(tmp_path)
    webui = root / "channel" / "webui"
    webui.rename(tmp_path / "away")
    set_channels(settings_dir, ["cli", "webui"])  # webui is missing: refused, cli stays on
    surface = kept_channels(settings_dir, root, coarse_ns=0)
    core = Core()
    for _ in range(3):
        assert (await surface.dispatch("webui", "list", {}, core)).code == "channel-off"
    (tmp_path / "away").rename(webui)
    assert isinstance(await surface.dispatch("webui", "list", {}, core), ModuleAnswer)


async def test_a_file_written_within_a_clock_tick_is_read_every_time(settings_dir: Path, tmp_path: Path) -> None:
    set_channels(settings_dir, ["cli", "webui"])
    # A tick longer than the test can take: the files are always too recent
    # to trust, however slow the machine (the default tick is 2 s).
    surface = kept_channels(settings_dir, tree(tmp_path), coarse_ns=10**18)
    core = Core()
    for _ in range(4):
        assert isinstance(await surface.dispatch("cli", "list", {}, core), ModuleAnswer)
    assert surface.loads == 4
