"""notifier ``web-push``: the standard Web Push, to every paired device whose
browser subscribed from the page.

Options (``notifiers.web-push`` in ``notifications.json``)::

    {"subject": "mailto:me@example.org", "ttl": 86400}

A destination is one device (``web-push:<device id>``), with every
subscription its browsers made. A send encrypts the payload for each
subscription with ``aes128gcm`` (RFC 8291, pywebpush's ``WebPusher.encode``),
signs a VAPID JWT for the push service's origin (RFC 8292, py-vapid's
``Vapid02.sign``: ES256 with the router's key, ``context["vapid_key"]``) and
POSTs it (RFC 8030) with ``TTL``, ``Urgency`` (``high`` for an ask) and
``Topic`` (from the event id: a push service that still holds an earlier
message for the same event replaces it, RFC 8030 section 5.4) through
``httpx.AsyncClient`` (which runs on Trio; the core's deadline cancels it).

Outcome: ``sent`` when any subscription took it (2xx; the status is the
last 2xx), else ``failed`` with the service's words. A 404 or 410 (the
subscription expired or was removed, RFC 8030 section 7.3) names that
subscription in ``gone``: the core removes it.

Checks: ``web-push-bad-subject`` (a subject that is not ``mailto:`` or
``https:``).
"""

import hashlib
import time
import urllib.parse

import httpx

INTERFACE_VERSION = 1

#: Seconds a push service keeps an undelivered message (ours: a day; a
#: phone that was off overnight still hears of the ask, which may be over).
DEFAULT_TTL = 86400
#: The VAPID ``sub`` claim when the person gave none (RFC 8292 section 2.1).
DEFAULT_SUBJECT = "mailto:router@localhost.localdomain"
#: The JWT's life (RFC 8292 section 2: at most 24 hours).
JWT_LIFE = 12 * 3600


def destinations(context):
    seen = {}
    for sub in context["subscriptions"]:
        seen.setdefault(sub["device"], sub["device_name"])
    return [{"id": f"web-push:{device}", "label": f"web-push: {name}", "device": device}
            for device, name in seen.items()]


def check(context):
    subject = context["options"].get("subject", DEFAULT_SUBJECT)
    if type(subject) is not str or not subject.startswith(("mailto:", "https://")):
        return [{"code": "web-push-bad-subject",
                 "message": "notifiers.web-push.subject is a mailto: or https: contact for the push services "
                            "(RFC 8292)"}]
    return []


def _topic(event):
    # RFC 8030 section 5.4: at most 32 characters of the URL-safe base64 alphabet.
    return hashlib.sha256(event.encode()).hexdigest()[:32]


def _headers(subscription, vapid, subject, ttl, urgency, event):
    from py_vapid import Vapid02

    parts = urllib.parse.urlsplit(subscription["endpoint"])
    claims = {"aud": f"{parts.scheme}://{parts.netloc}", "sub": subject, "exp": int(time.time()) + JWT_LIFE}
    headers = dict(Vapid02.from_file(vapid).sign(claims))
    headers.update({"Content-Encoding": "aes128gcm", "Content-Type": "application/octet-stream",
                    "TTL": str(ttl), "Urgency": urgency, "Topic": _topic(event)})
    return headers


def _body(subscription, data):
    from pywebpush import WebPusher

    return WebPusher(subscription).encode(data, content_encoding="aes128gcm")["body"]


async def send(request, context):
    import json

    options = context["options"]
    ttl = options.get("ttl", DEFAULT_TTL)
    ttl = ttl if type(ttl) is int and 0 <= ttl <= 28 * 86400 else DEFAULT_TTL
    subject = options.get("subject", DEFAULT_SUBJECT)
    urgency = "high" if request["payload"].get("kind") == "ask" else "normal"
    data = json.dumps(request["payload"], separators=(",", ":"), ensure_ascii=False).encode()
    gone, failures, status = [], [], None
    async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as client:
        for sub in context["subscriptions"]:
            info = sub["info"]
            try:
                headers = _headers(info, context["vapid_key"], subject, ttl, urgency, request["event"])
                answer = await client.post(info["endpoint"], content=_body(info, data), headers=headers)
            except httpx.HTTPError as error:
                failures.append(f"{urllib.parse.urlsplit(info['endpoint']).netloc}: {type(error).__name__}: {error}")
                continue
            if 200 <= answer.status_code < 300:
                status = answer.status_code
            elif answer.status_code in (404, 410):
                gone.append(sub["id"])
                failures.append(f"{answer.status_code}: the subscription is gone (removed)")
            else:
                words = answer.text[:200].strip() or answer.reason_phrase
                failures.append(f"{answer.status_code}: {words}")
    if status is not None:
        return {"outcome": "sent", "status": status, "detail": f"{status} from the push service", "gone": gone}
    return {"outcome": "failed", "status": None, "detail": "; ".join(failures) or "no subscription", "gone": gone}
