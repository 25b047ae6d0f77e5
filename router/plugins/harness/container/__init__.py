"""harness ``container``: an agent in a container, through its harness daemon.

The host dials the daemon at ``url`` (``/sessions/<id>`` over WebSocket, the
token in ``x-cf-harness-token``). Both come from this module's options in
``plugins.json``::

    "options": {"harness": {"container": {
        "url": "http://127.0.0.1:8787", "token": "...", "levels": ["off"]}}}

``levels`` lists the thinking levels the container's adapter applies
(default ``["off"]``): this module cannot know which adapter the image runs.
The route's thinking level reaches the adapter in its settings' options.

Preflight checks the URL and token are set and the daemon answers
``GET /healthz`` (``daemon-url-missing``, ``daemon-token-missing``,
``daemon-unreachable``); the broker's deadline bounds the probe. The version
is the container protocol this router speaks; the adapter's own id and
version arrive in the daemon's ``hello``.
"""

import urllib.parse

import httpx

INTERFACE_VERSION = 1

#: The container protocol version and health path (npm agents@0.32.0 protocol.d.ts:
#: CONTAINER_PROTOCOL_VERSION, CONTAINER_HEALTH_PATH).
PROTOCOL_VERSION = 1
HEALTH_PATH = "/healthz"


def _options(context):
    options = context.get("options")
    return options if type(options) is dict else {}


def levels(options):
    given = options.get("levels")
    if type(given) is list and given and all(type(v) is str for v in given):
        return list(given)
    return ["off"]


def counts_account(options):
    return False


def reach(context):
    options = _options(context)
    return {
        "via": "daemon",
        "url": options.get("url"),
        "token": options.get("token"),
        "settings": {
            "model": context["route"]["model"],
            "options": {"thinking": context["route"]["thinking"]},
        },
    }


def env(context):
    return {}


async def preflight(context):
    options = _options(context)
    url = options.get("url")
    if type(url) is not str or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return {
            "code": "daemon-url-missing",
            "message": 'set the daemon\'s URL in options.harness.container.url '
            '("http://host:port") with `router plugins set`',
        }
    if type(options.get("token")) is not str or not options["token"]:
        return {
            "code": "daemon-token-missing",
            "message": "set the daemon's token in options.harness.container.token with "
            "`router plugins set`",
        }
    try:
        # A plain http:// daemon needs no TLS: without it the client loads
        # no CA bundle (tens of ms of CPU for each new session's preflight).
        async with httpx.AsyncClient(verify=url.startswith("https:")) as client:
            response = await client.get(url.rstrip("/") + HEALTH_PATH)
    except httpx.HTTPError as exc:
        return {"code": "daemon-unreachable",
                "message": f"the daemon at {url} does not answer: {type(exc).__name__}: {exc}"}
    if response.status_code != 200:
        return {"code": "daemon-unreachable",
                "message": f"the daemon at {url} answered {HEALTH_PATH} with {response.status_code}"}
    return None


async def version(context):
    return f"container-protocol {PROTOCOL_VERSION}"
