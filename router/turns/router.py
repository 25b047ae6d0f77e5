"""The user-turn router: the Trio layer over :mod:`router.turns.core`.

:class:`TurnRouter` takes deliveries (an event id, a target session, a
message) and writes each into its session exactly once, answering the
sender; it also serves the sessions' transcripts, live views and aborts, so
every surface (the HTTP API, ``router send``, the MCP tools) calls this one
object.

Usage (a component in the main job's nursery)::

    router = TurnRouter(log=DeliveryLog(path), host=host, registry=registry)
    reply = await router.deliver(Delivery(event_id="e1", session="root",
                                          message=Person(text="hi", message_id="e1")))

Theory of operation
-------------------
``deliver`` admits the delivery against the durable record (one
transaction: a resend of an answered delivery is answered from the record
here and goes no further), then queues it on the session's **inbox** and
waits for its reply. Each open session has one inbox task (in the
session's nursery, :mod:`router.turns.registry`) that takes its
deliveries one at a time, in order; sessions run concurrently. For each:

1. read the record again (a resend queued behind the first attempt finds
   it answered and is answered from it);
2. ``core.plan`` with the session's target: is the mod connected (a
   Claude Code session); does the adapter steer (a container session);
3. store the planned record, *then* write: ``session.message`` on the mod
   link under the call deadline, or ``submit`` to the host with the event id
   as the operation id;
4. ``core.settle`` with the outcome; store; answer the sender.

The sender's wait is only a wait: cancelling it (a client that hung up)
leaves the delivery to the inbox, which records its answer for the resend.

Error handling: every refusal is a reply with a kebab-case code, never an
exception: :class:`~router.turns.core.Refused` (bad target, a reused event
id), :class:`~router.turns.core.Unanswered` (resend later). A bug while
handling one delivery answers it ``internal`` and the inbox goes on.

Resource handling: sessions live in the registry; closing one answers the
deliveries still queued for it ``session-closed``. The record (the
:class:`~router.turns.record.DeliveryLog`) and the host are the caller's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from typing import Any, AsyncIterator, Final, Mapping

import attrs
import trio

from router.container.host import Host
from router.container.link import LinkError
from router.container.store import Refused as HostRefused
from router.modlink.errors import ModCallError, ModCallTimeout, ModLinkClosed, ModSubscriberOverflow
from router.modlink.server import DEFAULT_CALL_DEADLINE, ModLink
from router.turns.core import (
    Answered,
    Card,
    ClaudeCodeTarget,
    ContainerTarget,
    Delivery,
    Denied,
    NoAnswer,
    Outcome,
    Person,
    Proceed,
    PromptTaken,
    Queued,
    Refused,
    Reply,
    RowWritten,
    State,
    SubmitPrompt,
    Unanswered,
    WriteMessage,
    check_delivery,
    plan,
    settle,
)
from router.turns.live import LiveHub, LiveSubscription, container_items
from router.turns.record import DeliveryLog
from router.turns.registry import Session, SessionKind, SessionRegistry, Starter
from wire.container import AdapterInfo
from wire.mod import ModMessageDenied, ModPromptTaken, ModRowWritten, ModSessionMessageArgs, ModUnreadCard, ModUnreadPerson

__all__ = ["INBOX_SIZE", "LiveStream", "Problem", "TurnRouter", "new_event_id"]

log = logging.getLogger("router.turns")

#: Deliveries a session's inbox holds before a new one is refused
#: ``inbox-full`` (ours: far more than a person types ahead).
INBOX_SIZE: Final = 256


@attrs.frozen(kw_only=True)
class Problem(Exception):
    """A refusal of a session operation (not a delivery): a kebab-case
    ``code`` and a sentence; surfaces map the code to their own status."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class _Slot:
    """One queued delivery and the reply its sender waits for."""

    __slots__ = ("delivery", "done", "reply")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.done = trio.Event()
        self.reply: Reply | None = None

    def answer(self, reply: Reply) -> None:
        if self.reply is None:
            self.reply = reply
            self.done.set()


class TurnRouter:
    """The user-turn router (see the module docstring).

    ``host`` serves container sessions (None: there are none);
    ``message_deadline`` (seconds) bounds each ``session.message`` call;
    ``env`` is where a Claude Code session's socket path is resolved from
    (default ``os.environ``).
    """

    def __init__(
        self,
        *,
        log: DeliveryLog,
        registry: SessionRegistry,
        host: Host | None = None,
        env: Mapping[str, str] | None = None,
        message_deadline: float = DEFAULT_CALL_DEADLINE,
        inbox_size: int = INBOX_SIZE,
        link_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.log = log
        self.registry = registry
        self.host = host
        self.env = os.environ if env is None else env
        self.message_deadline = message_deadline
        self.inbox_size = inbox_size
        self.link_options = dict(link_options or {})
        #: The container adapter last seen in a ``hello`` (any session): one
        #: daemon runs one adapter, so it speaks for sessions not linked yet.
        self.adapter: AdapterInfo | None = None
        self.delivered = 0

    def __repr__(self) -> str:
        return f"<TurnRouter {self.registry!r} delivered={self.delivered}>"

    # ------------------------------------------------------------------ sessions

    async def open_claude_code(self, session_id: str) -> Session:
        """Serve the mod link of Claude Code session ``session_id`` and
        register it. Raises ``ModLinkRefused`` when the link cannot start."""
        link = ModLink(session_id, env=self.env, **self.link_options)
        live = LiveHub()
        send, receive = trio.open_memory_channel[_Slot](self.inbox_size)
        session = Session(id=session_id, kind=SessionKind.CLAUDE_CODE, inbox=send, link=link, live=live)
        session.on_close.append(lambda: live.close())

        async def serve_link(task_status: trio.TaskStatus[None]) -> None:
            await link.run(task_status=task_status)

        # Subscribed before the link serves, so the view misses no event.
        first = link.events()

        async def view(task_status: trio.TaskStatus[None]) -> None:
            await self._view(link, live, first, task_status)

        starters: list[Starter] = [("mod-link", serve_link), ("live-view", view)]
        starters.append(("inbox", lambda task_status: self._inbox(session, receive, task_status)))
        return await self.registry.open(session, starters)

    async def _open_container(self, session_id: str) -> Session:
        send, receive = trio.open_memory_channel[_Slot](self.inbox_size)
        session = Session(id=session_id, kind=SessionKind.CONTAINER, inbox=send)
        starters: list[Starter] = [("inbox", lambda task_status: self._inbox(session, receive, task_status))]
        return await self.registry.open(session, starters)

    async def session(self, session_id: str) -> Session:
        """The open session ``session_id``; a container session the host
        knows is opened on first use. Raises :class:`Problem`
        (``unknown-session``)."""
        if type(session_id) is not str or not session_id:
            raise Problem(code="bad-session", message="a session id is a non-empty string")
        session = self.registry.get(session_id)
        if session is not None:
            return session
        if self.host is not None:
            store = self.host.store
            if await store.call(store.session, session_id) is not None:
                return await self._open_container(session_id)
        raise Problem(
            code="unknown-session",
            message=f"there is no session {session_id!r}; list the sessions (GET /sessions, or the "
            "list_sessions tool) to see which there are, or create a container session (POST /sessions)",
        )

    async def list(self) -> list[dict[str, Any]]:
        """Every session: ``{id, kind, busy}`` (container sessions oldest
        first, then Claude Code sessions)."""
        out: list[dict[str, Any]] = []
        if self.host is not None:
            for item in await self.host.sessions.list():
                entry = {"id": item["id"], "kind": SessionKind.CONTAINER.value, "busy": item["busy"]}
                if "parent" in item:
                    entry["parent"] = item["parent"]
                out.append(entry)
        for session in self.registry.sessions():
            if session.kind is SessionKind.CLAUDE_CODE:
                assert session.link is not None
                state = session.link.state
                out.append(
                    {
                        "id": session.id,
                        "kind": session.kind.value,
                        "busy": state.turn_running,
                        "connected": state.hello_session_id is not None,
                    }
                )
        return out

    async def create(self, session_id: str | None = None) -> dict[str, Any]:
        """Create a container session (an id that exists returns it)."""
        if self.host is None:
            raise Problem(code="no-host", message="this router serves no container sessions")
        if session_id is not None and (type(session_id) is not str or not session_id):
            raise Problem(code="bad-session", message="a session id is a non-empty string")
        existing = None if session_id is None else self.registry.get(session_id)
        if existing is not None and existing.kind is not SessionKind.CONTAINER:
            raise Problem(code="session-exists", message=f"{session_id!r} is a {existing.kind.value} session")
        created = await self.host.sessions.create(session_id)
        return {"id": created.id, "kind": SessionKind.CONTAINER.value}

    async def messages(self, session_id: str) -> dict[str, Any]:
        """``{session, kind, messages}``: the transcript (a container
        session's since its last reset; a Claude Code session's since the
        router attached)."""
        session = await self.session(session_id)
        if session.kind is SessionKind.CONTAINER:
            assert self.host is not None
            messages = await self.host.session(session_id).messages()
        else:
            assert session.live is not None
            messages = session.live.converter.snapshot()["messages"]
        return {"session": session_id, "kind": session.kind.value, "messages": messages}

    @contextlib.asynccontextmanager
    async def live(self, session_id: str) -> AsyncIterator[LiveStream]:
        """The session's live view: ``stream.snapshot``, then ``async for
        items in stream`` until the session closes."""
        session = await self.session(session_id)
        if session.kind is SessionKind.CLAUDE_CODE:
            assert session.live is not None
            with session.live.subscribe() as subscription:
                snapshot = {"session": session_id, "kind": session.kind.value, **subscription.snapshot}
                yield LiveStream(snapshot, _mod_batches(subscription))
            return
        assert self.host is not None
        async with self.host.session(session_id).events() as events:
            snapshot = {
                "session": session_id,
                "kind": session.kind.value,
                "messages": events.snapshot["messages"],
                "busy": events.snapshot["busy"],
            }
            yield LiveStream(snapshot, _container_batches(events))

    async def abort(self, session_id: str, operation_id: str | None = None) -> dict[str, Any]:
        session = await self.session(session_id)
        if session.kind is not SessionKind.CONTAINER:
            raise Problem(
                code="abort-unsupported",
                message="a Claude Code session's turn is stopped at its own terminal (Esc); "
                "the mod link carries no abort",
            )
        assert self.host is not None
        if operation_id is not None and (type(operation_id) is not str or not operation_id):
            raise Problem(code="bad-body", message="operationId is a non-empty string")
        aborted = await self.host.session(session_id).abort(operation_id)
        return {"session": session_id, "aborted": aborted, **({"operationId": operation_id} if operation_id else {})}

    async def reply_of(self, session_id: str, operation_id: str) -> dict[str, Any]:
        """Wait for a container operation to settle: its result as JSON."""
        assert self.host is not None
        try:
            result = await self.host.session(session_id).wait(operation_id)
        except (HostRefused, LinkError) as exc:
            return {"operationId": operation_id, "session": session_id, "status": "unanswered", "reason": exc.code}
        return result.to_json()

    # ------------------------------------------------------------------ deliveries

    async def deliver(self, delivery: Delivery) -> Reply:
        """Write one delivery into its session, exactly once per event id,
        and return the reply (see the module docstring)."""
        refused = check_delivery(delivery)
        if refused is not None:
            return refused
        try:
            session = await self.session(delivery.session)
        except Problem as problem:
            return Refused(code=problem.code, message=problem.message)
        admission = await self.log.call(self.log.admit, delivery)
        if not isinstance(admission, Proceed):
            return admission
        slot = _Slot(delivery)
        try:
            session.inbox.send_nowait(slot)
        except trio.WouldBlock:
            return Unanswered(
                event_id=delivery.event_id,
                code="inbox-full",
                message=f"session {delivery.session!r} has {self.inbox_size} deliveries waiting; "
                "resend with the same eventId later",
            )
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return _closed(delivery)
        await slot.done.wait()
        assert slot.reply is not None
        return slot.reply

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        event_id: str | None = None,
        card: bool = False,
        message_id: str | None = None,
        wait: bool = False,
    ) -> tuple[Reply, dict[str, Any]]:
        """What every surface does with "send this text to this session":
        build the delivery (a person's message unless ``card``; the event id
        minted when not given; the Dispatch message id defaults to the event
        id), deliver it, and answer its reply with the reply's JSON body:
        the answer (plus ``reply``, a container operation's result, when
        ``wait``), or ``{error, message[, eventId]}``."""
        event_id = new_event_id() if event_id is None else event_id
        message: Person | Card = (
            Card(text=text) if card else Person(text=text, message_id=event_id if message_id is None else message_id)
        )
        reply = await self.deliver(Delivery(event_id=event_id, session=session_id, message=message))
        if isinstance(reply, Answered):
            body = reply.to_json()
            if wait and body.get("status") == "delivered" and type(body.get("operationId")) is str:
                body["reply"] = await self.reply_of(session_id, body["operationId"])
            return reply, body
        if isinstance(reply, Unanswered):
            return reply, {"error": reply.code, "message": reply.message, "eventId": reply.event_id}
        return reply, {"error": reply.code, "message": reply.message}

    async def _inbox(
        self, session: Session, receive: trio.MemoryReceiveChannel[_Slot], task_status: trio.TaskStatus[None]
    ) -> None:
        current: _Slot | None = None
        task_status.started()
        try:
            async for slot in receive:
                current = slot
                try:
                    reply = await self._handle(session, slot.delivery)
                except Exception:
                    log.exception("delivery %r to session %r failed", slot.delivery.event_id, session.id)
                    reply = Unanswered(
                        event_id=slot.delivery.event_id,
                        code="internal",
                        message="the router failed on this delivery (it was logged); resend with the same eventId",
                    )
                slot.answer(reply)
                current = None
        finally:
            # The session is closing: whatever waits is answered, never left.
            if current is not None:
                current.answer(_closed(current.delivery))
            while True:
                try:
                    left = receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                left.answer(_closed(left.delivery))
            receive.close()

    async def _handle(self, session: Session, delivery: Delivery) -> Reply:
        record = await self.log.call(self.log.get, delivery.event_id)
        if record is None:  # pragma: no cover - admitted records are never removed
            raise RuntimeError(f"no record for admitted event {delivery.event_id!r}")
        if record.state is State.ANSWERED:
            assert record.answer is not None
            return Answered(answer=record.answer, from_record=True)
        if session.kind is SessionKind.CLAUDE_CODE:
            assert session.link is not None
            target: ClaudeCodeTarget | ContainerTarget = ClaudeCodeTarget(
                connected=session.link.state.hello_session_id is not None
            )
        else:
            target = ContainerTarget(steers=self._steers(session.id))
        planned, step = plan(record, target)
        await self.log.call(self.log.put, planned)
        if not isinstance(step, (WriteMessage, SubmitPrompt)):
            return step
        outcome = await self._write(session, step)
        settled, reply = settle(planned, step, outcome)
        await self.log.call(self.log.put, settled)
        if isinstance(reply, Answered):
            self.delivered += 1
        return reply

    def _steers(self, session_id: str) -> bool:
        assert self.host is not None
        link = self.host.session(session_id).link
        if link is not None and link.adapter is not None:
            self.adapter = link.adapter
        return self.adapter is not None and "steer" in self.adapter.capabilities

    async def _write(self, session: Session, step: WriteMessage | SubmitPrompt) -> Outcome:
        if isinstance(step, SubmitPrompt):
            assert self.host is not None
            try:
                receipt = await self.host.session(session.id).submit(
                    step.text, operation_id=step.operation_id, when_busy=step.when_busy
                )
            except HostRefused as exc:
                return NoAnswer(code=exc.code, message=f"{exc.sentence}; resend with the same eventId")
            return Queued(operation_id=receipt.operation_id, when_busy=step.when_busy)
        assert session.link is not None
        message = step.message
        unread: ModUnreadPerson | ModUnreadCard = (
            ModUnreadPerson(text=message.text, message_id=message.message_id)
            if isinstance(message, Person)
            else ModUnreadCard(text=message.text)
        )
        args = ModSessionMessageArgs(
            content=({"type": "text", "text": message.text},), message=unread, event_id=step.event_id
        )
        try:
            result = await session.link.call("session.message", args, deadline=self.message_deadline)
        except ModCallTimeout:
            return NoAnswer(
                code="no-answer",
                message=f"the Claude Code session did not answer within {self.message_deadline:g} s; resend "
                "with the same eventId (a resend goes as a card, and the session answers it from its record "
                "if this write landed)",
            )
        except ModLinkClosed:
            return NoAnswer(
                code="link-closed",
                message="the session's mod link closed before it answered; resend with the same eventId",
            )
        except ModCallError as exc:
            return NoAnswer(
                code="mod-error", message=f"the mod failed the write ({exc.error}); resend with the same eventId"
            )
        if isinstance(result, ModRowWritten):
            return RowWritten(uuid=result.uuid)
        if isinstance(result, ModPromptTaken):
            return PromptTaken()
        assert isinstance(result, ModMessageDenied)
        return Denied(deny=result.deny, as_=result.as_)

    # ------------------------------------------------------------------ live view task

    async def _view(
        self, link: ModLink, live: LiveHub, subscription: Any, task_status: trio.TaskStatus[None]
    ) -> None:
        """The session's one live-view task: the link's events, converted.
        A subscription that overflowed is replaced (the view's readers are
        told to take a fresh snapshot)."""
        task_status.started()
        while True:
            with subscription:
                try:
                    async for event in subscription:
                        live.feed([event])
                except ModSubscriberOverflow as exc:
                    live.reset(str(exc))
                    subscription = link.events()
                    continue
            return  # the link stopped


def _closed(delivery: Delivery) -> Unanswered:
    return Unanswered(
        event_id=delivery.event_id,
        code="session-closed",
        message=f"session {delivery.session!r} closed before this delivery was answered; "
        "resend with the same eventId",
    )


class LiveStream:
    """A live view: ``snapshot`` (``{session, kind, messages, busy}``) and
    ``async for items in stream``."""

    def __init__(self, snapshot: dict[str, Any], batches: AsyncIterator[list[dict[str, Any]]]) -> None:
        self.snapshot = snapshot
        self._batches = batches

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        return self._batches


async def _mod_batches(subscription: LiveSubscription) -> AsyncIterator[list[dict[str, Any]]]:
    async for items in subscription:
        yield items


async def _container_batches(events: Any) -> AsyncIterator[list[dict[str, Any]]]:
    async for batch in events:
        items: list[dict[str, Any]] = []
        for event in batch:
            items += container_items(event)
        if items:
            yield items


def new_event_id() -> str:
    return str(uuid.uuid4())

