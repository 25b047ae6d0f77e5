"""The certificates ``router serve --listen`` serves with: the person's own,
or a CA of the router's and a server certificate it signs.

Theory of operation
-------------------

TLS itself is Hypercorn's (``Config.create_ssl_context``, wrapped round each
listener as its Trio worker does: :func:`router._hypercorn.serve_on_socket`);
this module only decides which certificate and key files that context loads.

- **The person's own** (``--tls-cert FILE --tls-key FILE``): used as given,
  checked once at start (both readable, the key matches the certificate:
  ``ssl.SSLContext.load_cert_chain`` says so) so a mistake is a refusal at
  start, not a failed handshake on the phone. Nothing of ours is offered for
  download then: the person's certificate is trusted by whatever trusts it.
- **The router's own** (neither flag): a CA made once (an EC P-256 key, a
  self-signed certificate valid ten years, ``CA:TRUE, pathlen:0``, key usage
  ``keyCertSign, cRLSign``) kept in the settings directory as
  ``remote-ca.pem`` and ``remote-ca-key.pem``, the key file 0600 (made
  0600 before a byte is written; refused ``tls-file-unsafe`` at start when
  it is not a regular file of this user's with mode 0600). It is reused
  across restarts, so a phone that installed it once keeps trusting the
  router. A server certificate (``remote-server.pem`` and its key,
  0600) is signed by it for exactly the listen addresses (IP addresses as
  ``iPAddress`` subject alternative names, names as ``dNSName``), valid
  397 days (the longest a browser accepts for a server certificate);
  it is made again when the addresses differ from the ones it names, when
  it was not signed by this CA, or when it expires within 30 days.

What a phone must do to trust the router's own CA: install ``remote-ca.pem``
(offered at ``GET /pair/ca.pem``; the steps for iOS and Android are in
docs/remote.md). Until then it refuses the router's certificate, which is
the point: a device that does not trust the CA cannot be talked to by
anyone pretending to be the router either.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import stat
from pathlib import Path
from typing import Final, Iterable

import attrs

from router.errors import Refusal

__all__ = ["CA_CERT_FILE", "CA_KEY_FILE", "Certificates", "own_certificates", "person_certificates"]

CA_CERT_FILE: Final = "remote-ca.pem"
CA_KEY_FILE: Final = "remote-ca-key.pem"
SERVER_CERT_FILE: Final = "remote-server.pem"
SERVER_KEY_FILE: Final = "remote-server-key.pem"
#: The CA's life (ours: long, since a phone installs it by hand).
CA_DAYS: Final = 3650
#: A server certificate's life: 397 days is the most Chromium and Safari
#: accept for a certificate issued after 2020-09-01 (CA/Browser Forum ballot
#: SC31; Apple's "About upcoming limits on trusted certificates").
SERVER_DAYS: Final = 397
#: A server certificate this close to its end is made again at start.
RENEW_BEFORE: Final = datetime.timedelta(days=30)
#: The CA's subject name (ours).
CA_NAME: Final = "router local CA"


@attrs.frozen(kw_only=True)
class Certificates:
    """What Hypercorn's SSL context loads, and the CA a phone installs
    (None with the person's own certificate)."""

    certfile: str
    keyfile: str
    ca_file: str | None = None

    def ca_pem(self) -> bytes | None:
        return None if self.ca_file is None else Path(self.ca_file).read_bytes()


def person_certificates(certfile: str, keyfile: str) -> Certificates:
    """The person's certificate and key, checked as a server would load
    them; ``tls-files-bad`` when they cannot be."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise Refusal("tls-files-bad", f"--tls-cert {certfile} and --tls-key {keyfile} cannot be served: {exc}; "
                      "give a PEM certificate (with its chain) and the key that matches it") from None
    return Certificates(certfile=str(certfile), keyfile=str(keyfile))


def own_certificates(settings_dir: Path, hosts: Iterable[str]) -> Certificates:
    """The router's CA (made once) and a server certificate for ``hosts``
    (made when it does not fit them), in ``settings_dir``."""
    settings_dir = Path(settings_dir)
    settings_dir.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(settings_dir)
    _server(settings_dir, ca_key, ca_cert, sorted(set(hosts)))
    return Certificates(certfile=str(settings_dir / SERVER_CERT_FILE), keyfile=str(settings_dir / SERVER_KEY_FILE),
                        ca_file=str(settings_dir / CA_CERT_FILE))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write_private(path: Path, data: bytes) -> None:
    """``data`` into a new 0600 file at ``path`` (replacing it atomically)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def _read_private(path: Path) -> bytes:
    """A key file's bytes, refused ``tls-file-unsafe`` unless it is a
    regular file of this user's with mode 0600."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or mode != 0o600:
            raise Refusal("tls-file-unsafe", f"the key file {path} must be a regular file of yours with mode 0600 "
                          f"(it has {mode:04o}); fix it with chmod 600 {path}, or remove it to make a new one",
                          path=str(path))
        return file.read()


def _ca(settings_dir: Path) -> tuple[object, object]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key_path, cert_path = settings_dir / CA_KEY_FILE, settings_dir / CA_CERT_FILE
    if key_path.exists() and cert_path.exists():
        key = serialization.load_pem_private_key(_read_private(key_path), password=None)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if cert.public_key() == key.public_key():
            return key, cert
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"router on {os.uname().nodename}")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _san(hosts: list[str]) -> list[object]:
    from cryptography import x509

    names: list[object] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _fits(settings_dir: Path, ca_cert: object, hosts: list[str]) -> bool:
    """Whether the server certificate on disk is this CA's, for exactly
    ``hosts``, and not near its end."""
    from cryptography import x509

    cert_path, key_path = settings_dir / SERVER_CERT_FILE, settings_dir / SERVER_KEY_FILE
    if not (cert_path.exists() and key_path.exists()):
        return False
    _read_private(key_path)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        cert.verify_directly_issued_by(ca_cert)  # type: ignore[arg-type]
    except (ValueError, TypeError, Exception):
        return False
    named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(map(repr, named)) == set(map(repr, _san(hosts))) and cert.not_valid_after_utc - RENEW_BEFORE > _now()


def _server(settings_dir: Path, ca_key: object, ca_cert: object, hosts: list[str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if _fits(settings_dir, ca_cert, hosts):
        return
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "router")]))
        .issuer_name(ca_cert.subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)  # type: ignore[arg-type]
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),  # type: ignore[attr-defined]
                       critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    _write_private(settings_dir / SERVER_KEY_FILE, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (settings_dir / SERVER_CERT_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
