"""``router serve``: the main job, on embedded defaults.

On one machine with nothing else installed it starts, in this order:

1. the plug-in settings (``plugins.json``, ``routes.json``, ``limits.json``
   written from the safe defaults where missing);
2. the host's SQLite store (``host.sqlite``) and the deliveries' record
   (``turns.sqlite``) in the data directory: ``--data-dir``, else
   ``$ROUTER_DATA_DIR``, else ``$XDG_DATA_HOME/router``, else
   ``~/.local/share/router``; then the plug-in layer, with the host's store
   as the ``frames`` usage source's ledger and the turn records in
   ``usage.jsonl`` there. ``--store`` puts the three elsewhere: another
   SQLite data directory, or ``postgresql://…``, tables of one database
   any number of routers share (:mod:`router.store`, docs/store.md);
3. the launcher in force (``--launcher NAME``, else ``plugins.json``'s
   ``launcher``, else ``in-process``; a module the loader refuses is
   ``launcher-refused``, exit 2), which starts each container session's
   daemon on its first delivery, replaces it when it is lost, stops it
   when idle (``--idle-timeout``, default 600 s) and marks the session
   unreachable after three failed starts (:mod:`router.host.lifecycle`).
   The ``in-process`` launcher shares one in-process daemon with the echo
   adapter (reporting usage: words in and out as tokens) on a loopback port
   with a random token, which the job binds here (the daemon itself is
   built on its first connection: :class:`InProcessDaemon`); ``process`` runs a
   ``router daemon`` per session, ``docker`` a container per session from
   ``--image``. ``--daemon URL`` points the host at one real daemon
   instead, with ``$ROUTER_DAEMON_TOKEN`` or ``--daemon-token-file`` (or
   ``--daemon-token``; the old ``--token`` warns), and no launcher;
   that daemon is checked first: its health, the token, the protocol of its
   ``hello``, and a daemon that fails one is ``daemon-check-failed``, exit 2;
4. the host over them, the session registry and the user-turn router
   (which brackets every turn with the plug-in layer: usage records, and
   the limit checks' ``must_stop``);
5. the HTTP API and the page on ``127.0.0.1:--port`` (default 8765; ``0``
   picks a free port), which takes the access token of the settings
   directory (:mod:`router.board.access`: made on the first start);
6. the same API on the router's private Unix socket
   (:mod:`router.board.local`), where ``router sessions`` and ``router
   send`` find it.

It then writes the page's URL with the token,
``http://127.0.0.1:PORT/?token=TOKEN``, to ``page-url`` beside the token
file (0600 whatever the umask; :data:`PAGE_URL_FILE`) and prints it as its
first stdout line when only this user can read stdout (a terminal, a pipe
to the process that started it, a file no one else may read:
:func:`stdout_is_private`); otherwise (a file made under a umask that lets
others read it) the first line is the URL without the token,
``http://127.0.0.1:PORT/``. Then ``router serve: listening on <url>
(..., local <socket>); the page's URL with its token is in <file> (0600)``,
and it serves until SIGINT or SIGTERM, when it stops in the
reverse order: the private socket (its file removed), the API (no new
requests; live streams end), every session (queued deliveries are answered
``session-closed``), the host, the daemon, and last the stores, and removes
``page-url``. Exit 0 after a clean stop on SIGTERM, 130 on SIGINT (one
line on stderr), 2 when it cannot start (a busy store, a port in use, a
local directory that is not private: ``unsafe-directory``; a token file
that is not private: ``token-file-unsafe``; a ``--daemon`` that fails its
check).

:class:`MainJob` is that assembly as a component (``router mcp`` runs it
too, without the API unless asked). Each part it starts is a
:class:`Component` (``run(task_status=)`` and ``aclose()``): the job starts
them one by one, each in its own cancel scope, and stops them in one loop in
the reverse order: the part's ``aclose``, then its scope cancelled, then its
end awaited. A part that has nothing to finish is wrapped in
:class:`StoppedByCancel`.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import stat
import sys
import uuid
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol

import attrs
import trio

from router import errors
from router._trio import sole_error

__all__ = ["Component", "JobConfig", "MainJob", "StoppedByCancel", "configure", "run"]


if TYPE_CHECKING:  # the parts' classes, for their types: imported when they start
    from router.api.config import ApiConfig
    from router.api.server import ApiServer
    from router.board.local import LocalServer
    from router.board.service import LocalBoard
    from router.cluster import ClusterNode
    from router.daemon import Adapter, DaemonServer
    from router.host import DaemonEndpoint, Host, Launcher, Store
    from router.notify.outbox import Notifications
    from router.plugins.layer import PluginLayer
    from router.plugins.settings import SettingsDir
    from router.record import Record
    from router.remote import Reach, ReachConfig
    from router.store import StoreTarget
    from router.turns.delivery_log import DeliveryLog
    from router.turns.registry import SessionRegistry
    from router.turns.router import TurnRouter
    from router.worktrees import Place, Worktrees

log = logging.getLogger("router.serve")

#: The settings documents the job makes sure exist.
SETTINGS_FILES = ("plugins.json", "routes.json", "limits.json")
#: Seconds a launched daemon idles before ``router serve`` stops it (ours:
#: the reference's platform stops an idle container after minutes; ten
#: keep a session that a person answers now and then warm).
IDLE_TIMEOUT = 600.0
#: The launcher that shares the router's own in-process daemon (its module
#: takes that daemon's endpoint as options).
IN_PROCESS = "in-process"


@attrs.frozen(kw_only=True)
class JobConfig:
    data_dir: Path
    settings_dir: Path
    #: The API's port; None runs no API.
    port: int | None = None
    #: A real daemon to use instead of the in-process one.
    daemon_url: str | None = None
    daemon_token: str | None = None
    #: Claude Code sessions to serve (their mod links), by session id.
    claude_sessions: tuple[str, ...] = ()
    #: Seconds each ``session.message`` call may take.
    message_deadline: float | None = None
    #: The in-process daemon's adapter (None: the echo adapter).
    adapter: Adapter | None = None
    #: The instance a session the router did not launch is metered as.
    instance: str = "default"
    #: The plug-in tree the layer loads from (None: the shipped one; tests only).
    plugins_root: str | None = None
    #: The turn records the limits count (None: ``usage.jsonl`` in
    #: ``data_dir``). Several routers may share one file: each append is
    #: one ``O_APPEND`` write.
    records: Path | None = None
    #: Serve the private Unix socket (``router.board.local``) as this
    #: command (``serve``, ``mcp``); None serves none. With it, the API
    #: lists the whole local board and forwards to its holders.
    local: str | None = None
    #: The router's name on the board (``--name``; None: from the data
    #: directory, see ``router.board.local``).
    name: str | None = None
    #: Sessions of this router the board does not list (``router mcp``:
    #: its echo ``root``; see ``router.board.service``).
    hidden: tuple[str, ...] = ()
    #: The launcher module (None: ``plugins.json``'s, else the default's).
    launcher: str | None = None
    #: The image a container launcher runs (its ``image`` option).
    image: str | None = None
    #: Options merged over ``plugins.json``'s for the launcher (tests, commands).
    launcher_options: Mapping[str, Any] = attrs.field(factory=dict)
    #: Seconds a launched daemon may idle before it is stopped (None: never;
    #: the shared in-process daemon never is).
    idle_timeout: float | None = None
    #: Failed starts in a row before a session is unreachable.
    max_failures: int = 3
    #: Where the records live (``--store``: a SQLite data directory or
    #: ``postgresql://…``, :func:`router.store.parse_target`); None: the
    #: SQLite files in ``data_dir``.
    store: str | None = None
    #: Reach beyond this machine (``--listen``, ``--tls-cert``/``--tls-key``,
    #: ``--behind-proxy``): None: none.
    reach: ReachConfig | None = None
    #: Live streams one credential may hold at once (``--max-streams``;
    #: ``router.api.streams``).
    max_streams: int = 32
    #: Connections each API listener serves at once (``--max-connections``;
    #: ``router._hypercorn.ConnectionLimits``).
    max_connections: int = 256


class StartFailed(errors.Refusal):
    """The job could not start (a store that cannot open, a data dir that
    cannot be used): the commands print it and exit 2."""


class Component(Protocol):
    """What :class:`MainJob` starts and stops, one shape for every part:
    ``await nursery.start(component.run)`` returns once it serves (with what
    it hands back: the API's URL, the socket's path), and ``await
    component.aclose()`` asks it to stop gracefully. The job cancels the
    run's scope after ``aclose`` returns, so a part with nothing to finish
    may return at once (:class:`StoppedByCancel`)."""

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None: ...

    async def aclose(self) -> None: ...


class _Closes(Protocol):
    """What the job closes once its parts stopped (the record, the
    cluster's node), in the reverse order of opening."""

    def close(self) -> None: ...


@attrs.frozen
class StoppedByCancel:
    """A :class:`Component` over a part whose run stops when cancelled and
    has nothing to finish first (the host, the parking, the API ...)."""

    run: Callable[..., Awaitable[None]]

    async def aclose(self) -> None:
        return None


class InProcessDaemon:
    """The in-process daemon as a :class:`Component`. Its listeners are
    bound before it starts (their port is the endpoint the launcher hands
    out); its server (:mod:`router.daemon`, the adapter, the WebSocket) is
    built, in a worker thread, and run when the first connection arrives,
    so a router that never drives a container session (a Claude Code
    session's ``router mcp``) never loads it. That first connection waits
    for it; the ones after are served as by a server started at once."""

    def __init__(self, build: Callable[[], DaemonServer], listeners: list[trio.SocketListener]) -> None:
        self.build = build
        self.listeners = listeners
        #: The server, once the first connection built it.
        self.server: DaemonServer | None = None

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            async with trio.open_nursery() as waiting:  # until one listener has a connection waiting
                for listener in self.listeners:
                    waiting.start_soon(self._first_connection, listener, waiting.cancel_scope)
            self.server = await trio.to_thread.run_sync(self.build)
        finally:
            if self.server is None:  # stopped before any connection: nothing else holds them
                for listener in self.listeners:
                    listener.socket.close()
        await self.server.run(self.listeners)

    @staticmethod
    async def _first_connection(listener: trio.SocketListener, waiting: trio.CancelScope) -> None:
        await trio.lowlevel.wait_readable(listener.socket)
        waiting.cancel()

    async def aclose(self) -> None:
        if self.server is not None:
            await self.server.aclose()


class _Started:
    """One started component: its name, its cancel scope and the event its
    task sets when it is done."""

    def __init__(self, name: str, component: Component) -> None:
        self.name = name
        self.component = component
        self.scope = trio.CancelScope()
        self.done = trio.Event()

    async def stop(self) -> None:
        """Its graceful close, then its scope cancelled, then its end."""
        await self.component.aclose()
        self.scope.cancel(reason=f"the main job stops {self.name}")
        await self.done.wait()


class MainJob:
    """The router assembled (see the module docstring). ``await
    nursery.start(job.run)`` returns once everything listens; :meth:`aclose`
    stops it in order. Attributes (``router``, ``host``, ``api``, ``url``
    ...) are set while it runs.

    Resource handling: :meth:`run` owns every component and the stores, and
    closes the stores after every component stopped, on every exit.
    Cancelling ``run`` stops everything at once; :meth:`aclose` stops it in
    order.
    """

    def __init__(self, config: JobConfig, *, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.env = dict(os.environ if env is None else env)
        self.url: str | None = None
        self.router: TurnRouter | None = None
        self.host: Host | None = None
        self.layer: PluginLayer | None = None
        self.api: ApiServer | None = None
        #: The notifications (router.notify), while it runs.
        self.notifications: Notifications | None = None
        #: The API's access token, and the board, while it runs.
        self.token: str | None = None
        self.board: LocalBoard | None = None
        self.daemon_url: str | None = None
        #: The private Unix socket's server and path, when it serves one.
        self.local: LocalServer | None = None
        self.socket: str | None = None
        #: The launcher in force (None with ``--daemon``).
        self.launcher: Launcher | None = None
        #: Pairing and devices with ``--listen`` or ``--behind-proxy``.
        self.reach: Reach | None = None
        #: Sessions in git worktrees (``router serve`` only).
        self.worktrees: Worktrees | None = None
        #: This router's part in a cluster when the record is PostgreSQL.
        self.cluster: ClusterNode | None = None
        #: The components started, in order; stopped in the reverse one.
        self._started: list[_Started] = []
        self._stop = trio.Event()
        self._stopped = trio.Event()

    def __repr__(self) -> str:
        return f"<MainJob {self.config.data_dir} url={self.url!r} components={[each.name for each in self._started]}>"

    @property
    def headers(self) -> dict[str, str]:
        """What a client of the TCP API sends: the token."""
        return {"authorization": f"Bearer {self.token}"}

    @property
    def page_url(self) -> str | None:
        return None if self.api is None else self.api.page_url

    async def aclose(self) -> None:
        """Stop in the reverse order of starting, and wait until done."""
        self._stop.set()
        await self._stopped.wait()

    async def _start(self, nursery: trio.Nursery, name: str, component: Component) -> Any:
        """Start ``component`` in its own cancel scope and answer what its
        ``run`` handed back; it stops in the reverse order of starting
        (:meth:`_Started.stop`)."""
        started = _Started(name, component)

        async def body(task_status: trio.TaskStatus[Any]) -> None:
            try:
                with started.scope:
                    await component.run(task_status=task_status)
            finally:
                started.done.set()

        value = await nursery.start(body, name=name)
        self._started.append(started)
        return value

    async def run(self, *, task_status: trio.TaskStatus[MainJob] = trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        opened: list[_Closes] = []
        try:
            # 1. Settings, with the safe defaults where a file is missing.
            settings = await _ensure_settings(config.settings_dir)
            # 2. The stores, then the plug-in layer over them.
            target, record = await _open_record(config, opened)
            await self._open_layer(settings, record, opened)
            async with trio.open_nursery() as nursery:
                # 3. The launcher, or one daemon named by URL.
                endpoint, harness, via = await self._daemon_or_launcher(nursery)
                # 4. The host, the registry, the router.
                registry = await self._start_sessions(nursery, record, settings, endpoint, harness, via)
                await self._join_cluster(nursery, registry)
                for session_id in config.claude_sessions:
                    await self.router.open_claude_code(session_id)
                # 5. The API, behind the token.
                await self._start_api(nursery, record, target, harness)
                # 6. The private Unix socket: this user's other commands
                # (`router sessions`, `router send`) reach the router there.
                if config.local is not None:
                    await self._start_local(nursery, harness)
                if self.cluster is not None:
                    self.cluster.register(api_url=self.url, socket=self.socket, info=getattr(self.board, "info", None))
                task_status.started(self)
                await self._stop.wait()
                for started in reversed(self._started):
                    log.info("stopping %s", started.name)
                    await started.stop()
        finally:
            for each in reversed(opened):
                each.close()
            self._stopped.set()

    async def _open_layer(self, settings: SettingsDir, record: Record, opened: list[_Closes]) -> None:
        """This router's part in a cluster, then the plug-in layer: the
        host's store is the ledger the ``frames`` usage source reads."""
        from router.plugins.layer import PluginLayer
        from router.plugins.usage import StoreLedger

        # With a PostgreSQL record the router is one of a cluster
        # (router.cluster): it drives only the sessions it holds a
        # lease for, and every write of the record carries its number.
        self.cluster = _open_cluster(record.store, record.deliveries, opened)
        self.layer = PluginLayer(
            settings=settings, records=record.records, env=self.env,
            log=_plugin_log, deps={"ledger": StoreLedger(record.store)}, root=self.config.plugins_root,
        )
        loaded = await self.layer.reload()
        for refused in loaded.refused:
            log.warning("plug-in refused: %s", refused)

    async def _daemon_or_launcher(self, nursery: trio.Nursery) -> tuple[DaemonEndpoint | None, str, str]:
        """The launcher in force, or the one daemon ``--daemon`` names
        (checked first): the host's default endpoint, and the harness and
        ``via`` container sessions launch with."""
        config = self.config
        if config.daemon_url is None:
            self.launcher, endpoint = await self._launcher(nursery)
            harness, via = ("echo", "in-process") if self.launcher.name == IN_PROCESS else ("echo", "daemon")
            return endpoint, harness, via
        self.daemon_url = config.daemon_url
        endpoint, adapter = await _checked_daemon(config.daemon_url, config.daemon_token or "")
        # An echo daemon runs the echo harness, as a launched one
        # does, so the default routes launch on it with no
        # settings changed (the cluster recipe); a route to the
        # `container` module reaches it too.
        return endpoint, ("echo" if adapter == "echo" else "container"), "daemon"

    async def _start_sessions(
        self, nursery: trio.Nursery, record: Record, settings: SettingsDir, endpoint: DaemonEndpoint | None,
        harness: str, via: str,
    ) -> SessionRegistry:
        """The host, the session registry, the user-turn router, the
        notifications and the router's parking; returns the registry."""
        from router.host import Host, HostSettings
        from router.turns.registry import SessionRegistry
        from router.turns.router import TurnRouter

        config = self.config
        self.host = Host(record.store, endpoint, HostSettings(on_container_lost="if-declared"),
                         launcher=self.launcher, may_link=getattr(self.cluster, "holds", None))
        if self.cluster is not None:  # the record's list kept between the cluster's notifications
            self.host.kept_list = self.cluster.kept_list
        await self._start(nursery, "host", StoppedByCancel(self.host.run))
        registry = SessionRegistry()
        await self._start(nursery, "registry", registry)
        options: dict[str, Any] = {}
        if config.message_deadline is not None:
            options["message_deadline"] = config.message_deadline
        self.router = TurnRouter(
            deliveries=record.deliveries, registry=registry, host=self.host, env=self.env, layer=self.layer,
            instance=config.instance, container_harness=harness, container_via=via,
            # Beside the shared turn records: every local router's account limits.
            shared_limits=(config.records or config.data_dir / "usage.jsonl").with_name("account-limits.json"),
            remote=self.cluster, **options,
        )
        # Notifications (router.notify): their tables and the record's
        # hook before anything is written, then the outbox's worker.
        await self._start_notifications(nursery, record.deliveries, record.store, settings)
        # The provider's usage limits: parks reloaded, resumed at their resets.
        await self._start(nursery, "parking", StoppedByCancel(self.router.parking.run))
        return registry

    async def _start_api(self, nursery: trio.Nursery, record: Record, target: StoreTarget | None, harness: str) -> None:
        """The board (with a private socket), the worktrees (``router
        serve``), pairing, and the HTTP API on TCP (with ``--port``)."""
        from router.api.server import ApiServer

        config = self.config
        if config.local is not None:
            from router.board.service import Facts, LocalBoard, process_cwd

            facts = Facts(store=record.store, deliveries=record.deliveries, harness=harness, cwd=process_cwd(),
                          cluster=self.cluster, places=self._places())
            self.board = LocalBoard(self.router, env=self.env, facts=facts, hidden=frozenset(config.hidden))
            self.router.on_change = self.board.changed_here  # the live board surveys at once; the cluster is told
            await self._start_worktrees(nursery)
        if config.port is not None:
            self.token = await trio.to_thread.run_sync(_token, config.settings_dir)
            await self._start_reach(nursery, target)
            if self.reach is not None and self.notifications is not None:
                self.notifications.revoked_devices = self.reach.revoked_among
            from router._hypercorn import ConnectionLimits

            self.api = ApiServer(self.router, self.layer, token=self.token, port=config.port,
                                 config=self._api_config(harness), board=self.board, worktrees=self.worktrees,
                                 reach=self.reach, limits=ConnectionLimits(max_connections=config.max_connections))
            self.url = await self._start(nursery, "api", StoppedByCancel(self.api.run))

    async def _start_notifications(self, nursery: trio.Nursery, deliveries: DeliveryLog, store: Store,
                                   settings: SettingsDir) -> None:
        from router.notify.outbox import Notifications

        config = self.config
        owner = await trio.to_thread.run_sync(_owner_id, config.data_dir)
        self.notifications = Notifications(deliveries=deliveries, host_store=store, settings=settings,
                                           settings_dir=config.settings_dir, data_dir=config.data_dir, claimant=owner,
                                           loader_root=config.plugins_root, page_url=self._phone_url)
        await self.notifications.attach()
        self.router.notifications = self.notifications
        await self._start(nursery, "notifications", StoppedByCancel(self.notifications.run))

    def _phone_url(self) -> str | None:
        """The page's address as a phone reaches it (a notification's link),
        or None without --listen or --behind-proxy."""
        if self.reach is None:
            return None
        try:
            return self.reach.pairing_base()
        except errors.Refusal:
            return None

    async def _start_reach(self, nursery: trio.Nursery, target: StoreTarget | None) -> None:
        """Pairing, devices and the certificates, with ``--listen`` or
        ``--behind-proxy`` (:mod:`router.remote`)."""
        if self.config.reach is None or not self.config.reach.enabled:
            return
        from router.remote import DeviceStore, Reach

        devices = None
        try:
            devices = await trio.to_thread.run_sync(DeviceStore.open, target, self.config.data_dir)
            self.reach = Reach(self.config.reach, settings_dir=self.config.settings_dir, devices=devices)
            await trio.to_thread.run_sync(self.reach.prepare_certificates)
        except BaseException as failed:
            if devices is not None:
                devices.close()
            if isinstance(failed, errors.Refusal):
                raise StartFailed(failed.code, failed.message, **failed.data) from None
            raise
        await self._start(nursery, "reach", StoppedByCancel(self.reach.run))

    async def _join_cluster(self, nursery: trio.Nursery, registry: SessionRegistry) -> None:
        """Start this router's node of the cluster, when it is one."""
        cluster = self.cluster
        if cluster is None:
            return
        cluster.host, cluster.router, cluster.registry = self.host, self.router, registry
        await self._start(nursery, "cluster", cluster)

    def _places(self) -> Callable[[], dict[str, Place]]:
        """Every live place ``router new`` made, by session id (what the
        board shows of its project, branch and worktree): the record in
        the data directory every router of the user shares."""
        from router.worktrees import Places

        return Places((self.config.records or self.config.data_dir / "usage.jsonl").parent).live

    async def _start_worktrees(self, nursery: trio.Nursery) -> None:
        """Sessions in git worktrees (``router new``, ``router end``), in
        ``router serve`` only: the places an earlier run made are adopted
        first."""
        if self.config.local != "serve":
            return
        from router.worktrees import Worktrees

        self.worktrees = Worktrees(router=self.router, layer=self.layer, board=self.board, host=self.host,
                                   launcher=None if self.launcher is None else self.launcher.name,
                                   settings_dir=self.config.settings_dir, data_dir=self.config.data_dir, env=self.env)
        await self._start(nursery, "worktrees", StoppedByCancel(self.worktrees.run))

    def _api_config(self, harness: str) -> ApiConfig:
        from router.api.config import ApiConfig

        also = frozenset({"container"}) if self.config.daemon_url is not None else frozenset()
        return ApiConfig(harness=harness, also=also, launcher=None if self.launcher is None else self.launcher.name,
                         max_streams=self.config.max_streams)

    async def _launcher(self, nursery: trio.Nursery) -> tuple[Launcher, DaemonEndpoint | None]:
        """The launcher in force (a :class:`router.host.Launcher`), and the
        host's default endpoint: the in-process daemon's, which this starts
        when that launcher is in force, else None."""
        from router.host import Launcher
        from router.errors import Refusal

        config = self.config
        loaded = await self.layer.load_launcher(config.launcher)
        if isinstance(loaded, Refusal):
            raise StartFailed("launcher-refused", f"the launcher cannot be loaded: {loaded.code}: {loaded.message}")
        module, options = loaded
        options = {**options, "workspace_root": str(config.data_dir / "workspaces"),
                   "settings_dir": str(config.settings_dir), **config.launcher_options}
        if config.image is not None:
            options["image"] = config.image
        # ``labels``: extra labels on everything the launcher creates (the
        # host adds ``router.owner`` and ``router.session`` to them).
        extra = options.pop("labels", None)
        labels = {key: value for key, value in extra.items() if type(key) is str and type(value) is str} \
            if type(extra) is dict else {}
        endpoint, idle = None, config.idle_timeout
        if module.name == IN_PROCESS:
            endpoint, runtime = await self._in_process_daemon(nursery)
            options.update(url=endpoint.url, token=endpoint.token, runtime=runtime)
            idle = None  # one daemon for every session: nothing to stop
        owner = await trio.to_thread.run_sync(_owner_id, config.data_dir)
        from router.worktrees import Places

        places = Places(config.data_dir)

        def worktree(session: str) -> str | None:  # a container session `router new` made: its git worktree
            place = places.all().get(session)
            return place.worktree if place is not None and place.claude_session is None else None

        launcher = Launcher(name=module.name, module=module.module, owner=owner, options=options, labels=labels,
                            idle_timeout=idle, max_failures=config.max_failures, worktree=worktree)
        log.info("launcher %s (owner %s)", module.name, owner)
        return launcher, endpoint

    async def _in_process_daemon(self, nursery: trio.Nursery) -> tuple[DaemonEndpoint, str]:
        """Start the in-process daemon (the echo adapter that reports
        usage, unless the config names another; built on its first
        connection, :class:`InProcessDaemon`): its endpoint and runtime."""
        from router.host import DaemonEndpoint

        token = secrets.token_hex(16)
        runtime = f"in-process-{uuid.uuid4().hex[:12]}"
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        adapter = self.config.adapter

        def build() -> DaemonServer:
            from router.daemon import Daemon, DaemonServer
            from router.daemon.adapters.echo import counting

            return DaemonServer(Daemon(counting if adapter is None else adapter, runtime), token)

        await self._start(nursery, "daemon", InProcessDaemon(build, listeners))
        self.daemon_url = f"ws://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        return DaemonEndpoint(self.daemon_url, token), runtime

    async def _start_local(self, nursery: trio.Nursery, harness: str) -> None:
        from router.api.server import LocalServer

        assert self.config.local is not None
        self.local = LocalServer(self.router, self.layer, env=self.env, command=self.config.local,
                                 data_dir=self.config.data_dir, url=self.url, config=self._api_config(harness),
                                 board=self.board, name=self.config.name, worktrees=self.worktrees, reach=self.reach)
        try:
            self.socket = await self._start(nursery, "local", StoppedByCancel(self.local.run))
        except errors.Refusal as refused:
            raise StartFailed(refused.code, refused.message, **refused.data) from None


async def _ensure_settings(settings_dir: Path) -> SettingsDir:
    """The settings directory, each file written from the safe defaults
    where it is missing (a file that cannot be is logged)."""
    from router.errors import Refusal
    from router.plugins.settings import SettingsDir

    settings = SettingsDir(settings_dir)
    for name in SETTINGS_FILES:
        document = await trio.to_thread.run_sync(settings.ensure, name)
        if isinstance(document, Refusal):
            log.warning("settings: %s", document)
    return settings


async def _open_record(config: JobConfig, opened: list[_Closes]) -> tuple[StoreTarget | None, Record]:
    """The store target ``--store`` names (None: the data directory) and the
    record opened there (appended to ``opened``); :class:`StartFailed` when
    it cannot be."""
    from router.record import open_record
    from router.store import parse_target

    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        target = None if config.store is None else parse_target(config.store)
        record = await trio.to_thread.run_sync(open_record, target, config.data_dir, config.records)
    except errors.Refusal as exc:
        raise StartFailed(exc.code, exc.message) from None
    except OSError as exc:
        raise StartFailed("no-data-dir", f"{config.data_dir} cannot be used: {exc}") from None
    opened.append(record)
    return target, record


def _open_cluster(store: Store, deliveries: DeliveryLog, opened: list[_Closes]) -> ClusterNode | None:
    """This router's node of the cluster (``router.cluster``) when the
    record is PostgreSQL, else None: it drives only the sessions it holds
    a lease for, and every write of the record carries its number."""
    if getattr(store, "dialect", "sqlite") != "postgresql":
        return None
    from router.cluster import open_node

    node = open_node(store, deliveries)
    opened.append(node)
    return node


def _token(settings_dir: Path) -> str:
    from router.board.access import load_or_create_token

    try:
        return load_or_create_token(settings_dir)
    except errors.Refusal as refused:
        raise StartFailed(refused.code, refused.message, **refused.data) from None


#: The session the daemon check dials (ours; a name no session has, so the
#: check replaces nobody's socket).
PROBE_SESSION = "router-daemon-check"


async def _checked_daemon(url: str, token: str) -> tuple[DaemonEndpoint, str]:
    """The daemon's endpoint and its adapter's id, once it passed its check
    (health, token, protocol); ``StartFailed`` (``bad-daemon-url``,
    ``daemon-check-failed``) saying what is wrong otherwise."""
    from router.host import DaemonEndpoint, EndpointError, LinkError, probe

    try:
        endpoint = DaemonEndpoint(url, token)
    except EndpointError as exc:
        raise StartFailed(exc.code, exc.message) from None
    try:
        hello = await probe(endpoint, f"{PROBE_SESSION}-{secrets.token_hex(4)}")
    except LinkError as exc:
        raise StartFailed("daemon-check-failed", f"{exc.code}: {exc.message}", reason=exc.code) from None
    log.info("daemon %s: protocol %s, adapter %s %s", url, hello.protocol, hello.adapter.id, hello.adapter.version)
    return endpoint, hello.adapter.id


def _owner_id(data_dir: Path) -> str:
    """This data directory's router id (``router-id`` in it, made once):
    what the launcher labels its containers and names its workspaces by, so
    a restarted router finds its own, and two data directories never share
    one."""
    path = data_dir / "router-id"
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing.isalnum() and 0 < len(existing) <= 32:
        return existing
    made = secrets.token_hex(6)
    path.write_text(made + "\n")
    return made


def _plugin_log(entry: dict[str, Any]) -> None:
    """The plug-in layer's log: a launch is routine (info), anything else
    it reports (a refused module, a refused launch) is a warning."""
    from wire.json import dumps

    level = logging.INFO if entry.get("event") == "launched" else logging.WARNING
    logging.getLogger("router.plugins").log(level, "%s", dumps(entry))


# --------------------------------------------------------------------------- the command


def _dirs(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Path, Path]:
    from router.dirs import default_data_dir, default_settings_dir

    data = Path(args.data_dir) if args.data_dir else default_data_dir(env)
    settings = Path(args.settings) if args.settings else default_settings_dir(env)
    return data, settings


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help="where the stores live (default $ROUTER_DATA_DIR, else "
                        "$XDG_DATA_HOME/router, else ~/.local/share/router)")
    parser.add_argument("--settings", metavar="DIR", help="the plug-in settings directory (default "
                        "$ROUTER_SETTINGS_DIR, else $XDG_CONFIG_HOME/router, else ~/.config/router)")
    parser.add_argument("--daemon", metavar="URL", help="a container daemon to use (ws://host:port) instead of "
                        "the in-process echo daemon; its token from $ROUTER_DAEMON_TOKEN or --daemon-token-file")
    parser.add_argument("--daemon-token-file", metavar="FILE", help="a 0600 file holding the daemon's token "
                        "(with --daemon; or $ROUTER_DAEMON_TOKEN)")
    parser.add_argument("--daemon-token", metavar="TOKEN", help="the daemon's token; every local user can read a "
                        "command line: prefer $ROUTER_DAEMON_TOKEN or --daemon-token-file")
    # The old spelling, for one release: `router send --token` is the API's token, this one was the daemon's.
    parser.add_argument("--token", dest="deprecated_token", metavar="TOKEN", help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                        help="what goes to stderr (default warning)")


def daemon_token(command: str, args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The daemon's token (``--daemon-token``, ``--daemon-token-file``,
    ``$ROUTER_DAEMON_TOKEN``; the deprecated ``--token`` with a one-line
    warning), or None. Raises :class:`router.errors.Refusal` (exit 2)."""
    from router.tokens import DAEMON_TOKEN_VARIABLE, secret_from

    flag = args.daemon_token
    if getattr(args, "deprecated_token", None):
        print(f"router {command}: --token is deprecated here (it names the API's token elsewhere); use "
              f"${DAEMON_TOKEN_VARIABLE} or --daemon-token-file", file=sys.stderr, flush=True)
        flag = flag or args.deprecated_token
    return secret_from(flag=flag, file=args.daemon_token_file, env=env, variable=DAEMON_TOKEN_VARIABLE,
                       flag_name="--daemon-token", file_name="--daemon-token-file")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8765,
                        help="the API's port on 127.0.0.1 (default 8765; 0 picks a free one)")
    parser.add_argument("--store", metavar="URL", help="where the records live: a SQLite data directory (default: "
                        "the data dir) or postgresql://user@host:port/db, which any number of routers share")
    add_common(parser)
    parser.add_argument("--launcher", metavar="NAME", help="what starts each container session's daemon: "
                        "in-process (one shared echo daemon), process (a `router daemon` per session), docker "
                        "(a container per session); default: plugins.json's launcher, else in-process")
    parser.add_argument("--image", help="the image the docker launcher runs (default: its image option, else "
                        "router:latest, built from the repository's Dockerfile)")
    parser.add_argument("--name", metavar="NAME", help="this router's name on the board, which `router sessions` "
                        "shows and --router takes (default: serve-<6 hex> from the data directory, the same at "
                        "every restart)")
    parser.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT, metavar="SECONDS",
                        help=f"stop a launched daemon idle this long; the next message starts it again "
                        f"(default {IDLE_TIMEOUT:g}; 0: never)")
    # Reach beyond this machine (router.remote, docs/remote.md).
    parser.add_argument("--listen", action="append", default=[], metavar="HOST:PORT",
                        help="also serve the page and API on this address (repeatable), over TLS; phones pair "
                        "with `router pair`")
    parser.add_argument("--tls-cert", metavar="FILE", help="the certificate (PEM, with its chain) the --listen "
                        "addresses serve; default: one signed by the router's own CA")
    parser.add_argument("--tls-key", metavar="FILE", help="the key of --tls-cert")
    parser.add_argument("--behind-proxy", nargs="?", const="", default=None, metavar="URL",
                        help="a local tunnel or reverse proxy terminates TLS (tailscale serve, cloudflared, "
                        "Caddy): trust its forwarded headers from loopback peers; URL: where it serves the "
                        "router (https://…), for pairing links")
    parser.add_argument("--max-streams", type=int, default=32, metavar="N",
                        help="live streams (the page's session and board views) one credential may hold at once "
                        "(default 32)")
    parser.add_argument("--max-connections", type=_at_least_one, default=256, metavar="N",
                        help="connections each API listener serves at once; one more is answered 503 "
                        "too-many-connections (default 256; each is a file descriptor, so `ulimit -n` bounds it)")


def _at_least_one(text: str) -> int:
    """A count flag's value: a whole number, at least 1 (argparse prints
    the refusal and exits 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def job_config(args: argparse.Namespace, env: Mapping[str, str], *, token: str | None = None,
               **extra: Any) -> JobConfig:
    data, settings = _dirs(args, env)
    return JobConfig(data_dir=data, settings_dir=settings, daemon_url=args.daemon, daemon_token=token, **extra)


def setup_logging(level: str, prefix: str) -> None:
    from router._peerlog import guard_handlers

    logging.basicConfig(
        stream=sys.stderr, level=level.upper(), format=f"{prefix}: %(levelname)s %(name)s: %(message)s"
    )
    guard_handlers()  # peers' text cut, repeats rate-limited (router/_peerlog.py)


class BadServeArguments(Exception):
    """A ``router serve`` argument that cannot be used: its sentence is
    printed after ``router serve: ``, and the command exits 2."""


def _checked_arguments(args: argparse.Namespace) -> tuple[str | None, ReachConfig | None]:
    """The daemon's token and the reach configuration ``args`` give, once
    every argument is checked; :class:`BadServeArguments` otherwise."""
    if not 0 <= args.port <= 65535:
        raise BadServeArguments(f"--port {args.port} is not a port (0 to 65535)")
    try:
        token = daemon_token("serve", args, os.environ)
    except errors.Refusal as refused:
        raise BadServeArguments(str(refused)) from None
    if args.daemon is not None and token is None:
        raise BadServeArguments("no-daemon-token: --daemon needs the daemon's token ($ROUTER_DAEMON_TOKEN or "
                                "--daemon-token-file FILE)")
    if args.daemon is not None and args.launcher is not None:
        raise BadServeArguments("give --daemon (one daemon) or --launcher (a daemon per session), not both")
    if args.idle_timeout < 0:
        raise BadServeArguments("--idle-timeout is 0 (never) or a number of seconds")
    if args.max_streams < 1:
        raise BadServeArguments("--max-streams is at least 1")
    try:
        reach = _reach_config(args)
        if args.name is not None:
            from router.board.local import check_name

            check_name(args.name)
    except errors.Refusal as refused:
        raise BadServeArguments(str(refused)) from None
    return token, reach


def run(args: argparse.Namespace) -> int:
    try:
        token, reach = _checked_arguments(args)
    except BadServeArguments as bad:
        print(f"router serve: {bad}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, "router serve")
    config = job_config(args, os.environ, token=token, port=args.port, local="serve", store=args.store,
                        launcher=args.launcher, image=args.image, idle_timeout=args.idle_timeout or None,
                        name=args.name, reach=reach, max_streams=args.max_streams,
                        max_connections=args.max_connections)
    try:
        return trio.run(partial(_serve, config, private=stdout_is_private()))
    except StartFailed as exc:
        print(f"router serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = ", ".join([f"127.0.0.1:{args.port}", *args.listen])
        print(f"router serve: cannot-listen: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2


#: The file beside the ``api-token`` file where ``router serve`` leaves the
#: page's URL with its token, 0600 (ours; docs/cli.md, "Tokens").
PAGE_URL_FILE = "page-url"
#: The exit status after SIGINT: 128 + SIGINT's number, as a shell reports
#: a command it interrupted (docs/cli.md, "Interrupting a command").
INTERRUPTED = 128 + signal.SIGINT


def page_url_path(settings_dir: Path) -> Path:
    """Where ``router serve`` leaves the page's URL with its token."""
    return Path(settings_dir) / PAGE_URL_FILE


def _reach_config(args: argparse.Namespace) -> ReachConfig | None:
    """``--listen``, ``--tls-cert``/``--tls-key``, ``--behind-proxy`` as a
    checked ``router.remote.ReachConfig``, or None when none is given."""
    if not (args.listen or args.tls_cert or args.tls_key or args.behind_proxy is not None):
        return None
    from router.remote import ReachConfig, check_config, parse_listen

    config = ReachConfig(listen=tuple(parse_listen(each) for each in args.listen), tls_cert=args.tls_cert,
                         tls_key=args.tls_key, behind_proxy=args.behind_proxy is not None,
                         public_url=args.behind_proxy or None)
    check_config(config)
    return config


def stdout_is_private() -> bool:
    """Whether no other user can read what goes to stdout: a terminal; a
    pipe or a socket (another user can reach neither: the process at the
    other end, or ``/proc/PID/fd``, which only this user may open); a
    regular file or a named pipe of this user's that grants nothing to group
    or others. ``/dev/null`` and anything else: no."""
    try:
        fd = sys.stdout.fileno()
        info = os.fstat(fd)
    except (OSError, ValueError, AttributeError):
        return False
    if os.isatty(fd):
        return True
    if stat.S_ISSOCK(info.st_mode):
        return True
    if stat.S_ISFIFO(info.st_mode) or stat.S_ISREG(info.st_mode):
        return info.st_uid == os.getuid() and info.st_mode & 0o077 == 0
    return False


async def _serve(config: JobConfig, *, private: bool = False) -> int:
    from router.tokens import write_private

    received: int | None = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        job = MainJob(config)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(job.run)
                page, url_file = job.page_url, page_url_path(config.settings_dir)
                try:
                    await trio.to_thread.run_sync(write_private, url_file, f"{page}\n")
                except OSError as exc:
                    raise StartFailed("cannot-write-url", f"could not write {url_file}: {exc.strerror or exc}") from None
                # The first line (a fixed name, docs/cli.md): the URL with its
                # token only where no one else can read it; a file it is
                # redirected to is as readable as the umask made it.
                print(page if private else f"{job.url}/", flush=True)
                print(
                    f"router serve: listening on {job.url} (data {config.data_dir}, settings {config.settings_dir}, "
                    f"local {job.socket}); the page's URL with its token is in {url_file} (0600)",
                    flush=True,
                )
                if job.reach is not None:
                    for origin in sorted(job.reach.origins() - {job.url, job.url.replace("127.0.0.1", "localhost")}):
                        print(f"router serve: reachable at {origin}; pair a phone with `router pair`", flush=True)
                async for received in signals:
                    log.info("signal %s: stopping", signal.Signals(received).name)
                    break
                await job.aclose()
                await trio.to_thread.run_sync(_remove_if, url_file, f"{page}\n")
        except BaseExceptionGroup as group:
            sole = sole_error(group)
            if isinstance(sole, (StartFailed, OSError)):
                raise sole from None
            raise
    if received == signal.SIGINT:
        print("router serve: interrupted: stopped", file=sys.stderr, flush=True)
        return INTERRUPTED
    return 0


def _remove_if(path: Path, text: str) -> None:
    """Remove ``path`` if it still holds ``text`` (another router on the
    same settings may have written its own since)."""
    try:
        if path.read_text() == text:
            path.unlink()
    except OSError:
        pass
