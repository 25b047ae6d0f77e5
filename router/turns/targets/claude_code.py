"""A Claude Code session as a target: its mod link.

The router writes with ``session.message`` under the call deadline; the
session's one live-view task reads the link's events, turns them into live
items (:class:`~router.turns.live.ModLiveConverter` inside a
:class:`~router.turns.live.LiveHub`) and then hands each turn's start and
end to the session's brackets, so a turn's end reaches the brackets after
its result reached the viewers. The mod link carries no abort: a turn is
stopped at the session's own terminal.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

import trio

from router.asks import Ask, AskBook, AskPolicy, policy_from, rule_for, rule_text
from router.board.state import claude_code_state
from router.errors import Refusal
from router.modlink.errors import ModCallError, ModCallTimeout, ModLinkClosed, ModSubscriberOverflow
from router.modlink.server import ModLink
from router.plugins.routing import LaunchRecord
from router.plugins.settings import SettingsDir, default_settings_dir
from router.turns.brackets import attached_launch
from router.turns.core import (
    ClaudeCodeReadiness,
    Denied,
    NoAnswer,
    Outcome,
    Person,
    PromptTaken,
    RowWritten,
    SubmitPrompt,
    WriteMessage,
)
from router.limits import limit_of_mod_event, limit_of_text, wall_ms
from router.turns.live import LiveHub
from router.turns.registry import SessionKind, Starter
from router.turns.session_brackets import SessionBrackets
from router.turns.resume import StreamCursor, parse_live_id
from router.turns.targets.base import LiveStream, stale
from wire.json import ABSENT
from wire.mod import (
    MOD_CAPABILITY_ASKS,
    ModAppendEvent,
    ModUnknownEvent,
    ModAskAnswerArgs,
    ModAskEvent,
    ModHelloEvent,
    ModMessageDenied,
    ModPromptTaken,
    ModRowWritten,
    ModSessionEndEvent,
    ModSessionMessageArgs,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
    ModUnreadCard,
    ModUnreadPerson,
)

__all__ = ["ClaudeCodeTarget"]

log = logging.getLogger("router.asks")

#: How long the answer to an ask may take to reach the mod (ours: a poll hold
#: and a little; the mod hands the ask back to Claude Code if the link goes).
ANSWER_CALL_DEADLINE = 15.0
#: How long the mod may take to name the session's model (ours: one poll
#: hold and a little, as an ask's answer).
MODEL_CALL_DEADLINE = 15.0


class ClaudeCodeTarget:
    """One Claude Code session's mod link, as a target (see the module
    docstring). ``deadline`` (seconds) bounds each ``session.message``;
    ``instance`` and ``routes()`` name the launch record its turns are
    metered under (it was not launched by this router)."""

    kind = SessionKind.CLAUDE_CODE
    one_turn = True

    def __init__(
        self,
        session_id: str,
        *,
        env: Mapping[str, str],
        link_options: Mapping[str, Any],
        deadline: float,
        instance: str,
        routes: Callable[[], Awaitable[object]],
        record_ask: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        record_turn_end: Callable[[str, str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.id = session_id
        self.link = ModLink(session_id, env=env, **link_options)
        self.hub: LiveHub | None = LiveHub()
        self.deadline = deadline
        self.instance = instance
        self._routes = routes
        # Subscribed before the link serves, so the view misses no event.
        self._first = self.link.events()
        #: The permission asks the mod reported (router.asks), each waiting
        #: in a task of the ``asks`` nursery under its deadline.
        self.asks = AskBook(session_id)
        self._answered: dict[str, trio.Event] = {}
        self._asks_nursery: trio.Nursery | None = None
        self._settings = SettingsDir(default_settings_dir(env))
        self._mod_knows_asks = False
        #: Keeps each ask and its answer in the session's record (the
        #: delivery log's ``asks``); None keeps them in memory only.
        self._record_ask = record_ask
        #: Tells the session's record a turn ended, with its answer
        #: ``(session, turn id, text)`` (the delivery log's
        #: ``turn_ended``: a notification); None tells nobody.
        self._record_turn_end = record_turn_end
        #: Told what the view sees of the provider's usage limit (the
        #: router's parking; None: nobody listens).
        self.on_limit: Callable[[Any], None] | None = None
        #: Whether the mod told this turn's limit (its reset is exact; the
        #: answer's sentence is then not read).
        self._limit_told = False
        #: The model the mod named when asked (``session.model``), until a
        #: turn's steps or a model event name it (the link's state).
        self._asked_model: str | None = None

    def __repr__(self) -> str:
        return f"<ClaudeCodeTarget {self.id!r} {self.link!r}>"

    # ------------------------------------------------------------------ tasks

    def tasks(self, brackets: SessionBrackets | None) -> list[Starter]:
        async def serve_link(task_status: trio.TaskStatus[None]) -> None:
            await self.link.run(task_status=task_status)

        async def view(task_status: trio.TaskStatus[None]) -> None:
            await self._view(brackets, task_status)

        async def serve_asks(task_status: trio.TaskStatus[None]) -> None:
            async with trio.open_nursery() as nursery:
                self._asks_nursery = nursery
                task_status.started()
                await trio.sleep_forever()

        return [("asks", serve_asks), ("mod-link", serve_link), ("live-view", view)]

    async def _view(self, brackets: SessionBrackets | None, task_status: trio.TaskStatus[None]) -> None:
        """The session's one live-view task: the link's events, converted,
        then handed to the brackets. A subscription that overflowed is
        replaced (the view's readers are told to take a fresh snapshot; the
        brackets take the turn the link's state says runs)."""
        assert self.hub is not None
        subscription = self._first
        task_status.started()
        while True:
            with subscription:
                try:
                    async for event in subscription:
                        self._seen(event, brackets)
                except ModSubscriberOverflow as exc:
                    self.hub.reset(str(exc))
                    subscription = self.link.events()
                    if brackets is not None:
                        state = self.link.state
                        brackets.resync([state.turn_id] if state.turn_running and state.turn_id else [])
                    continue
            self._asks_gone()
            return  # the link stopped

    def _seen(self, event: Any, brackets: SessionBrackets | None) -> None:
        """One event of the link, in the view's task: the asks, the usage
        limit, the live view, a turn's end, then the brackets."""
        assert self.hub is not None
        if isinstance(event, (ModHelloEvent, ModSessionEndEvent)):
            # A mod that starts again, or a session that ended, waits on no ask.
            self._asks_gone()
        if isinstance(event, ModHelloEvent):
            self._mod_knows_asks = event.capabilities is not ABSENT and (
                MOD_CAPABILITY_ASKS in event.capabilities
            )
            if self.link.state.model is None and self._asks_nursery is not None:
                self._asks_nursery.start_soon(self._ask_model, name=f"model-{self.id}")
        if isinstance(event, ModAskEvent):
            self._ask_reported(event)
        self._limit_of(event)
        self.hub.feed([event])
        if isinstance(event, ModTurnCompleteEvent):
            self._turn_ended(event.turn_id)
        if brackets is not None:
            _bracket_mod_event(brackets, event)

    def _turn_ended(self, turn: str) -> None:
        """Record the turn's end with its answer (the text of its last
        assistant step the view drew), beside the view: the view never
        waits on the disk."""
        if self._record_turn_end is None or self._asks_nursery is None or self.hub is None:
            return
        text = ""
        for message in reversed(self.hub.converter.messages.values()):
            if message.get("operationId") != turn:
                continue
            text = "".join(part.get("text", "") for part in message["parts"] if part.get("type") == "text")
            if text.strip():
                break
        self._asks_nursery.start_soon(self._record_end, turn, text, name=f"turn-end-{self.id}")

    async def _record_end(self, turn: str, text: str) -> None:
        assert self._record_turn_end is not None
        try:
            await self._record_turn_end(self.id, turn, text)
        except Exception:  # noqa: BLE001 - the record failing never holds the session up
            log.exception("session %s: the end of turn %s could not be recorded", self.id, turn)

    async def _ask_model(self) -> None:
        """Claude Code names its model in a turn's steps; before the first,
        ask the mod (``session.model``) so the board shows it. A mod that
        cannot say leaves it unknown (logged)."""
        try:
            value = await self.link.call("session.model", deadline=MODEL_CALL_DEADLINE)
        except (ModCallError, ModCallTimeout, ModLinkClosed) as exc:
            log.info("session %r: the mod did not name its model: %s", self.id, exc)
            return
        if type(value) is str and value:
            self._asked_model = value

    # ------------------------------------------------------------------ the usage limit

    def _limit_of(self, event: object) -> None:
        """Tell the parking of a usage limit the mod's events show: the
        mod's ``usage-limit`` event (exact), else Claude Code's answer from
        the model ``<synthetic>`` (``You've hit your 5-hour limit · resets
        6:40am (UTC)``: minutes only; docs/limits.md)."""
        if self.on_limit is None:
            return
        if isinstance(event, ModTurnStartEvent):
            self._limit_told = False
        elif isinstance(event, ModUnknownEvent):
            seen = limit_of_mod_event(event.raw, wall_ms())
            if seen is not None:
                self._limit_told = True
                self.on_limit(seen)
        elif (isinstance(event, ModAppendEvent) and event.door == "response" and not self._limit_told
              and event.origin.model == "<synthetic>"):
            for block in event.message.content:
                text = block.get("text") if isinstance(block, dict) else None
                seen = limit_of_text(text, wall_ms()) if isinstance(text, str) else None
                if seen is not None:
                    self.on_limit(seen)
                    return

    # ------------------------------------------------------------------ asks

    def _ask_reported(self, event: ModAskEvent) -> None:
        """Keep the ask and start its wait; an ask the book refuses (an id
        reported twice) is logged and left to the wait already running."""
        now = time.time()
        ask = Ask(
            id=event.ask_id, session=self.id, tool=event.tool, input=event.input, summary=event.summary,
            opened=now, deadline=now, reason=None if event.reason is ABSENT else event.reason,
            tool_use_id=None if event.tool_use_id is ABSENT else event.tool_use_id,
        )
        try:
            self.asks.open(ask)
        except Refusal as refused:
            log.warning("session %s: %s", self.id, refused)
            return
        self._answered[ask.id] = trio.Event()
        assert self._asks_nursery is not None
        self._asks_nursery.start_soon(self._wait_for_answer, ask)

    def _asks_gone(self) -> None:
        """The mod no longer waits on its asks (its link stopped, it started
        again, the session ended): each waiting one is ``gone``, its wait ends,
        and no answer is sent for it."""
        for ask in self.asks.waiting():
            self.asks.close(ask.id, now=time.time(), state="gone")
            event = self._answered.get(ask.id)
            if event is not None:
                event.set()

    async def _policy(self) -> AskPolicy:
        document = await trio.to_thread.run_sync(self._settings.read, "asks.json")
        policy = document if isinstance(document, Refusal) else policy_from(document.value)
        if isinstance(policy, Refusal):
            # A broken asks.json answers nothing by rule; the person still can.
            log.warning("asks.json cannot be used (%s); asks wait %g s, no rules", policy, AskPolicy().deadline)
            return AskPolicy()
        return policy

    async def _wait_for_answer(self, ask: Ask) -> None:
        """One ask's life: a rule answers it, or a person within the
        deadline (a cancel scope), or nobody and Claude Code's prompt comes
        up. The answer is then sent to the mod."""
        policy = await self._policy()
        ask.deadline = ask.opened + policy.deadline
        await self._record(ask)
        rule = rule_for(policy.rules, ask.tool, ask.input)
        if ask.state != "waiting":
            pass  # gone while the policy was read
        elif rule is not None:
            self.asks.answer(ask.id, rule.decision, by=f"rule:{rule_text(rule)}", now=time.time())
        else:
            with trio.move_on_after(policy.deadline):
                await self._answered[ask.id].wait()
            self.asks.close(ask.id, now=time.time())
        self._answered.pop(ask.id, None)
        await self._record(ask)
        if ask.state == "gone":
            return
        decision = ask.decision if ask.state == "answered" else "ask"
        reason = ABSENT
        if decision == "deny":
            reason = f"The person denied this call ({ask.by})"
        args = ModAskAnswerArgs(ask_id=ask.id, decision=decision, reason=reason)  # type: ignore[arg-type]
        log.info("session %s: ask %s %s (%s) by %s", self.id, ask.id, ask.state, decision, ask.by)
        if not self._mod_knows_asks:
            return  # only a mod whose hello named the asks is sent their answers
        try:
            await self.link.call("ask.answer", args, deadline=ANSWER_CALL_DEADLINE)
        except Refusal as failed:
            # The mod hands the ask back to Claude Code when its link goes.
            log.warning("session %s: the answer to ask %s did not reach the mod: %s", self.id, ask.id, failed)

    async def _record(self, ask: Ask) -> None:
        if self._record_ask is None:
            return
        try:
            await self._record_ask(ask.to_json())
        except Exception:  # noqa: BLE001 - the record failing never holds the ask up
            log.exception("session %s: ask %s could not be recorded", self.id, ask.id)

    def answer_ask(self, ask_id: str, decision: str, *, by: str) -> dict[str, Any]:
        """A person's answer: the first wins. Raises :class:`Refusal`
        (``unknown-ask``, ``ask-answered``, ``ask-expired``, ``bad-decision``)."""
        ask = self.asks.answer(ask_id, decision, by=by, now=time.time())
        event = self._answered.get(ask_id)
        if event is not None:
            event.set()
        return ask.to_json()

    # ------------------------------------------------------------------ writing

    def readiness(self, stopped: str | None) -> ClaudeCodeReadiness:
        return ClaudeCodeReadiness(connected=self.link.state.hello_session_id is not None, stopped=stopped)

    async def prepare(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None,
                      launch: LaunchRecord | None = None) -> None:
        """Nothing to prepare: the mod writes into whatever turn runs."""

    def withdraw(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> None:
        """Nothing was prepared."""

    async def write(self, step: WriteMessage | SubmitPrompt, brackets: SessionBrackets | None) -> Outcome:
        assert isinstance(step, WriteMessage)
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
            result = await self.link.call("session.message", args, deadline=self.deadline)
        except ModCallTimeout:
            return NoAnswer(
                refusal=Refusal("no-answer", f"the Claude Code session did not answer within {self.deadline:g} s; "
                                "resend with the same eventId (a resend goes as a card, and the session answers it "
                                "from its record if this write landed)"),
            )
        except ModLinkClosed:
            return NoAnswer(
                refusal=Refusal("link-closed", "the session's mod link closed before it answered; resend with the "
                                "same eventId"),
            )
        except ModCallError as exc:
            return NoAnswer(
                refusal=Refusal("mod-error", f"the mod failed the write ({exc.error}); resend with the same eventId"),
            )
        if isinstance(result, ModRowWritten):
            return RowWritten(uuid=result.uuid)
        if isinstance(result, ModPromptTaken):
            return PromptTaken()
        assert isinstance(result, ModMessageDenied)
        return Denied(deny=result.deny, as_=result.as_)

    async def abort_operation(self, operation_id: str) -> None:  # pragma: no cover - the core never asks
        raise AssertionError("a Claude Code session has no operations to abort")

    # ------------------------------------------------------------------ metering

    async def turns_seen(self, brackets: SessionBrackets) -> None:
        """The link's events are the view's: a turn the mod ended is seen."""

    async def stopped(self) -> None:
        """Nothing is queued in a Claude Code session: the stop holds its
        next deliveries, and that is all."""

    async def launch_record(self) -> LaunchRecord:
        state = self.link.state
        return attached_launch(
            # A ``/clear`` moves the session id, and the transcript with it.
            session=state.session_id or self.id, instance=self.instance, harness="claude-code",
            via="mod-link", routes=await self._routes(), model=state.model,
            harness_version=state.claude_version, counts_account=True,
        )

    # ------------------------------------------------------------------ reading

    def entry(self) -> dict[str, Any]:
        state = self.link.state
        waiting = self.asks.waiting()
        entry = {
            "id": self.id,
            "kind": self.kind.value,
            "busy": state.turn_running,
            "connected": state.hello_session_id is not None,
            "state": claude_code_state(link=state, stopped=False, closed=False, waiting=bool(waiting)),
            **({"model": state.model or self._asked_model} if state.model or self._asked_model else {}),
        }
        if waiting:
            first = waiting[0]
            entry["ask"] = {"id": first.id, "tool": first.tool, "summary": first.summary, "since": first.opened}
        return entry

    async def messages(self) -> list[Any]:
        assert self.hub is not None
        return self.hub.converter.snapshot()["messages"]

    @contextlib.asynccontextmanager
    async def live(self, since: str | None = None) -> AsyncIterator[LiveStream]:
        """The live view; a resume point is honoured while the view's
        history holds it. The router keeps no durable record of a Claude
        Code session, so an id from before a restart gets a reset."""
        assert self.hub is not None
        point = parse_live_id(since)
        with self.hub.subscribe(point) as subscription:
            cursor = StreamCursor(subscription.epoch)
            if subscription.replay is not None:
                yield LiveStream.resumed(subscription, cursor)
                return
            yield LiveStream(
                subscription, cursor,
                snapshot={"session": self.id, "kind": self.kind.value, **subscription.snapshot},
                snapshot_id=cursor.id_of(subscription.position, None),
                reset=stale(point, since),
            )  # fmt: skip

    async def abort(self, operation_id: str | None) -> dict[str, Any]:
        raise Refusal(
            "abort-unsupported",
            "a Claude Code session's turn is stopped at its own terminal (Esc); the mod link carries no abort",
        )


def _bracket_mod_event(brackets: SessionBrackets, event: Any) -> None:
    if isinstance(event, ModTurnStartEvent):
        brackets.turn_started(event.turn_id)
    elif isinstance(event, ModTurnCompleteEvent):
        brackets.turn_ended(event.turn_id)
    elif isinstance(event, (ModHelloEvent, ModSessionEndEvent)):
        brackets.all_ended()  # the mod restarted, or the session ended: no turn runs
