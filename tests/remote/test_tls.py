"""The router's own CA and server certificates (router.remote.tls): the
chain verifies for each listen address, the keys are 0600, the CA is kept
across restarts and the server certificate follows the addresses."""

from __future__ import annotations

import os
import socket
import ssl
import stat
from pathlib import Path

import pytest
import trio

from router._hypercorn import serve_on_socket
from router.errors import Refusal
from router.remote import own_certificates, person_certificates
from router.remote.tls import CA_KEY_FILE, SERVER_KEY_FILE


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def _hello(scope: dict, receive: object, send: object) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()  # type: ignore[operator]
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})  # type: ignore[operator]
            else:
                await send({"type": "lifespan.shutdown.complete"})  # type: ignore[operator]
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


def _handshake(host: str, port: int, cafile: str | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
    raw = socket.create_connection((host, port), timeout=10)
    return context.wrap_socket(raw, server_hostname=host)


async def test_the_chain_verifies_for_each_listen_address_and_keys_are_private(tmp_path: Path) -> None:
    hosts = ["127.0.0.1", "127.0.0.3", "localhost"]
    certificates = own_certificates(tmp_path, hosts)
    assert certificates.ca_file is not None
    assert _mode(tmp_path / CA_KEY_FILE) == 0o600 and _mode(tmp_path / SERVER_KEY_FILE) == 0o600
    async with trio.open_nursery() as nursery:
        for host in ("127.0.0.1", "127.0.0.3"):
            sock = socket.socket()
            sock.bind((host, 0))
            sock.listen(8)
            sock.setblocking(False)
            port = sock.getsockname()[1]
            await nursery.start(lambda task_status, s=sock: serve_on_socket(
                _hello, s, logger="test.tls", certfile=certificates.certfile, keyfile=certificates.keyfile,
                task_status=task_status))
            names = [host, "localhost"] if host == "127.0.0.1" else [host]
            for name in names:
                tls = await trio.to_thread.run_sync(_handshake, name if name != "localhost" else "localhost", port,
                                                    certificates.ca_file)
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
                tls.close()
            # A client that trusts only the system's CAs refuses it.
            with pytest.raises(ssl.SSLCertVerificationError):
                await trio.to_thread.run_sync(_handshake, host, port, None)
        nursery.cancel_scope.cancel()


def test_the_ca_is_kept_and_the_server_certificate_follows_the_addresses(tmp_path: Path) -> None:
    first = own_certificates(tmp_path, ["127.0.0.1"])
    ca = Path(first.ca_file or "").read_bytes()
    server = Path(first.certfile).read_bytes()
    again = own_certificates(tmp_path, ["127.0.0.1"])
    assert Path(again.ca_file or "").read_bytes() == ca and Path(again.certfile).read_bytes() == server
    moved = own_certificates(tmp_path, ["127.0.0.1", "10.9.8.7"])
    assert Path(moved.ca_file or "").read_bytes() == ca
    assert Path(moved.certfile).read_bytes() != server
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(Path(moved.certfile).read_bytes())
    ca_cert = x509.load_pem_x509_certificate(ca)
    cert.verify_directly_issued_by(ca_cert)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(str(ip) for ip in names.get_values_for_type(x509.IPAddress)) == ["10.9.8.7", "127.0.0.1"]


def test_a_ca_key_that_is_not_private_is_refused(tmp_path: Path) -> None:
    own_certificates(tmp_path, ["127.0.0.1"])
    os.chmod(tmp_path / CA_KEY_FILE, 0o644)
    with pytest.raises(Refusal) as refused:
        own_certificates(tmp_path, ["127.0.0.1"])
    assert refused.value.code == "tls-file-unsafe" and "chmod 600" in refused.value.message


def test_a_person_certificate_that_does_not_load_is_refused(tmp_path: Path) -> None:
    mine = own_certificates(tmp_path / "a", ["127.0.0.1"])
    other = own_certificates(tmp_path / "b", ["127.0.0.1"])
    assert person_certificates(mine.certfile, mine.keyfile).ca_file is None
    with pytest.raises(Refusal) as refused:
        person_certificates(mine.certfile, other.keyfile)  # a key that is not the certificate's
    assert refused.value.code == "tls-files-bad"
