"""The provider's usage limits in the user-turn router: park, keep, resume.

:class:`Parking` is the Trio layer between the sessions and the park
scheduler (:mod:`router.limits`): each session's target tells it what it
saw (:meth:`Parking.signal`: a usage limit with its reset; a container
operation the limit ended), it keeps the record (the delivery log's
``parks`` and ``park_work``), and it resumes each parked session once, at
the time the scheduler gives, through that session's inbox.

Theory of operation
-------------------
**The account.** Every session of one account parks together. A session's
account is its launch record's ``account`` (``routes.json``'s account for
the instance, when its harness counts accounts: ``counts_account``); a
session with none is on the account ``default``: one subscriber's
sign-in on one machine, which is what a person running many Claude Code
sessions has. (The OAuth token itself never reaches the router.)

**Park.** The first signal of a limit parks every session of the account
the router knows (its open sessions and the host's container sessions); a
session opened later joins the park at once. Parked, a session's inbox
writes nothing: each delivery it takes is kept (``park_work``, by event
id; its entry stays unanswered, last code ``parked``) and answered with the
outcome ``parked`` and the reset (:func:`parked_answer`). A container
operation that the limit ended (``unanswered``, reason ``usage-limit: ...``)
is kept too, by operation id.

**Resume.** At its time the scheduler hands a park over; a *resume marker*
goes onto the session's inbox, and deliveries that come before the marker
are still kept (the park holds until the marker runs), so nothing passes
the kept work. The inbox then runs the kept work in order, each piece
marked ``resuming`` before it goes out and ``done`` after: a kept delivery
goes the normal way (plan, write, settle; a resend of it is answered from
the record afterwards); a kept operation is submitted again as
``<operation id>~resumed`` with its stored input. Every piece is idempotent
by its id (the delivery log by event id; the host, the daemon and the mod
by operation or event id), so a restart in the middle runs again what was
``resuming`` without writing it twice. The park's record is dropped once
its work ran; if the limit comes back meanwhile the rest stays kept for
the next park. A person may resume a park early or cancel it (its kept
deliveries are then answered unanswered ``park-cancelled``: resend them).

**A local session's own turn** is not kept: Claude Code 2.1.332 continues
a turn the limit ended by itself once the limit resets (a prompt with the
origin ``auto-continuation``, "Your claude.ai usage limit has reset ..."),
so the router only holds and then writes what it was sent.

Error handling: a signal or a resume that fails is logged and the others go
on; the park stays in the record (a restart resumes it).
"""

from __future__ import annotations

import logging
import math
from functools import partial
import random
from datetime import datetime, timezone
from typing import Any, Callable, Final

from pathlib import Path

import attrs
import trio

from router.limits import shared as shared_limits
from router.plugins.watched import Watched
from router._transient import DEFAULT_POLICY, StoreUnavailable
from router.errors import Refusal
from router.limits import LimitSeen, Park, ParkBook, ParkBookStatistics, Parked, ParkTimer, Resume, wall_ms
from router.turns.core import Answered, Delivery, DeliveryEntry, Reply, State
from router.turns.registry import Session

__all__ = ["ParkingStatistics", "DEFAULT_ACCOUNT", "KeptOperation", "Parking", "ResumeMarker", "parked_answer"]

log = logging.getLogger("router.limits")

#: The account of a session whose launch names none (see the module docstring).
DEFAULT_ACCOUNT: Final = "default"
#: The suffix of a kept operation's id when it is submitted again (ours).
RESUMED_SUFFIX: Final = "~resumed"


@attrs.frozen
class KeptOperation:
    """A signal: the limit ended this container operation; keep it."""

    operation_id: str


@attrs.frozen
class ResumeMarker:
    """On a session's inbox: run the park's kept work here, in order."""

    park: Park


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parked_answer(event_id: str, park: Park) -> dict[str, Any]:
    """The answer a delivery to a parked session gets (``status: parked``)."""
    return {
        "status": "parked", "eventId": event_id, "session": park.session, "account": park.account,
        "resetsAt": park.resets_at, "resumeAt": park.resume_at,
        "message": f"session {park.session!r} is parked: account {park.account!r} reached the provider's usage "
                   f"limit, which resets at {iso(park.resets_at)}; this message is kept and goes in once, "
                   f"at about {iso(park.resume_at)} (router resume {park.session} sends it now)",
    }


@attrs.frozen
class ParkingStatistics:
    """What :class:`Parking` holds: its book's figures, the resumes pending
    and the operations kept."""

    book: ParkBookStatistics
    pending: int
    kept: int


class Parking:
    """Parks of the router's sessions (see the module docstring). ``router``
    is the :class:`~router.turns.router.TurnRouter` that owns it (its
    registry, record, host and ``write_delivery``)."""

    def __init__(
        self, router: Any, *, book: ParkBook | None = None, wall: Callable[[], int] = wall_ms,
        shared: Path | None = None,
    ) -> None:
        self.router = router
        #: The account limits every local router shares (router.limits.shared; None: this router's own only).
        self.shared = shared
        # The shared file read again only when its identity changed (another
        # router's write renames a new file over it): no thread hop per
        # delivery while it stands.
        self._shared_file: Watched[dict[str, dict[str, Any]]] | None = (
            None if shared is None else Watched(lambda: [shared], partial(shared_limits.read, shared))
        )
        self.deliveries = router.deliveries
        self.timer = ParkTimer(book or ParkBook(rng=random.Random()), on_resume=self._due, wall=wall)
        self._accounts: dict[str, str] = {}
        #: Parks handed over whose marker has not run yet (they still hold).
        self._pending: dict[str, Park] = {}
        #: session -> the reset of the park a person ended early (resumed or
        #: cancelled): the shared file's same limit does not park it again.
        self._released: dict[str, int] = {}
        self._signals_in, self._signals = trio.open_memory_channel[tuple[str, Any]](math.inf)
        self.kept = 0

    def __repr__(self) -> str:
        return f"<Parking {self.timer.book!r} pending={sorted(self._pending)}>"

    def statistics(self) -> ParkingStatistics:
        return ParkingStatistics(book=self.timer.book.statistics(), pending=len(self._pending), kept=self.kept)
    # ------------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reload the recorded parks (a restart keeps them parked and
        resumes them at their times), then serve the timer and the signals."""
        self.timer.restore(await self.deliveries.call(self.deliveries.parks))
        async with trio.open_nursery() as nursery:
            await nursery.start(self.timer.run)
            task_status.started()
            async for session_id, signal in self._signals:
                try:
                    await self._on_signal(session_id, signal)
                except Exception:
                    log.exception("session %r: handling %r failed", session_id, signal)

    # ------------------------------------------------------------------ what sessions tell

    def signal(self, session_id: str, signal: LimitSeen | KeptOperation) -> None:
        """What a session's target saw; handled in order, in the task."""
        self._signals_in.send_nowait((session_id, signal))

    def holding(self, session_id: str) -> Park | None:
        """The park that holds the session's writes now, if any."""
        return self.timer.book.park_of(session_id) or self._pending.get(session_id)

    async def joined(self, session: Session) -> None:
        """A session opened: it parks at once if its account is parked."""
        account = await self._account(session.id)
        await self._parked(self.timer.member(session.id, account))
        await self.check_shared(session.id)

    async def check_shared(self, *session_ids: str) -> None:
        """Park each of ``session_ids`` whose account another local router
        found limited (the shared file, read once, and only when it changed
        since the last read: :mod:`router.plugins.watched`;
        :mod:`router.limits.shared`)."""
        if self._shared_file is None or not session_ids:
            return
        limits = await self._shared_file.get()
        now = self.timer.now()
        for session_id in session_ids:
            account = await self._account(session_id)
            limit = limits.get(account)
            if limit is None or limit["resetsAt"] <= now or self._released.get(session_id, 0) >= limit["resetsAt"]:
                continue
            known = self.timer.book.limit_of(account)
            if known is not None and known >= limit["resetsAt"] and self.holding(session_id) is not None:
                continue
            kind = limit.get("limitKind") if type(limit.get("limitKind")) is str else ""
            await self._parked(self.timer.limit(account, limit["resetsAt"], session=session_id, limit_kind=kind))

    async def _on_signal(self, session_id: str, signal: LimitSeen | KeptOperation) -> None:
        if isinstance(signal, LimitSeen):
            account = await self._account(session_id)
            effects: list[Parked] = []
            for other in await self._known():
                if other != session_id:
                    effects += self.timer.member(other, await self._account(other))
            effects += self.timer.limit(account, signal.resets_at, session=session_id, limit_kind=signal.limit_kind)
            await self._parked(effects)
            if self.shared is not None:
                await trio.to_thread.run_sync(partial(
                    shared_limits.record, self.shared, account, resets_at=signal.resets_at,
                    limit_kind=signal.limit_kind, source=session_id, at=self.timer.now()))
        elif isinstance(signal, KeptOperation):
            if self.holding(session_id) is None:
                log.warning("session %r: operation %r ended at the usage limit with no park; kept for the next",
                            session_id, signal.operation_id)
            self.kept += await self.deliveries.call(self.deliveries.keep, session_id, signal.operation_id,
                                                    "operation")

    async def _known(self) -> list[str]:
        ids = [session.id for session in self.router.registry.sessions()]
        if self.router.containers is not None:
            ids += [entry["id"] for entry in await self.router.containers.list() if entry["id"] not in ids]
        return ids

    async def _account(self, session_id: str) -> str:
        known = self._accounts.get(session_id)
        if known is not None:
            return known
        account = DEFAULT_ACCOUNT
        session = self.router.registry.get(session_id)
        try:
            if session is not None:
                account = (await session.target.launch_record()).account or DEFAULT_ACCOUNT
            else:
                launched = await self.deliveries.call(self.deliveries.launch_of, session_id)
                account = (launched.account if launched is not None else None) or DEFAULT_ACCOUNT
        except Exception:  # no plug-in layer, a broken routes.json: the default account
            log.debug("session %r: no launch record to name its account", session_id, exc_info=True)
        self._accounts[session_id] = account
        return account

    async def _parked(self, effects: list[Parked]) -> None:
        for effect in effects:
            park = effect.park
            await self.deliveries.call(self.deliveries.put_park, park)
            self._publish(park.session, {"type": "session-parked", "session": park.session, **park.to_json()})

    def _publish(self, session_id: str, item: dict[str, Any]) -> None:
        session = self.router.registry.get(session_id)
        if session is not None and session.live is not None:
            session.live.publish([item])

    # ------------------------------------------------------------------ deliveries while parked

    async def keep_delivery(self, delivery: Delivery, park: Park) -> Reply:
        """Keep a delivery the park holds; its answer ``parked``."""
        answer = parked_answer(delivery.event_id, park)
        await self.deliveries.call(self._keep, delivery.event_id, park.session, answer["message"])
        return Answered(answer=answer)

    def _keep(self, event_id: str, session_id: str, sentence: str) -> None:
        """In the log's thread: the kept work and the entry, unanswered."""
        if self.deliveries.keep(session_id, event_id, "delivery"):
            self.kept += 1
        entry: DeliveryEntry | None = self.deliveries.get(event_id)
        if entry is not None and entry.state is not State.ANSWERED:
            self.deliveries.put(attrs.evolve(entry, state=State.UNANSWERED, last=("parked", sentence)))

    # ------------------------------------------------------------------ resume

    async def _due(self, resume: Resume) -> None:
        """The timer handed a park over: its marker goes onto the inbox."""
        park = resume.park
        self._pending[park.session] = park
        try:
            while True:
                try:
                    session = self.router.registry.get(park.session) or await self.router.session(park.session)
                    break
                except StoreUnavailable as refused:  # the record blinked past its retries: not "not open"
                    log.warning("session %r: its park ends, but %s; trying again", park.session, refused.message)
                    await trio.sleep(DEFAULT_POLICY.most)
        except Refusal:
            self._pending.pop(park.session, None)
            log.warning("session %r is not open here; its park stays recorded for the next start", park.session)
            return
        try:
            await session.inbox.send(ResumeMarker(park))  # type: ignore[arg-type]
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._pending.pop(park.session, None)
            log.warning("session %r closed as its park ended; its park stays recorded for the next start", park.session)

    async def run_kept(self, session: Session, marker: ResumeMarker) -> None:
        """In the session's inbox: run the park's kept work once, in order
        (see the module docstring)."""
        self._pending.pop(session.id, None)
        for item, kind, _state in await self.deliveries.call(self.deliveries.kept, session.id):
            if self.holding(session.id) is not None:
                return  # parked again meanwhile: the rest waits for that park
            await self.deliveries.call(self.deliveries.mark_kept, session.id, item, "resuming")
            if kind == "operation":
                await self._submit_again(session, item)
            else:
                entry = await self.deliveries.call(self.deliveries.get, item)
                if entry is not None:
                    delivery = Delivery(event_id=item, session=session.id, message=entry.message)
                    reply = await self.router.write_delivery(session, delivery)
                    if isinstance(reply, Answered) and reply.answer.get("status") == "parked":
                        return
            await self.deliveries.call(self.deliveries.mark_kept, session.id, item, "done")
        if self.holding(session.id) is None:
            await self.deliveries.call(self.deliveries.drop_park, session.id)
            self._publish(session.id, {"type": "session-unparked", "session": session.id, "why": "resumed"})

    async def _submit_again(self, session: Session, operation_id: str) -> None:
        containers = self.router.containers
        if containers is None:
            return
        store = containers.host.store
        record = await store.call(store.operations.get, session.id, operation_id)
        if record is None:
            log.warning("session %r: kept operation %r is not in the record", session.id, operation_id)
            return
        await containers.host.session(session.id).submit(record.input, operation_id=operation_id + RESUMED_SUFFIX)

    # ------------------------------------------------------------------ a person

    async def resume_now(self, session_id: str) -> dict[str, Any] | None:
        """Resume a parked session now; None when it is not parked."""
        resume = self.timer.resume_now(session_id)
        if resume is None:
            return None
        self._released[session_id] = resume.park.resets_at
        await self._due(resume)
        return {"session": session_id, "resumed": True, "was": {"parked": resume.park.to_json()}}

    async def cancel(self, session_id: str) -> dict[str, Any]:
        """End a park; its kept deliveries are answered unanswered
        ``park-cancelled`` (the sender may resend them), its kept operations
        stay settled as they ended."""
        park = self.timer.cancel(session_id) or self._pending.pop(session_id, None)
        if park is None:
            return {"session": session_id, "cancelled": False}
        self._released[session_id] = park.resets_at
        dropped = await self.deliveries.call(self._drop, session_id)
        self._publish(session_id, {"type": "session-unparked", "session": session_id, "why": "cancelled"})
        return {"session": session_id, "cancelled": True, "dropped": dropped, "was": {"parked": park.to_json()}}

    def _drop(self, session_id: str) -> list[str]:
        dropped = []
        for item, kind, _state in self.deliveries.kept(session_id):
            if kind != "delivery":
                continue
            entry = self.deliveries.get(item)
            if entry is not None and entry.state is not State.ANSWERED:
                sentence = "the person cancelled the park that kept this message; resend it with the same eventId"
                self.deliveries.put(attrs.evolve(entry, state=State.UNANSWERED, last=("park-cancelled", sentence)))
                dropped.append(item)
        self.deliveries.drop_park(session_id)
        return dropped

