"""The outbox: notification events sent after their commit, once per
destination, by the router that holds them.

Theory of operation
-------------------

:meth:`Notifications.attach` installs the ``notify`` tables in the delivery
record's database and hooks :class:`~router.notify.record.Notices` on it,
so every ask, stop, park and resume writes its event in its own
transaction. :meth:`Notifications.run` is the worker: woken by each event
written (and every :data:`POLL` seconds, to take over an event another
router's expired claim left), it claims the open events
(:func:`router.notify.record.claim`), and for each:

1. reads what is true now (the settings file, the notifier modules
   switched on, the subscriptions, the ask's state, who watches the
   session) and asks :func:`router.notify.core.route` what to do with each
   destination that has no final receipt yet;
2. writes each suppression as its receipt; for each send, writes a
   ``pending`` receipt, sends (under :data:`SEND_DEADLINE`), and writes the
   outcome (``sent`` with the push status, or ``failed`` with the service's
   words); an ask answered meanwhile is suppressed instead (checked again
   right before each send);
3. marks the event done once every destination has its final receipt.

**Exactly once, and where it is only at least once.** The event commits
with its cause or not at all, so no cause goes unnotified, and nothing is
sent before the cause is on disk. A router killed after the commit and
before the send finds the event open on its restart (its claim is its own,
by its router id) and sends it then, once: a destination with a final
receipt is never sent to again. The one window left is between a push
service's answer and the ``sent`` receipt's commit: a router killed there
sends again after its restart (the ``pending`` receipt says a send may have
gone). Web Push makes that repeat harmless: the message carries a ``Topic``
from the event id (a push service still holding the first replaces it) and
the page shows it with the event id as its ``tag`` (a device shows one
notification per event). An apprise service may show it twice.

Error handling: a notifier that crashes, times out or answers in the wrong
shape gives a ``failed`` receipt naming why; bad settings are reported
(:meth:`Notifications.problems`) and read as empty. None of it reaches a
delivery or a turn: the record's hook only inserts a row, and the worker
runs beside everything else.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Final

import attrs
import trio

from router.notify import record
from router.notify.record import NoticeSource
from router.notify.config import NotifySettings, load_settings, save_settings, vapid_key
from router.errors import Refusal
from router.notify.core import (LOCAL_DEVICE, Destination, Event, NotifyProblem, Presence, PresenceStatistics,
                                RoutingFacts, SessionSetting, check_problems, payload, route)
from router.plugins.loader import LoadedModule, Loader
from router.plugins.settings import SettingsDir

__all__ = ["NotificationsStatistics", "Notifications", "POLL", "SEND_DEADLINE"]

log = logging.getLogger("router.notify")

#: Seconds between two looks at the outbox with no wake-up (ours: another
#: router's claim expires after record.CLAIM; a minute's delay then is fine).
POLL: Final = 5.0
#: Seconds one destination's send may take (ours: a push service answers in
#: well under a second; an SMTP server may be slow).
SEND_DEADLINE: Final = 30.0


def _ms() -> int:
    return time.time_ns() // 1_000_000


def _json_of(problem: NotifyProblem | None) -> dict[str, Any] | None:
    return None if problem is None else problem.to_json()


@attrs.frozen
class NotificationsStatistics:
    """What the :class:`Notifications` did: sent, suppressed, failed, the
    notices written, and the devices' presence."""

    sent: int
    suppressed: int
    failed: int
    written: int
    presence: PresenceStatistics


class Notifications:
    """The router's notifications: the outbox worker, presence, settings.

    ``deliveries`` is the :class:`router.turns.delivery_log.DeliveryLog`;
    ``settings`` the plug-in settings directory (``plugins.json``:
    which notifiers are on); ``claimant`` this router's id."""

    def __init__(self, *, deliveries: NoticeSource, settings: SettingsDir, settings_dir: Path, data_dir: Path,
                 claimant: str, host_store: NoticeSource | None = None, loader_root: str | None = None,
                 page_url: Callable[[], str | None] = lambda: None, clock: Callable[[], float] = time.time) -> None:
        self.deliveries = deliveries
        #: The host's store (:class:`router.host.store.Store`): its turns'
        #: ends and its daemons' unreachability are events too.
        self.host_store = host_store
        #: Where events are read from: the delivery record, and the host's
        #: store when it is a database of its own (a SQLite file; with
        #: PostgreSQL both write the one table).
        self.sources: list[NoticeSource] = [deliveries]
        self.settings = settings
        self.settings_dir = Path(settings_dir)
        self.data_dir = Path(data_dir)
        self.claimant = claimant
        self.presence = Presence()
        self.page_url = page_url
        self._clock = clock
        self._loader = Loader(root=loader_root, log=lambda entry: log.warning("notifier refused: %s", entry))
        self._plugins_mark: str | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._wakeup = trio.Event()
        self._settings_lock = trio.Lock()
        self._settings = NotifySettings()
        self._vapid: str | None = None
        self.notices = record.Notices(claimant, wake=self.wake,
                                      turn_ended=lambda session: self._settings.setting(session).turn_ended)
        self.sent = self.suppressed = self.failed = 0
        #: Which of the given paired devices' ids are revoked (or gone):
        #: :meth:`router.remote.reach.Reach.revoked_among`, set once the
        #: router listens beyond loopback. A revoked device's subscriptions
        #: are removed before anything is sent to it.
        self.revoked_devices: Callable[[list[str]], Awaitable[set[str]]] | None = None
        #: destination id -> its last failure (``send-failed``, the sentence,
        #: when), shown with the settings.
        self.last_error: dict[str, NotifyProblem] = {}

    def __repr__(self) -> str:
        return (f"<Notifications {self.claimant!r} sent={self.sent} suppressed={self.suppressed} "
                f"failed={self.failed} {self.presence!r}>")

    def statistics(self) -> NotificationsStatistics:
        return NotificationsStatistics(sent=self.sent, suppressed=self.suppressed, failed=self.failed,
                                       written=self.notices.written, presence=self.presence.statistics())
    # ------------------------------------------------------------------ setup

    async def attach(self) -> None:
        """Install the tables and hook the record (before anything writes)."""
        self._settings = await self.read_settings()
        await self.deliveries.call(record.install, self.deliveries.database)
        self.deliveries.on_change = self.notices
        host = self.host_store
        if host is not None:
            await host.call(record.install, host.database)
            host.on_change = self.notices
            if host.database.dialect == "sqlite":
                self.sources.append(host)

    def wake(self) -> None:
        """Tell the worker there is work; safe from any thread."""
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(lambda: self._wakeup.set())
        except trio.RunFinishedError:
            pass

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        task_status.started()
        while True:
            self._wakeup = trio.Event()
            try:
                await self.drain()
            except Exception:  # noqa: BLE001 - the store failing now; the next pass tries again
                log.exception("notifications: the outbox could not be read")
            with trio.move_on_after(POLL):
                await self._wakeup.wait()

    async def _db(self, fn: Callable[..., Any], *args: Any, source: NoticeSource | None = None, **kwargs: Any) -> Any:
        """``fn(database, ...)`` on ``source``'s worker thread (default: the delivery record)."""
        owner = self.deliveries if source is None else source
        db = owner.database
        return await owner.call(lambda: fn(db, *args, **kwargs))

    # ------------------------------------------------------------------ the worker

    async def drain(self) -> int:
        """Send every open event this router holds; how many were handled."""
        handled = 0
        for source in self.sources:
            while True:
                # One at a time: each claim renews this router's claims, so a
                # slow send never lets another router of a cluster take over
                # an event this one is still working on.
                events = await self._db(record.claim, self.claimant, _ms(), limit=1, source=source)
                if not events:
                    break
                for event in events:
                    await self.handle(event, source)
                    handled += 1
        return handled

    async def notifiers(self) -> list[LoadedModule]:
        """The notifier modules ``plugins.json`` switches on, in order
        (loaded again when the file changed)."""
        from router.plugins.settings import plugins_value

        document = await trio.to_thread.run_sync(self.settings.read, "plugins.json")
        plugins = plugins_value(document)
        wanted = plugins.get("notifier", []) if type(plugins) is dict else []
        mark = repr(wanted)
        if mark != self._plugins_mark:
            await self._loader.load_async({"notifier": wanted}, only=["notifier"])
            self._plugins_mark = mark
        return list(self._loader.modules("notifier"))

    async def read_settings(self) -> NotifySettings:
        self._settings = await trio.to_thread.run_sync(load_settings, self.settings_dir)
        return self._settings

    def _context(self, module: LoadedModule, settings: NotifySettings, subs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"options": dict(settings.notifiers.get(module.name, {})),
                "subscriptions": [{"id": s["id"], "device": s["device"], "device_name": s["device_name"]}
                                  for s in subs]}

    async def live_subscriptions(self) -> list[dict[str, Any]]:
        """Every subscription whose device is not revoked; a revoked device's
        are removed from the record (a revoked phone hears nothing more)."""
        subs = await self._db(record.subscriptions)
        paired = sorted({s["device"] for s in subs if s["device"] != LOCAL_DEVICE})
        if self.revoked_devices is None or not paired:
            return subs
        revoked = await self.revoked_devices(paired)
        for sub in subs:
            if sub["device"] in revoked:
                await self._db(record.drop_subscription, sub["id"])
                log.info("removed subscription %s: device %s was revoked", sub["id"], sub["device"])
        return [s for s in subs if s["device"] not in revoked]

    async def destinations(self, settings: NotifySettings) -> list[tuple[LoadedModule, Destination]]:
        subs = await self.live_subscriptions()
        out = []
        for module in await self.notifiers():
            try:
                # Plain functions, run off the loop: apprise parses URLs (and
                # imports its many services the first time) as it answers.
                listed = await trio.to_thread.run_sync(module.function("destinations"),
                                                       self._context(module, settings, subs))
                for item in listed:
                    out.append((module, Destination(id=str(item["id"]), notifier=module.name,
                                                    label=str(item.get("label") or item["id"]),
                                                    device=item.get("device"))))
            except Exception as error:  # noqa: BLE001 - a module's fault is its receipt's, not the worker's
                log.warning("notifier %s: destinations failed: %s: %s", module.name, type(error).__name__, error)
        return out

    async def handle(self, event: Event, source: NoticeSource | None = None) -> None:
        settings = await self.read_settings()
        destinations = await self.destinations(settings)
        facts = await self._facts(event, settings)
        final = await self._db(record.final_receipts, event.id, source=source)
        modules = {d.id: m for m, d in destinations}
        for decision in route(event, [d for _, d in destinations], facts, final):
            destination = decision.destination
            if decision.send and event.kind == "ask":
                state = await self._db(record.ask_state, event.ask["id"]) if event.ask else None
                if state not in (None, "waiting"):  # answered while the destinations before it were sent to
                    decision = route(event, [destination], RoutingFacts(now=self._clock(), ask_state=state))[0]
            if not decision.send:
                await self._db(record.put_receipt, event.id, destination.id, destination.label, "suppressed",
                               code=decision.code, detail=decision.detail, source=source)
                self.suppressed += 1
                continue
            await self._send(event, modules[destination.id], destination, settings, source)
        # A send cut short (the router stopped) to a destination that is no
        # longer one: its receipt says so rather than stay pending.
        for gone, label in await self._db(record.pending_receipts, event.id, source=source):
            if gone not in modules:
                await self._db(record.put_receipt, event.id, gone, label, "failed", source=source,
                               detail="no longer a destination (its notifier is off, or its subscription or URL "
                                      "is gone) when the send could be tried again")
        await self._db(record.finish, event.id, source=source)

    async def _facts(self, event: Event, settings: NotifySettings) -> RoutingFacts:
        now = self._clock()
        ask_state = None
        if event.kind == "ask" and event.ask is not None:
            ask_state = await self._db(record.ask_state, event.ask["id"])
        return RoutingFacts(now=now, watching=self.presence.watching(event.session, now),
                            setting=settings.setting(event.session), quiet=settings.quiet, ask_state=ask_state)

    async def _send(self, event: Event, module: LoadedModule, destination: Destination, settings: NotifySettings,
                    source: NoticeSource | None) -> None:
        await self._db(record.renew, self.claimant, _ms(), source=source)
        await self._db(record.put_receipt, event.id, destination.id, destination.label, "pending",
                       detail="sending", source=source)
        subs = [s for s in await self.live_subscriptions() if destination.device is not None
                and s["device"] == destination.device]
        context = {**self._context(module, settings, subs), "page_url": self.page_url()}
        if destination.device is not None:
            context["subscriptions"] = [{"id": s["id"], "info": s["subscription"].info()} for s in subs]
            context["vapid_key"] = await self._vapid_path()
        request = {"event": event.id, "destination": destination.id, "payload": payload(event)}
        answer: Any = None
        with trio.move_on_after(SEND_DEADLINE) as scope:
            try:
                answer = await module.function("send")(request, context)
            except Exception as error:  # noqa: BLE001 - a notifier's crash is its receipt's failure
                answer = {"outcome": "failed", "detail": f"the notifier crashed: {type(error).__name__}: {error}"}
        if scope.cancelled_caught:
            answer = {"outcome": "failed", "detail": f"no answer within {SEND_DEADLINE:g} s"}
        if type(answer) is not dict or answer.get("outcome") not in ("sent", "failed"):
            answer = {"outcome": "failed", "detail": "the notifier answered in the wrong shape"}
        status = answer.get("status") if type(answer.get("status")) is int else None
        detail = str(answer.get("detail") or answer["outcome"])
        await self._db(record.put_receipt, event.id, destination.id, destination.label, answer["outcome"],
                       detail=detail, status=status, source=source)
        for gone in answer.get("gone") or ():
            await self._db(record.drop_subscription, str(gone))
        if answer["outcome"] == "sent":
            self.sent += 1
            self.last_error.pop(destination.id, None)
        else:
            self.failed += 1
            self.last_error[destination.id] = NotifyProblem(notifier=destination.notifier,
                                                            refusal=Refusal("send-failed", detail), at=_ms())
            log.warning("notification %s to %s failed: %s", event.id, destination.label, detail)

    # ------------------------------------------------------------------ what the routes and the CLI read

    async def events(self, *, session: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The newest events of every source, newest first."""
        found: list[dict[str, Any]] = []
        for source in self.sources:
            found += await self._db(record.events, session=session, limit=limit, source=source)
        found.sort(key=lambda event: event["at"], reverse=True)
        return found[:limit]

    async def problems(self) -> list[NotifyProblem]:
        """Every configuration error now: the settings file's, each
        notifier's own checks, a notifier the loader refused."""
        settings = await self.read_settings()
        out: list[NotifyProblem] = []
        if settings.error is not None:
            out.append(NotifyProblem(notifier=None, refusal=settings.error))
        modules = await self.notifiers()
        refused = self._loader.refused("notifier")
        if refused is not None:
            out.append(NotifyProblem(notifier=refused.name, refusal=refused.refusal))
        for module in modules:
            try:
                found = await trio.to_thread.run_sync(module.function("check"), self._context(module, settings, []))
            except Exception as error:  # noqa: BLE001 - a notifier's crash is a configuration error it shows
                out.append(NotifyProblem(notifier=module.name, refusal=Refusal(
                    "notifier-check-failed", f"the {module.name} notifier's check failed: {type(error).__name__}: {error}")))
                continue
            out += check_problems(module.name, found)
        return out

    async def view(self) -> dict[str, Any]:
        """``GET /notifications/settings``: nothing secret in it."""
        settings = await self.read_settings()
        pairs = await self.destinations(settings)
        on = [m.name for m in await self.notifiers()]
        return {
            "notifiers": on,
            "destinations": [{"id": d.id, "notifier": d.notifier, "label": d.label, "device": d.device,
                              "last_error": _json_of(self.last_error.get(d.id))} for _, d in pairs],
            "quiet_hours": None if settings.quiet is None else {"start": settings.quiet.start,
                                                                "end": settings.quiet.end,
                                                                "time_zone": settings.quiet.time_zone},
            "turn_ended": settings.turn_ended,
            "sessions": {k: {"muted": v.muted, "turn_ended": v.turn_ended}
                         for k, v in sorted(settings.sessions.items())},
            "errors": [problem.to_json() for problem in await self.problems()],
        }

    async def set_session(self, session: str, change: Callable[[SessionSetting], SessionSetting]) -> SessionSetting:
        import attrs

        async with self._settings_lock:
            settings = await self.read_settings()
            if settings.error is not None:
                raise settings.error
            new = change(settings.setting(session))
            updated = attrs.evolve(settings, sessions={**settings.sessions, session: new})
            await trio.to_thread.run_sync(save_settings, self.settings_dir, updated)
            self._settings = updated
        return new

    async def _vapid_path(self) -> str | None:
        """The VAPID key file, made (and checked) once per run; None when it
        cannot be used (the send then fails, saying why)."""
        if self._vapid is None:
            try:
                self._vapid = str((await trio.to_thread.run_sync(vapid_key, self.data_dir))[0])
            except Exception as error:  # noqa: BLE001 - told in the receipt and the log
                log.warning("notifications: the VAPID key cannot be used: %s", error)
        return self._vapid

    async def public_key(self) -> str | None:
        """The VAPID public key, or None while ``web-push`` is off."""
        if "web-push" not in [m.name for m in await self.notifiers()]:
            return None
        return (await trio.to_thread.run_sync(vapid_key, self.data_dir))[1]
