"""The plug-in layer: every part the core calls out to is a plug-in kind.

A module of a kind is a directory ``router/plugins/<kind>/<name>/`` with an
``__init__.py``; ``plugins.json`` in the settings directory says which are
switched on. No core module imports a plug-in module by name: calls go
through the loader (``router.plugins.loader``) and the broker
(``router.plugins.broker``). See ``docs/plugins.md``.

Layout: ``kinds`` (the registry), ``loader``, ``broker`` (deadlines and
search), ``settings`` (files, revisions, patches), ``routing`` (harness
routes and the launcher's checks), ``limit_checks`` (fail-closed composition),
``usage`` (turn brackets and records), ``channels``, ``watched`` (a value
kept while its files keep their identity), ``layer`` (the object the main
job holds) and ``cli`` (``router plugins|routes|limits``).
"""

from router.plugins.broker import Broker, ModuleAnswer
from router.plugins.kinds import KINDS, Kind
from router.plugins.layer import PluginLayer
from router.plugins.limit_checks import Limits, MustStop
from router.plugins.loader import LoadedModule, Loader, LoadResult, RefusedPlugin
from router.errors import Refusal
from router.plugins.routing import LaunchRecord
from router.plugins.settings import SettingsDir
from router.plugins.usage import JsonlRecords, MemoryLedger, MemoryRecords, StoreLedger, UsageLedger

__all__ = [
    "Broker",
    "JsonlRecords",
    "KINDS",
    "Kind",
    "LaunchRecord",
    "Limits",
    "LoadResult",
    "LoadedModule",
    "Loader",
    "MemoryLedger",
    "MemoryRecords",
    "ModuleAnswer",
    "MustStop",
    "PluginLayer",
    "Refusal",
    "RefusedPlugin",
    "SettingsDir",
    "StoreLedger",
    "UsageLedger",
]
