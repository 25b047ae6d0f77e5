"""Notification settings (``notifications.json``) and the VAPID key pair.

Both hold secrets, so both are files of this user's with mode 0600
(:func:`router.tokens.write_private`), read with the same check as a token
file: apprise URLs carry tokens and passwords, the VAPID private key signs
every push. Neither is ever logged or shown whole: an apprise URL is shown
masked (:func:`router.notify.core.mask`) and named by a hash.

``notifications.json`` in the settings directory::

    {"notifiers": {"apprise": {"urls": ["ntfys://ntfy.sh/my-topic", "mailto://…"]},
                   "web-push": {"subject": "mailto:me@example.org"}},
     "quiet_hours": {"start": "22:00", "end": "07:00", "time_zone": "Europe/Paris"},
     "turn_ended": false,
     "sessions": {"<session id>": {"muted": false, "turn_ended": true}}}

Every key is optional, and no other key is taken. ``notifiers`` holds each notifier module's options
(what its ``destinations``, ``check`` and ``send`` are given: docs/plugins.md,
``notifier``). Which notifiers are on is ``plugins.json``'s
``"notifier"`` list (their order is the order destinations are tried);
a notifier that is on but has nothing to send to (no URL, no subscription)
sends nothing. The file is structured by a converter
(:class:`router.notify.core.SettingsFile`); one that does not parse, has a
key it does not take or a value of the wrong type is reported
(``bad-notify-settings``, naming the path: ``notifications.json:
sessions["s1"].muted: expected a boolean, got a string``) and read as
empty: it never blocks a delivery.

The VAPID key (``vapid.pem`` in the data directory, PKCS#8 PEM, P-256) is
made once, the first time the ``web-push`` notifier needs it.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any, Final, Mapping

import attrs

from router.errors import Refusal
from router.notify.core import QuietHours, SessionSetting, SettingsFile, structure
from router.tokens import check_private, write_private
from wire.json import ABSENT

__all__ = ["SETTINGS_FILE", "VAPID_FILE", "NotifySettings", "load_settings", "save_settings", "vapid_key"]

SETTINGS_FILE: Final = "notifications.json"
VAPID_FILE: Final = "vapid.pem"


@attrs.frozen(kw_only=True)
class NotifySettings:
    #: module name -> its options (secrets inside: never shown).
    notifiers: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, repr=False)
    quiet: QuietHours | None = None
    turn_ended: bool = False
    sessions: Mapping[str, SessionSetting] = attrs.field(factory=dict)
    #: Why the file could not be read as written (it is then read as empty).
    error: Refusal | None = None

    def setting(self, session: str) -> SessionSetting:
        found = self.sessions.get(session)
        if found is not None:
            return found
        return SessionSetting(turn_ended=self.turn_ended)

    def to_json(self) -> dict[str, Any]:
        """As written in the file (secrets included: only for the file)."""
        out: dict[str, Any] = {"turn_ended": self.turn_ended,
                               "sessions": {k: attrs.asdict(v) for k, v in sorted(self.sessions.items())}}
        if self.notifiers:
            out["notifiers"] = {k: dict(v) for k, v in self.notifiers.items()}
        if self.quiet is not None:
            out["quiet_hours"] = attrs.asdict(self.quiet)
        return out


def _bad(message: str) -> Refusal:
    return Refusal("bad-notify-settings", f"{SETTINGS_FILE}: {message}; fix the file (notifications stay as if "
                   "it were empty meanwhile)")


def _parse(value: Any) -> NotifySettings:
    """The file's JSON, structured (:class:`router.notify.core.SettingsFile`:
    unknown keys and values of the wrong type refused, naming their path)."""
    try:
        document = structure(value, SettingsFile, code="bad-notify-settings", what=SETTINGS_FILE)
    except Refusal as refusal:
        raise _bad(refusal.message.removeprefix(f"{SETTINGS_FILE}: ")) from None
    quiet = None if document.quiet_hours is ABSENT else document.quiet_hours
    return NotifySettings(notifiers=document.notifiers, quiet=quiet, turn_ended=document.turn_ended,
                          sessions=document.sessions)


def load_settings(settings_dir: Path) -> NotifySettings:
    """The settings, or empty ones carrying the refusal that says why the
    file could not be used. A missing file is empty settings."""
    path = Path(settings_dir) / SETTINGS_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return NotifySettings()
    except OSError as exc:
        return NotifySettings(error=_bad(f"cannot be opened ({exc.strerror}); it must be a regular file of yours"))
    try:
        with os.fdopen(fd, "rb") as file:
            check_private(path, os.fstat(file.fileno()))
            raw = file.read(1 << 20)
        return _parse(json.loads(raw.decode("utf-8")))
    except Refusal as refusal:
        if refusal.code == "token-file-unsafe":
            refusal = Refusal("bad-notify-settings", refusal.message.replace("token file", "settings file"))
        return NotifySettings(error=refusal)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return NotifySettings(error=_bad("it is not JSON text"))


def save_settings(settings_dir: Path, settings: NotifySettings) -> None:
    Path(settings_dir).mkdir(parents=True, exist_ok=True)
    write_private(Path(settings_dir) / SETTINGS_FILE, json.dumps(settings.to_json(), indent=2) + "\n")


def vapid_key(data_dir: Path) -> tuple[Path, str]:
    """The VAPID key file (made once, 0600) and its public key as the page
    takes it: base64url, no padding, of the 65-byte uncompressed point."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(data_dir) / VAPID_FILE
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:  # another router made it meanwhile: use theirs
            pass
        else:
            with os.fdopen(fd, "wb") as file:
                file.write(pem)
                file.flush()
                os.fsync(file.fileno())
        info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise Refusal("vapid-key-unsafe", f"{path} is a symbolic link; the VAPID key must be a regular file of yours")
    try:
        check_private(path, info)
    except Refusal as refusal:
        raise Refusal("vapid-key-unsafe", refusal.message.replace("token file", "VAPID key")) from None
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise Refusal("vapid-key-unsafe", f"{path} is not a P-256 private key; remove it and a new one is made")
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return path, base64.urlsafe_b64encode(point).rstrip(b"=").decode()
