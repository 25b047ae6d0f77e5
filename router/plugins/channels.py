"""Channels: the surfaces a person reaches sessions through (the ``router``
command, the web page), each a ``channel`` module that must be switched on.

Theory of operation
-------------------

A surface calls :meth:`Channels.dispatch` with its channel's name, the
session operation (``list``, ``send`` or ``read``), its arguments and the
core's caller. Each call reads ``plugins.json`` afresh, loads only the
``channel`` kind through the loader, captures the loaded modules (a tuple
that never changes under it), and hands the operation to the channel's
``dispatch``, which passes it to the core's caller and answers whatever the
core answered, unchanged. No lock is held while the operation runs: a slow
``send`` does not hold up a ``list``.

A channel that is not switched on refuses ``channel-off`` with the recovery
command. The command surface exits with :data:`CLI_OFF_EXIT`, the web surface
answers :data:`WEB_OFF_STATUS`. The recovery never needs a channel:
``router plugins`` and ``router plugins set`` read and write the settings
file directly. A ``plugins.json`` that is not valid keeps the loader's last
good selection (none, on a first load).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Final, Mapping

import trio

from router.plugins.broker import Answer, Broker
from router.plugins.loader import Loader
from router.plugins.refusal import PluginError, Refusal
from router.plugins.settings import SettingsDir, plugins_value

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
#: Exit status of a command whose channel is off (the seed's).
CLI_OFF_EXIT: Final = 3
#: HTTP status of a web request whose channel is off (the seed's).
WEB_OFF_STATUS: Final = 503

#: The core's caller: ``await core(operation, args)`` answers the operation.
CoreCaller = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


async def pass_through(channel: str, request: object, core: CoreCaller) -> Any:
    """What a channel module's ``dispatch`` does: check the operation is one
    a channel carries, and answer what the core answers, unchanged."""
    if type(request) is not dict or request.get("operation") not in SESSION_OPERATIONS:
        operation = request.get("operation") if type(request) is dict else None
        raise PluginError(
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
    def __init__(self, *, settings: SettingsDir, loader: Loader, broker: Broker) -> None:
        self._settings = settings
        self._loader = loader
        self._broker = broker

    async def dispatch(
        self, channel: str, operation: str, args: Mapping[str, Any], core: CoreCaller
    ) -> Answer | Refusal:
        document = await trio.to_thread.run_sync(self._settings.read, "plugins.json")
        # A file that is broken gives None: the loader keeps its last good selection.
        await self._loader.load_async(plugins_value(document), only=["channel"])
        captured = self._loader.modules("channel")  # frozen: a reload cannot change it
        module = next((m for m in captured if m.name == channel), None)
        if module is None:
            return channel_off(channel, [m.name for m in captured])
        return await self._broker.call(
            module, "dispatch", {"operation": operation, "args": dict(args)}, core,
            crash_code="channel-failed",
        )
