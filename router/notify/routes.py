"""The notification routes, as a Blueprint on the API app (the contract the
page is written against; docs/notifications.md, "HTTP").

==============================================  =============================================
``GET /notifications/vapid``                    ``{public_key}`` (409 ``notifier-off`` while
                                                ``web-push`` is off)
``POST /notifications/subscriptions``           a ``PushSubscription.toJSON()`` → 201 ``{id,
                                                device}``; the same endpoint replaces the old
``DELETE /notifications/subscriptions/<id>``    204 (404 ``unknown-subscription``)
``POST /presence {visible, session}``           204: the requesting device watches ``session``
                                                while visible (45 s without a renewal ends it,
                                                and so does its ``GET /board/live`` ending)
``GET /notifications[?session=][&limit=]``      ``{notifications: [{id, kind, session, at, title,
                                                body, receipts: [...]}]}``, newest first
``GET /notifications/settings``                 destinations (masked), quiet hours, sessions'
                                                settings, each destination's last error, errors
``POST /sessions/<id>/notify {muted?,           the session's setting ``{session, muted,
turn_ended?}``                                  turn_ended}``
==============================================  =============================================

The requesting device is the paired device whose credential came through
the gate (:mod:`router.remote.gate`); a request with the loopback token or
on the private socket is the device ``local``. Every route answers
``notifications-off`` (404) on a router that runs no notifications (``router
mcp``).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncIterator, Final

from quart import Blueprint, Response, current_app, request

from router._body import json_object
from router.errors import Refusal
from router.notify import record
from router.notify.core import LOCAL_DEVICE, parse_presence, parse_session_setting, parse_subscription
from wire.json import dumps

__all__ = ["KEY", "blueprint", "gone_when_closed"]

#: The key in ``app.extensions`` of how the app finds its router's
#: notifications: a callable answering the
#: :class:`router.notify.outbox.Notifications`, or None when it runs none.
#: The app that registers this Blueprint sets it
#: (:meth:`router.api.context.ApiContext.install`); these routes read
#: nothing else of the app.
KEY: Final = "router.notify"

#: The most notifications one listing answers (ours, docs/notifications.md "HTTP": default 50, max 500).
MAX_LIMIT: Final = 500

blueprint = Blueprint("notify", __name__)


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status=status, content_type="application/json")


def _notifications() -> Any:
    """The notifications of the app serving this request, or None."""
    find = current_app.extensions.get(KEY)
    return None if find is None else find()


def _service() -> Any:
    found = _notifications()
    if found is None:
        raise Refusal("notifications-off", "this router sends no notifications (the page's `router serve` does)")
    return found


def _device() -> tuple[str, str]:
    gate = request.scope.get("router.gate")
    device = getattr(gate, "device", None)
    if gate is not None and gate.remote and device is not None:
        return device.id, device.name
    return LOCAL_DEVICE, LOCAL_DEVICE


def gone_when_closed(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``body`` (a page's stream), which drops the requesting device's
    presence when it ends, however it ends (the page closed it, the
    server did). Call it in the request: the device is read now, not in
    the stream. A router that runs no notifications gets ``body`` as is."""
    service = _notifications()
    if service is None:
        return body
    device, _ = _device()
    return _then_gone(body, service.presence, device)


async def _then_gone(body: AsyncIterator[bytes], presence: Any, device: str) -> AsyncIterator[bytes]:
    try:
        async with aclosing(body) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                yield chunk
    finally:
        presence.gone(device)


async def _body(code: str) -> Any:
    """The request's body as a JSON object, or the refusal ``code``."""
    return json_object(await request.get_data(cache=False), what=f"{request.method} {request.path}", code=code)


@blueprint.get("/notifications/vapid")
async def vapid() -> Response:
    key = await _service().public_key()
    if key is None:
        raise Refusal("notifier-off", "the web-push notifier is off; switch it on in plugins.json "
                      '("notifier": ["web-push", ...]): docs/notifications.md')
    return _json({"public_key": key})


@blueprint.post("/notifications/subscriptions")
async def subscribe() -> Response:
    service = _service()
    options = (await service.read_settings()).notifiers.get("web-push", {})
    subscription = parse_subscription(await _body("bad-subscription"),
                                      allow_http=options.get("loopback_http") is True)
    device, name = _device()
    await service.deliveries.call(lambda: record.put_subscription(service.deliveries.database, subscription,
                                                                  device, name))
    return _json({"id": subscription.id, "device": name}, 201)


@blueprint.delete("/notifications/subscriptions/<sub>")
async def unsubscribe(sub: str) -> Response:
    service = _service()
    device, _ = _device()
    only = None if device == LOCAL_DEVICE else device
    dropped = await service.deliveries.call(
        lambda: record.drop_subscription(service.deliveries.database, sub, only))
    if not dropped:
        raise Refusal("unknown-subscription", f"this device has no subscription {sub!r}")
    return Response("", status=204)


@blueprint.post("/presence")
async def presence() -> Response:
    import time

    service = _service()
    visible, session = parse_presence(await _body("bad-presence"))
    device, name = _device()
    service.presence.post(device, name, visible=visible, session=session, now=time.time())
    return Response("", status=204)


@blueprint.get("/notifications")
async def listing() -> Response:
    session = request.args.get("session") or None
    raw = request.args.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise Refusal("bad-query", f"limit is a whole number from 1 to {MAX_LIMIT}")
    return _json({"notifications": await _service().events(session=session, limit=int(raw))})


@blueprint.get("/notifications/settings")
async def settings() -> Response:
    return _json(await _service().view())


@blueprint.post("/sessions/<path:session>/notify")
async def session_setting(session: str) -> Response:
    body = await _body("bad-notify-setting")
    setting = await _service().set_session(session, lambda current: parse_session_setting(body, current))
    return _json({"session": session, "muted": setting.muted, "turn_ended": setting.turn_ended})
