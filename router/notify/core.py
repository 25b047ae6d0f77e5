"""Notifications without I/O: what is notified, and where each goes.

Theory of operation
-------------------

A **notification event** (:class:`Event`) is made from a state change the
record writes (an ask that waits, a stop, a park, a resume, a turn that
ended with nobody watching, a session that became unreachable) by the
``*_event`` functions here, and written in the same transaction as that
change (:mod:`router.notify.record`). It has its own id, which is the
idempotency key of every send made for it.

After the commit, the outbox (:mod:`router.notify.outbox`) hands each event
to :func:`route` with the destinations in the person's order (each
``web-push`` device with a subscription, then each ``apprise`` URL, in the
order ``plugins.json`` switches the notifiers on), what is known at that
moment (presence, settings, the ask's state now) and the receipts already
written. :func:`route` answers one :class:`Decision` per destination that
has no final receipt yet:

- ``suppressed`` ``visible``: a device's page shows the session now (the
  device itself, and every other destination: the person is looking at it);
- ``suppressed`` ``muted``: the person muted the session;
- ``suppressed`` ``quiet-hours``: the clock is inside the quiet hours;
- ``suppressed`` ``answered``: the ask was answered (or expired) before its
  notification went out;
- ``send``: everything else.

A destination with a final receipt (``sent``, ``suppressed``, ``failed``)
gets no decision at all: **at most one notification per event per
destination**. The first reason that applies wins, in the order above.

:class:`Presence` keeps which device watches which session: a page that
posts ``{"visible": true, "session": S}`` watches ``S`` until it posts
again or :data:`PRESENCE_TTL` seconds pass without a renewal (the page
renews every 15 s while visible: docs/notifications.md, "On the phone").

Times are passed in (``now``: seconds since the epoch); nothing here reads a
clock or awaits.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import re
import secrets
import zoneinfo
from typing import Any, Final, Iterable, Literal, Mapping, Sequence, TypeVar

import attrs
import cattrs

from router.errors import CarriesRefusal, Refusal, refusal_of
from router.plugins.models import refusal_from
from wire._convert import Builder, Json, Number, type_name
from wire.json import ABSENT, Absent

__all__ = ["PresenceStatistics", 
    "LOCAL_DEVICE",
    "NOTIFY_STATUS",
    "NotifyProblem",
    "Decision",
    "Destination",
    "Event",
    "KINDS",
    "MAX_PAYLOAD",
    "PRESENCE_TTL",
    "Presence",
    "QuietHours",
    "RoutingFacts",
    "SessionSetting",
    "PushSubscription",
    "PresenceBody",
    "SessionSettingBody",
    "SettingsFile",
    "SubscriptionBody",
    "ask_event",
    "check_problems",
    "event_id",
    "park_event",
    "parse_presence",
    "parse_session_setting",
    "parse_subscription",
    "payload",
    "resumed_event",
    "route",
    "stop_event",
    "structure",
    "turn_ended_event",
    "unreachable_event",
]

T = TypeVar("T")

#: The device a request with the loopback token (or the private socket)
#: counts as: this machine, never revoked.
LOCAL_DEVICE: Final = "local"

#: The kinds of event, as the push payload names them (docs/notifications.md, "HTTP").
KINDS: Final = ("ask", "turn-ended", "unreachable", "limit-stopped", "parked", "resumed")
#: Seconds a page's "visible" counts without a renewal (ours: the page renews
#: every 15 s, docs/notifications.md "On the phone"; three renewals missed).
PRESENCE_TTL: Final = 45.0
#: The push payload's largest size in bytes (docs/notifications.md, "HTTP": ≤ 3 kB; push
#: services take 4096 bytes of record, RFC 8291 section 4 less the header).
MAX_PAYLOAD: Final = 3000
#: A title's and a body's longest text, in characters (ours: a lock screen
#: shows two or three lines).
MAX_TITLE: Final = 80
MAX_BODY: Final = 300

#: Refusal code -> HTTP status, for the API's one table.
NOTIFY_STATUS: Final = {
    "notifier-off": 409,
    "notifications-off": 404,
    "bad-subscription": 400,
    "bad-presence": 400,
    "bad-notify-setting": 400,
    "bad-notify-settings": 409,
    "unknown-subscription": 404,
}

Outcome = Literal["sent", "suppressed", "failed", "pending"]
FINAL: Final = frozenset({"sent", "suppressed", "failed"})


def event_id() -> str:
    """A new event id: ``ntf-`` and 128 random bits."""
    return f"ntf-{secrets.token_hex(16)}"


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@attrs.frozen(kw_only=True)
class Event:
    """One notification event (see the module docstring). ``at`` is ms
    since the epoch; ``ask`` is ``{"id", "tool", "session"}`` for an ask."""

    id: str
    kind: str
    session: str
    title: str
    body: str
    at: int
    ask: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "session": self.session, "title": self.title,
                "body": self.body, "at": self.at, "ask": None if self.ask is None else dict(self.ask)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Event:
        ask = value.get("ask")
        return cls(id=str(value["id"]), kind=str(value["kind"]), session=str(value["session"]),
                   title=str(value["title"]), body=str(value["body"]), at=int(value["at"]),
                   ask=None if ask is None else {k: str(v) for k, v in dict(ask).items()})


def payload(event: Event, *, base: str = "/") -> dict[str, Any]:
    """The push payload (docs/notifications.md, "HTTP"), at most
    :data:`MAX_PAYLOAD` bytes of JSON: the body is shortened until it fits."""
    from urllib.parse import quote

    from wire.json import dumps

    out = {"id": event.id, "kind": event.kind, "session": event.session, "title": event.title,
           "body": event.body, "url": f"{base}?session={quote(event.session, safe='')}",
           "ask": None if event.ask is None else dict(event.ask), "at": event.at}
    while len(dumps(out).encode()) > MAX_PAYLOAD and out["body"]:
        out["body"] = _clip(out["body"], len(out["body"]) // 2) if len(out["body"]) > 2 else ""
    return out


# --------------------------------------------------------------------------- events from state changes


def _new(kind: str, session: str, title: str, body: str, at: int, ask: Mapping[str, str] | None = None) -> Event:
    return Event(id=event_id(), kind=kind, session=session, title=_clip(title, MAX_TITLE),
                 body=_clip(body, MAX_BODY), at=at, ask=ask)


def ask_event(ask: Mapping[str, Any], at: int) -> Event | None:
    """The event of an ask as :meth:`router.asks.Ask.to_json` writes it:
    only a *waiting* ask waits on the person (one a rule answered is never
    notified)."""
    if ask.get("state") != "waiting":
        return None
    tool = str(ask.get("tool") or "a tool")
    summary = str(ask.get("summary") or tool)
    session = str(ask["session"])
    return _new("ask", session, f"{tool} needs your answer", summary, at,
                {"id": str(ask["id"]), "tool": tool, "session": session})


def stop_event(session: str, reason: str, at: int) -> Event:
    return _new("limit-stopped", session, "Stopped by a limit", f"{session}: {reason}", at)


def park_event(session: str, resets_at: int, at: int, limit_kind: str = "") -> Event:
    when = dt.datetime.fromtimestamp(resets_at / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    which = f" ({limit_kind})" if limit_kind else ""
    return _new("parked", session, "Parked at the usage limit",
                f"{session}: the provider's usage limit{which} resets at {when}; its work waits until then", at)


def resumed_event(session: str, why: str, at: int) -> Event:
    return _new("resumed", session, "Resumed", f"{session}: {why}", at)


def unreachable_event(session: str, reason: str, at: int) -> Event:
    return _new("unreachable", session, "Unreachable", f"{session}: {reason}", at)


def turn_ended_event(session: str, answer: str, at: int) -> Event:
    first = next((line for line in str(answer).splitlines() if line.strip()), "")
    return _new("turn-ended", session, "Turn ended", f"{session}: {first}" if first else session, at)


# --------------------------------------------------------------------------- settings the routing reads


@attrs.frozen
class QuietHours:
    """``start``/``end`` ``HH:MM`` in ``time_zone``; ``end`` before ``start``
    spans midnight. Equal times are no quiet hours."""

    start: str
    end: str
    time_zone: str = "UTC"

    def __attrs_post_init__(self) -> None:
        for value in (self.start, self.end):
            if type(value) is not str or not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", value):
                raise Refusal("bad-quiet-hours", f"quiet hours are HH:MM (00:00 to 23:59), not {value!r}")
        try:
            zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
            raise Refusal("bad-quiet-hours", f"{self.time_zone!r} is not a time zone name (Europe/Paris, UTC)") \
                from None

    def contains(self, now: float) -> bool:
        local = dt.datetime.fromtimestamp(now, zoneinfo.ZoneInfo(self.time_zone)).strftime("%H:%M")
        if self.start == self.end:
            return False
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end


@attrs.frozen
class SessionSetting:
    muted: bool = False
    turn_ended: bool = False


@attrs.frozen(kw_only=True)
class Destination:
    """Where one notification may go: ``id`` (``web-push:<device id>`` or
    ``apprise:<hash>``), the notifier module, and the device for a phone."""

    id: str
    notifier: str
    label: str
    device: str | None = None


@attrs.frozen(kw_only=True)
class RoutingFacts:
    """What is known when an event is routed."""

    now: float
    #: device id -> its name, for each device watching the event's session.
    watching: Mapping[str, str] = attrs.field(factory=dict)
    setting: SessionSetting = SessionSetting()
    quiet: QuietHours | None = None
    #: The ask's state now (``waiting``, ``answered``, ``expired``, ``gone``), for an ask.
    ask_state: str | None = None


@attrs.frozen
class Decision:
    destination: Destination
    send: bool
    #: For a suppression: the code (``visible``, ``muted``, ``quiet-hours``,
    #: ``answered``) and a sentence.
    code: str | None = None
    detail: str = ""


def _suppression(event: Event, destination: Destination, facts: RoutingFacts) -> tuple[str, str] | None:
    if facts.watching:
        if destination.device is not None and destination.device in facts.watching:
            return "visible", "visible: the session is open on this device"
        names = ", ".join(sorted(facts.watching.values()))
        return "visible", f"visible elsewhere: the session is open on {names}"
    if facts.setting.muted:
        return "muted", "muted: the session's notifications are muted"
    if facts.quiet is not None and facts.quiet.contains(facts.now):
        return "quiet-hours", f"quiet hours ({facts.quiet.start} to {facts.quiet.end} {facts.quiet.time_zone})"
    if event.kind == "ask" and facts.ask_state not in (None, "waiting"):
        return "answered", f"already answered: the ask is {facts.ask_state} before its notification went out"
    return None


def route(event: Event, destinations: Sequence[Destination], facts: RoutingFacts,
          final: Iterable[str] = ()) -> list[Decision]:
    """One decision per destination without a final receipt (``final``: the
    destination ids that have one), in the destinations' order."""
    done = set(final)
    out = []
    for destination in destinations:
        if destination.id in done:
            continue
        why = _suppression(event, destination, facts)
        out.append(Decision(destination, True) if why is None else Decision(destination, False, why[0], why[1]))
    return out


# --------------------------------------------------------------------------- configuration errors


@attrs.frozen(kw_only=True)
class NotifyProblem(CarriesRefusal):
    """A configuration error that stops notifications, or a destination's
    last failure: the notifier it is about (``None``: the settings file),
    the :class:`~router.errors.Refusal` saying what is wrong, and for a
    failure when it happened (ms since the epoch)."""

    notifier: str | None
    refusal: Refusal
    at: int | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"notifier", "error": code, "message", "at"?}``: the refusal's
        one JSON spelling (:meth:`router.errors.Refusal.to_json`)."""
        return {"notifier": self.notifier, **self.refusal.to_json(),
                **({} if self.at is None else {"at": self.at})}


def check_problems(notifier: str, found: object) -> list[NotifyProblem]:
    """What a notifier's ``check`` answered (a list of ``{"code", "message"}``,
    docs/plugins.md), each row as a :class:`NotifyProblem`; an answer or a row
    of another shape is itself one (``notifier-check-malformed``)."""
    rows = found if isinstance(found, (list, tuple)) else [found]
    out = []
    for row in rows:
        refusal = refusal_of(row)
        if refusal is None:
            refusal = Refusal("notifier-check-malformed", f"the {notifier} notifier's check answered "
                              f"{str(row)[:200]}, not a list of {{code, message}}")
        out.append(NotifyProblem(notifier=notifier, refusal=refusal))
    return out


# --------------------------------------------------------------------------- presence


@attrs.frozen
class PresenceStatistics:
    """What a :class:`Presence` knows: the devices seen, and how many show a session."""

    devices: int
    showing: int


class Presence:
    """Which device watches which session (see the module docstring)."""

    def __init__(self, ttl: float = PRESENCE_TTL) -> None:
        self._ttl = ttl
        #: device id -> (name, session shown or None, until).
        self._seen: dict[str, tuple[str, str | None, float]] = {}

    def __repr__(self) -> str:
        return f"<Presence devices={len(self._seen)}>"

    def statistics(self) -> PresenceStatistics:
        return PresenceStatistics(devices=len(self._seen),
                                  showing=sum(1 for _, s, _ in self._seen.values() if s is not None))
    def post(self, device: str, name: str, *, visible: bool, session: str | None, now: float) -> None:
        if visible:
            self._seen[device] = (name, session, now + self._ttl)
        else:
            self._seen.pop(device, None)

    def gone(self, device: str) -> None:
        """The device's page went away (its stream closed)."""
        self._seen.pop(device, None)

    def watching(self, session: str, now: float) -> dict[str, str]:
        """device id -> name, for each device whose page shows ``session`` now."""
        for device in [d for d, (_, _, until) in self._seen.items() if until <= now]:
            del self._seen[device]
        return {device: name for device, (name, shown, _) in self._seen.items() if shown == session}


# --------------------------------------------------------------------------- bodies


def _b64url(value: str, what: str, size: int | None) -> bytes:
    if not value or len(value) > 200 or not re.fullmatch(r"[A-Za-z0-9_-]+=*", value):
        raise Refusal("bad-subscription", f"keys.{what} is base64url text")
    try:
        raw = base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        raise Refusal("bad-subscription", f"keys.{what} is base64url text") from None
    if size is not None and len(raw) != size:
        raise Refusal("bad-subscription", f"keys.{what} is {size} bytes once decoded, not {len(raw)}")
    return raw


@attrs.frozen(kw_only=True)
class PushSubscription:
    """A browser's push subscription (``PushSubscription.toJSON()``)."""

    endpoint: str
    p256dh: str
    auth: str = attrs.field(repr=False)
    expiration: int | None = None

    @property
    def id(self) -> str:
        """Stable per endpoint: the same endpoint posted again replaces the old one."""
        return "sub-" + hashlib.sha256(self.endpoint.encode()).hexdigest()[:16]

    def info(self) -> dict[str, Any]:
        """What pywebpush takes as ``subscription_info``."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}


# The bodies and the settings file are structured by two converters on the
# wires' Builder (strict leaves, unknown keys refused, an optional key absent
# or of its type): the subscription is the browser's camelCase
# ``PushSubscription.toJSON()``, everything else of ours is snake_case. What
# follows a structuring trusts its types and checks only values (a URL's
# scheme, a key's length).


class NotifyShapeError(ValueError):
    """A notification body's or settings file's value of the wrong type."""


@attrs.frozen(kw_only=True)
class SubscriptionKeys:
    p256dh: str
    auth: str


@attrs.frozen(kw_only=True)
class SubscriptionBody:
    """``POST /notifications/subscriptions``: ``PushSubscription.toJSON()``."""

    endpoint: str
    expiration_time: Number | None | Absent = ABSENT
    keys: SubscriptionKeys


@attrs.frozen(kw_only=True)
class PresenceBody:
    """``POST /presence``: ``session`` absent or null is no session."""

    visible: bool
    session: str | None | Absent = ABSENT


@attrs.frozen(kw_only=True)
class SessionSettingBody:
    """``POST /sessions/<id>/notify``: each key absent keeps the current value."""

    muted: bool | None = None
    turn_ended: bool | None = None


@attrs.frozen(kw_only=True)
class SettingsFile:
    """``notifications.json`` as written (:mod:`router.notify.config`); every key optional."""

    notifiers: Mapping[str, Mapping[str, Json]] = attrs.field(factory=dict)
    quiet_hours: QuietHours | None | Absent = ABSENT
    turn_ended: bool = False
    sessions: Mapping[str, SessionSetting] = attrs.field(factory=dict)


SUBSCRIPTION_SHAPE: Final = "{endpoint, expirationTime?, keys: {p256dh, auth}}"
PRESENCE_SHAPE: Final = '{"visible": true|false, "session"?: "<session id>"|null}'
SESSION_SETTING_SHAPE: Final = '{"muted"?: true|false, "turn_ended"?: true|false}'


def _converters() -> tuple[cattrs.Converter, cattrs.Converter]:
    """``(snake, camel)``: ours (the settings file, presence, a session's
    setting) and the browser's subscription."""
    snake = Builder(NotifyShapeError, tags={}, detailed=True, spell=str)
    snake.conv.forbid_extra_keys = True
    snake.mappings()
    snake.classes(SessionSetting, QuietHours)
    quiet_hours = snake.conv.get_structure_hook(QuietHours)

    def structure_quiet_hours(value: object, _: Any) -> QuietHours:
        try:
            return quiet_hours(value, QuietHours)
        except cattrs.ClassValidationError as exc:
            # Its times and zone, checked by the class: the sentence without the code.
            refused = [inner for inner in exc.exceptions if isinstance(inner, Refusal)]
            if refused:
                raise NotifyShapeError(refused[0].message) from None
            raise

    snake.conv.register_structure_hook(QuietHours, structure_quiet_hours)
    snake.classes(SettingsFile, PresenceBody, SessionSettingBody)
    camel = Builder(NotifyShapeError, tags={}, detailed=True)
    camel.conv.forbid_extra_keys = True
    camel.classes(SubscriptionKeys, SubscriptionBody)
    return snake.conv, camel.conv


_SNAKE, _CAMEL = _converters()


def structure(value: object, cls: type[T], *, code: str, what: str) -> T:
    """``value`` as a ``cls``, or the refusal ``code`` naming ``what`` (the
    route's shape, the file) and the failing path."""
    if type(value) is not dict:
        raise Refusal(code, f"{what}: expected a JSON object, got {type_name(value)}")
    try:
        return (_CAMEL if cls is SubscriptionBody else _SNAKE).structure(value, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        raise refusal_from(exc, what=what, code=code) from None


def parse_subscription(body: object, *, allow_http: bool = False) -> PushSubscription:
    """A subscription body, or ``bad-subscription`` with a sentence.
    ``allow_http``: an ``http://`` endpoint (tests' loopback push service)."""
    try:
        parsed = structure(body, SubscriptionBody, code="bad-subscription",
                           what=f"POST /notifications/subscriptions takes {SUBSCRIPTION_SHAPE}")
    except Refusal as refusal:  # the path as the browser spells the key
        raise Refusal(refusal.code, refusal.message.replace(": expiration_time:", ": expirationTime:")) from None
    endpoint = _endpoint(parsed.endpoint, allow_http)
    expiration = parsed.expiration_time
    if expiration is not ABSENT and expiration is not None and not 0 <= expiration < 2**53:
        raise Refusal("bad-subscription", "expirationTime is null or a time in ms since the epoch")
    point = _b64url(parsed.keys.p256dh, "p256dh", 65)
    if point[0] != 4:
        raise Refusal("bad-subscription", "keys.p256dh is an uncompressed P-256 point (65 bytes starting 0x04)")
    _b64url(parsed.keys.auth, "auth", 16)
    return PushSubscription(endpoint=endpoint, p256dh=parsed.keys.p256dh, auth=parsed.keys.auth,
                            expiration=None if expiration is ABSENT or expiration is None else int(expiration))


def _endpoint(endpoint: str, allow_http: bool) -> str:
    """A subscription's ``endpoint``: the push service's URL."""
    schemes = ("https://", "http://") if allow_http else ("https://",)
    if (not endpoint.startswith(schemes) or len(endpoint) > 2048
            or any(c in endpoint for c in " \r\n\t\x00") or not endpoint.isprintable()):
        raise Refusal("bad-subscription", "endpoint is the push service's https:// URL (at most 2048 characters)")
    return endpoint


def parse_presence(body: object) -> tuple[bool, str | None]:
    """``{"visible": bool, "session"?: str | null}``, or ``bad-presence``."""
    parsed = structure(body, PresenceBody, code="bad-presence", what=f"POST /presence takes {PRESENCE_SHAPE}")
    session = None if parsed.session is ABSENT else parsed.session
    if session is not None and (not session or len(session) > 256 or not session.isprintable()):
        raise Refusal("bad-presence", "session is a session id (text, at most 256 characters) or null")
    return parsed.visible, session


def parse_session_setting(body: object, current: SessionSetting) -> SessionSetting:
    """``{"muted"?: bool, "turn_ended"?: bool}`` over ``current``, or ``bad-notify-setting``."""
    parsed = structure(body, SessionSettingBody, code="bad-notify-setting",
                       what=f"POST /sessions/<id>/notify takes {SESSION_SETTING_SHAPE}")
    given = {key: value for key, value in attrs.asdict(parsed).items() if value is not None}
    return attrs.evolve(current, **given)


def mask(url: str) -> str:
    """An apprise URL as it may be shown: its scheme and host's first
    letters, never its tokens, passwords or paths."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    shown = host[:3] + "…" if len(host) > 3 else "…"
    return f"{scheme}://{shown}" if rest else f"{scheme[:12]}…"


def url_key(url: str) -> str:
    """A destination id for an apprise URL that does not reveal it."""
    return "apprise:" + hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:12]
