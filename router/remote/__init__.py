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

from router.remote.devices import Device, DeviceStore, StreamBook, credential_id
from router.remote.gate import COOKIE, OPEN_PATHS, REMOTE_STATUS, Gate, GateInfo, LoopbackOrigins
from router.remote.pairing import PairingBook
from router.remote.reach import Listen, Reach, ReachConfig, check_config, parse_listen
from router.remote.routes import make_blueprint
from router.remote.tls import Certificates, own_certificates, person_certificates

__all__ = ["COOKIE", "Certificates", "Device", "DeviceStore", "Gate", "GateInfo", "Listen", "LoopbackOrigins", "OPEN_PATHS",
           "PairingBook", "REMOTE_STATUS", "Reach", "ReachConfig", "StreamBook", "check_config", "credential_id", "make_blueprint",
           "own_certificates", "parse_listen", "person_certificates"]
