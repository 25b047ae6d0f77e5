"""The page's shell (``router/api/shell.py``): the manifest, the service
worker, the icons, the page gzipped, all without a token and holding no
data; and ``POST /render``, whose HTML never holds what could run, whatever
the Markdown (hypothesis draws hostile text)."""

from __future__ import annotations

import gzip
import json
import struct
import zlib

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.api.shell import ICONS, OPEN_ROUTES, TAGS, png_icon, render_markdown, svg_icon
from tests.api.conftest import TOKEN, Api


async def test_the_shell_is_served_without_a_token_and_holds_no_data(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as bare:
        for path in sorted(OPEN_ROUTES):
            answer = await bare.get(path)
            assert answer.status_code == 200, path
            assert TOKEN.encode() not in answer.content, path
        manifest = (await bare.get("/manifest.webmanifest")).json()
        assert manifest["start_url"] == "/" and manifest["display"] == "standalone"
        assert {icon["sizes"] for icon in manifest["icons"]} >= {"192x192", "512x512"}
        assert any(icon.get("purpose") == "maskable" for icon in manifest["icons"])
        worker = await bare.get("/sw.js")
        assert worker.headers["content-type"].startswith("text/javascript")
        assert "router-shell-" in worker.text and '"/"' in worker.text
        # The render route holds data (it is the answers'), so it takes the token.
        refused = await bare.post("/render", json={"texts": ["x"]})
        assert refused.status_code == 401 and refused.json()["error"] == "no-token"


@pytest.mark.parametrize("path", ["/", "/sw.js"])
async def test_the_page_and_its_worker_go_gzipped_to_a_client_that_takes_it(api: Api, path: str) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as bare:
        plain = await bare.get(path, headers={"accept-encoding": "identity"})
        zipped = await bare.get(path, headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in plain.headers and zipped.headers["content-encoding"] == "gzip"
    assert zipped.text == plain.text  # httpx decoded it
    assert int(zipped.headers["content-length"]) < len(plain.content) / 2
    if path == "/":
        policy = plain.headers["content-security-policy"]
        assert "worker-src 'self'" in policy and "img-src data: 'self'" in policy


def _png_size(data: bytes) -> tuple[int, int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    length = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    raw = zlib.decompress(data[41:41 + length])
    assert len(raw) == height * (1 + 4 * width) and depth == 8 and color == 6
    return width, height, raw[1 + 4 * (width // 2) * 1 + 3]


def test_the_icons_are_pngs_of_their_size_and_an_svg() -> None:
    for path, (size, maskable) in ICONS.items():
        data = png_icon(size, maskable=maskable) if size < 512 else None
        if data is not None:
            assert _png_size(data)[:2] == (size, size)
    corner = png_icon(64)
    # The rounded corner is transparent; the maskable icon's is not.
    assert zlib.decompress(corner[41:41 + struct.unpack(">I", corner[33:37])[0]])[1 + 3] == 0
    maskable = png_icon(64, maskable=True)
    assert zlib.decompress(maskable[41:41 + struct.unpack(">I", maskable[33:37])[0]])[1 + 3] == 255
    assert svg_icon().startswith("<svg") and "script" not in svg_icon()


async def test_render_turns_markdown_into_sanitized_html(api: Api) -> None:
    answer = await api.client.post("/render", json={"texts": [
        "**bold** and `code`\n\n```py\nprint('<b>')\n```",
        "<script>alert(1)</script><img src=x onerror=alert(1)> [x](javascript:alert(1))",
    ]})
    assert answer.status_code == 200
    safe, hostile = answer.json()["html"]
    assert "<strong>bold</strong>" in safe and '<code class="language-py">' in safe and "&lt;b&gt;" in safe
    assert "<script" not in hostile and "<img" not in hostile and 'href="javascript' not in hostile
    assert "&lt;script&gt;" in hostile  # shown as text
    for body in ({"texts": "x"}, {"texts": [1]}, {"text": ["x"]}, []):
        refused = await api.client.post("/render", json=body)
        assert refused.status_code == 400 and refused.json()["error"] == "bad-body"


_HOSTILE = st.lists(st.sampled_from(list("<>/=\"' `*[]()!:#-\n") + [
    "script", "img", "onerror", "javascript", "svg", "onload", "a href", "iframe", "style", "&#x6a;"]), max_size=60).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_HOSTILE, min_size=1, max_size=6).map("".join))
def test_rendered_html_never_holds_a_tag_or_attribute_that_could_run(text: str) -> None:
    html = render_markdown(text)
    lowered = html.lower()
    for tag in ("<script", "<img", "<iframe", "<svg", "<style", "<object", "<embed"):
        assert tag not in lowered
    # Every tag left is an allowed one, and no attribute is a handler.
    import re

    for name in re.findall(r"<\s*([a-z0-9]+)", lowered):
        assert name in TAGS, name
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", lowered)
    assert not re.search(r"href\s*=\s*\"\s*(javascript|data|vbscript):", lowered)
    json.dumps(html)


def test_the_page_is_small_once_compressed() -> None:
    from router.api.page import PAGE

    assert len(gzip.compress(PAGE.encode(), 9)) < 100_000
