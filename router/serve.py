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
   with a random token, which the job starts here; ``process`` runs a
   ``router daemon`` per session, ``docker`` a container per session from
   ``--image``. ``--daemon URL`` points the host at one real daemon
   instead, with ``--token`` or ``$ROUTER_DAEMON_TOKEN``, and no launcher;
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

It then prints the page's URL with the token as its first stdout line,
``http://127.0.0.1:PORT/?token=TOKEN`` (a fixed name of DESIGN.md), then
``router serve: listening on <url> (..., local <socket>)``, and serves until SIGINT or SIGTERM, when it stops in the
reverse order: the private socket (its file removed), the API (no new
requests; live streams end), every session (queued deliveries are answered
``session-closed``), the host, the daemon, and last the stores. Exit 0
after a clean stop, 2 when it cannot start (a busy store, a port in use, a
local directory that is not private: ``unsafe-directory``; a token file
that is not private: ``token-file-unsafe``; a ``--daemon`` that fails its
check).

:class:`MainJob` is that assembly as a component (``router mcp`` runs it
too, without the API unless asked).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import sys
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import attrs
import trio

from router import errors
from router._trio import sole_error

__all__ = ["JobConfig", "MainJob", "configure", "run"]

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
    adapter: Any = None
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


class StartFailed(errors.Refusal):
    """The job could not start (a store that cannot open, a data dir that
    cannot be used): the commands print it and exit 2."""


class _Component:
    """One started component: its cancel scope and the event its task sets
    when it is done."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.scope = trio.CancelScope()
        self.done = trio.Event()


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
        self.router: Any = None
        self.host: Any = None
        self.layer: Any = None
        self.api: Any = None
        #: The API's access token, and the board, while it runs.
        self.token: str | None = None
        self.board: Any = None
        self.daemon_url: str | None = None
        #: The private Unix socket's server and path, when it serves one.
        self.local: Any = None
        self.socket: str | None = None
        #: The launcher in force (a ``router.host.Launcher``; None with ``--daemon``).
        self.launcher: Any = None
        #: Sessions in git worktrees (``router.worktrees.Worktrees``; ``router serve`` only).
        self.worktrees: Any = None
        #: This router's part in a cluster (``router.cluster.ClusterNode``)
        #: when the record is PostgreSQL.
        self.cluster: Any = None
        self._stops: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        self._stop = trio.Event()
        self._stopped = trio.Event()

    def __repr__(self) -> str:
        return f"<MainJob {self.config.data_dir} url={self.url!r} components={[name for name, _ in self._stops]}>"

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

    async def _start(self, nursery: trio.Nursery, name: str, run: Callable[..., Awaitable[Any]]) -> Any:
        component = _Component(name)

        async def body(task_status: trio.TaskStatus[Any]) -> None:
            try:
                with component.scope:
                    await run(task_status=task_status)
            finally:
                component.done.set()

        value = await nursery.start(body, name=name)

        async def stop() -> None:
            component.scope.cancel(reason=f"the main job stops {name}")
            await component.done.wait()

        self._stops.append((name, stop))
        return value

    async def run(self, *, task_status: trio.TaskStatus[MainJob] = trio.TASK_STATUS_IGNORED) -> None:
        from router.api.server import ApiServer
        from router.host import Host, HostSettings
        from router.plugins.layer import PluginLayer
        from router.plugins.refusal import Refusal
        from router.plugins.settings import SettingsDir
        from router.plugins.usage import StoreLedger
        from router.store import open_record, parse_target
        from router.turns.registry import SessionRegistry
        from router.turns.router import TurnRouter

        config = self.config
        opened: list[Any] = []
        try:
            # 1. Settings, with the safe defaults where a file is missing.
            settings = SettingsDir(config.settings_dir)
            for name in SETTINGS_FILES:
                document = await trio.to_thread.run_sync(settings.ensure, name)
                if isinstance(document, Refusal):
                    log.warning("settings: %s", document)
            # 2. The stores, then the plug-in layer over them: the host's
            # store is the ledger the ``frames`` usage source reads.
            try:
                config.data_dir.mkdir(parents=True, exist_ok=True)
                target = None if config.store is None else parse_target(config.store)
                record = await trio.to_thread.run_sync(open_record, target, config.data_dir, config.records)
                opened.append(record)
                store, deliveries = record.store, record.deliveries
            except errors.Refusal as exc:
                raise StartFailed(exc.code, exc.message) from None
            except OSError as exc:
                raise StartFailed("no-data-dir", f"{config.data_dir} cannot be used: {exc}") from None
            # With a PostgreSQL record the router is one of a cluster
            # (router.cluster): it drives only the sessions it holds a
            # lease for, and every write of the record carries its number.
            self.cluster = cluster = _open_cluster(store, deliveries, opened)
            self.layer = PluginLayer(
                settings=settings, records=record.records, env=self.env,
                log=_plugin_log, deps={"ledger": StoreLedger(store)}, root=config.plugins_root,
            )
            loaded = await self.layer.reload()
            for refused in loaded.refused:
                log.warning("plug-in refused: %s", refused)

            async with trio.open_nursery() as nursery:
                # 3. The launcher, or one daemon named by URL.
                launcher = None
                if config.daemon_url is None:
                    launcher, endpoint = await self._launcher(nursery)
                    harness, via = ("echo", "in-process") if launcher.name == IN_PROCESS else ("echo", "daemon")
                else:
                    self.daemon_url = config.daemon_url
                    endpoint, adapter = await _checked_daemon(config.daemon_url, config.daemon_token or "")
                    # An echo daemon runs the echo harness, as a launched one
                    # does, so the default routes launch on it with no
                    # settings changed (the cluster recipe); a route to the
                    # `container` module reaches it too.
                    harness, via = ("echo" if adapter == "echo" else "container"), "daemon"
                self.launcher = launcher
                # 4. The host, the registry, the router.
                self.host = Host(store, endpoint, HostSettings(on_container_lost="if-declared"), launcher=launcher,
                                 may_link=getattr(cluster, "holds", None))
                await self._start(nursery, "host", self.host.run)
                registry = SessionRegistry()
                await self._start(nursery, "registry", registry.run)
                self._stops[-1] = ("registry", _then(registry.aclose, self._stops[-1][1]))
                options: dict[str, Any] = {}
                if config.message_deadline is not None:
                    options["message_deadline"] = config.message_deadline
                self.router = TurnRouter(
                    deliveries=deliveries, registry=registry, host=self.host, env=self.env, layer=self.layer,
                    instance=config.instance, container_harness=harness, container_via=via,
                    # Beside the shared turn records: every local router's account limits.
                    shared_limits=(config.records or config.data_dir / "usage.jsonl").with_name("account-limits.json"),
                    remote=cluster, **options,
                )
                # The provider's usage limits: parks reloaded, resumed at their resets.
                await self._start(nursery, "parking", self.router.parking.run)
                await self._join_cluster(nursery, registry)
                for session_id in config.claude_sessions:
                    await self.router.open_claude_code(session_id)
                # 5. The API, behind the token.
                if config.local is not None:
                    from router.board.service import Facts, LocalBoard, process_cwd

                    facts = Facts(store=store, deliveries=deliveries, harness=harness, cwd=process_cwd(), cluster=cluster,
                                  places=self._places())
                    self.board = LocalBoard(self.router, env=self.env, facts=facts, hidden=frozenset(config.hidden))
                    await self._start_worktrees(nursery)
                if config.port is not None:
                    self.token = await trio.to_thread.run_sync(_token, config.settings_dir)
                    self.api = ApiServer(self.router, self.layer, token=self.token, port=config.port,
                                         config=self._api_config(harness), board=self.board, worktrees=self.worktrees)
                    self.url = await self._start(nursery, "api", self.api.run)
                # 6. The private Unix socket: this user's other commands
                # (`router sessions`, `router send`) reach the router there.
                if config.local is not None:
                    await self._start_local(nursery, harness)
                if cluster is not None:
                    cluster.register(api_url=self.url, socket=self.socket, info=getattr(self.board, "info", None))
                task_status.started(self)
                await self._stop.wait()
                for name, stop in reversed(self._stops):
                    log.info("stopping %s", name)
                    await stop()
        finally:
            for each in reversed(opened):
                each.close()
            self._stopped.set()


    async def _join_cluster(self, nursery: trio.Nursery, registry: Any) -> None:
        """Start this router's node of the cluster, when it is one."""
        cluster = self.cluster
        if cluster is None:
            return
        cluster.host, cluster.router, cluster.registry = self.host, self.router, registry
        await self._start(nursery, "cluster", cluster.run)
        self._stops[-1] = ("cluster", _then(cluster.aclose, self._stops[-1][1]))

    def _places(self) -> Callable[[], Any]:
        """Every live place ``router new`` made, by session id (what the
        board shows of its project, branch and worktree): the record in
        the data directory every router of the user shares."""
        from router.worktrees import Places

        return Places((self.config.records or self.config.data_dir / "usage.jsonl").parent).live

    async def _start_worktrees(self, nursery: trio.Nursery) -> None:
        """Sessions in git worktrees (``router new``, ``router end``), in
        ``router serve`` only: the places an earlier run made are adopted
        first."""
        from router.worktrees import Worktrees

        if self.config.local != "serve":
            return

        self.worktrees = Worktrees(router=self.router, layer=self.layer, board=self.board, host=self.host,
                                   launcher=None if self.launcher is None else self.launcher.name,
                                   settings_dir=self.config.settings_dir, data_dir=self.config.data_dir, env=self.env)
        await self._start(nursery, "worktrees", self.worktrees.run)

    def _api_config(self, harness: str) -> Any:
        from router.api.app import ApiConfig

        also = frozenset({"container"}) if self.config.daemon_url is not None else frozenset()
        return ApiConfig(harness=harness, also=also, launcher=None if self.launcher is None else self.launcher.name)

    async def _launcher(self, nursery: trio.Nursery) -> tuple[Any, Any]:
        """The launcher in force (a :class:`router.host.Launcher`), and the
        host's default endpoint: the in-process daemon's, which this starts
        when that launcher is in force, else None."""
        from router.host import DaemonEndpoint, Launcher
        from router.plugins.refusal import Refusal

        config = self.config
        loaded = await self.layer.load_launcher(config.launcher)
        if isinstance(loaded, Refusal):
            raise StartFailed("launcher-refused", f"the launcher cannot be loaded: {loaded.code}: {loaded.message}")
        module, options = loaded
        options = {**options, "workspace_root": str(config.data_dir / "workspaces"), **config.launcher_options}
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

    async def _in_process_daemon(self, nursery: trio.Nursery) -> tuple[Any, str]:
        """Start the in-process daemon (the echo adapter that reports
        usage, unless the config names another): its endpoint and runtime."""
        from router.daemon.adapters.echo import counting as echo_adapter
        from router.daemon import Daemon, DaemonServer
        from router.host import DaemonEndpoint

        token = secrets.token_hex(16)
        runtime = f"in-process-{uuid.uuid4().hex[:12]}"
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        adapter = echo_adapter if self.config.adapter is None else self.config.adapter
        server = DaemonServer(Daemon(adapter, runtime), token)

        async def run_daemon(task_status: trio.TaskStatus[Any]) -> None:
            await server.run(listeners, task_status=task_status)

        await self._start(nursery, "daemon", run_daemon)
        self._stops[-1] = ("daemon", _then(server.aclose, self._stops[-1][1]))
        self.daemon_url = f"ws://127.0.0.1:{server.ports[0]}"
        return DaemonEndpoint(self.daemon_url, token), runtime

    async def _start_local(self, nursery: trio.Nursery, harness: str) -> None:
        from router.board.local import LocalServer

        assert self.config.local is not None
        self.local = LocalServer(self.router, self.layer, env=self.env, command=self.config.local,
                                 data_dir=self.config.data_dir, url=self.url, config=self._api_config(harness),
                                 board=self.board, name=self.config.name, worktrees=self.worktrees)
        try:
            self.socket = await self._start(nursery, "local", self.local.run)
        except errors.Refusal as refused:
            raise StartFailed(refused.code, refused.message, **refused.data) from None


def _open_cluster(store: Any, deliveries: Any, opened: list[Any]) -> Any:
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


async def _checked_daemon(url: str, token: str) -> tuple[Any, str]:
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


def _then(first: Callable[[], Awaitable[None]], second: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A stop that runs ``first`` (a component's own graceful close) and
    then ``second`` (cancel its task and wait for it)."""

    async def both() -> None:
        await first()
        await second()

    return both


# --------------------------------------------------------------------------- the command


def _dirs(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Path, Path]:
    from router.plugins.settings import default_data_dir, default_settings_dir

    data = Path(args.data_dir) if args.data_dir else default_data_dir(env)
    settings = Path(args.settings) if args.settings else default_settings_dir(env)
    return data, settings


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help="where the stores live (default $ROUTER_DATA_DIR, else "
                        "$XDG_DATA_HOME/router, else ~/.local/share/router)")
    parser.add_argument("--settings", metavar="DIR", help="the plug-in settings directory (default "
                        "$ROUTER_SETTINGS_DIR, else $XDG_CONFIG_HOME/router, else ~/.config/router)")
    parser.add_argument("--daemon", metavar="URL", help="a container daemon to use (ws://host:port) instead of "
                        "the in-process echo daemon; its token from --token or $ROUTER_DAEMON_TOKEN")
    parser.add_argument("--token", help="the daemon's token (with --daemon)")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                        help="what goes to stderr (default warning)")


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


def job_config(args: argparse.Namespace, env: Mapping[str, str], **extra: Any) -> JobConfig:
    data, settings = _dirs(args, env)
    token = args.token or env.get("ROUTER_DAEMON_TOKEN")
    return JobConfig(data_dir=data, settings_dir=settings, daemon_url=args.daemon, daemon_token=token, **extra)


def setup_logging(level: str, prefix: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=level.upper(), format=f"{prefix}: %(levelname)s %(name)s: %(message)s"
    )


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        print(f"router serve: --port {args.port} is not a port (0 to 65535)", file=sys.stderr)
        return 2
    if args.daemon is not None and not (args.token or os.environ.get("ROUTER_DAEMON_TOKEN")):
        print("router serve: --daemon needs the daemon's token (--token or $ROUTER_DAEMON_TOKEN)", file=sys.stderr)
        return 2
    if args.daemon is not None and args.launcher is not None:
        print("router serve: give --daemon (one daemon) or --launcher (a daemon per session), not both",
              file=sys.stderr)
        return 2
    if args.idle_timeout < 0:
        print("router serve: --idle-timeout is 0 (never) or a number of seconds", file=sys.stderr)
        return 2
    if args.name is not None:
        from router.board.local import check_name

        try:
            check_name(args.name)
        except errors.Refusal as refused:
            print(f"router serve: {refused}", file=sys.stderr)
            return 2
    setup_logging(args.log_level, "router serve")
    config = job_config(args, os.environ, port=args.port, local="serve", store=args.store, launcher=args.launcher, image=args.image,
                        idle_timeout=args.idle_timeout or None, name=args.name)
    try:
        return trio.run(_serve, config)
    except StartFailed as exc:
        print(f"router serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"router serve: cannot-listen: 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2


async def _serve(config: JobConfig) -> int:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        job = MainJob(config)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(job.run)
                print(job.page_url, flush=True)  # the first line: a fixed name (DESIGN.md)
                print(
                    f"router serve: listening on {job.url} (data {config.data_dir}, settings {config.settings_dir}, "
                    f"local {job.socket})",
                    flush=True,
                )
                async for received in signals:
                    log.info("signal %s: stopping", signal.Signals(received).name)
                    break
                await job.aclose()
        except BaseExceptionGroup as group:
            sole = sole_error(group)
            if isinstance(sole, (StartFailed, OSError)):
                raise sole from None
            raise
    return 0
