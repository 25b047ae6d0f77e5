"""notifier ``apprise``: any service the ``apprise`` library speaks (ntfy,
Pushover, Telegram, Slack, Discord, Matrix, email, ...), from URLs.

Options (``notifiers.apprise`` in ``notifications.json``, a 0600 file: the
URLs carry the services' tokens and passwords)::

    {"urls": ["ntfys://ntfy.sh/my-topic", "pover://USER@TOKEN"]}

A destination is one URL (``apprise:<hash of the URL>``), labelled with its
scheme and the first letters of its host only: a URL is never logged,
shown or stored in a receipt whole. A send runs apprise's (blocking)
``notify`` in a worker thread: the title, and the body with the session's
link. Outcome: ``sent`` when apprise says it went, else ``failed`` with
the words apprise logged (the URL's text taken out).

Checks: ``apprise-bad-url`` for each URL apprise cannot parse (it is then
skipped: the other URLs still get their notifications).
"""

import logging

INTERFACE_VERSION = 1

# apprise logs to its own logger; what it says goes into the receipt, not
# into the router's log (a service's answer may echo a part of the URL).
logging.getLogger("apprise").propagate = False


def _urls(options):
    urls = options.get("urls", [])
    return [u for u in urls if type(u) is str] if type(urls) is list else []


def _mask(url):
    import hashlib

    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0].split("?", 1)[0]
    shown = host[:3] + "…" if len(host) > 3 else "…"
    return f"{scheme[:12]}://{shown}", "apprise:" + hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _parses(url):
    import apprise

    return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None


def destinations(context):
    out = []
    for url in _urls(context["options"]):
        if _parses(url):
            label, key = _mask(url)
            out.append({"id": key, "label": f"apprise: {label}", "device": None})
    return out


def check(context):
    out = []
    for url in _urls(context["options"]):
        if not _parses(url):
            label, _ = _mask(url)
            out.append({"code": "apprise-bad-url",
                        "message": f"apprise cannot read the URL {label} (scheme unknown, or a part missing); "
                                   "see https://github.com/caronc/apprise/wiki for its form"})
    return out


def _notify(url, title, body):
    import apprise

    sender = apprise.Apprise()
    sender.add(url)
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
        ok = sender.notify(body=body, title=title)
        words = captured.getvalue()
    lines = [line.strip() for line in words.splitlines() if line.strip()]
    cleaned = [line.replace(url, "<url>") for line in lines]
    return bool(ok), " / ".join(cleaned[-3:])[:400]


async def send(request, context):
    import trio

    wanted = request["destination"]
    payload = request["payload"]
    url = next((u for u in _urls(context["options"]) if _mask(u)[1] == wanted), None)
    if url is None:
        return {"outcome": "failed", "status": None, "detail": "the URL is no longer in the settings", "gone": []}
    link = context.get("page_url")
    body = payload["body"] + (f"\n{link.rstrip('/')}{payload['url']}" if link else "")
    ok, words = await trio.to_thread.run_sync(_notify, url, payload["title"], body, abandon_on_cancel=True)
    if ok:
        return {"outcome": "sent", "status": None, "detail": words or "apprise sent it", "gone": []}
    return {"outcome": "failed", "status": None, "detail": words or "apprise could not send it", "gone": []}
