"""The host: durable container sessions over the daemon WebSocket.

The host is what the reference calls the object (``ContainerHarness`` in npm
``agents@0.32.0``): it owns the durable record (:mod:`router.host.store`)
and drives a disposable daemon. It survives the loss of the socket, of the
daemon, and of itself, and never loses or doubles an operation, a transcript
message or a persisted entry.

Usage (Trio idiom: the host is a component with ``run``)::

    store = Store("host.db")
    host = Host(store, DaemonEndpoint("ws://127.0.0.1:8080", token))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        session = host.session("root")
        result, messages = await session.prompt("hello")
        await host.aclose()
    store.close()  # after the host: no link may still use it

Layout: :class:`Host` (the component: the store, the default daemon
endpoint, the settings, one :class:`~router.host.session_link.SessionLink`
per session with work, and with a launcher one
:class:`~router.host.supervisor.Supervisor` per session),
:class:`HostSession` (the per-session API, a cheap handle), and
:class:`HostSessions` (create / fork / list).

**Many daemons.** Each link dials its own session's endpoint, asked before
every dial: with a launcher, the one its supervisor started (it waits
until one runs, and a submit is what starts it); without one, the
session's own endpoint in the record (``sessions.create(id,
endpoint=...)``) or else the host's default. Each link reconnects on its
own, so one session's dead daemon never delays another's. The rules live in the sans-IO
core (:mod:`router.host.reconcile`); the sockets in
:mod:`router.host.session_link` and :mod:`router.host.link`.

Every API call writes to the store first (in the store's worker thread, so
the loop never waits on the disk) and then asks the session's link to act; a
call that returns has its effect on disk. A refusal is :class:`Refused` (a
:class:`router.errors.Refusal`: a kebab-case code and a message).
"""

from __future__ import annotations

import functools
import logging
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Final, Literal, Sequence

import attrs
import trio

from router._fanout import FanOutSubscription
from router.errors import refusal_of
from router.host.events import DaemonChanged, HostEvent
from router.host.link import Backoff, DaemonEndpoint, EndpointError, LinkError, LinkUnreachable
from router.host.settings import HostSettings
from router.host.store import OPEN_STATUSES, Refused, SessionRecord, Store
from router.host.supervisor import Launcher, Supervisor, SupervisorStatistics
from wire.json import JsonValue

if TYPE_CHECKING:
    from router.host.lifecycle import Publish
    from router.host.reconcile import OperationResult
    from router.host.session_link import SessionLink, SessionLinkStatistics

# The session links (router.host.session_link: the WebSocket, the container
# wire and its converter, the reconcile core) are imported where a session is
# first driven, not with the host: a router that drives no container session
# (a Claude Code session's ``router mcp``) never loads them.

log = logging.getLogger(__name__)

#: Seconds between two looks at the record while waiting on an operation
#: another router of the cluster drives (ours).
REMOTE_WAIT_POLL: Final = 0.5

#: The session a host always has (the reference's ``ROOT_SESSION``).
ROOT_SESSION: Final = "root"
#: The daemon state of a session :meth:`Host.end_session` ended.
ENDED: Final = "ended"

__all__ = ["HostStatistics", 
    "DaemonEndpoint",
    "EventStream",
    "Host",
    "HostSession",
    "HostSessions",
    "HostSettings",
    "LinkError",
    "ROOT_SESSION",
    "Receipt",
    "Refused",
]


@attrs.frozen(kw_only=True)
class Receipt:
    """What ``submit`` returns: the operation, and whether this call
    created it (False: the key was known, nothing new was stored)."""

    operation_id: str
    session: str
    accepted: bool


class _Wait:
    """The event a settle sets, and how many waits hold it."""

    __slots__ = ("event", "waiters")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.waiters = 0


def _input_json(input: Any) -> JsonValue:
    """The wire JSON of a prompt input, or :class:`Refused`."""
    from wire.container import ContainerInput, converter, structure_or_none

    if type(input) is str:
        return input
    if isinstance(input, tuple):  # typed parts
        try:
            return converter.unstructure(input, ContainerInput)
        except Exception:
            pass
    elif structure_or_none(input, ContainerInput) is not None:
        return input
    raise Refused(
        "bad-input",
        "a prompt is a string or a list of {type: 'text', text} / "
        "{type: 'image', mediaType, data} parts",
    )


@attrs.frozen
class HostStatistics:
    """What a :class:`Host` holds: each session's link and daemon supervisor,
    by session id, and the waits open."""

    links: dict[str, SessionLinkStatistics]
    daemons: dict[str, SupervisorStatistics]
    waits: int


class Host:
    """The host component. See the module docstring.

    Resource handling: :meth:`run` owns a nursery holding every session's
    link; :meth:`close` (or cancelling ``run``) closes them all, ends every
    event stream and wakes every ``wait`` (which then raises
    ``host-not-running``); :meth:`aclose` does the same and returns once
    ``run`` has. The store is the caller's: the host neither opens nor
    closes it, and it must outlive the host (close it after ``aclose``).
    """

    def __init__(
        self,
        store: Store,
        endpoint: DaemonEndpoint | None,
        settings: HostSettings | None = None,
        *,
        launcher: Launcher | None = None,
        may_link: Callable[[str], bool] | None = None,
    ) -> None:
        self.store = store
        #: Whether this host may drive a session now (a cluster's lease,
        #: ``router.cluster``); None: every session. A session it may not
        #: drive gets no link and no launched daemon: its calls that need
        #: one are refused ``not-holder``, and its record is the holder's
        #: to write.
        self.may_link = may_link
        #: The endpoint of sessions whose record names none (None: every
        #: session names its own, or a launcher starts it).
        self.endpoint = endpoint
        self.settings = settings or HostSettings()
        #: Starts each session's daemon (None: sessions dial their endpoints).
        self.launcher = launcher
        self.sessions = HostSessions(self)
        #: Keeps the session list between reads (a cluster's
        #: ``ClusterNode.kept_list``: re-reads only the sessions its
        #: notifications name); None: every list reads every session.
        self.kept_list: Callable[..., Any] | None = None
        self._owner = _LinkOwner(self)
        self._links: dict[str, SessionLink] = {}
        self._supervisors: dict[str, Supervisor] = {}
        self._nursery: trio.Nursery | None = None
        #: Set when ``run`` has returned (every link and its store calls done).
        self._stopped = trio.Event()
        #: ``(session, operation)`` → the event its settle sets (popped then).
        self._waits: dict[tuple[str, str], _Wait] = {}

    def __repr__(self) -> str:
        state = "running" if self._nursery is not None else "stopped"
        where = self.launcher.name if self.launcher is not None else None if self.endpoint is None else self.endpoint.url
        return f"<Host {where} {state} links={len(self._links)} waits={len(self._waits)}>"

    def statistics(self) -> HostStatistics:
        return HostStatistics(
            links={session: link.statistics() for session, link in self._links.items()},
            daemons={session: sup.statistics() for session, sup in self._supervisors.items()},
            waits=len(self._waits),
        )
    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: trio.TaskStatus[Host] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`close` or cancellation; ``started`` once the
        root session exists and sessions with open work are reattaching."""
        if self._nursery is not None:
            raise RuntimeError("this host is already running")
        await self.store.call(
            functools.partial(self.store.sessions.create, ROOT_SESSION, settings=self.settings.defaults)
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.launcher is not None:
                    # Daemons an earlier run left are adopted or stopped now,
                    # not when their session is next used.
                    for record in await self.store.call(self.store.sessions.all):
                        if (record.daemon.container is not None and record.daemon.launcher == self.launcher.name
                                and (self.may_link is None or self.may_link(record.id))):
                            self.supervisor(record.id)
                if self.settings.wake_open:
                    for session in await self.store.call(self.store.operations.open_sessions):
                        if self.may_link is None or self.may_link(session):
                            self._ensure_link(session)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._links.clear()
            self._supervisors.clear()
            waits, self._waits = self._waits, {}
            for entry in waits.values():
                entry.event.set()
            self._stopped.set()

    def close(self) -> None:
        """Stop the host: every link closes; ``run`` returns."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason="the host was closed")

    async def aclose(self) -> None:
        """:meth:`close`, then wait until ``run`` has returned, so no link
        is still using the store. Returns at once for a host not running."""
        running = self._nursery is not None
        self.close()
        if running:
            await self._stopped.wait()

    def session(self, id: str = ROOT_SESSION) -> HostSession:
        """A handle on one session. No I/O until you call it."""
        return HostSession(self, id)

    async def close_session(self, id: str) -> None:
        """Close a session's link (its event streams end). Its record stays;
        the next call that needs the daemon opens a new link."""
        link = self._links.get(id)
        if link is not None:
            link.stop()
            await link.wait_closed()

    async def end_session(self, id: str, *, reason: str = "ended") -> None:
        """End a session for good: its open operations settle
        ``unanswered``/``aborted``, its link closes, its launched daemon
        stops and its workspace is removed (the launcher's
        ``remove_workspace``), and its record is marked ``ended`` (the
        daemon state), which keeps its transcript readable and keeps it
        off the listings. Raises :class:`Refused` (``workspace-in-use`` and
        the like) when the launcher cannot remove the workspace."""
        store = self.store
        await store.call(store.sessions.require, id)
        await self.session(id).abort()
        await self.close_session(id)
        supervisor = self._supervisors.pop(id, None)
        if supervisor is not None:
            await supervisor.aclose()
        if self.launcher is not None:
            record = await store.call(store.sessions.require, id)
            context = self.launcher.context(id, harness=record.daemon.harness or self.launcher.default_harness)
            remove = getattr(self.launcher.module, "remove_workspace", None)
            answer = await remove(context) if remove is not None else None
            refusal = refusal_of(answer)
            if refusal is not None:
                raise Refused(refusal.code, refusal.message)
            if answer is not None:
                raise Refused("malformed-answer", f"the {self.launcher.name} launcher's remove_workspace answered "
                              f"{str(answer)[:200]}, not null or {{code, message}}")
        await store.call(lambda: store.sessions.set_daemon(id, state=ENDED, reason=reason, url=None, token=None,
                                                           container=None))

    async def ended(self, id: str) -> bool:
        """Whether session ``id`` was ended (:meth:`end_session`)."""
        record = await self.store.call(self.store.sessions.get, id)
        return record is not None and record.daemon.state == ENDED

    # ------------------------------------------------------------------ links

    def _require_running(self) -> trio.Nursery:
        if self._nursery is None:
            raise Refused("host-not-running", "the host is not running; start it with nursery.start(host.run)")
        return self._nursery

    def _ensure_link(self, session: str, *, restart_failed: bool = True) -> SessionLink:
        nursery = self._require_running()
        link = self._links.get(session)
        if link is not None and (link.failure is None or not restart_failed):
            return link
        if self.may_link is not None and not self.may_link(session):
            raise Refused("not-holder", f"another router of the cluster drives session {session!r}; "
                          "ask it (the board names it)", session=session)
        from router.host.session_link import SessionLink

        link = SessionLink(
            self._owner, session, store=self.store, endpoint=self.endpoint, settings=self.settings,
            endpoint_of=functools.partial(self._endpoint_of, session),
        )
        self._links[session] = link
        nursery.start_soon(link.run, name=f"session {session!r}")
        return link

    def supervisor(self, session: str) -> Supervisor | None:
        """The session's daemon supervisor (with a launcher), started on
        first use; None without a launcher."""
        if self.launcher is None:
            return None
        supervisor = self._supervisors.get(session)
        if supervisor is None:
            nursery = self._require_running()
            supervisor = Supervisor(session, launcher=self.launcher, store=self.store, owner=self._owner)
            self._supervisors[session] = supervisor
            nursery.start_soon(supervisor.run, name=f"session {session!r} daemon")
        return supervisor

    async def _endpoint_of(self, session: str) -> DaemonEndpoint:
        """Where the session's link dials now (see the module docstring)."""
        supervisor = self.supervisor(session)
        if supervisor is not None:
            return await supervisor.endpoint()
        record = await self.store.call(self.store.sessions.require, session)
        daemon = record.daemon
        if daemon.url is not None:
            try:
                return DaemonEndpoint(daemon.url, daemon.token or "")
            except EndpointError as exc:
                raise LinkUnreachable(exc.code, f"session {session!r}: {exc.message}") from None
        if self.endpoint is None:
            raise LinkUnreachable("no-endpoint", f"session {session!r} names no daemon, and this host has none")
        return self.endpoint

    async def _fail_open(self, session: str, code: str) -> None:
        """Settle every open operation of ``session`` ``unanswered`` with
        ``code`` (its daemon cannot be started), and wake their waiters."""
        from router.host.reconcile import end_event

        results, _ = await self.store.transact(
            functools.partial(_settle_open, session=session, operation_id=None,
                              outcome={"status": "unanswered", "reason": code})
        )
        self._notify(session, results, [end_event(result) for result in results])

    def _wake_session(self, session: str) -> None:
        """Wake every wait on ``session``, to look again."""
        for key in [key for key in self._waits if key[0] == session]:
            self._waits.pop(key).event.set()

    def _settled(self, session: str, results: Sequence[OperationResult]) -> None:
        """Settles committed: wake their waiters, and let the session's
        supervisor look for idleness. (Events go with the link's own batch.)"""
        for result in results:
            entry = self._waits.pop((session, result.operation_id), None)
            if entry is not None:
                entry.event.set()
        supervisor = self._supervisors.get(session)
        if results and supervisor is not None:
            supervisor.check_idle()

    def _notify(self, session: str, results: list[OperationResult], events: list[HostEvent]) -> None:
        """Settles and events committed by the API (not by a link)."""
        self._settled(session, results)
        link = self._links.get(session)
        if link is not None:
            link.emit(events)


def _settle_open(
    store: Store, *, session: str, operation_id: str | None, outcome: dict
) -> tuple[list[OperationResult], list[str]]:
    """In one transaction: settle one open operation (or, with no id, every
    open one) of ``session`` with ``outcome``. Returns the results and the
    ids of those a daemon had been handed."""
    from router.host.reconcile import OperationResult

    if operation_id is None:
        targets = store.operations.all(session=session, statuses=OPEN_STATUSES)
    else:
        one = store.operations.get(session, operation_id)
        targets = [one] if one is not None and not one.settled else []
    results, delivered = [], []
    for target in targets:
        if store.operations.settle(session, target.id, outcome):
            if target.delivered is not None:
                delivered.append(target.id)
            record = store.operations.get(session, target.id)
            result = OperationResult.of(record) if record is not None else None
            if result is not None:
                results.append(result)
    return results, delivered


class _LinkOwner:
    """What the host is to its session links: the
    :class:`~router.host.session_link.LinkOwner` protocol, kept off the
    host's own API."""

    __slots__ = ("host",)

    def __init__(self, host: Host) -> None:
        self.host = host

    def backoff(self) -> Backoff:
        settings = self.host.settings
        return Backoff(base=settings.reconnect_base, cap=settings.reconnect_cap)

    def settled(self, session: str, results: Sequence[OperationResult]) -> None:
        self.host._settled(session, results)

    def failed(self, link: SessionLink) -> None:
        self.host._wake_session(link.session)

    def published(self, session: str, change: Publish) -> None:
        link = self.host._links.get(session)
        if link is not None:
            daemon = change.daemon
            link.emit([DaemonChanged(
                state=change.state, reason=change.reason, container=None if daemon is None else daemon.container,
                runtime_id=None if daemon is None else daemon.runtime,
            )])

    def redial(self, session: str) -> None:
        link = self.host._links.get(session)
        if link is not None:
            link.reconnect()

    async def fail_open(self, session: str, code: str, message: str) -> None:
        log.warning("session %r: its daemon cannot be started; its open operations settle %s: %s",
                    session, code, message)
        await self.host._fail_open(session, code)

    def ended(self, link: SessionLink) -> None:
        host = self.host
        # A failed link stays, so ``wait`` can report why; a closed one goes.
        if link.failure is None and host._links.get(link.session) is link:
            del host._links[link.session]
        # After ``close_session``, waits on the session look again (and
        # reopen a link if they must). A link that ended otherwise ended
        # with the host, whose ``run`` wakes every wait once it is down.
        if link.stopped:
            host._wake_session(link.session)


class HostSession:
    """One session, addressed through the host. Cheap; no I/O until used."""

    def __init__(self, host: Host, id: str) -> None:
        self.host = host
        self.id = id

    def __repr__(self) -> str:
        return f"<HostSession {self.id!r}>"

    @property
    def link(self) -> SessionLink | None:
        """The session's link, if it has one now."""
        return self.host._links.get(self.id)

    # ------------------------------------------------------------------ operations

    async def submit(
        self,
        input: Any,
        *,
        operation_id: str | None = None,
        when_busy: Literal["followUp", "steer"] = "followUp",
    ) -> Receipt:
        """Durably queue a prompt; returns once it is on disk, before the
        agent runs. Idempotent on ``operation_id`` (default: a new UUID)."""
        host = self.host
        host._require_running()
        body = _input_json(input)
        operation_id = operation_id if operation_id is not None else str(uuid.uuid4())
        if type(operation_id) is not str or not operation_id:
            raise Refused("bad-operation-id", "an operation id is a non-empty string")
        store = host.store
        record, accepted = await store.call(store.operations.enqueue, self.id, operation_id, body, when_busy)
        if not record.settled:
            supervisor = host.supervisor(self.id)
            if supervisor is not None:
                supervisor.demand()
            link = host._ensure_link(self.id)
            if accepted:
                link.request_deliver()
        return Receipt(operation_id=operation_id, session=self.id, accepted=accepted)

    async def prompt(
        self,
        input: Any,
        *,
        operation_id: str | None = None,
        when_busy: Literal["followUp", "steer"] = "followUp",
    ) -> tuple[OperationResult, list[dict]]:
        """Submit and wait: the result, and the transcript after it."""
        receipt = await self.submit(input, operation_id=operation_id, when_busy=when_busy)
        result = await self.wait(receipt.operation_id)
        return result, await self.messages()

    async def steer(self, input: Any, *, operation_id: str | None = None) -> Receipt:
        """Join the running turn when the adapter can steer; else queue."""
        return await self.submit(input, operation_id=operation_id, when_busy="steer")

    async def wait(self, operation_id: str) -> OperationResult:
        """Wait for an operation to settle. Cancelling the wait stops only
        the wait. An unknown id is ``unanswered``/``not_found`` (as the
        reference). Raises the link's :class:`LinkError` when the link gave
        up (``unauthorized``, ``protocol-mismatch``, or unreachable past
        ``give_up_after``), and ``host-not-running`` when the host stops."""
        from router.host.reconcile import OperationResult

        host = self.host
        store = host.store
        key = (self.id, operation_id)
        while True:
            # Take the event before reading, so a settle between the read
            # and the wait still wakes us.
            entry = host._waits.get(key)
            if entry is None:
                entry = host._waits[key] = _Wait()
            entry.waiters += 1
            try:
                record = await store.call(store.operations.get, self.id, operation_id)
                if record is None:
                    return OperationResult(
                        operation_id=operation_id, session=self.id, status="unanswered", reason="not_found"
                    )
                result = OperationResult.of(record)
                if result is not None:
                    return result
                if host.may_link is not None and not host.may_link(self.id):
                    # Another router drives it: its settle shows in the
                    # shared record, which is looked at again now and then.
                    with trio.move_on_after(REMOTE_WAIT_POLL):
                        await entry.event.wait()
                    continue
                link = host._ensure_link(self.id, restart_failed=False)
                if link.failure is not None:
                    raise link.failure
                await entry.event.wait()
            finally:
                entry.waiters -= 1
                if entry.waiters == 0 and host._waits.get(key) is entry:
                    del host._waits[key]

    async def abort(self, operation_id: str | None = None) -> bool:
        """Stop one operation, or (no id) every open operation of the
        session; each settles ``unanswered``/``aborted`` here at once, and
        the daemon is told to stop each one it was handed (by id: an
        abort-everything could reach the daemon after later operations and
        stop those too). Returns whether anything was open to abort (always
        True with no id, as the reference)."""
        from router.host.reconcile import end_event

        host = self.host
        store = host.store

        results, delivered = await store.transact(
            functools.partial(_settle_open, session=self.id, operation_id=operation_id,
                              outcome={"status": "unanswered", "reason": "aborted"})
        )
        host._notify(self.id, results, [end_event(result) for result in results])
        link = host._links.get(self.id)
        if link is not None:
            # Newest first: the daemon settles a queued operation at once but
            # a running one only when its turn stops, and then starts the
            # next queued one; aborting the queued ones first leaves it none.
            link.request_abort(delivered[::-1])
        return operation_id is None or bool(results)

    def answer(self, ask_id: str, decision: str) -> None:
        """Send a person's answer to an ask the session's adapter raised
        (``allow`` or ``deny``; docs/container-protocol.md, "Asks"). Refused
        (``no-link``) when the host drives no link for the session."""
        link = self.host._links.get(self.id)
        if link is None:
            raise Refused("no-link", f"the host has no link to session {self.id!r}'s daemon; the ask cannot "
                          "be answered from here")
        link.request_answer(ask_id, decision)

    async def reset(self, handoff: str | None = None) -> int:
        """Start a new context: a new adapter session without the old
        history; ``handoff``, if given, goes in front of the next prompt.
        Refused (``session-busy``) while anything is queued or running.
        Returns the new generation."""
        host = self.host
        store = host.store
        if handoff is not None and type(handoff) is not str:
            raise Refused("bad-handoff", "a handoff note is a string")
        generation = await store.call(store.sessions.reset, self.id, handoff)
        link = host._links.get(self.id)
        if link is not None:
            link.reconnect()
        return generation

    async def set_model(self, model: str) -> None:
        """Change the adapter's model for this session (sent as ``configure``)."""
        if type(model) is not str:
            raise Refused("bad-model", "a model is the adapter's model name, a string")
        host = self.host
        store = host.store

        def update(store: Store) -> None:
            record = store.sessions.require(self.id)
            store.sessions.set_settings(self.id, {**record.settings, "model": model})

        await store.transact(update)
        link = host._links.get(self.id)
        if link is not None:
            link.request_configure()

    # ------------------------------------------------------------------ reading

    async def record(self) -> SessionRecord:
        store = self.host.store
        return await store.call(store.sessions.require, self.id)

    async def messages(self) -> list[dict]:
        """The transcript since the last reset, oldest first."""
        store = self.host.store
        return await store.call(store.messages.all, self.id)

    async def busy(self) -> bool:
        """Whether anything is queued or running."""
        return bool(await self.pending())

    async def pending(self) -> list[dict]:
        """Open operations, oldest first: ``{operationId, session, status}``."""
        store = self.host.store
        records = await store.call(
            functools.partial(store.operations.all, session=self.id, statuses=OPEN_STATUSES)
        )
        return [
            {"operationId": record.id, "session": self.id, "status": record.status}
            for record in records
        ]

    async def snapshot(self, *, messages: bool = True) -> dict:
        """``{session, messages, pending, busy}`` as the store has it now;
        with ``messages=False`` without ``messages`` (the whole transcript,
        which costs what the session's history holds)."""
        store = self.host.store

        def read(store: Store) -> dict:
            pending = [
                {"operationId": record.id, "session": self.id, "status": record.status}
                for record in store.operations.all(session=self.id, statuses=OPEN_STATUSES)
            ]
            out: dict[str, Any] = {"session": self.id, "pending": pending, "busy": bool(pending)}
            if messages:
                out["messages"] = store.messages.all(self.id)
            return out

        return await store.transact(read)

    @asynccontextmanager
    async def events(self, *, messages: bool = True) -> AsyncIterator[EventStream]:
        """This session's events: ``stream.snapshot``, then ``async for
        batch in stream`` (lists of event objects) until the session closes.
        ``messages=False``: the snapshot without the transcript (a reader
        that needs only ``pending``, such as the container view, which
        subscribes again whenever it lagged: the transcript would make each
        subscription cost the session's whole history).

        The subscription starts before the snapshot is read, so nothing
        falls between them; an event may repeat what the snapshot shows
        (messages are keyed by id). A subscriber more than
        ``SUBSCRIBER_BUFFER`` batches behind is dropped and its iteration
        raises :class:`EventsLagged`."""
        host = self.host
        await host.store.call(host.store.sessions.require, self.id)
        link = host._ensure_link(self.id)
        with link.subscribe() as subscription:
            snapshot = await self.snapshot(messages=messages)
            yield EventStream(self.id, snapshot, subscription)


class EventStream:
    """A session's live events after a snapshot; see :meth:`HostSession.events`.
    ``async for batch in stream`` gives lists of :data:`~router.host.events.HostEvent`."""

    def __init__(self, session: str, snapshot: dict, subscription: FanOutSubscription[list[HostEvent]]) -> None:
        self.session = session
        self.snapshot = snapshot
        self._subscription = subscription

    def __aiter__(self) -> FanOutSubscription[list[HostEvent]]:
        return self._subscription


def _listed(record: SessionRecord, busy: bool) -> tuple[dict[str, Any], tuple[int, Any]]:
    """A session's row in :meth:`HostSessions.list` and its stamp."""
    item: dict[str, Any] = {"id": record.id}
    if record.parent is not None:
        item["parent"] = record.parent
    item["busy"] = busy
    daemon = record.daemon
    if daemon.state == ENDED:
        item["ended"] = True
    if daemon.state is not None:
        item["daemon"] = {"state": daemon.state, "reason": daemon.reason, "container": daemon.container,
                          "runtime": daemon.runtime, "launcher": daemon.launcher, "harness": daemon.harness}
    return item, (record.updated_at, record.settings.get("model"))


def _read_sessions(store: Store) -> dict[str, tuple[dict[str, Any], tuple[int, Any]]]:
    """Every session's row and stamp, oldest first."""
    busy = set(store.operations.open_sessions())
    return {record.id: _listed(record, record.id in busy) for record in store.sessions.all()}


def _read_named(store: Store, ids: frozenset[str]) -> dict[str, tuple[dict[str, Any], tuple[int, Any]]]:
    """The rows and stamps of the sessions ``ids`` that exist."""
    out = {}
    for session in sorted(ids):
        record = store.sessions.get(session)
        if record is not None:
            out[session] = _listed(record, bool(store.operations.all(session=session, statuses=OPEN_STATUSES)))
    return out


class HostSessions:
    """Every session of a host: create, fork, list."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def get(self, id: str) -> HostSession:
        return HostSession(self.host, id)

    async def create(
        self, id: str | None = None, *, endpoint: DaemonEndpoint | None = None, harness: str | None = None
    ) -> HostSession:
        """A new top-level session with the host's defaults (an id that
        exists already returns that session unchanged). ``endpoint``: the
        session's own daemon (else the host's default, or its launcher's);
        ``harness``: what its launched daemon runs (``echo``,
        ``claude-code`` ...; else the launcher's default). Either is
        recorded only when the session is created."""
        store = self.host.store
        id = id if id is not None else str(uuid.uuid4())
        settings = self.host.settings.defaults

        def create(store: Store) -> None:
            _, created = store.sessions.create(id, settings=settings)
            fields = {} if endpoint is None else {"url": endpoint.url, "token": endpoint.token}
            if harness is not None:
                fields["harness"] = harness
            if created and fields:
                store.sessions.set_daemon(id, **fields)

        await store.transact(create)
        return HostSession(self.host, id)

    async def fork(self, parent: str, id: str | None = None) -> HostSession:
        """A new session that continues ``parent``'s current history (its
        transcript and the adapter's persisted entries) as a branch."""
        store = self.host.store
        id = id if id is not None else str(uuid.uuid4())
        await store.call(store.sessions.fork, id, parent)
        return HostSession(self.host, id)

    async def list(self, *, stamps: dict[str, tuple[int, Any]] | None = None) -> list[dict]:
        """Every session, oldest first: ``{id, parent?, busy, daemon?}``
        (``daemon``: ``{state, reason, container, runtime, launcher,
        harness}`` of a session whose daemon a launcher runs). ``stamps``,
        when given, gets each session's ``(updated_at, settings' model)``
        from the same read (the board's rows: one read of the record per
        survey, not two). With :attr:`Host.kept_list` (a cluster's), the
        rows are kept between the notifications of the sessions written
        and only those are read again."""
        store = self.host.store
        if self.host.kept_list is None:
            rows = list((await store.transact(_read_sessions)).values())
        else:
            rows = await self.host.kept_list(functools.partial(store.transact, _read_sessions),
                                             functools.partial(store.transact, _read_named))
        out = []
        for item, stamp in rows:
            if stamps is not None:
                stamps[item["id"]] = stamp
            out.append(dict(item))  # the kept row stays as it was read
        return out
