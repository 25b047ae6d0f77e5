"""The user-turn router's decisions, without I/O: the sans-IO core.

Theory of operation
-------------------
A *delivery* is one message for one session under one *event id*: the
person's own words with the Dispatch message id they are (:class:`Person`),
or a card (:class:`Card`), a message the router delivers that nobody at the
session typed. The sender may send the same delivery again (a *resend*) as
often as it likes, concurrently too; the event id is what makes that safe.
Each event id has one :class:`DeliveryEntry` (its entry in the delivery
log), kept durably by the Trio layer
(``router.turns.delivery_log``), in one of three states:

=============  ==============================================================
``pending``    admitted; an attempt may be under way (or was, when the router
               stopped in the middle of one)
``unanswered`` the last attempt got no answer; the next resend tries again
``answered``   final: every resend is answered from the record, nothing is
               written again
=============  ==============================================================

The Trio layer drives a delivery through four plain functions:

1. :func:`admit` (with the record as it stands, or ``None``): a resend of an
   answered delivery is answered from the record; an event id seen before
   for another session or another message is refused
   (``event-id-conflict``); anything else proceeds, with a new ``pending``
   record when the id is new.
2. :func:`plan`, in the session's inbox: what to write. The record it
   returns is stored *before* the write goes out (decide, then do), so a
   router that dies mid-write resends correctly.
3. the Trio layer does the write and reads its outcome, asking
   :func:`before_write` once the write is ready and :func:`after_write`
   once it returned whether the session stopped meanwhile;
4. :func:`settle`: the new record and the sender's :class:`Reply`, from the
   table :data:`TRANSITIONS`.

**A Claude Code session** (through the mod's ``session.message``). The mod
writes a row into the running turn, or the prompt of a new turn when idle,
and is idempotent by the event id: it answers a replay from its own record
and writes nothing (claude-envoy 1.19.0 ``hooks/mod-protocol.ts``, ``ModCallArguments``). Its
answer decides (``mod-protocol.ts``, ``ModCallResults``):

- a row (with its uuid) or a prompt the engine took: answered;
- a prompt the session dropped (``deny`` with ``as: "prompt"``): answered,
  and the answer says so: the person is told their message was dropped;
- a row the session refused (``deny`` with ``as: "row"``): unanswered, so
  the sender resends;
- no answer at all (the call's deadline passed, the link closed, the mod
  failed the call): unanswered.

The Dispatch attempt of a person's message is *spent by the first write*
(``mod-protocol.ts``, ``eventId``: "it is spent by the first frame"): every later attempt
under the same event id goes as a card. So a late answer (the mod wrote the
person's words, but its answer missed the deadline) turns the person's
message into a card under the same event id, and the mod answers that card
from its record of the first write: the words land once. ``plan`` marks the
attempt spent in the record it returns, which is stored before the write.
A session whose mod has not connected gets no write at all (nothing could
read it); the attempt is not spent and the delivery stays unanswered.

**A container session** (through the host). The message becomes a
``prompt`` whose operation id is the event id (the host and the daemon are
idempotent on it), ``whenBusy: "steer"`` when the session's adapter reports
the ``steer`` capability, else ``followUp``. Once the host has the
operation on disk the delivery is answered; a host that refuses it (not
running, say) leaves it unanswered.

**A stopped session** (a limit stopped it, ``router.turns.brackets``) gets
no write at all: the delivery is unanswered (``session-stopped``, with the
stop's reason), no attempt is spent, and a resend once the person resumed
the session goes as the first attempt would have. A turn's end may stop
the session *while* a write is under way (the Trio layer awaits between the
plan and the write: a container turn's bracket opens first; and while the
host stores the prompt): that is the outcome :class:`Stopped`. Stopped
before the write went out, nothing is written and the delivery is
unanswered (``session-stopped``; the planned attempt counts). Stopped after
the host queued the prompt, the delivery is answered (the host has it) and
the operation is aborted (:class:`AbortOperation`): the stop aborted what
was queued before it, and this one must not run either.

Invariants (``tests/turns/test_core_properties.py`` checks them under
hypothesis): an answered entry never changes again; a person's words are
written as the person's at most once per event id, and only by the first
attempt; an event id belongs to one session and one message.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Literal, Mapping, TypeAlias, Union

import attrs

from router.errors import CarriesRefusal, Refusal

__all__ = [
    "AbortOperation",
    "Admission",
    "Answered",
    "Card",
    "ClaudeCodeReadiness",
    "ContainerReadiness",
    "Delivery",
    "Denied",
    "Message",
    "NoAnswer",
    "Outcome",
    "Person",
    "Proceed",
    "PromptTaken",
    "Queued",
    "Readiness",
    "DeliveryEntry",
    "DeliveryRefused",
    "Reply",
    "RowWritten",
    "State",
    "Stopped",
    "SubmitPrompt",
    "TRANSITIONS",
    "TurnCoreError",
    "DeliveryUnanswered",
    "WriteMessage",
    "MAX_ID_CHARS",
    "MAX_TEXT_CHARS",
    "admit",
    "after_write",
    "before_write",
    "check_delivery",
    "message_kind",
    "plan",
    "settle",
    "stopped_sentence",
]


class TurnCoreError(RuntimeError):
    """A bug in the caller: a transition the table does not have."""


class State(enum.Enum):
    PENDING = "pending"
    UNANSWERED = "unanswered"
    ANSWERED = "answered"


# --------------------------------------------------------------------------- messages


@attrs.frozen(kw_only=True)
class Person:
    """The person's own words, with the Dispatch message id they are."""

    text: str
    message_id: str


@attrs.frozen(kw_only=True)
class Card:
    """A message the router delivers that nobody at the session typed."""

    text: str


Message: TypeAlias = Union[Person, Card]


def message_kind(message: Message) -> Literal["person", "card"]:
    return "person" if isinstance(message, Person) else "card"


@attrs.frozen(kw_only=True)
class Delivery:
    """One message for one session, under the sender's event id."""

    event_id: str
    session: str
    message: Message


@attrs.frozen(kw_only=True)
class DeliveryEntry:
    """What the router knows of one event id (stored durably).

    ``attempts`` counts the writes planned; ``person_spent`` says the
    Dispatch attempt of a person's message is used up (every later attempt
    is a card); ``answer`` is the final answer (JSON), once ``answered``;
    ``last`` the ``(code, message)`` of the last attempt that got none.
    """

    event_id: str
    session: str
    message: Message
    state: State = State.PENDING
    attempts: int = 0
    person_spent: bool = False
    answer: Mapping[str, Any] | None = None
    last: tuple[str, str] | None = None


# --------------------------------------------------------------------------- replies


@attrs.frozen(kw_only=True)
class Answered:
    """The delivery's answer; ``from_record`` when a resend was answered
    from the record and nothing was written."""

    answer: Mapping[str, Any]
    from_record: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**self.answer, "fromRecord": self.from_record}


@attrs.frozen(kw_only=True)
class DeliveryUnanswered(CarriesRefusal):
    """No answer this time: the sender resends under the same event id;
    ``refusal`` says why (its code and sentence)."""

    event_id: str
    refusal: Refusal


@attrs.frozen(kw_only=True)
class DeliveryRefused(CarriesRefusal):
    """A refusal at admission (``refusal``); resending the same delivery
    changes nothing."""

    refusal: Refusal


Reply: TypeAlias = Union[Answered, DeliveryUnanswered, DeliveryRefused]

# --------------------------------------------------------------------------- readiness and writes


@attrs.frozen(kw_only=True)
class ClaudeCodeReadiness:
    """A Claude Code session; ``connected`` once its mod said ``hello``;
    ``stopped``, the reason, when a limit stopped the session."""

    connected: bool
    stopped: str | None = None


@attrs.frozen(kw_only=True)
class ContainerReadiness:
    """A container session; ``steers`` when its adapter reports ``steer``;
    ``stopped``, the reason, when a limit stopped the session."""

    steers: bool
    stopped: str | None = None


Readiness: TypeAlias = Union[ClaudeCodeReadiness, ContainerReadiness]


@attrs.frozen(kw_only=True)
class WriteMessage:
    """Call ``session.message`` with this message under the event id."""

    event_id: str
    message: Message


@attrs.frozen(kw_only=True)
class SubmitPrompt:
    """Submit a prompt to the host: operation id, text, ``whenBusy``."""

    operation_id: str
    text: str
    when_busy: Literal["steer", "followUp"]


Write: TypeAlias = Union[WriteMessage, SubmitPrompt]

# --------------------------------------------------------------------------- outcomes


@attrs.frozen(kw_only=True)
class RowWritten:
    """The mod appended a row into the running turn."""

    uuid: str


@attrs.frozen(kw_only=True)
class PromptTaken:
    """The mod submitted a prompt the idle session took."""


@attrs.frozen(kw_only=True)
class Denied:
    """The mod wrote nothing: the session refused the row or dropped the prompt."""

    deny: str
    as_: Literal["row", "prompt"]


@attrs.frozen(kw_only=True)
class NoAnswer(CarriesRefusal):
    """No answer: a deadline, a closed link, a failed call, a host refusal;
    ``refusal`` says which."""

    refusal: Refusal


@attrs.frozen(kw_only=True)
class Queued:
    """The host has the prompt on disk under ``operation_id``."""

    operation_id: str
    when_busy: Literal["steer", "followUp"]


@attrs.frozen(kw_only=True)
class Stopped:
    """A limit stopped the session while the write was under way (between
    the plan and the write, or while the host stored the prompt).
    ``written`` is what the write did when it had gone out already (the
    host has the prompt on disk: it is answered, and aborted so it never
    runs); ``None`` when nothing went out."""

    reason: str
    written: Queued | None = None


Outcome: TypeAlias = Union[RowWritten, PromptTaken, Denied, NoAnswer, Queued, Stopped]


@attrs.frozen(kw_only=True)
class AbortOperation:
    """Abort this container operation: it was queued into a session that
    stopped meanwhile, and must not run."""

    operation_id: str

# --------------------------------------------------------------------------- checking

#: The longest event id, session id and Dispatch message id (ours: ids are
#: UUIDs in practice; a bound keeps the record's keys small).
MAX_ID_CHARS: Final = 256
#: The longest message text (ours: far beyond a typed message, well below
#: anything that would strain the mod link's 32 MiB body bound).
MAX_TEXT_CHARS: Final = 100_000


def _is_text(value: object) -> bool:
    if type(value) is not str:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800")
        return False
    return True


def check_delivery(delivery: Delivery) -> DeliveryRefused | None:
    """Whether a delivery is one the router can take: ids non-empty, of at
    most :data:`MAX_ID_CHARS`, text non-empty and at most
    :data:`MAX_TEXT_CHARS`, all valid Unicode. ``None`` when it is."""
    message = delivery.message
    ids = [("eventId", delivery.event_id), ("session", delivery.session)]
    if isinstance(message, Person):
        ids.append(("messageId", message.message_id))
    for name, value in ids:
        if not _is_text(value) or not value or len(value) > MAX_ID_CHARS:
            return DeliveryRefused(
                refusal=Refusal("bad-delivery", f"{name} must be a non-empty string of valid Unicode, at most "
                                f"{MAX_ID_CHARS} characters"),
            )
    if not _is_text(message.text) or not message.text or len(message.text) > MAX_TEXT_CHARS:
        return DeliveryRefused(
            refusal=Refusal("bad-delivery", f"text must be a non-empty string of valid Unicode, at most "
                            f"{MAX_TEXT_CHARS} characters"),
        )
    if not message.text.strip():
        # Every surface (CLI, API, page, MCP) delivers through here, so each refuses it alike.
        return DeliveryRefused(refusal=Refusal("empty-message", "the message is only whitespace; write some text "
                                               "and send it again"))
    return None


def stopped_sentence(session: str, reason: str) -> str:
    """The sentence a delivery into a stopped session is answered with."""
    return (
        f"session {session!r} is stopped ({reason}), so nothing was written; raise the limit or count "
        "it from now (`router limits`, `router limits set`, `router limits reset PATH`), resume the "
        f"session (`router resume {session}`, or POST /sessions/{session}/resume), then resend with "
        "the same eventId"
    )


# --------------------------------------------------------------------------- admission


@attrs.frozen(kw_only=True)
class Proceed:
    """Go on to the session's inbox with this entry (``new``: just made)."""

    entry: DeliveryEntry
    new: bool


Admission: TypeAlias = Union[Proceed, Answered, DeliveryRefused]


def admit(existing: DeliveryEntry | None, delivery: Delivery) -> Admission:
    """Decide a delivery against the record of its event id (None: new)."""
    if existing is None:
        return Proceed(
            entry=DeliveryEntry(event_id=delivery.event_id, session=delivery.session, message=delivery.message),
            new=True,
        )
    if existing.session != delivery.session:
        return DeliveryRefused(
            refusal=Refusal("event-id-conflict", f"event id {delivery.event_id!r} was already delivered to session "
                            f"{existing.session!r}; a resend names the same session, a new message takes a new "
                            "event id"),
        )
    if existing.message != delivery.message:
        return DeliveryRefused(
            refusal=Refusal("event-id-conflict", f"event id {delivery.event_id!r} was already used for another "
                            "message; a resend carries the same message, a new message takes a new event id"),
        )
    if existing.state is State.ANSWERED:
        assert existing.answer is not None
        return Answered(answer=existing.answer, from_record=True)
    return Proceed(entry=existing, new=False)


# --------------------------------------------------------------------------- planning


def plan(entry: DeliveryEntry, target: Readiness) -> tuple[DeliveryEntry, Write | Reply]:
    """What to do for ``entry`` now: the entry to store first, and the
    write (or, with nothing to write, the reply)."""
    if entry.state is State.ANSWERED:
        assert entry.answer is not None
        return entry, Answered(answer=entry.answer, from_record=True)
    if target.stopped is not None:
        # Nothing is written and no attempt is spent: once the person
        # resumes the session, a resend goes as it would have.
        code = "session-stopped"
        text = stopped_sentence(entry.session, target.stopped)
        return (
            attrs.evolve(entry, state=State.UNANSWERED, last=(code, text)),
            DeliveryUnanswered(event_id=entry.event_id, refusal=Refusal(code, text)),
        )
    if isinstance(target, ClaudeCodeReadiness):
        if not target.connected:
            code = "mod-not-connected"
            text = (
                f"the Claude Code session {entry.session!r} has no mod connected yet, so nothing "
                "was written; resend with the same eventId once the session runs"
            )
            return (
                attrs.evolve(entry, state=State.UNANSWERED, last=(code, text)),
                DeliveryUnanswered(event_id=entry.event_id, refusal=Refusal(code, text)),
            )
        message = entry.message
        if isinstance(message, Person) and entry.person_spent:
            message = Card(text=message.text)
        return (
            attrs.evolve(entry, attempts=entry.attempts + 1, person_spent=True),
            WriteMessage(event_id=entry.event_id, message=message),
        )
    when_busy: Literal["steer", "followUp"] = "steer" if target.steers else "followUp"
    return (
        attrs.evolve(entry, attempts=entry.attempts + 1),
        SubmitPrompt(operation_id=entry.event_id, text=entry.message.text, when_busy=when_busy),
    )


# --------------------------------------------------------------------------- the stop around a write


def before_write(stopped: str | None) -> Stopped | None:
    """Whether a planned write still goes out, now that it is ready (a
    container session's turn bracket is open): ``stopped`` is the
    session's stop reason as it stands now (``None``: not stopped). A
    :class:`Stopped` outcome, with nothing written, when a turn's end
    stopped the session since the plan; ``None`` to write."""
    return None if stopped is None else Stopped(reason=stopped)


def after_write(outcome: Outcome, stopped: str | None) -> tuple[Outcome, AbortOperation | None]:
    """The outcome of a write once the session's stop, as it stands after
    the write returned, is known. A prompt the host queued into a session
    that stopped meanwhile comes after the stop aborted what was queued, so
    it is aborted too (it must not run), and still answered: the host has
    it. A mod write is unchanged (it went into the turn that stopped)."""
    if stopped is not None and isinstance(outcome, Queued):
        return Stopped(reason=stopped, written=outcome), AbortOperation(operation_id=outcome.operation_id)
    return outcome, None


# --------------------------------------------------------------------------- settling

OutcomeKind: TypeAlias = Literal["written", "dropped", "row-refused", "no-answer", "stopped"]

#: (state before, what the outcome was) -> state after. An ``answered``
#: entry is in no row: it is never settled again.
TRANSITIONS: Final[Mapping[tuple[State, OutcomeKind], State]] = {
    (State.PENDING, "written"): State.ANSWERED,
    (State.PENDING, "dropped"): State.ANSWERED,
    (State.PENDING, "row-refused"): State.UNANSWERED,
    (State.PENDING, "no-answer"): State.UNANSWERED,
    (State.UNANSWERED, "written"): State.ANSWERED,
    (State.UNANSWERED, "dropped"): State.ANSWERED,
    (State.UNANSWERED, "row-refused"): State.UNANSWERED,
    (State.UNANSWERED, "no-answer"): State.UNANSWERED,
    (State.PENDING, "stopped"): State.UNANSWERED,
    (State.UNANSWERED, "stopped"): State.UNANSWERED,
}


def _kind_of(outcome: Outcome) -> OutcomeKind:
    if isinstance(outcome, Stopped):
        return "stopped" if outcome.written is None else "written"
    if isinstance(outcome, (RowWritten, PromptTaken, Queued)):
        return "written"
    if isinstance(outcome, Denied):
        return "dropped" if outcome.as_ == "prompt" else "row-refused"
    return "no-answer"


def _answer(entry: DeliveryEntry, write: Write, outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Stopped):
        assert outcome.written is not None
        outcome = outcome.written
    base: dict[str, Any] = {"eventId": entry.event_id, "session": entry.session}
    if isinstance(write, WriteMessage):
        base["message"] = message_kind(write.message)
    if isinstance(outcome, RowWritten):
        return {**base, "status": "delivered", "as": "row", "uuid": outcome.uuid}
    if isinstance(outcome, PromptTaken):
        return {**base, "status": "delivered", "as": "prompt"}
    if isinstance(outcome, Denied):  # a prompt the session dropped: told to the person
        return {**base, "status": "dropped", "as": "prompt", "reason": outcome.deny}
    assert isinstance(outcome, Queued)
    return {
        **base,
        "status": "delivered",
        "as": "prompt",
        "operationId": outcome.operation_id,
        "whenBusy": outcome.when_busy,
    }


def settle(entry: DeliveryEntry, write: Write, outcome: Outcome) -> tuple[DeliveryEntry, Reply]:
    """The entry after ``write`` ended in ``outcome``, and the sender's reply."""
    kind = _kind_of(outcome)
    after = TRANSITIONS.get((entry.state, kind))
    if after is None:
        raise TurnCoreError(f"no transition from {entry.state.value} on {kind} (event {entry.event_id!r})")
    mod_only = isinstance(outcome, (RowWritten, PromptTaken, Denied))
    queued = isinstance(outcome, Queued) or (isinstance(outcome, Stopped) and outcome.written is not None)
    if (queued and not isinstance(write, SubmitPrompt)) or (
        mod_only and not isinstance(write, WriteMessage)
    ):
        raise TurnCoreError(f"{type(outcome).__name__} does not answer {type(write).__name__}")
    if after is State.ANSWERED:
        answer = _answer(entry, write, outcome)
        return attrs.evolve(entry, state=after, answer=answer, last=None), Answered(answer=answer)
    if isinstance(outcome, Denied):
        code = "row-refused"
        text = (
            f"the session refused the row ({outcome.deny}), so nothing was written; "
            "resend with the same eventId"
        )
    elif isinstance(outcome, Stopped):
        code, text = "session-stopped", stopped_sentence(entry.session, outcome.reason)
    else:
        assert isinstance(outcome, NoAnswer)
        code, text = outcome.code, outcome.message
    return (
        attrs.evolve(entry, state=after, last=(code, text)),
        DeliveryUnanswered(event_id=entry.event_id, refusal=Refusal(code, text)),
    )
