"""The plug-in layer as the router wires it: one object the main job holds.

:class:`PluginLayer` reads the settings directory, loads the kinds the router
calls during its life (usage sources, limit checks, the search source) at
:meth:`~PluginLayer.reload`, and serves:

- :meth:`launch`: route an instance (``router.plugins.routing``), then ask
  the limit checks whether it may start;
- :meth:`begin_turn` / :meth:`end_turn`: bracket a turn with the usage
  sources, store its record, then ask the limit checks whether the session
  must stop. The caller ends a turn in this order: the turn's result lands
  (is delivered and stored), then ``end_turn``, then, if it answers a
  :class:`~router.plugins.limit_checks.MustStop`, the session is stopped with its
  ``reason``. The stop never cuts a turn short;
- :meth:`may_continue`: whether a stopped session may be resumed (the
  limit checks' ``may_launch`` for its subject);
- :meth:`search`: the broker's web search;
- :meth:`dispatch`: a channel's session operation;
- :meth:`report`: every limit and what it has counted;
- :meth:`load_launcher`: the launcher module in force and its options
  (loaded once, by the main job, when it starts).

A running layer sees a changed ``plugins.json`` at its next ``reload`` (the
harness of a launch and a channel's selection are read at each call).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from typing import Any, Callable, Mapping

import trio

from router.plugins.broker import Broker, ModuleAnswer
from router.plugins.defaults import PLUGINS
from router.plugins.channels import Channels, CoreCaller
from router.plugins.limit_checks import CheckFailure, Limits, MustStop, counting_window
from router.plugins.loader import LoadedModule, Loader, LoadResult, Log, default_log
from router.errors import Refusal
from router.plugins.routing import LaunchRecord, plan_launch
from router.plugins.models import KindSwitch, KindSwitches, LimitsSettings, PluginsSettings, RoutesSettings
from router.plugins.settings import Document, SettingsDir, redact, settings_of
from router.plugins.usage import Bracket, RecordStore, TurnMeter, utc_now
from router.plugins.watched import Watched

__all__ = ["PluginLayer", "RUNTIME_KINDS"]

#: The kinds loaded at reload. Harness modules are loaded per launch, channel
#: modules per operation.
RUNTIME_KINDS = ("usage-source", "limit-check", "search-source")


def _limits(document: Document | Refusal) -> Mapping[str, Any]:
    """The ``limits`` tree of ``limits.json`` (``{}`` when it has none)."""
    return settings_of(document, LimitsSettings).limits


class PluginLayer:
    def __init__(
        self,
        *,
        settings: SettingsDir,
        records: RecordStore,
        root: str | None = None,
        log: Log | None = None,
        deps: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        now: Callable[[], dt.datetime] = utc_now,
        deadlines: Mapping[str, float | None] | None = None,
    ) -> None:
        self.settings = settings
        self.records = records
        self._log = log or default_log
        self.loader = Loader(root=root, log=self._log)
        self.broker = Broker(deadlines=deadlines, log=self._log)
        self.limits = Limits(broker=self.broker, log=self._log)
        self.channels = Channels(settings=settings, loader=Loader(root=root, log=self._log),
                                 broker=self.broker)
        self._deps = dict(deps or {})
        self._env = dict(os.environ if env is None else env)
        self._now = now
        #: ``plugins.json`` as last loaded (a broken file keeps the one before).
        self._plugins = PluginsSettings(switches=KindSwitches(by_kind={}))
        #: ``limits.json`` as every turn's end reads it: kept while the file
        #: keeps its identity (:mod:`router.plugins.watched`), so an
        #: unchanged file is not read and parsed again per turn.
        self._limits_doc: Watched[Document | Refusal] = Watched(lambda: (settings.path / "limits.json",))

    def __repr__(self) -> str:
        return f"<PluginLayer {self.settings!r} {self.loader!r}>"

    async def _read(self, name: str) -> Document | Refusal:
        return await trio.to_thread.run_sync(self.settings.read, name)

    async def reload(self) -> LoadResult:
        """Read ``plugins.json`` and load the runtime kinds. A file that does
        not parse refuses every kind, which keeps what it had."""
        settings = settings_of(await self._read("plugins.json"), PluginsSettings)
        result = await self.loader.load_async(settings.switches, only=RUNTIME_KINDS)
        if settings.switches.by_kind is not None:
            self._plugins = settings
        return result

    def _switched_on(self, kind: str) -> list[str]:
        switch = self._plugins.switches.get(kind)
        if switch is None:
            return []
        if switch.refusal is None or switch.names:
            return list(switch.names)
        # A setting of the wrong shape: the loader refused the kind and kept
        # what it had, and what it kept stays on (limits fail closed).
        return [module.name for module in self.loader.modules(kind)]

    def switched_on(self, kind: str) -> list[str]:
        """The modules of ``kind`` that ``plugins.json`` switches on (as
        last loaded)."""
        return self._switched_on(kind)

    def _kind_options(self, kind: str) -> Mapping[str, Any]:
        return self._plugins.kind_options(kind)

    @staticmethod
    async def _off_loop(ask: Callable[..., Any], **kwargs: Any) -> Any:
        """Ask the limit checks in a worker thread: they are plain functions
        over data, and with many turn records to count (a limit older than
        a long history) they take long enough to stall the loop."""
        return await trio.to_thread.run_sync(functools.partial(ask, **kwargs))

    async def _counted_records(self, limits: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The turn records a launch or a turn's end hands the limit checks:
        only those that can count for a limit of ``limits``
        (:func:`~router.plugins.limit_checks.counting_window`), read incrementally
        in the records' worker thread. None at all while no limit is set."""
        any_limit, start = counting_window(limits)
        if not any_limit:
            return []
        return await self.records.call(self.records.since, start)

    # ----------------------------------------------------------------- launch

    async def _load_harness(self, name: str) -> LoadedModule | Refusal:
        # A fresh loader per launch: the module's file is executed again, so
        # an earlier load's module is never reused.
        fresh = Loader(root=self.loader.root, log=self._log)
        result = await fresh.load_async({"harness": [name]}, only=["harness"])
        if result.refused:
            return result.refused[0].refusal
        return fresh.modules("harness")[0]

    async def launch(self, instance: str, *, session: str | None = None) -> LaunchRecord | Refusal:
        plugins_doc = await self._read("plugins.json")
        routes_doc = await self._read("routes.json")
        limits_doc = await self._read("limits.json")
        for document in (plugins_doc, routes_doc, limits_doc):
            if isinstance(document, Refusal):
                return document
        record = await plan_launch(
            instance,
            plugins=settings_of(plugins_doc, PluginsSettings),
            routes=settings_of(routes_doc, RoutesSettings),
            load_harness=self._load_harness, broker=self.broker, env=self._env, session=session,
        )
        if isinstance(record, Refusal):
            self._log({"event": "launch-refused", "instance": instance, **record.data, "code": record.code, "message": record.message})
            return record
        limits = _limits(limits_doc)
        refusal = await self._off_loop(
            self.limits.may_launch,
            switched_on=self._switched_on("limit-check"),
            modules=self.loader.modules("limit-check"),
            limits=limits,
            subject=record.subject(),
            records=await self._counted_records(limits),
            now=self._now(),
        )
        if refusal is not None:
            return refusal
        # The record may carry a module's secret (the container harness's
        # daemon token in reach): the log gets it redacted, env by name only.
        self._log({"event": "launched", **redact(record.to_json()), "env": sorted(record.env)})
        return record

    async def load_launcher(self, name: str | None = None) -> tuple[LoadedModule, dict[str, Any]] | Refusal:
        """The ``launcher`` module ``name`` (else the one ``plugins.json``
        switches on, else the default's), loaded afresh, and its options
        (``options.launcher.<name>``); or the loader's refusal."""
        settings = settings_of(await self._read("plugins.json"), PluginsSettings)
        if name is None:
            # A name the loader refuses (``bad-name``) is loaded, to be refused with its reason.
            switch = settings.switches.get("launcher") or KindSwitch(value=None)
            name = next(iter(switch.names), PLUGINS["plugins"]["launcher"])
        fresh = Loader(root=self.loader.root, log=self._log)
        result = await fresh.load_async({"launcher": name}, only=["launcher"])
        if result.refused:
            return result.refused[0].refusal
        return fresh.modules("launcher")[0], settings.module_options("launcher", name)

    # ------------------------------------------------------------------ turns

    def _meter(self) -> TurnMeter:
        return TurnMeter(loader=self.loader, broker=self.broker, records=self.records,
                         deps={"env": self._env, **self._deps},
                         options=self._kind_options("usage-source"), log=self._log, now=self._now)

    async def begin_turn(self, launch: LaunchRecord, *, transcript: str | None = None) -> Bracket:
        subject = {
            **launch.subject(), "session": launch.session, "harness": launch.harness,
            "reach": dict(launch.reach), "transcript": transcript,
        }
        return await self._meter().begin(subject)

    async def end_turn(self, bracket: Bracket) -> tuple[dict[str, Any], MustStop | None]:
        """Store the turn's record, then ask whether the session must stop
        (appending the record, reading ``limits.json``, counting the records
        and asking the checks in one worker-thread hop: this runs at every
        turn's end). The record is appended before the checks count, as
        before: a check sees the turn that just ended."""
        record = await self._meter().close(bracket)
        appended: list[bool] = []
        # The records' store blinking (a full disk, PostgreSQL restarting)
        # is tried again by the records' worker (router._transient), the
        # record appended once; past the budget, ``store-unavailable``: not
        # a limit's "no".
        stop = await self.records.call(self._append_and_check, record, appended, self._switched_on("limit-check"),
                                       self.loader.modules("limit-check"), dict(bracket.subject))
        return record, stop

    def _append_and_check(self, record: dict[str, Any], appended: list[bool], switched_on: list[str], modules: Any,
                          subject: dict[str, Any]) -> MustStop | None:
        """In the records' worker thread: store the turn's record (unless an earlier
        try did: ``appended``), then :meth:`_must_stop`."""
        if not appended:
            self.records.append(record)
            appended.append(True)
        return self._must_stop(switched_on, modules, subject)

    def _must_stop(self, switched_on: list[str], modules: Any, subject: dict[str, Any]) -> MustStop | None:
        """In a worker thread: the limit checks' ``must_stop`` for the turn
        of ``subject``, over ``limits.json`` as it is now."""
        document = self._limits_document()
        if isinstance(document, Refusal) and switched_on:
            # Fail closed, as launch does: limits that cannot be read cannot
            # be known to hold, so the session stops once its turn has landed.
            failure = CheckFailure(check="limits.json", refusal=Refusal(document.code, document.message))
            stop = MustStop(check="limits.json", failure=failure,
                        reason=f"limit-check-failed: limits.json cannot be read ({document.code})")
            self._log({"event": "session-stop", "check": "limits.json", "code": document.code,
                       "reason": stop.reason, "subject": subject})
            return stop
        limits = _limits(document)
        any_limit, start = counting_window(limits)
        return self.limits.must_stop(
            switched_on=switched_on,
            modules=modules,
            limits=limits,
            subject={k: subject.get(k) for k in ("instance", "provider", "model", "account")},
            records=self.records.since(start) if any_limit else [],
            now=self._now(),
        )

    def _limits_document(self) -> Document | Refusal:
        """In a worker thread: ``limits.json`` as it is now, read only when
        the file changed since the last read (see :mod:`router.plugins.watched`:
        a change is seen by the next turn's end, whoever made it)."""
        watched = self._limits_doc
        kept = watched.kept()
        if kept is not None:
            return kept
        key, began = watched.begin()
        document = self.settings.read("limits.json")
        watched.keep(document, key, began)
        return document

    async def may_continue(self, subject: Mapping[str, Any]) -> Refusal | None:
        """Whether a session a stop ended may take turns again: the limit
        checks' ``may_launch`` for its ``subject`` (``{instance, provider,
        model, account}``), as a launch asks them (no routing, no
        preflight: the session runs already). ``None`` when it may; else
        ``limit-reached``, ``limit-check-failed`` or the settings' refusal."""
        document = await self._read("limits.json")
        if isinstance(document, Refusal):
            return document
        limits = _limits(document)
        return await self._off_loop(
            self.limits.may_launch,
            switched_on=self._switched_on("limit-check"),
            modules=self.loader.modules("limit-check"),
            limits=limits,
            subject=dict(subject),
            records=await self._counted_records(limits),
            now=self._now(),
        )

    # ------------------------------------------------------------- the rest

    async def report(self) -> list[dict[str, Any]] | Refusal:
        document = await self._read("limits.json")
        if isinstance(document, Refusal):
            return document
        return await self._off_loop(
            self.limits.report,
            switched_on=self._switched_on("limit-check"),
            modules=self.loader.modules("limit-check"),
            limits=_limits(document),
            records=await self.records.call(self.records.read),
            now=self._now(),
        )

    async def search(self, query: str) -> dict[str, Any] | Refusal:
        return await self.broker.search(
            self.loader, query, options=self._kind_options("search-source"), deps=self._deps
        )

    async def dispatch(
        self, channel: str, operation: str, args: Mapping[str, Any], core: CoreCaller
    ) -> ModuleAnswer | Refusal:
        return await self.channels.dispatch(channel, operation, args, core)
