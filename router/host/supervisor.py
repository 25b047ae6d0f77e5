"""A launched session's daemon on Trio: the thin layer over
:class:`~router.host.lifecycle.LifecycleCore`.

A :class:`Supervisor` runs as one task in the host's nursery for each
session whose daemon a launcher starts (:class:`Launcher`: a launcher
plug-in module, its options, and what the host adds to every call). It
owns a nursery holding one watch task per running daemon (the launcher's
``wait``). Its own task takes inputs one at a time (a demand, a settle to
check for idleness, a loss a watch reported) and does what the core
answers, in order: starts (each under ``start_timeout``, a ``fail_after``),
stops (each under ``stop_timeout``, shielded, so a stop that began is not
cut off by the host stopping), records and notices. The idle stop is the
deadline of the cancel scope the task waits for its next input in: the
core's :attr:`~router.host.lifecycle.LifecycleCore.idle_deadline`.

The session's link asks :meth:`Supervisor.endpoint` before each dial; it
waits until a daemon runs. So a session whose daemon is starting, or
unreachable, holds only its own link: every other session's supervisor,
link and daemon go on (one dead daemon never delays another).

Resource handling: when the task is cancelled (the host stops) it stops
its daemon, shielded, within ``stop_timeout``; every watch task ends with
its nursery.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import math
import re
import secrets
import uuid
from typing import Any, Callable, Final, Mapping, Protocol

import attrs
import trio

from router._transient import StoreUnavailable
from router.errors import refusal_of
from router.store.db import is_store_failure
from router.host.lifecycle import (
    DaemonInfo,
    Effect,
    FailOpen,
    LifecycleCore,
    LifecycleStatistics,
    MAX_FAILURES,
    Publish,
    RedialLink,
    Start,
    StopContainer,
    Watch,
)
from router.host.link import DaemonEndpoint, EndpointError, LinkError, check_health
from router.host.store import OPEN_STATUSES, DaemonRecord, Store

log = logging.getLogger(__name__)
#: Seconds between reads of the record while the store is away: the first
#: pause and the longest (the store's own retries came before).
STORE_PAUSE: Final = (0.5, 10.0)

__all__ = ["SupervisorStatistics", "Launcher", "Supervisor", "SupervisorOwner", "workspace_name"]

#: Seconds a start may take (ours: a container is healthy in under a
#: second here; a cold image on a loaded machine, or a remote Docker host,
#: can take far longer; the module's own health wait is inside it).
START_TIMEOUT: Final = 120.0
#: Seconds a stop may take (ours: ``docker stop`` gives 10 s before SIGKILL).
STOP_TIMEOUT: Final = 30.0
#: The harness a session runs when its record names none.
DEFAULT_HARNESS: Final = "echo"


def workspace_name(owner: str, session: str) -> str:
    """A per-session name that Docker accepts for a volume
    (``[a-zA-Z0-9][a-zA-Z0-9_.-]*``) and that no two sessions share: the
    session id's safe characters and a digest of the whole id."""
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", session)[:40]
    digest = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"router-ws-{owner}-{safe}-{digest}"


@attrs.frozen(kw_only=True)
class Launcher:
    """A launcher module (``start``, ``wait``, ``inspect``, ``stop``,
    ``remove_workspace``, each ``async``, each taking a context dict: the
    ``launcher`` plug-in kind) and what the host adds to every call.

    ``owner`` names this router in every label (``router.owner``) and
    workspace; ``workspace(session)`` is the session's workspace (a Docker
    volume name, or a directory), default :func:`workspace_name`."""

    name: str
    module: Any = attrs.field(repr=False)
    owner: str
    options: Mapping[str, Any] = attrs.field(factory=dict)
    env: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    labels: Mapping[str, str] = attrs.field(factory=dict)
    workspace: Callable[[str], str] | None = attrs.field(default=None, repr=False)
    #: The session's git worktree, when ``router new`` made one
    #: (``router.worktrees``): the context's ``worktree``, which a launcher
    #: mounts at ``/workspace`` (docker) or runs the daemon in (process).
    worktree: Callable[[str], str | None] | None = attrs.field(default=None, repr=False)
    default_harness: str = DEFAULT_HARNESS
    idle_timeout: float | None = None
    max_failures: int = MAX_FAILURES
    start_timeout: float = START_TIMEOUT
    stop_timeout: float = STOP_TIMEOUT
    #: Pause after a failed start, doubling (the core's defaults when None).
    retry_base: float | None = None

    def context(self, session: str, *, harness: str, runtime: str = "", token: str = "") -> dict[str, Any]:
        """The context every module call takes (docs/plugins.md)."""
        workspace = self.workspace(session) if self.workspace is not None else workspace_name(self.owner, session)
        worktree = self.worktree(session) if self.worktree is not None else None
        return {
            **({"worktree": worktree} if worktree else {}),
            "session": session,
            "runtime": runtime,
            "token": token,
            "harness": harness,
            "env": dict(self.env),
            "labels": {**self.labels, "router.owner": self.owner, "router.session": session},
            "options": dict(self.options),
            "workspace": workspace,
        }

    def core(self) -> LifecycleCore:
        extra = {} if self.retry_base is None else {"retry_base": self.retry_base}
        return LifecycleCore(idle_timeout=self.idle_timeout, max_failures=self.max_failures, **extra)


class SupervisorOwner(Protocol):
    """What a :class:`Supervisor` needs from the host."""

    def published(self, session: str, change: Publish) -> None:
        """The daemon's state changed (recorded already): tell watchers."""

    def redial(self, session: str) -> None:
        """Have the session's link drop its connection and dial again."""

    async def fail_open(self, session: str, code: str, message: str) -> None:
        """Settle the session's open operations ``unanswered``/``code``."""


def describe_exit(outcome: object) -> str:
    """A sentence for what ``wait`` answered."""
    if type(outcome) is not dict:
        return "the launcher's wait answered something that is not an outcome"
    reason, state = outcome.get("reason"), outcome.get("state")
    if type(reason) is str and reason:
        return f"{state}: {reason}" if type(state) is str and state not in reason else reason
    return str(state or "stopped")


@attrs.frozen
class SupervisorStatistics:
    """What a :class:`Supervisor` is doing: its lifecycle's figures, the
    launcher's name and the daemons watched."""

    lifecycle: LifecycleStatistics
    launcher: str
    watches: int


class Supervisor:
    """One launched session's daemon; see the module docstring."""

    def __init__(self, session: str, *, launcher: Launcher, store: Store, owner: SupervisorOwner) -> None:
        self.session = session
        self.launcher = launcher
        self.store = store
        self.owner = owner
        self.core = launcher.core()
        self.harness = launcher.default_harness
        self._send, self._receive = trio.open_memory_channel[tuple](math.inf)
        self._changed = trio.Event()
        self._watches: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._done = trio.Event()
        #: Checks sent and not yet taken: only the last of a run reads the record.
        self._checks = 0

    def __repr__(self) -> str:
        return f"<Supervisor {self.session!r} {self.launcher.name} {self.core!r}>"

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(lifecycle=self.core.statistics(), launcher=self.launcher.name,
                                    watches=len(self._watches))
    # ------------------------------------------------------------------ inputs (from the host)

    def demand(self) -> None:
        """The session has work (a submit): start its daemon if none runs."""
        self._send.send_nowait(("demand",))

    def check_idle(self) -> None:
        """An operation of the session settled: it may be idle now."""
        self._checks += 1
        self._send.send_nowait(("check",))

    async def aclose(self) -> None:
        """Stop supervising: the daemon is stopped (as when the host
        closes) and this returns once :meth:`run` has."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason="the session ended")
            await self._done.wait()

    async def endpoint(self) -> DaemonEndpoint:
        """The running daemon's endpoint; waits until one runs."""
        while self.core.daemon is None:
            await self._changed.wait()
        daemon = self.core.daemon
        return DaemonEndpoint(daemon.url, daemon.token)

    # ------------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED) -> None:
        record = await self._read(self.store.sessions.require, self.session)
        self.harness = record.daemon.harness or self.launcher.default_harness
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                left = record.daemon
                if left.container is not None and left.launcher == self.launcher.name:
                    # An earlier run of this router left it (it was killed):
                    # still running and healthy, it is taken over; else it
                    # goes, and a new daemon starts from the record.
                    if not await self._adopt(left):
                        await self._stop(left.container, "left by an earlier run of the router",
                                         runtime=left.runtime or "")
                if await self._open_work():
                    await self._do(self.core.demand())
                await self._loop()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                for effect in self.core.close():
                    if type(effect) is StopContainer:
                        await self._stop(effect.container, effect.why)
                await self._record(Publish(self.core.state, self.core.reason, None))
            self._signal()
            self._done.set()

    async def _loop(self) -> None:
        while True:
            with trio.CancelScope(deadline=self.core.idle_deadline) as waiting:
                step = await self._receive.receive()
            if waiting.cancelled_caught:
                await self._do(self.core.idle_expired(trio.current_time()))
                continue
            kind = step[0]
            if kind == "demand":
                # Only while its work is still open: a demand queued behind
                # failed starts whose work was settled since is spent. While
                # a daemon runs or starts a demand only marks the session
                # wanted (no start), and the settle's check that follows it
                # reads the record: no read here.
                if self.core.state == "running" or self.core.starting or await self._open_work():
                    await self._do(self.core.demand())
            elif kind == "check":
                self._checks -= 1
                if self._checks > 0:
                    continue  # a later check reads the record and decides (it sees at least as much)
                if not await self._open_work():
                    await self._do(self.core.work_done(trio.current_time()))
            elif kind == "lost":
                log.warning("session %r: its daemon %s was lost: %s", self.session, step[1], step[2])
                await self._do(self.core.lost(step[1], step[2]))

    async def _adopt(self, left: DaemonRecord) -> bool:
        """Take over the daemon an earlier run recorded, if it still runs
        and answers its health check (each step bounded); whether it did."""
        if left.state != "running" or None in (left.url, left.token, left.runtime, left.container):
            return False
        assert left.url is not None and left.token is not None and left.runtime is not None
        assert left.container is not None
        context = self.launcher.context(self.session, harness=self.harness)
        try:
            endpoint = DaemonEndpoint(left.url, left.token)
            with trio.fail_after(self.launcher.stop_timeout):
                found = await self.launcher.module.inspect(context, left.container)
                if type(found) is not dict or found.get("state") != "running":
                    return False
                await check_health(endpoint)
        except (trio.TooSlowError, EndpointError, LinkError):
            return False
        except Exception:
            log.exception("session %r: inspecting %s failed", self.session, left.container)
            return False
        daemon = DaemonInfo(url=left.url, token=left.token, runtime=left.runtime, container=left.container)
        log.info("session %r: adopted daemon %s at %s", self.session, left.container, left.url)
        await self._do(self.core.adopted(daemon, trio.current_time()))
        return True

    async def _open_work(self) -> bool:
        store = self.store
        records = await self._read(
            lambda: store.operations.all(session=self.session, statuses=OPEN_STATUSES)
        )
        return bool(records)

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A read of the record the supervisor cannot go on without: while
        the store is away past its retry budget (``store-unavailable``) it
        waits and reads again, never raising out of the supervisor (where
        it ended ``router serve``: docs/reliability.md)."""
        pause = STORE_PAUSE[0]
        while True:
            try:
                return await self.store.call(fn, *args)
            except StoreUnavailable as exc:
                log.warning("session %r: the launcher waits for the store: %s", self.session, exc.message)
                await trio.sleep(pause)  # a pause before reading again, not a condition
                pause = min(pause * 2, STORE_PAUSE[1])

    # ------------------------------------------------------------------ effects

    async def _do(self, effects: list[Effect]) -> None:
        queue = collections.deque(effects)
        while queue:
            effect = queue.popleft()
            kind = type(effect)
            if kind is Start:
                if effect.delay > 0:
                    await trio.sleep(effect.delay)
                queue.extend(await self._start())
            elif kind is Watch:
                assert self._nursery is not None
                self._nursery.start_soon(self._watch, effect.container, name=f"watch {effect.container}")
            elif kind is StopContainer:
                await self._stop(effect.container, effect.why)
            elif kind is RedialLink:
                self.owner.redial(self.session)
            elif kind is Publish:
                await self._record(effect)
                self.owner.published(self.session, effect)
            elif kind is FailOpen:
                await self.owner.fail_open(self.session, effect.refusal.code, effect.refusal.message)
            self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _record(self, change: Publish) -> None:
        daemon = change.daemon
        fields: dict[str, str | None] = {"state": change.state, "reason": change.reason,
                                         "launcher": self.launcher.name, "harness": self.harness}
        if daemon is not None:
            fields.update(url=daemon.url, token=daemon.token, runtime=daemon.runtime, container=daemon.container)
        elif change.state != "running":
            fields.update(url=None, token=None, container=None)
        try:
            await self.store.call(lambda: self.store.sessions.set_daemon(self.session, **fields))
        except Exception as error:
            if not is_store_failure(error):
                raise
            # The record refused the write (in a cluster: this router no
            # longer holds the session's lease, e.g. while it stops; or the
            # store failed). The daemon's state is the holder's to record;
            # the supervisor goes on, and the link sees the same failure.
            log.warning("session %r: the daemon's state %s was not recorded: %s", self.session, change.state, error)

    async def _start(self) -> list[Effect]:
        launcher = self.launcher
        runtime, token = f"r-{uuid.uuid4().hex}", secrets.token_hex(16)
        context = launcher.context(self.session, harness=self.harness, runtime=runtime, token=token)
        try:
            with trio.fail_after(launcher.start_timeout):
                answer = await launcher.module.start(context)
        except trio.TooSlowError:
            return self.core.start_failed(
                "start-timeout", f"the {launcher.name} launcher did not start the daemon within "
                f"{launcher.start_timeout:g} s")
        except Exception as exc:
            log.exception("session %r: the %s launcher's start failed", self.session, launcher.name)
            return self.core.start_failed("start-crashed", f"the {launcher.name} launcher failed: {exc!r:.300}")
        refused = refusal_of(answer)  # the plug-in protocol's {"code", "message"}
        if refused is not None:
            log.warning("session %r: the %s launcher refused: %s", self.session, launcher.name, refused)
            return self.core.start_failed(refused.code, refused.message)
        daemon = self._daemon_of(answer, runtime, token)
        if isinstance(daemon, str):
            return self.core.start_failed("malformed-answer", daemon)
        log.info("session %r: daemon %s started at %s (runtime %s)", self.session, daemon.container, daemon.url,
                 daemon.runtime)
        return self.core.started(daemon, trio.current_time())

    def _daemon_of(self, answer: object, runtime: str, token: str) -> DaemonInfo | str:
        """The daemon a start answered, or why the answer is not one."""
        if type(answer) is not dict or type(answer.get("url")) is not str:
            return f"the {self.launcher.name} launcher's start answered {str(answer)[:200]}, not {{url, container}}"
        try:
            DaemonEndpoint(answer["url"], token)
        except EndpointError as exc:
            return exc.message

        def text(key: str, default: str) -> str:
            value = answer.get(key)  # type: ignore[union-attr]
            return value if type(value) is str and value else default

        return DaemonInfo(url=answer["url"], token=text("token", token), runtime=text("runtime", runtime),
                          container=text("container", runtime))

    async def _watch(self, container: str) -> None:
        context = self.launcher.context(self.session, harness=self.harness)
        with trio.CancelScope() as scope:
            self._watches[container] = scope
            try:
                outcome: object = await self.launcher.module.wait(context, container)
            except Exception as exc:
                log.exception("session %r: the %s launcher's wait failed", self.session, self.launcher.name)
                outcome = {"state": "missing", "reason": f"the launcher's wait failed: {exc!r:.300}"}
            finally:
                self._watches.pop(container, None)
        if not scope.cancelled_caught:
            self._send.send_nowait(("lost", container, describe_exit(outcome)))

    async def _stop(self, container: str, why: str, *, runtime: str = "") -> None:
        """Stop ``container`` and log what the launcher did (stopped it, or
        found nothing to stop), never only the intention. ``runtime`` is the
        record's runtime id of a daemon an earlier run left (a launcher
        checks it names that daemon before it stops it)."""
        watch = self._watches.pop(container, None)
        if watch is not None:
            watch.cancel()
        context = self.launcher.context(self.session, harness=self.harness, runtime=runtime)
        answer: object = None
        with trio.CancelScope(shield=True), trio.move_on_after(self.launcher.stop_timeout) as scope:
            try:
                answer = await self.launcher.module.stop(context, container)
            except Exception:
                log.exception("session %r: the %s launcher's stop of %s failed", self.session,
                              self.launcher.name, container)
                return
        said = answer if type(answer) is dict else {}
        if said.get("state") == "missing":
            log.info("session %r: daemon %s (%s) was not running: %s", self.session, container, why,
                     said.get("reason") or "the launcher found nothing to stop")
        elif not scope.cancelled_caught:
            log.info("session %r: stopped daemon %s (%s)%s", self.session, container, why,
                     f": {said['reason']}" if type(said.get("reason")) is str else "")
        if scope.cancelled_caught:
            log.warning("session %r: stopping %s took over %g s; left to the launcher", self.session, container,
                        self.launcher.stop_timeout)
