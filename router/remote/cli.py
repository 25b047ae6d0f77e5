"""``router pair`` and ``router devices``: pairing a phone and managing the
paired devices, through the running ``router serve``'s private socket.

- ``router pair [--json] [--png FILE]``: asks the router for a one-time code
  (``POST /pairings``) and prints its URL's QR code in the terminal, the URL
  (``https://HOST:PORT/pair#CODE``) and when the code expires. ``--json``
  prints ``{url, code, expiresAt, qrSvg}`` instead; ``--png FILE`` also
  writes the QR code as a PNG image (0600: it holds the code).
- ``router devices [--json]``: the paired devices (name, first and last
  use, revoked or not).
- ``router devices revoke NAME``: revoke one; its next request is refused
  and its open streams close.
- ``router devices rename NAME NEW``: rename one.

The router asked is the first of this user's routers (their private
sockets, :mod:`router.board.client`) that serves other devices (``router
serve --listen …`` or ``--behind-proxy``). Exit status: 0 done, 1 refused
by the router (the refusal printed), 2 usage or no such router.
"""

from __future__ import annotations

from router._httpx import unix_transport
import argparse
import datetime
import json
import os
import sys
from typing import Any

from router.errors import Refusal

__all__ = ["configure_devices", "configure_pair", "run_devices", "run_pair"]

#: Seconds each router has to answer (ours, as ``router sessions``).
TIMEOUT = 5.0


def configure_pair(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print {url, code, expiresAt, qrSvg} as JSON")
    parser.add_argument("--png", metavar="FILE", help="also write the QR code as a PNG image (mode 0600)")


def configure_devices(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", nargs="*", metavar="revoke NAME | rename NAME NEW",
                        help="nothing: list the devices; revoke NAME; rename NAME NEW")
    parser.add_argument("--json", action="store_true", help="print JSON")


class DevicesRefused(Refusal):
    """The router refused the request (exit 1; no router serving other
    devices is a plain :class:`Refusal`, exit 2)."""


def _refused(status: int, body: Any) -> DevicesRefused:
    """The router's refusal as its body spells it (``Refusal.to_json``)."""
    refused = DevicesRefused.from_json(body)
    return refused if refused is not None else \
        DevicesRefused("not-a-router", f"the router answered {status}: {str(body)[:200]}")


async def _ask(method: str, path: str, body: Any = None) -> Any:
    """The answer of the first router that serves devices; raises
    :class:`DevicesRefused` for its refusal, ``Refusal`` when none does."""
    import httpx
    import trio

    from router.board.client import BASE_URL, CLI_CHANNEL, router_sockets
    from router.board.paths import local_directory

    directory = str(local_directory(os.environ))
    for path_ in router_sockets(directory):
        with trio.move_on_after(TIMEOUT):
            try:
                async with httpx.AsyncClient(transport=unix_transport(path_), base_url=BASE_URL,
                                             headers=CLI_CHANNEL, timeout=None) as client:
                    response = await client.request(method, path, json=body) if body is not None else \
                        await client.request(method, path)
            except httpx.HTTPError:
                continue
            try:
                answer = response.json()
            except ValueError:
                continue
            if response.status_code == 404 and type(answer) is dict and answer.get("error") == "no-remote":
                continue
            if response.status_code >= 400:
                raise _refused(response.status_code, answer)
            return answer
    raise Refusal("no-remote", "no router of yours serves other devices; start one with `router serve --listen "
                  "HOST:PORT` (or --behind-proxy URL)")


def _run(command: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    import trio

    try:
        return 0, trio.run(_ask, method, path, body)
    except DevicesRefused as refused:
        print(f"router {command}: {refused}", file=sys.stderr)
        return 1, None
    except Refusal as refused:
        print(f"router {command}: {refused}", file=sys.stderr)
        return 2, None


def run_pair(args: argparse.Namespace) -> int:
    status, answer = _run("pair", "POST", "/pairings", {})
    if status:
        return status
    import segno

    qr = segno.make(answer["url"], error="m")
    if args.png:
        fd = os.open(args.png, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o600)
            qr.save(file, kind="png", scale=8, border=4)
    if args.json:
        print(json.dumps(answer), flush=True)
        return 0
    qr.terminal(out=sys.stdout, compact=True)
    expires = datetime.datetime.fromtimestamp(answer["expiresAt"] / 1000).strftime("%H:%M:%S")
    print(f"\nScan this with the phone's camera, or open:\n  {answer['url']}\n"
          f"It pairs one device, once, until {expires}.", flush=True)
    return 0


def run_devices(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    words = args.words
    if not words:
        status, answer = _run("devices", "GET", "/devices")
        if status:
            return status
        if args.json:
            print(json.dumps(answer["devices"]), flush=True)
        else:
            _table(answer["devices"])
        return 0
    if words[0] == "revoke" and len(words) == 2:
        status, answer = _run("devices", "POST", f"/devices/{quote(words[1], safe='')}/revoke", {})
    elif words[0] == "rename" and len(words) == 3:
        status, answer = _run("devices", "PATCH", f"/devices/{quote(words[1], safe='')}", {"name": words[2]})
    else:
        print("router devices: give nothing (list), revoke NAME, or rename NAME NEW", file=sys.stderr)
        return 2
    if status:
        return status
    device = answer["device"]
    print(json.dumps(device) if args.json else f"{words[0]}d {device['name']} ({device['id']})", flush=True)
    return 0


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


def _table(devices: list[dict[str, Any]]) -> None:
    rows = [("DEVICE", "FIRST USE", "LAST USE", "STATE")]
    rows += [(d["name"], _when(d["firstUse"]), _when(d["lastUse"]), "revoked" if d["revoked"] else "active")
             for d in devices]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(), flush=True)
