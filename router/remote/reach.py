"""The router's reach beyond this machine: its addresses, pairing and devices
as one component of the main job.

Theory of operation
-------------------

:class:`Reach` holds what ``router serve --listen HOST:PORT`` (repeatable),
``--tls-cert``/``--tls-key`` and ``--behind-proxy [URL]`` asked for
(:class:`ReachConfig`, checked by :func:`check_config` before anything
starts), the certificates (:mod:`router.remote.tls`), the pairing book
(:mod:`router.remote.pairing`, sans-IO, fed the wall clock here), the
devices' record and their open streams (:mod:`router.remote.devices`).

- **Addresses.** Each ``--listen`` address is served over TLS (the
  person's certificate, else the router's own CA's), or, with
  ``--behind-proxy``, in plain HTTP for the local proxy, which is why a
  non-loopback address is refused then (``plain-http-refused``): plain HTTP
  past this machine can be read and changed by anyone on the way.
- **Origins.** The router's own origins (:meth:`Reach.origins`): its
  loopback port's (``http://127.0.0.1:PORT``, ``http://localhost:PORT``),
  each listen address's, and the proxy's URL when given; a proxied
  request's forwarded origin is added for that request
  (:mod:`router.remote.gate`).
- **Pairing.** :meth:`Reach.pairing` issues a code and makes the URL a
  phone opens, ``<origin>/pair#<code>`` (the code in the fragment: browsers
  never send it, so no log and no proxy sees it), with its QR code as SVG.
  :meth:`Reach.redeem` trades a code for a device and its secret.
- **Revocation.** :meth:`Reach.revoke` writes the record, then cancels the
  device's open requests here (its live streams end at once); :meth:`run`
  checks the devices that have streams open against the record once a
  second, so a revocation by another router sharing the record ends them
  here within that second.

Resource handling: :meth:`Reach.run` owns the watcher and closes the
devices' record on every exit. Error handling: the record's calls run on
one worker thread; a failure there is a 500 for the request that met it.
"""

from __future__ import annotations

import io
import ipaddress
import logging
import time
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import trio

from router.errors import Refusal
from router.remote.devices import Device, DeviceStore, StreamBook, StreamBookStatistics
from router.remote.pairing import PairingBook, PairingBookStatistics, Redeemed
from router.remote.tls import Certificates, own_certificates, person_certificates

__all__ = ["ReachStatistics", "Listen", "Reach", "ReachConfig", "check_config", "parse_listen"]

log = logging.getLogger("router.remote")

#: Seconds between two checks of the devices with open streams against the
#: record (the brief: a revoked device's streams close within a second).
WATCH_EVERY: Final = 0.5


@attrs.frozen
class Listen:
    host: str
    port: int

    @property
    def hostport(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address); ``bad-listen``."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Refusal("bad-listen", f"--listen {text!r} is not HOST:PORT (an address of this machine and a port "
                      "1 to 65535, e.g. 192.168.1.20:8443 or [fd00::2]:8443)")
    if host in ("0.0.0.0", "::"):
        raise Refusal("bad-listen", f"--listen {text!r}: name the address the phone reaches (one per --listen), "
                      "not every address: the certificate names each address it serves")
    return Listen(host.lower(), int(port))


@attrs.frozen(kw_only=True)
class ReachConfig:
    listen: tuple[Listen, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    #: ``--behind-proxy``: a local proxy terminates TLS.
    behind_proxy: bool = False
    #: The URL the proxy serves the router at (``--behind-proxy URL``).
    public_url: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.listen) or self.behind_proxy


def check_config(config: ReachConfig) -> None:
    """Refuse what cannot be served safely, before anything starts."""
    if (config.tls_cert is None) != (config.tls_key is None):
        raise Refusal("tls-files-bad", "give --tls-cert FILE and --tls-key FILE together (the certificate and its key)")
    if config.tls_cert is not None and not config.listen:
        raise Refusal("tls-files-bad", "--tls-cert and --tls-key are for --listen HOST:PORT addresses; give one")
    if config.behind_proxy:
        if config.tls_cert is not None:
            raise Refusal("tls-files-bad", "--behind-proxy means the proxy holds the certificate; drop --tls-cert "
                          "and --tls-key, or drop --behind-proxy to serve TLS here")
        for each in config.listen:
            if not each.loopback:
                raise Refusal("plain-http-refused", f"--listen {each.hostport} with --behind-proxy would serve plain "
                              "HTTP beyond this machine, where anyone on the way can read and change it (the "
                              "device's credential included); listen on 127.0.0.1 for the proxy, or drop "
                              "--behind-proxy to serve TLS on that address")
    if config.public_url is not None:
        parts = urlsplit(config.public_url)
        if parts.scheme != "https" or not parts.hostname:
            raise Refusal("bad-proxy-url", f"--behind-proxy {config.public_url!r}: give the https:// URL the proxy "
                          "serves the router at (e.g. https://box.tail1234.ts.net)")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


@attrs.frozen
class ReachStatistics:
    """What a :class:`Reach` serves: its listeners, its pairing codes and the
    devices' live streams."""

    listen: tuple[str, ...]
    pairing: PairingBookStatistics
    streams: StreamBookStatistics


class Reach:
    """See the module docstring."""

    def __init__(self, config: ReachConfig, *, settings_dir: Path, devices: DeviceStore, loopback_port: int | None = None,
                 clock: Any = time.time) -> None:
        check_config(config)
        self.config = config
        self.settings_dir = Path(settings_dir)
        self.store = devices
        self.book = PairingBook()
        self.streams = StreamBook()
        self.loopback_port = loopback_port
        self.clock = clock
        self.certificates: Certificates | None = None

    def __repr__(self) -> str:
        return f"<Reach listen={[each.hostport for each in self.config.listen]} {self.book!r} {self.streams!r}>"

    def statistics(self) -> ReachStatistics:
        return ReachStatistics(listen=tuple(each.hostport for each in self.config.listen),
                               pairing=self.book.statistics(self.clock()), streams=self.streams.statistics())
    # ------------------------------------------------------------------ addresses

    @property
    def behind_proxy(self) -> bool:
        return self.config.behind_proxy

    @property
    def tls(self) -> bool:
        return not self.config.behind_proxy

    def prepare_certificates(self) -> Certificates | None:
        """The certificates the listen addresses serve (a worker thread's
        call: it may make keys); None when they serve plain HTTP."""
        if not self.tls or not self.config.listen:
            return None
        if self.config.tls_cert is not None and self.config.tls_key is not None:
            self.certificates = person_certificates(self.config.tls_cert, self.config.tls_key)
        else:
            self.certificates = own_certificates(self.settings_dir, [each.host for each in self.config.listen])
        return self.certificates

    def public_host(self) -> str | None:
        """The proxy's URL's ``host[:port]``, as a ``Host`` header names it."""
        return None if self.config.public_url is None else urlsplit(self.config.public_url).netloc.lower()

    def listen_hosts(self) -> set[str]:
        return {each.hostport for each in self.config.listen}

    def origins(self) -> frozenset[str]:
        scheme = "https" if self.tls else "http"
        out = {f"{scheme}://{each.hostport}" for each in self.config.listen}
        if self.loopback_port is not None:
            out |= {f"http://127.0.0.1:{self.loopback_port}", f"http://localhost:{self.loopback_port}"}
        if self.config.public_url is not None:
            out.add(_origin(self.config.public_url))
        return frozenset(out)

    def pairing_base(self) -> str:
        if self.config.public_url is not None:
            return self.config.public_url.rstrip("/")
        chosen = sorted(self.config.listen, key=lambda each: each.loopback)
        if not chosen or (self.behind_proxy and self.config.public_url is None):
            raise Refusal("no-remote-address", "a phone reaches this router at no address yet: start `router serve` "
                          "with --listen HOST:PORT, or --behind-proxy URL naming the proxy's https:// URL")
        return f"https://{chosen[0].hostport}"

    # ------------------------------------------------------------------ pairing

    def pairing(self) -> dict[str, Any]:
        """A new code: ``{url, code, expiresAt (ms), qrSvg}``; ``pairing-locked``
        or ``no-remote-address`` as a refusal raised."""
        import segno

        base = self.pairing_base()
        issued = self.book.issue(self.clock())
        if isinstance(issued, Refusal):
            raise issued
        url = f"{base}/pair#{issued.code}"
        svg = io.BytesIO()
        segno.make(url, error="m").save(svg, kind="svg", scale=4, border=2, xmldecl=False)
        return {"url": url, "code": issued.code, "expiresAt": int(issued.expires_at * 1000),
                "qrSvg": svg.getvalue().decode()}

    async def redeem(self, code: Any, user_agent: str) -> tuple[Device, str]:
        redeemed = self.book.redeem(code if type(code) is str else "", self.clock())
        if not isinstance(redeemed, Redeemed):
            log.info("pairing refused: %s", redeemed.code)  # never the code
            raise redeemed
        device, secret = await self._call(self.store.pair, user_agent, self.clock())
        log.info("paired device %s (%s)", device.name, device.id)
        return device, secret

    # ------------------------------------------------------------------ devices

    async def authenticate(self, secret: str) -> Device | None:
        device = await self._call(self.store.authenticate, secret, self.clock())
        if device is not None and self.streams.is_revoked(device.id):
            return None
        return device

    async def devices(self) -> list[Device]:
        return await self._call(self.store.devices)

    async def rename(self, name: str, new: str) -> Device:
        return await self._call(self.store.rename, name, new)

    async def revoke(self, name: str) -> Device:
        device = await self._call(self.store.revoke, name, self.clock())
        self._cancel(device.id)
        log.info("revoked device %s (%s)", device.name, device.id)
        return device

    async def revoked_among(self, ids: list[str]) -> set[str]:
        """Which of the device ids ``ids`` are revoked (or gone)."""
        return await self._call(self.store.revoked_among, ids)

    def _cancel(self, device_id: str) -> None:
        for handle in self.streams.revoked(device_id):
            handle.cancel(reason=f"device {device_id} was revoked")  # type: ignore[attr-defined]

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await self.store.call(fn, *args)

    # ------------------------------------------------------------------ the watcher

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch the devices with open streams against the record (see the
        module docstring) until cancelled; closes the record on exit."""
        try:
            task_status.started()
            while True:
                await trio.sleep(WATCH_EVERY)
                watched = self.streams.watched()
                if watched:
                    for device_id in await self._call(self.store.revoked_among, watched):
                        self._cancel(device_id)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.store.close)  # waits for a call in the record's thread
