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

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.plugins.broker": "Broker ModuleAnswer",
    "router.plugins.kinds": "KINDS Kind",
    "router.plugins.layer": "PluginLayer",
    "router.plugins.limit_checks": "Limits MustStop",
    "router.plugins.loader": "LoadedModule Loader LoadResult RefusedPlugin",
    "router.errors": "Refusal",
    "router.plugins.routing": "LaunchRecord",
    "router.plugins.settings": "SettingsDir",
    "router.plugins.usage": "JsonlRecords MemoryLedger MemoryRecords StoreLedger UsageLedger",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
