"""The page's weight and its first paint on a phone profile; prints a table.

    .venv/bin/python bench/page.py [--runs 5]

It starts a real ``router serve --port 0`` (the in-process echo daemon, a
fresh data directory) and:

- **Weight.** Fetches each file of the shell (what the service worker keeps:
  ``/``, the manifest, the SVG icon, the 192 px icon; and the worker's own
  script) as a browser asks for it (``Accept-Encoding: gzip``) and prints
  its size as written, as served (the page goes gzipped), and gzipped at
  level 9. The budget: the shell under 100 KB compressed.
- **First paint.** Opens the page in a headless Chromium (Debian's
  ``chromium``; ``tests/support/chromium.py``) with a phone's profile, over
  CDP: 390×844 at a scale of 3, mobile, touch; the CPU slowed 4×
  (``Emulation.setCPUThrottlingRate``); the network as Lighthouse's mobile
  "slow 4G" under DevTools throttling (``Network.emulateNetworkConditions``:
  562.5 ms of request latency, 1,474.56 kbit/s down, 675 kbit/s up:
  Lighthouse ``core/config/constants.js``, ``throttling.mobileSlow4G``,
  its ``requestLatencyMs`` and ``*ThroughputKbps``). Each run is a fresh
  browser context (no cache, no service worker): the cold first paint and
  first contentful paint (``performance.getEntriesByType('paint')``), the
  time the board first lists a session; then a reload once the service
  worker controls the page (the warm open, the shell from its cache).
  The budget: first paint under 2 s.

Measured on a loaded shared machine, the figures move from run to run; the
table gives each run and the median. Results: docs/bench.md, "The page".
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.api.processes import serve  # noqa: E402
from tests.support.chromium import Browser, Page, chromium  # noqa: E402

SHELL = ("/", "/manifest.webmanifest", "/icons/icon.svg", "/icons/icon-192.png", "/sw.js")
BUDGET_BYTES = 100_000
BUDGET_PAINT_MS = 2000.0
#: Lighthouse's mobile slow 4G under DevTools throttling (see the docstring).
SLOW_4G = {"offline": False, "latency": 562.5, "downloadThroughput": 1474.56 * 1024 / 8,
           "uploadThroughput": 675 * 1024 / 8}
#: When the board first lists a session, stamped by the page's own clock.
BOARD_SEEN = """new Promise((done) => {
  const seen = () => document.querySelector('#board li') ? performance.now() : null;
  const now = seen(); if (now !== null) return done(now);
  new MutationObserver((_, observer) => { const at = seen(); if (at !== null) { observer.disconnect(); done(at); } })
    .observe(document.getElementById('board'), {childList: true});
})"""
PAINTS = "Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]))"


async def weight(url: str) -> list[tuple[str, int, int, int]]:
    rows = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for path in SHELL:
            async with client.stream("GET", path, headers={"accept-encoding": "gzip"}) as response:
                served = b"".join([chunk async for chunk in response.aiter_raw()])
                assert response.status_code == 200, path
                encoded = response.headers.get("content-encoding") == "gzip"
            raw = gzip.decompress(served) if encoded else served
            rows.append((path, len(raw), len(served), len(gzip.compress(raw, 9))))
    return rows


async def phone_tab(browser: Browser) -> Page:
    """A tab in a fresh browser context (its own cache and service workers),
    with the phone's profile and throttling on."""
    context = await browser.send("Target.createBrowserContext", {"disposeOnDetach": True})
    target = await browser.send("Target.createTarget", {"url": "about:blank", "browserContextId": context["browserContextId"]})
    attached = await browser.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
    page = Page(browser, attached["sessionId"])
    await page.send("Page.enable")
    await page.send("Runtime.enable")
    await page.send("Network.enable")
    await page.emulate(390, 844, mobile=True)
    await page.send("Emulation.setCPUThrottlingRate", {"rate": 4})
    await page.send("Network.emulateNetworkConditions", SLOW_4G)
    return page


async def one_run(browser: Browser, url: str) -> dict[str, float]:
    page = await phone_tab(browser)
    await page.send("Page.navigate", {"url": url})
    await page.wait_for("document.readyState === 'complete' && location.href.startsWith('http')", timeout=60)
    board = await page.evaluate(BOARD_SEEN)
    cold = await page.wait_for(f"(() => {{ const p = {PAINTS}; return p['first-contentful-paint'] ? p : null; }})()")
    await page.wait_for("navigator.serviceWorker.controller !== null", timeout=60)
    await page.send("Page.reload", {})
    await page.wait_for("document.readyState === 'complete' && performance.getEntriesByType('paint').length > 0"
                        " && performance.timeOrigin > 0", timeout=60)
    warm = await page.wait_for(f"(() => {{ const p = {PAINTS}; return p['first-contentful-paint'] ? p : null; }})()")
    await page.send("Target.closeTarget", {"targetId": (await page.send("Target.getTargetInfo"))["targetInfo"]["targetId"]})
    return {"first paint": cold["first-paint"], "first contentful paint": cold["first-contentful-paint"],
            "board listed": board, "warm first contentful paint": warm["first-contentful-paint"]}


async def main(runs: int) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp:
        async with serve(Path(tmp)) as served, chromium() as browser:
            rows = await weight(served.url)
            results = [await one_run(browser, served.page) for _ in range(runs)]
    print("## weight (bytes)\n")
    print(f"{'file':<24}{'as written':>12}{'as served':>12}{'gzip -9':>10}")
    for path, raw, sent, zipped in rows:
        print(f"{path:<24}{raw:>12,}{sent:>12,}{zipped:>10,}")
    shell_served = sum(sent for _, _, sent, _ in rows)
    shell_zipped = sum(min(sent, zipped) for _, _, sent, zipped in rows)
    print(f"{'shell':<24}{sum(r[1] for r in rows):>12,}{shell_served:>12,}{shell_zipped:>10,}"
          f"   budget {BUDGET_BYTES:,}: {'met' if shell_zipped < BUDGET_BYTES else 'MISSED'}")
    print("\n## a phone on slow 4G, CPU 4x slower (ms)\n")
    names = list(results[0])
    print(f"{'run':<6}" + "".join(f"{n:>28}" for n in names))
    for index, result in enumerate(results, 1):
        print(f"{index:<6}" + "".join(f"{result[n]:>28.0f}" for n in names))
    medians = {n: statistics.median(r[n] for r in results) for n in names}
    print(f"{'median':<6}" + "".join(f"{medians[n]:>28.0f}" for n in names))
    met = medians["first paint"] < BUDGET_PAINT_MS
    print(f"\nfirst paint budget {BUDGET_PAINT_MS:.0f} ms: {'met' if met else 'MISSED'}")
    return 0 if met and shell_zipped < BUDGET_BYTES else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    sys.exit(trio.run(main, parser.parse_args().runs))
