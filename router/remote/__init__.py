"""The router reachable from a phone, securely (docs/remote.md).

- :mod:`.tls`: the person's certificate, or the router's own CA and a server
  certificate for the listen addresses;
- :mod:`.pairing`: sans-IO: one-time codes, expiry, lockout;
- :mod:`.devices`: the devices' record (SQLite or PostgreSQL) and their open
  streams (sans-IO);
- :mod:`.gate`: the ASGI gate every TCP request passes (proxy headers,
  ``Host``, ``Origin``, a device's credential);
- :mod:`.reach`: :class:`Reach`, the component ``router serve`` runs;
- :mod:`.routes`, :mod:`.page`: the pairing and device routes, and the
  pairing page;
- :mod:`.cli`: ``router pair``, ``router devices``.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.remote.devices": "DEVICES_FILE Device DeviceStore StreamBook credential_id",
    "router.remote.gate": "COOKIE OPEN_PATHS REMOTE_STATUS Gate GateInfo LoopbackOrigins",
    "router.remote.pairing": "PairingBook",
    "router.remote.reach": "Listen Reach ReachConfig check_config parse_listen",
    "router.remote.routes": "install_routes",
    "router.remote.tls": "Certificates own_certificates person_certificates",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
