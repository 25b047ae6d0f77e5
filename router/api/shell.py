"""The page's installable shell: the page at ``/``, its web app manifest,
its service worker, its icons, and the Markdown of answers rendered safely.

A Blueprint (:func:`shell_blueprint`) the API app registers. Every ``GET``
here holds no data (the page, the manifest, the worker's script, the
icons), so the TCP port serves them without a token (:data:`OPEN_ROUTES`,
which ``router/api/app.py`` adds to its own); ``POST /render`` takes the
token like every other route.

Theory of operation:

- **The page** is one document (``page.py``), sent gzipped to a client
  that takes it (compressed once, at import; the worker's script too): the shell's weight is what a
  phone on a slow link waits for (``bench/page.py`` measures it).
- **The service worker** (``/sw.js``, at the root so its scope covers
  ``/``) keeps the shell in a cache named after a digest of the page and
  the manifest, so a changed page is a changed worker script, which the
  browser installs, and the old cache goes. Navigations to ``/`` go to the
  network first and fall back to the cache: the page opens offline, and
  is fresh whenever the router answers. API requests are never touched:
  the page's outbox (``localStorage``) keeps what is typed offline and
  sends it, with its event id, when the router answers again.
- **Notifications** (docs/notifications.md, "On the phone"): the worker
  shows each Web Push payload as one notification tagged with its event id
  (Allow and Deny on an ask); an action answers the ask itself
  (``POST /sessions/<id>/asks/<ask>`` ``{decision, by: "push"}``, the
  device's cookie, or the loopback token the page handed it, kept in the
  ``router-credential`` cache), a 409 meaning someone answered first, then
  focuses the open page (told to open the session) or opens the session's
  URL. A refused answer shows the notification again with why.
- **The icons** are drawn here by code: an SVG, and PNGs rasterized from
  the same shapes (signed distances, one pixel of anti-aliasing) by
  :func:`png_icon`, with a plain PNG encoder (zlib and CRC from the
  standard library). Drawn once, on a worker thread, then kept.
- **Markdown** (``POST /render {texts}`` → ``{html}``): ``markdown-it-py``
  (CommonMark, raw HTML off: an agent's ``<script>`` is text), then
  ``nh3`` (ammonia) keeps only the tags and attributes of :data:`TAGS`, and
  links to ``http``, ``https`` and ``mailto`` only. The page inserts the
  result through an inert parse and copies only the same allow-list
  (``page.js``, ``sanitizedNodes``), so nothing an agent wrote runs.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import math
import struct
import zlib
from typing import Any, Callable, Final

import nh3
import trio
from markdown_it import MarkdownIt
from quart import Blueprint, Response, request

from router.api.page import PAGE
from router.errors import Refusal
from wire.json import JsonError, loads

__all__ = ["OPEN_ROUTES", "PAGE_CSP", "TAGS", "blueprint", "png_icon", "render_markdown", "shell_blueprint", "svg_icon"]

#: The page's Content-Security-Policy: its own script and style inline, the
#: service worker, manifest and icons from this origin, images as ``data:``
#: (an answer's images, a pairing's QR code) or from here; nothing else.
PAGE_CSP: Final = (
    "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: 'self'; "
    "worker-src 'self'; manifest-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)

#: The icons' sizes (px): the manifest's 192 and 512 (Chromium's install
#: criteria) and a maskable 512 (the glyph inside the 80 % safe zone).
ICON_SIZES: Final = (192, 512)
ICONS: Final = {f"/icons/icon-{size}.png": (size, False) for size in ICON_SIZES} | {
    "/icons/maskable-512.png": (512, True)
}
OPEN_ROUTES: Final = frozenset({"/", "/manifest.webmanifest", "/sw.js", "/icons/icon.svg", *ICONS})

#: The theme: the page's accent (light) and its dark background.
ACCENT: Final = "#2f5fd0"
DARK_BG: Final = "#15171c"

# ---------------------------------------------------------------------- icons
#
# The drawing, in a 64×64 box: a rounded square of the accent, and a white
# fork: one node on the left joined to two on the right (a message routed to
# sessions). The SVG and the PNGs draw the same shapes.

_NODES: Final = ((18.0, 32.0), (46.0, 18.0), (46.0, 46.0))
_NODE_R: Final = 6.5
_STROKE: Final = 4.5
_CORNER: Final = 14.0
#: The fork's bounding box with a margin of two pixels of the smallest icon.
_GLYPH_BOX: Final = (18.0 - _NODE_R - 1.0, 18.0 - _NODE_R - 1.0, 46.0 + _NODE_R + 1.0, 46.0 + _NODE_R + 1.0)


def svg_icon() -> str:
    (x0, y0), (x1, y1), (x2, y2) = _NODES
    circles = "".join(f'<circle cx="{x:g}" cy="{y:g}" r="{_NODE_R:g}"/>' for x, y in _NODES)
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">'
        f'<rect width="64" height="64" rx="{_CORNER:g}" fill="{ACCENT}"/>'
        f'<g fill="#fff" stroke="#fff" stroke-width="{_STROKE:g}" stroke-linecap="round">'
        f'<path d="M{x0:g} {y0:g}L{x1:g} {y1:g}M{x0:g} {y0:g}L{x2:g} {y2:g}" fill="none"/>{circles}</g></svg>'
    )


def _segment_distance(px: float, py: float, ax: float, ay: float, bx: float, by: float) -> float:
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
    return math.hypot(px - ax - t * dx, py - ay - t * dy)


def _glyph_distance(x: float, y: float) -> float:
    """Signed distance (icon units) to the white fork; negative inside."""
    (x0, y0), (x1, y1), (x2, y2) = _NODES
    nodes = min(math.hypot(x - nx, y - ny) for nx, ny in _NODES) - _NODE_R
    lines = min(_segment_distance(x, y, x0, y0, x1, y1), _segment_distance(x, y, x0, y0, x2, y2)) - _STROKE / 2
    return min(nodes, lines)


def _square_distance(x: float, y: float) -> float:
    """Signed distance to the rounded square (0..64, corner ``_CORNER``)."""
    qx = abs(x - 32.0) - (32.0 - _CORNER)
    qy = abs(y - 32.0) - (32.0 - _CORNER)
    return math.hypot(max(qx, 0.0), max(qy, 0.0)) + min(max(qx, qy), 0.0) - _CORNER


def _png(width: int, height: int, rows: list[bytes]) -> bytes:
    """An 8-bit RGBA PNG (ISO/IEC 15948: signature, IHDR, one IDAT, IEND;
    filter type 0 on every row)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    raw = b"".join(b"\x00" + row for row in rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def png_icon(size: int, *, maskable: bool = False) -> bytes:
    """The icon as a ``size``×``size`` PNG. ``maskable``: the background
    fills the square (the platform cuts its own shape) and the glyph shrinks
    to 80 %, inside the safe zone of the W3C manifest's maskable icons."""
    scale = 64.0 / size
    pixel = scale  # one pixel of anti-aliasing, in icon units
    glyph_scale = 0.8 if maskable else 1.0
    accent = _rgb(ACCENT)
    rows = []
    for j in range(size):
        y = (j + 0.5) * scale
        gy = 32.0 + (y - 32.0) / glyph_scale
        row = bytearray()
        for i in range(size):
            x = (i + 0.5) * scale
            back = 1.0 if maskable else max(0.0, min(1.0, 0.5 - _square_distance(x, y) / pixel))
            if back == 0.0:
                row += b"\x00\x00\x00\x00"
                continue
            gx = 32.0 + (x - 32.0) / glyph_scale
            inside = _GLYPH_BOX[0] <= gx <= _GLYPH_BOX[2] and _GLYPH_BOX[1] <= gy <= _GLYPH_BOX[3]
            ink = max(0.0, min(1.0, 0.5 - _glyph_distance(gx, gy) * glyph_scale / pixel)) if inside else 0.0
            row += bytes((*(round(c + (255 - c) * ink) for c in accent), round(255 * back)))
        rows.append(bytes(row))
    return _png(size, size, rows)


@functools.cache
def _icon(path: str) -> bytes:
    size, maskable = ICONS[path]
    return png_icon(size, maskable=maskable)


# ---------------------------------------------------------------------- markdown

#: What an answer's HTML may hold after nh3: Markdown's own output, nothing
#: that runs or loads (no img: an agent's image comes as an image part).
TAGS: Final = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
})
_ATTRIBUTES: Final = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}, "th": {"style"}, "td": {"style"}}
_MARKDOWN: Final = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)
#: The most texts one ``POST /render`` takes (the body's 1 MiB bounds the rest).
MAX_TEXTS: Final = 256


#: Texts up to this many characters are kept rendered (512 of them at most:
#: 8 MiB), as a page asks again for what it shows after a reconnection.
CACHED_CHARS: Final = 16 * 1024


def render_markdown(text: str) -> str:
    """``text`` (Markdown) as HTML that holds only :data:`TAGS`."""
    return _render_kept(text) if len(text) <= CACHED_CHARS else _render(text)


@functools.lru_cache(maxsize=512)
def _render_kept(text: str) -> str:
    return _render(text)


def _render(text: str) -> str:
    html = _MARKDOWN.render(text)
    return nh3.clean(
        html,
        tags=set(TAGS),
        attributes={tag: set(names) for tag, names in _ATTRIBUTES.items()},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
        filter_style_properties={"text-align"},
    )


_render_limiter = trio.CapacityLimiter(1)


def _render_all(texts: list[str]) -> list[str]:
    return [render_markdown(text) for text in texts]


# ---------------------------------------------------------------------- manifest, worker

def manifest() -> dict[str, Any]:
    """The web app manifest (W3C "Web Application Manifest")."""
    return {
        "name": "router",
        "short_name": "router",
        "description": "Your agent sessions: the board, each conversation, the asks waiting on you.",
        "id": "/",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": DARK_BG,
        "theme_color": ACCENT,
        "icons": [
            {"src": "/icons/icon.svg", "sizes": "any", "type": "image/svg+xml"},
            *({"src": f"/icons/icon-{size}.png", "sizes": f"{size}x{size}", "type": "image/png"} for size in ICON_SIZES),
            {"src": "/icons/maskable-512.png", "sizes": "512x512", "type": "image/png", "purpose": "maskable"},
        ],
    }


_MANIFEST: Final = json.dumps(manifest(), separators=(",", ":"))
#: The cache's version: a digest of what the shell is.
VERSION: Final = hashlib.sha256((PAGE + _MANIFEST + svg_icon()).encode()).hexdigest()[:16]
#: What the worker keeps on install.
SHELL: Final = ("/", "/manifest.webmanifest", "/icons/icon.svg", "/icons/icon-192.png")

SERVICE_WORKER: Final = """// router's service worker: keeps the page's shell so it opens offline, and
// shows the router's Web Push notifications (docs/notifications.md, "On the phone").
// API requests pass through untouched; the page's outbox keeps what is typed.
"use strict";
const CACHE = "router-shell-" + VERSION;
// The loopback token the page gave (a page opened from `router serve`'s URL),
// kept apart from the shell: a paired device has none, its cookie goes instead.
const CREDENTIAL = "router-credential", TOKEN_KEY = "/.router-token";
const SHELL = SHELL_PATHS;
// Each part of the shell is kept on its own: one that fails to load (the link
// blinked) still leaves a worker that shows notifications, and is fetched when
// next asked for; an install that failed as a whole would leave none until the
// page's next load.
self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE)
    .then((cache) => Promise.all(SHELL.map((path) => cache.add(path).catch(() => null))))
    .then(() => self.skipWaiting()));
});
self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k.startsWith("router-shell-") && k !== CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});
self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin) return;
  if (url.pathname === "/") {
    // The network first (a fresh page whenever the router answers), the kept shell when not.
    event.respondWith(fetch(event.request)
      .then((response) => {
        if (response.ok) { const copy = response.clone(); caches.open(CACHE).then((cache) => cache.put("/", copy)); }
        return response;
      })
      .catch(() => caches.match("/", { ignoreSearch: true }).then((kept) => kept || Response.error())));
  } else if (SHELL.includes(url.pathname)) {
    event.respondWith(caches.match(url.pathname).then((kept) => kept || fetch(event.request)));
  }
});
self.addEventListener("message", (event) => {
  const data = event.data || {};
  if (data.type !== "token" || (event.origin && event.origin !== self.location.origin)) return;
  event.waitUntil(caches.open(CREDENTIAL).then((kept) => typeof data.token === "string" && data.token
    ? kept.put(TOKEN_KEY, new Response(data.token)) : kept.delete(TOKEN_KEY)));
});
// A push: the router's payload {id, kind, session, title, body, url, ask, at}
// shown as one notification per event (its tag), Allow and Deny on an ask.
self.addEventListener("push", (event) => {
  let payload = null;
  try { payload = event.data ? event.data.json() : null; } catch (_) { payload = null; }
  if (!payload || typeof payload !== "object") payload = { title: "router", body: event.data ? event.data.text() : "" };
  const asks = payload.kind === "ask" && payload.ask && typeof payload.ask.id === "string";
  event.waitUntil(self.registration.showNotification(String(payload.title || "router"), {
    tag: String(payload.id || "router"), body: String(payload.body || ""), data: payload,
    icon: "/icons/icon-192.png", timestamp: typeof payload.at === "number" ? payload.at : Date.now(),
    requireInteraction: asks,
    actions: asks ? [{ action: "allow", title: "Allow" }, { action: "deny", title: "Deny" }] : [],
  }));
});
// Where a notification leads: its url when it is this router's page, else the session.
function target(payload) {
  const fallback = "/" + (payload.session ? "?session=" + encodeURIComponent(payload.session) : "");
  try {
    const url = new URL(payload.url || fallback, self.location.origin);
    return url.origin === self.location.origin && url.pathname === "/" ? url : new URL(fallback, self.location.origin);
  } catch (_) { return new URL(fallback, self.location.origin); }
}
// An action answers the ask with this device's credential (its cookie, or the
// page's token); the first answer wins, so a 409 says someone else answered.
async function answer(payload, decision) {
  const ask = payload.ask, session = ask.session || payload.session || "";
  const kept = await caches.open(CREDENTIAL).then((c) => c.match(TOKEN_KEY)).catch(() => undefined);
  const token = kept ? await kept.text() : "";
  try {
    const response = await fetch("/sessions/" + encodeURIComponent(session) + "/asks/" + encodeURIComponent(ask.id), {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json", ...(token ? { authorization: "Bearer " + token } : {}) },
      body: JSON.stringify({ decision, by: "push" }),
    });
    const body = await response.json().catch(() => ({}));
    if (response.ok) return { ok: true, text: decision + ": " + (ask.tool || "the tool") + " (from the notification)" };
    if (response.status === 409) return { ok: true, text: "already settled elsewhere: " + (body.message || body.error) };
    return { ok: false, text: "the answer was refused: " + (body.error || response.status) + ": " + (body.message || "") };
  } catch (_) {
    return { ok: false, text: "the router did not answer: answer the ask on the page" };
  }
}
self.addEventListener("notificationclick", (event) => {
  const done = clicked(event.notification, event.action);
  // A script-made event (a test's dispatch) cannot be extended; the work runs all the same.
  if (event.isTrusted) event.waitUntil(done);
});
async function clicked(notification, action) {
  const payload = notification.data || {};
  notification.close();
  const decision = action === "allow" || action === "deny" ? action : null;
  const said = decision && payload.ask && payload.ask.id ? await answer(payload, decision) : null;
  if (said && !said.ok) {
    // Said where it is seen even if no page opens: the notification again, with why.
    await self.registration.showNotification(String(payload.title || "router"), {
      tag: String(payload.id || "router"), body: said.text, data: { ...payload, ask: null }, icon: "/icons/icon-192.png" });
  }
  const url = target(payload);
  const open = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const page = open.find((client) => { const at = new URL(client.url); return at.origin === self.location.origin && at.pathname === "/"; });
  if (page) {
    page.postMessage({ type: "open", url: url.pathname + url.search, said: said ? said.text : null });
    await page.focus().catch(() => null);
  } else {
    await self.clients.openWindow(url.href).catch(() => null);
  }
}
""".replace('"router-shell-" + VERSION', json.dumps("router-shell-" + VERSION)).replace(
    "SHELL_PATHS", json.dumps(list(SHELL)))

_PAGE_BYTES: Final = PAGE.encode("utf-8")
_PAGE_GZIP: Final = gzip.compress(_PAGE_BYTES, 9, mtime=0)
_WORKER_BYTES: Final = SERVICE_WORKER.encode("utf-8")
_WORKER_GZIP: Final = gzip.compress(_WORKER_BYTES, 9, mtime=0)


def _accepts_gzip() -> bool:
    return any(part.split(";")[0].strip() == "gzip" for part in request.headers.get("accept-encoding", "").split(","))


def shell_blueprint() -> Blueprint:
    """The shell's routes (see the module docstring)."""
    shell = Blueprint("shell", __name__)

    @shell.get("/")
    async def page() -> Response:
        headers = {"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff",
                   "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
        if _accepts_gzip():
            headers["Content-Encoding"] = "gzip"
            return Response(_PAGE_GZIP, content_type="text/html; charset=utf-8", headers=headers)
        return Response(_PAGE_BYTES, content_type="text/html; charset=utf-8", headers=headers)

    @shell.get("/manifest.webmanifest")
    async def web_manifest() -> Response:
        return Response(_MANIFEST, content_type="application/manifest+json", headers={"Cache-Control": "no-cache"})

    @shell.get("/sw.js")
    async def service_worker() -> Response:
        headers = {"Cache-Control": "no-cache", "Service-Worker-Allowed": "/", "X-Content-Type-Options": "nosniff",
                   "Vary": "Accept-Encoding"}
        if _accepts_gzip():
            headers["Content-Encoding"] = "gzip"
            return Response(_WORKER_GZIP, content_type="text/javascript; charset=utf-8", headers=headers)
        return Response(_WORKER_BYTES, content_type="text/javascript; charset=utf-8", headers=headers)

    @shell.get("/icons/icon.svg")
    async def icon_svg() -> Response:
        return Response(svg_icon(), content_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    def icon_route(path: str) -> Callable[[], Any]:
        async def icon_png() -> Response:
            data = await trio.to_thread.run_sync(_icon, path)
            return Response(data, content_type="image/png", headers={"Cache-Control": "max-age=86400"})
        return icon_png

    for path in ICONS:
        shell.add_url_rule(path, f"icon_{path.rsplit('/', 1)[1].replace('.', '_').replace('-', '_')}",
                           icon_route(path), methods=["GET"])

    @shell.post("/render")
    async def render() -> Response:
        raw = await request.get_data(cache=False)
        assert isinstance(raw, bytes)
        texts = _texts(raw)
        if isinstance(texts, str):
            raise Refusal("bad-body", f"POST /render takes {{texts: [string]}}: {texts}")  # the app answers it, 400
        async with _render_limiter:
            html = await trio.to_thread.run_sync(_render_all, texts)
        return Response(json.dumps({"html": html}), content_type="application/json")

    return shell


def _texts(raw: bytes) -> list[str] | str:
    """The body's ``texts``, or a sentence saying what is wrong."""
    try:
        body = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, JsonError, RecursionError):
        return "the body is not JSON text"
    if type(body) is not dict or set(body) != {"texts"}:
        return "the body must be an object with 'texts' only"
    texts = body["texts"]
    if type(texts) is not list or not all(type(text) is str for text in texts):
        return "'texts' must be a list of strings"
    if len(texts) > MAX_TEXTS:
        return f"at most {MAX_TEXTS} texts at once"
    return texts


#: The shell's routes, one Blueprint for :data:`router.api.routes.BLUEPRINTS`.
blueprint: Final = shell_blueprint()
