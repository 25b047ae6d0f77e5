"""Channels: the surfaces a person reaches sessions through (the ``router``
command, the web page), each a ``channel`` module that must be switched on.

Theory of operation
-------------------

A surface calls :meth:`Channels.dispatch` with its channel's name, the
session operation (``list``, ``send`` or ``read``), its arguments and the
core's caller. The call takes the channel modules ``plugins.json`` switches
on (a tuple that never changes under it), and hands the operation to the
channel's ``dispatch``, which passes it to the core's caller and answers
whatever the core answered, unchanged. No lock is held while the operation
runs: a slow ``send`` does not hold up a ``list``.

The modules are those of the last load while ``plugins.json`` and the
files of the channel modules it names (each module's directory and
``__init__.py``, the plug-in tree's root and its ``channel`` directory) have
the identities they had when it was read (:mod:`router.plugins.watched`):
a change to any of them is seen by the next call, which reads
``plugins.json`` and loads the channel kind again. (Before, every call did
both, two worker-thread hops and an ``exec`` of each module per request.) A
module's other files (a submodule it imports) are not watched: an edit to
one alone is seen when ``plugins.json`` or the module's ``__init__.py``
changes, or at the next start.

A channel that is not switched on refuses ``channel-off`` with the recovery
command. The command surface exits with :data:`CLI_OFF_EXIT`, the web surface
answers :data:`WEB_OFF_STATUS`. The recovery never needs a channel:
``router plugins`` and ``router plugins set`` read and write the settings
file directly. A ``plugins.json`` that is not valid keeps the loader's last
good selection (none, on a first load).
"""

from __future__ import annotations

import os
from typing import Any, Awaitable, Callable, Final, Mapping

import trio

from router.plugins.broker import Broker, ModuleAnswer
from router.plugins.kinds import is_name
from router.plugins.loader import LoadedModule, Loader
from router.errors import Refusal
from router.plugins.models import PluginsSettings
from router.plugins.settings import SettingsDir, settings_of
from router.plugins.watched import Watched

__all__ = [
    "CLI_OFF_EXIT",
    "SESSION_OPERATIONS",
    "WEB_OFF_STATUS",
    "Channels",
    "CoreCaller",
    "channel_off",
    "pass_through",
]

#: The session operations a channel carries.
SESSION_OPERATIONS: Final = ("list", "send", "read")
#: Exit status of a command whose channel is off (the Mosaic plug-in layer's README).
CLI_OFF_EXIT: Final = 3
#: HTTP status of a web request whose channel is off (the Mosaic plug-in layer's README).
WEB_OFF_STATUS: Final = 503

#: The core's caller: ``await core(operation, args)`` answers the operation.
CoreCaller = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


async def pass_through(channel: str, request: object, core: CoreCaller) -> Any:
    """What a channel module's ``dispatch`` does: check the operation is one
    a channel carries, and answer what the core answers, unchanged."""
    if type(request) is not dict or request.get("operation") not in SESSION_OPERATIONS:
        operation = request.get("operation") if type(request) is dict else None
        raise Refusal(
            "unknown-operation",
            f"the {channel} channel carries {', '.join(SESSION_OPERATIONS)}, not {operation!r}",
        )
    args = request.get("args")
    return await core(request["operation"], args if type(args) is dict else {})


def channel_off(channel: str, switched_on: list[str]) -> Refusal:
    wanted = switched_on + [channel] if channel not in switched_on else switched_on
    patch = '{"revision": "<the revision it shows>", "plugins": {"channel": [%s]}}' % ", ".join(
        f'"{n}"' for n in wanted
    )
    return Refusal(
        code="channel-off",
        message=f'the "{channel}" channel is switched off. Switch it on from a shell (no channel '
        f"needed): run `router plugins --json`, write {patch} to a file, and run "
        "`router plugins set --file FILE`",
    )


class Channels:
    def __init__(self, *, settings: SettingsDir, loader: Loader, broker: Broker,
                 coarse_ns: int | None = None) -> None:
        self._settings = settings
        self._loader = loader
        self._broker = broker
        #: The names whose files the kept load depends on.
        self._names: frozenset[str] = frozenset()
        self._watched: Watched[tuple[LoadedModule, ...]] = Watched(self._paths, coarse_ns=coarse_ns)
        self.loads = 0

    def __repr__(self) -> str:
        return f"<Channels loads={self.loads} names={sorted(self._names)} {self._watched!r}>"

    def _paths(self) -> list[str]:
        root = os.path.abspath(self._loader.root)
        kind = os.path.join(root, "channel")
        paths = [str(self._settings.path / "plugins.json"), root, kind]
        for name in sorted(self._names):
            paths += [os.path.join(kind, name), os.path.join(kind, name, "__init__.py")]
        return paths

    async def _modules(self) -> tuple[LoadedModule, ...]:
        """The channel modules switched on (see the module docstring)."""
        kept = self._watched.kept()
        if kept is not None:
            return kept
        key, began = self._watched.begin()
        document = await trio.to_thread.run_sync(self._settings.read, "plugins.json")
        # A file that is broken switches nothing: the loader keeps its last good selection.
        plugins = settings_of(document, PluginsSettings)
        await self._loader.load_async(plugins.switches, only=["channel"])
        self.loads += 1
        captured = self._loader.modules("channel")  # frozen: a reload cannot change it
        named = {n for n in plugins.listed("channel") if is_name(n)}
        names = frozenset(named | {m.name for m in captured})
        if names != self._names:
            # The key was taken over the old names: keep nothing, so the next
            # call loads again with every file it now depends on watched.
            self._names = names
            self._watched.forget()
            return captured
        self._watched.keep(captured, key, began)
        return captured

    async def dispatch(
        self, channel: str, operation: str, args: Mapping[str, Any], core: CoreCaller
    ) -> ModuleAnswer | Refusal:
        captured = await self._modules()
        module = next((m for m in captured if m.name == channel), None)
        if module is None:
            return channel_off(channel, [m.name for m in captured])
        return await self._broker.call(
            module, "dispatch", {"operation": operation, "args": dict(args)}, core,
            crash_code="channel-failed",
        )
