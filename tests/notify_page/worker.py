"""Driving the page's service worker and its notifications in headless
Chromium over CDP, for the page's notification tests.

Headless Chromium has no push service (its ``PushManager.subscribe()``
never settles), so the tests do three things a real phone's browser and
push service would (docs/notifications.md, "On the phone", "How it is
tested"):

- **The subscription** is made by the test (a P-256 key pair and an auth
  secret, :class:`tests.notify.pushservice.Browser`) and handed to the page
  by :func:`stub_push_manager`: a script added with CDP
  ``Page.addScriptToEvaluateOnNewDocument``, in the test's tab only, that
  replaces ``PushManager.prototype.subscribe`` / ``getSubscription``. The
  page's own code then posts it, as it would a real one.
- **The push** is delivered with CDP ``ServiceWorker.deliverPushMessage``
  (the payload the router encrypted for the test's push service, decrypted
  by the test; or the router's own payload of an event).
- **A tap on an action**: Chromium offers no CDP command to click a
  notification, so :func:`click_action` evaluates in the worker's own
  target (``Target.attachToTarget`` on the ``service_worker`` target)
  ``self.registration.getNotifications({tag})`` and dispatches a
  ``NotificationEvent("notificationclick", {notification, action})`` on
  ``self``: the worker's listener runs as for a real tap (a script-made
  event has no ``waitUntil``, and may not open a window; the worker hands
  the open session to the page it finds).
"""

from __future__ import annotations

import json
from typing import Any

import trio

from tests.support.chromium import Browser, Page

#: The notifications the worker shows, as plain values.
SHOWN = """navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((all) => all.map((n) => ({
  title: n.title, body: n.body, tag: n.tag, data: n.data, requireInteraction: n.requireInteraction,
  actions: n.actions.map((a) => ({action: a.action, title: a.title}))})))"""


#: The page's worker registration as plain values: what a failed wait says.
REGISTRATION = """navigator.serviceWorker.getRegistration().then((r) => r ? {
  installing: r.installing && r.installing.state, waiting: r.waiting && r.waiting.state,
  active: r.active && r.active.state, scope: r.scope} : 'no registration')"""


async def controlled(page: Page, timeout: float = 30) -> None:
    """Wait until the page's service worker controls it; a timeout says
    where the worker's registration got to (installing, waiting, active)."""
    try:
        await page.wait_for("navigator.serviceWorker.controller !== null", timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nthe worker's registration: {await page.evaluate(REGISTRATION)!r}") from None


def stub_push_manager(subscription: dict[str, Any]) -> str:
    """The script that gives the page ``subscription`` (a
    ``PushSubscription.toJSON()``) as the browser's push subscription."""
    return """(() => {
  if (typeof PushManager === "undefined") return;
  const json = %s;
  let made = null;
  const fake = (key) => ({ endpoint: json.endpoint, expirationTime: null,
    options: { userVisibleOnly: true, applicationServerKey: key },
    toJSON: () => json, unsubscribe: async () => { made = null; return true; } });
  PushManager.prototype.subscribe = async function (options) {
    made = fake(new Uint8Array(options.applicationServerKey).buffer);
    return made;
  };
  PushManager.prototype.getSubscription = async function () { return made; };
})();""" % json.dumps(subscription)


async def grant_notifications(browser: Browser, origin: str) -> None:
    """The person allowed notifications for ``origin`` (CDP ``Browser.grantPermissions``)."""
    await browser.send("Browser.grantPermissions", {"origin": origin, "permissions": ["notifications"]})


#: Each tab's registration id, found once: ``ServiceWorker.enable`` sent
#: again on a tab made Chromium 156 drop a push delivered next, and close the
#: notifications shown (observed), so the domain is switched on once per tab.
_REGISTRATIONS: dict[tuple[str, str], str] = {}


async def registration_id(page: Page, origin: str) -> str:
    """The id of the page's service worker registration (CDP ``ServiceWorker``
    domain's ``workerRegistrationUpdated``), asked once per tab."""
    known = _REGISTRATIONS.get((page.session, origin))
    if known is not None:
        return known
    await page.send("ServiceWorker.enable")
    scope = origin.rstrip("/") + "/"
    with trio.fail_after(30):
        while True:
            for event in reversed(page.browser.events):
                if event.get("method") == "ServiceWorker.workerRegistrationUpdated":
                    for each in event["params"]["registrations"]:
                        if each["scopeURL"] == scope and not each["isDeleted"]:
                            _REGISTRATIONS[(page.session, origin)] = str(each["registrationId"])
                            return str(each["registrationId"])
            await trio.sleep(0.05)


async def deliver(page: Page, origin: str, payload: dict[str, Any]) -> None:
    """``payload`` handed to the page's worker as a push's data."""
    await controlled(page)
    registration = await registration_id(page, origin)
    await page.send("ServiceWorker.deliverPushMessage",
                    {"origin": origin, "registrationId": registration, "data": json.dumps(payload)})


def worker_events(page: Page, last: int = 8) -> list[dict[str, Any]]:
    """The last ``ServiceWorker`` domain events the browser sent (versions'
    status and running status, errors): what a failed wait says."""
    return [event for event in page.browser.events
            if str(event.get("method", "")).startswith("ServiceWorker.")][-last:]


async def delivered_and_shown(page: Page, origin: str, payload: dict[str, Any], *, count: int = 1,
                              timeout: float = 60, tries: int = 3) -> list[dict[str, Any]]:
    """``payload`` delivered until the worker shows ``count`` notifications;
    what it shows. Delivered again (same tag: still one notification) when
    nothing shows within a share of ``timeout``: a push handed to
    ``ServiceWorker.deliverPushMessage`` showed nothing in 2 runs of 4 of
    the two push tests on a loaded machine, the worker activated, running
    and controlling the page, and the same push delivered again showed at
    once each time (observed; the cause is Chromium's), as a real push
    service sends again a message the browser did not take. A worker that
    shows nothing after every try fails with its last events."""
    for attempt in range(1, tries + 1):
        await deliver(page, origin, payload)
        try:
            return await page.wait_for(f"{SHOWN}.then((all) => all.length === {count} && all)", timeout=timeout / tries)
        except AssertionError as exc:
            if attempt == tries:
                raise AssertionError(f"{exc}\nthe worker's last events: {worker_events(page)!r}") from None
    raise AssertionError("unreachable")


async def worker(browser: Browser, origin: str) -> Page:
    """The service worker's own target, to evaluate in."""
    with trio.fail_after(30):
        while True:
            targets = (await browser.send("Target.getTargets"))["targetInfos"]
            found = [t for t in targets if t["type"] == "service_worker" and t["url"] == f"{origin}/sw.js"]
            if found:
                break
            await trio.sleep(0.05)
    attached = await browser.send("Target.attachToTarget", {"targetId": found[0]["targetId"], "flatten": True})
    target = Page(browser, attached["sessionId"])
    await target.send("Runtime.enable")
    return target


async def click_action(browser: Browser, origin: str, tag: str, action: str) -> int:
    """A tap on ``action`` of the notification tagged ``tag`` (see the module
    docstring); how many notifications had that tag."""
    target = await worker(browser, origin)
    return await target.evaluate(f"""self.registration.getNotifications({{tag: {json.dumps(tag)}}}).then((found) => {{
        for (const notification of found)
          self.dispatchEvent(new NotificationEvent("notificationclick", {{notification, action: {json.dumps(action)}}}));
        return found.length;
    }})""")


def presence_posts(page: Page) -> list[tuple[dict[str, Any], int | None]]:
    """The page's ``POST /presence`` bodies and the router's status for each
    (CDP ``Network`` events; ``Network.enable`` first)."""
    statuses: dict[str, int] = {}
    sent: list[tuple[str, dict[str, Any]]] = []
    for event in page.browser.events:
        if event.get("sessionId") != page.session:
            continue
        params = event.get("params", {})
        if event.get("method") == "Network.requestWillBeSent" and params["request"]["url"].endswith("/presence") \
                and params["request"]["method"] == "POST":
            sent.append((params["requestId"], json.loads(params["request"].get("postData") or "null")))
        elif event.get("method") == "Network.responseReceived":
            statuses[params["requestId"]] = params["response"]["status"]
    return [(body, statuses.get(request)) for request, body in sent]
