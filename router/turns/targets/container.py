"""A container session as a target: the host's session.

The router writes with ``submit`` (the event id is the operation id; the
host and the daemon are idempotent on it). When turns are metered, the
session's one live-view task follows the host's events for it, publishes
them as live items and hands each operation's start and end to the
session's brackets (an ``OperationEnded`` comes after the host stored the
result and woke its waiters); unmetered, the live view is the host's
events as they come, and the session has no view task.

:class:`ContainerSessions` is the host's side of the router: the container
sessions the host knows (open or not), creating one, waiting for an
operation's result, and the adapter the daemon last said it runs.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncIterator, Awaitable, Callable, Final

import trio

from router.board.state import container_state
from router.errors import Refusal
from router.host import EventsLagged, Host, HostEvent, LinkError, OperationEnded, OperationStarted
from router.host import Refused as HostRefused
from router.plugins.routing import LaunchRecord
from router.turns.brackets import attached_launch
from router.turns.core import ContainerReadiness, NoAnswer, Outcome, Queued, SubmitPrompt, WriteMessage
from router.turns.delivery_log import DeliveryLog
from router.turns.live import LiveHub, container_items
from router.turns.registry import Session, SessionKind, Starter
from router.turns.session_brackets import SessionBrackets
from router.turns.targets.base import LiveStream, live_batches
from wire.container import AdapterInfo

__all__ = ["ContainerSessions", "ContainerTarget", "RESUBSCRIBE_PAUSE"]

log = logging.getLogger("router.turns.targets.container")

#: Pauses before a container session's view follows the host's events
#: again after they ended (the link failed or was closed), doubling (ours).
RESUBSCRIBE_PAUSE: Final = (0.1, 10.0)


class ContainerSessions:
    """The container sessions of ``host`` (see the module docstring).
    ``deliveries`` holds their recorded launches; a session with none is
    metered as ``instance`` on ``harness``, reached ``via``; a turn's
    bracket may take ``bracket_wait`` seconds to open before its prompt is
    submitted anyway."""

    kind = SessionKind.CONTAINER

    def __init__(
        self,
        host: Host,
        *,
        deliveries: DeliveryLog,
        instance: str,
        harness: str,
        via: str,
        routes: Callable[[], Awaitable[object]],
        bracket_wait: float,
    ) -> None:
        self.host = host
        self.deliveries = deliveries
        self.instance = instance
        self.harness = harness
        self.via = via
        self.routes = routes
        self.bracket_wait = bracket_wait
        #: The container adapter last seen in a ``hello`` (any session): one
        #: daemon runs one adapter, so it speaks for sessions not linked yet.
        self.adapter: AdapterInfo | None = None

    def __repr__(self) -> str:
        return f"<ContainerSessions adapter={None if self.adapter is None else self.adapter.id!r}>"

    def target(self, session_id: str, *, metered: bool) -> ContainerTarget:
        """The target of session ``session_id`` (``metered``: it has a view
        task of its own, feeding its brackets and its live view)."""
        return ContainerTarget(self, session_id, metered=metered)

    async def knows(self, session_id: str) -> bool:
        store = self.host.store
        return await store.call(store.session, session_id) is not None

    async def list(self) -> list[dict[str, Any]]:
        """``{id, kind, busy, state[, parent]}`` of every container session,
        oldest first (``state`` before any stop: the router adds those)."""
        out: list[dict[str, Any]] = []
        for item in await self.host.sessions.list():
            link = self.host.session(item["id"]).link
            entry = {
                "id": item["id"],
                "kind": self.kind.value,
                "busy": item["busy"],
                "state": container_state(
                    busy=item["busy"], stopped=False, link_state=None if link is None else link.state
                ),
            }
            if "parent" in item:
                entry["parent"] = item["parent"]
            out.append(entry)
        return out

    async def create(self, session_id: str | None, existing: Session | None) -> str:
        """Create a container session (an id that exists is kept); its id.
        ``existing`` is the open session of that id, if any."""
        if existing is not None and existing.kind is not self.kind:
            raise Refusal("session-exists", f"{session_id!r} is a {existing.kind.value} session")
        created = await self.host.sessions.create(session_id)
        return created.id

    async def reply_of(self, session_id: str, operation_id: str) -> dict[str, Any]:
        """Wait for a container operation to settle: its result as JSON."""
        try:
            result = await self.host.session(session_id).wait(operation_id)
        except (HostRefused, LinkError) as exc:
            return {"operationId": operation_id, "session": session_id, "status": "unanswered", "reason": exc.code}
        return result.to_json()

    def steers(self, session_id: str) -> bool:
        """Whether the session's adapter folds a prompt into a running turn."""
        link = self.host.session(session_id).link
        if link is not None and link.adapter is not None:
            self.adapter = link.adapter
        return self.adapter is not None and "steer" in self.adapter.capabilities


class ContainerTarget:
    """One container session, as a target (see the module docstring)."""

    kind = SessionKind.CONTAINER
    one_turn = False

    def __init__(self, sessions: ContainerSessions, session_id: str, *, metered: bool) -> None:
        self.id = session_id
        self.sessions = sessions
        self.host_session = sessions.host.session(session_id)
        self.hub: LiveHub | None = LiveHub() if metered else None

    def __repr__(self) -> str:
        return f"<ContainerTarget {self.id!r} metered={self.hub is not None}>"

    # ------------------------------------------------------------------ tasks

    def tasks(self, brackets: SessionBrackets | None) -> list[Starter]:
        if self.hub is None:
            return []

        async def view(task_status: trio.TaskStatus[None]) -> None:
            await self._view(brackets, task_status)

        return [("live-view", view)]

    async def _view(self, brackets: SessionBrackets | None, task_status: trio.TaskStatus[None]) -> None:
        """The session's one live-view task: follows the host's events for
        the session, publishes them as live items, then hands each
        operation's start and end to the brackets. Each new subscription
        tells the brackets which operations run (from its snapshot), so a
        gap never leaves a bracket open. The events end when the host's
        link for the session fails or closes; the view follows again after
        a pause (viewers are told to take a fresh snapshot)."""
        assert self.hub is not None
        pause, cap = RESUBSCRIBE_PAUSE
        started = False
        while True:
            try:
                async with self.host_session.events() as events:
                    if brackets is not None:
                        brackets.resync(
                            p["operationId"] for p in events.snapshot["pending"] if p["status"] == "running"
                        )
                    if not started:
                        task_status.started()
                        started = True
                    pause = RESUBSCRIBE_PAUSE[0]
                    await self._follow(events, brackets)
                why = "the host's events for the session ended"
            except EventsLagged as exc:
                why = str(exc)
            except (HostRefused, LinkError) as exc:
                why = f"the host refused the session's events ({exc.code})"
            if not started:
                task_status.started()
                started = True
            self.hub.reset(why)
            await trio.sleep(pause)  # a pause before trying again, not a condition
            pause = min(pause * 2, cap)

    async def _follow(self, events: Any, brackets: SessionBrackets | None) -> None:
        assert self.hub is not None
        async for batch in events:
            self.hub.publish(_items(batch))
            if brackets is not None:
                for event in batch:
                    _bracket_host_event(brackets, event)

    # ------------------------------------------------------------------ writing

    def readiness(self, stopped: str | None) -> ContainerReadiness:
        return ContainerReadiness(steers=self.sessions.steers(self.id), stopped=stopped)

    async def prepare(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> None:
        """Open the turn's bracket before the operation is submitted (the
        adapter may report usage the moment it starts), and wait until its
        marks are taken; at most ``bracket_wait`` seconds (logged)."""
        assert isinstance(step, SubmitPrompt)
        if brackets is None:
            return
        brackets.writing(step.operation_id)
        wait = self.sessions.bracket_wait
        with trio.move_on_after(wait) as waited:
            await brackets.wait_until(lambda core: core.open)
        if waited.cancelled_caught:
            log.warning("session %r: no bracket opened within %g s; submitting anyway (%r)", self.id, wait, brackets)

    def withdraw(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> None:
        assert isinstance(step, SubmitPrompt)
        if brackets is not None:
            brackets.not_writing(step.operation_id)

    async def write(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> Outcome:
        assert isinstance(step, SubmitPrompt)
        try:
            receipt = await self.host_session.submit(
                step.text, operation_id=step.operation_id, when_busy=step.when_busy
            )
        except HostRefused as exc:
            self.withdraw(step, brackets)
            return NoAnswer(code=exc.code, message=f"{exc.message}; resend with the same eventId")
        except BaseException:
            self.withdraw(step, brackets)
            raise
        if not receipt.accepted:
            self.withdraw(step, brackets)  # known already: no new turn comes of it
        return Queued(operation_id=receipt.operation_id, when_busy=step.when_busy)

    async def abort_operation(self, operation_id: str) -> None:
        await self.host_session.abort(operation_id)

    # ------------------------------------------------------------------ metering

    async def turns_seen(self, brackets: SessionBrackets) -> None:
        """A turn the host settled but the view has not seen end yet (the
        sender may have its reply before the view its end): wait for the
        view, unless the host still runs something."""
        if brackets.core.running and not await self.host_session.busy():
            await brackets.wait_until(lambda core: not core.running)

    async def stopped(self) -> None:
        """Abort what is queued: the session's next turns must not run."""
        try:
            await self.host_session.abort()
        except (HostRefused, LinkError) as exc:
            log.warning("session %r: aborting its queued operations failed: %s", self.id, exc)

    async def launch_record(self) -> LaunchRecord:
        deliveries = self.sessions.deliveries
        launched = await deliveries.call(deliveries.launch_of, self.id)
        if launched is not None:
            return launched
        return attached_launch(
            session=self.id, instance=self.sessions.instance, harness=self.sessions.harness,
            via=self.sessions.via, routes=await self.sessions.routes(),
        )

    # ------------------------------------------------------------------ reading

    def entry(self) -> None:
        """The host lists container sessions (:meth:`ContainerSessions.list`)."""
        return None

    async def messages(self) -> list[Any]:
        return await self.host_session.messages()

    @contextlib.asynccontextmanager
    async def live(self) -> AsyncIterator[LiveStream]:
        if self.hub is None:
            # Not metered: the host's events, as they come.
            async with self.host_session.events() as events:
                yield LiveStream(self._snapshot(events.snapshot), _host_batches(events))
            return
        with self.hub.subscribe() as subscription:
            # Subscribed first, so nothing falls between the snapshot and
            # the items (an item may repeat what the snapshot shows).
            yield LiveStream(self._snapshot(await self.host_session.snapshot()), live_batches(subscription))

    def _snapshot(self, host_snapshot: dict[str, Any]) -> dict[str, Any]:
        return {
            "session": self.id,
            "kind": self.kind.value,
            "messages": host_snapshot["messages"],
            "busy": host_snapshot["busy"],
        }

    async def abort(self, operation_id: str | None) -> dict[str, Any]:
        if operation_id is not None and (type(operation_id) is not str or not operation_id):
            raise Refusal("bad-body", "operationId is a non-empty string")
        aborted = await self.host_session.abort(operation_id)
        return {"session": self.id, "aborted": aborted, **({"operationId": operation_id} if operation_id else {})}


def _items(batch: list[HostEvent]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for event in batch:
        items += container_items(event)
    return items


async def _host_batches(events: Any) -> AsyncIterator[list[dict[str, Any]]]:
    async for batch in events:
        items = _items(batch)
        if items:
            yield items


def _bracket_host_event(brackets: SessionBrackets, event: HostEvent) -> None:
    # Events of other classes (an adapter's live text, a frame the host
    # skipped) open and close no turn.
    if type(event) is OperationStarted:
        brackets.turn_started(event.operation_id)
    elif type(event) is OperationEnded:
        brackets.turn_ended(event.operation_id)
