"""A Web Push service written for the tests (RFC 8030 section 5: a POST to
the subscription's endpoint, answered ``201 Created`` with a ``Location``),
on loopback HTTP, and the browser's side of a subscription.

The service runs in a thread of its own (its own Trio loop), so a router
in another process or in the test's own loop posts to it alike. What it
answers per endpoint: ``accept`` (201), ``gone`` (410), ``hold`` (reads the
request and never answers: a send that cannot complete).

:class:`Browser` is what a browser's ``PushManager.subscribe()`` makes: a
P-256 key pair and a 16-byte auth secret (RFC 8291 section 2); it decrypts
an ``aes128gcm`` body with ``http_ece`` and checks a VAPID header (RFC 8292:
an ES256 JWT whose signature verifies under the ``k`` key, which must be the
router's).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import threading
import time
from typing import Any

import attrs
import h11
import trio


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@attrs.define
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class PushService:
    """See the module docstring. ``received``: the POSTs it accepted (201)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.mode: dict[str, str] = {}
        self.received: list[Received] = []
        self.refused: list[Received] = []
        self.held = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._stop = threading.Event()

    def endpoint(self, name: str, mode: str = "accept") -> str:
        self.mode[f"/push/{name}"] = mode
        return f"http://127.0.0.1:{self.port}/push/{name}"

    def __enter__(self) -> PushService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()

    def accepted(self, name: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == f"/push/{name}"]

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        http = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = self._read(conn, http)
                if request is None:
                    return
                path = request.target.decode()
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                got = Received(path, headers, body)
                mode = self.mode.get(path, "gone")
                if mode == "hold":
                    with self._lock:
                        self.held += 1
                    self._stop.wait(60)
                    return
                status = 201 if mode == "accept" else 410
                with self._lock:
                    (self.received if status == 201 else self.refused).append(got)
                extra = [("location", f"/message/{secrets.token_hex(4)}")] if status == 201 else []
                conn.sendall(http.send(h11.Response(status_code=status, headers=[("content-length", "0"), *extra])))
                conn.sendall(http.send(h11.EndOfMessage()))
                http.start_next_cycle()
        except (OSError, h11.ProtocolError):
            return
        finally:
            conn.close()

    @staticmethod
    def _read(conn: socket.socket, http: h11.Connection) -> tuple[Any, bytes]:
        request, body = None, b""
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                data = conn.recv(65536)
                http.receive_data(data)
                if not data and request is None:
                    return None, b""
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""


class Browser:
    """A browser's push subscription (see the module docstring)."""

    def __init__(self, endpoint: str) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        self.endpoint = endpoint
        point = self.key.public_key().public_bytes(serialization.Encoding.X962,
                                                   serialization.PublicFormat.UncompressedPoint)
        self.subscription = {"endpoint": endpoint, "expirationTime": None,
                             "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)}}

    def decrypt(self, received: Received) -> dict[str, Any]:
        import http_ece

        assert received.headers["content-encoding"] == "aes128gcm"
        plain = http_ece.decrypt(received.body, private_key=self.key, auth_secret=self.auth, version="aes128gcm")
        return json.loads(plain)


def verify_vapid(received: Received, router_public_key: str) -> dict[str, Any]:
    """The VAPID JWT's claims, after checking its ES256 signature under the
    router's public key (RFC 8292 sections 2 and 3)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, utils

    scheme, _, params = received.headers["authorization"].partition(" ")
    assert scheme == "vapid"
    fields = dict(part.strip().split("=", 1) for part in params.split(","))
    assert fields["k"] == router_public_key
    header_b64, claims_b64, signature_b64 = fields["t"].split(".")
    header = json.loads(unb64url(header_b64))
    assert header["alg"] == "ES256"
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(router_public_key))
    raw = unb64url(signature_b64)
    assert len(raw) == 64
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))  # raises when forged
    claims = json.loads(unb64url(claims_b64))
    assert claims["exp"] > time.time()
    return claims
