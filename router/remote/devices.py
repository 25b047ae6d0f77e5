"""Paired devices: their record (SQLite or PostgreSQL) and their open streams.

Theory of operation
-------------------

A device holds one credential: :data:`SECRET_BYTES` random bytes
(``secrets.token_urlsafe``), shown to it once when it pairs and kept here
only as its SHA-256 (a credential of 256 random bits needs no slow hash: it
cannot be guessed, only stolen, and the record never holds it). A request
names its device by that hash; a revoked device's hash finds nothing usable.

- **The record** is its own component, ``devices``, with its schema steps
  (:data:`STEPS`, one list for both dialects: the SQL is portable) taken by
  :func:`router.store.db.migrate`: a ``devices.sqlite`` file in the SQLite data
  directory, or the ``devices`` table of the PostgreSQL database, which
  routers sharing that database share, devices and revocations included.
- **Names.** A device is named from its browser's user agent
  (:func:`name_from_agent`: "iPhone Safari", "Android Chrome"), with
  ``-2``, ``-3`` … when the name is taken; the person may rename it
  (``PATCH /devices/<name>``). Names are what the person types
  (``router devices revoke NAME``); ids (``dev-<hex>``) are what the
  connection caps and logs use: :func:`credential_id` is
  ``device:<id>``.
- **Use.** First use is the pairing; last use is written when a request
  comes more than :data:`TOUCH_EVERY` seconds after the one written last
  (no write per request).
- **Open streams.** :class:`StreamBook` (sans-IO) keeps, per device id, the
  cancel handles of its open streams; revoking hands back those to cancel,
  and :meth:`StreamBook.watched` names the ids a router checks against the
  record once a second, so a revocation made by another router sharing the
  record also closes the streams open here within that second.

Error handling: from Trio every method of :class:`DeviceStore` runs on the
record's one worker thread (:meth:`DeviceStore.call`, a
:class:`router.store.worker.Worker`): a transient database failure is
tried again, whole, then refused ``store-unavailable``; any other failure
raises, the record unchanged.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Final, Hashable, Iterable

import attrs

from router.store.db import Database, SqliteDatabase, StoreTarget, migrate, open_migrated
from router.errors import Refusal
from router.store.worker import Worker

__all__ = ["StreamBookStatistics", "Device", "DeviceStore", "StreamBook", "credential_id", "hash_secret", "name_from_agent"]

#: Random bytes in a device's credential (ours: 256 bits, as the API token).
SECRET_BYTES: Final = 32
#: Seconds between two writes of a device's last use (ours: a minute is as
#: precise as "last used" needs to be).
TOUCH_EVERY: Final = 60.0
#: A device name: what a person types after ``router devices revoke``.
NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,47}")
DEVICES_FILE: Final = "devices.sqlite"

#: The schema, as steps (``STEPS[n]`` takes version n to n + 1); the same
#: statements on SQLite and PostgreSQL.
STEPS: Final = (
    (
        """CREATE TABLE IF NOT EXISTS devices (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            secret_hash TEXT NOT NULL UNIQUE,
            user_agent TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT NOT NULL,
            revoked_at BIGINT
        )""",
    ),
)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def credential_id(device_id: str) -> str:
    """The credential id the connection caps key on."""
    return f"device:{device_id}"


def name_from_agent(agent: str) -> str:
    """A short name for a browser's ``User-Agent``: its device and browser."""
    device = next((label for needle, label in (
        ("iPhone", "iPhone"), ("iPad", "iPad"), ("Android", "Android"), ("Macintosh", "Mac"),
        ("Windows", "Windows"), ("CrOS", "Chromebook"), ("Linux", "Linux"),
    ) if needle in agent), "Device")
    browser = next((label for needle, label in (
        ("Edg/", "Edge"), ("Firefox/", "Firefox"), ("FxiOS", "Firefox"), ("CriOS", "Chrome"),
        ("Chrome/", "Chrome"), ("Safari/", "Safari"),
    ) if needle in agent), "browser")
    return f"{device} {browser}"


@attrs.frozen(kw_only=True)
class Device:
    id: str
    name: str
    user_agent: str
    created_at: int
    last_used_at: int
    revoked_at: int | None = None

    @property
    def credential(self) -> str:
        return credential_id(self.id)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "userAgent": self.user_agent, "firstUse": self.created_at,
                "lastUse": self.last_used_at, "revoked": self.revoked_at is not None,
                **({"revokedAt": self.revoked_at} if self.revoked_at is not None else {})}


_COLUMNS: Final = "id, name, user_agent, created_at, last_used_at, revoked_at"


def _device(row: Any) -> Device:
    return Device(id=row[0], name=row[1], user_agent=row[2], created_at=row[3], last_used_at=row[4],
                  revoked_at=row[5])


def _ms(now: float | None = None) -> int:
    return int((time.time() if now is None else now) * 1000)


class DeviceStore:
    """The devices' record (see the module docstring)::

        store = DeviceStore.open(target, data_dir)
        device, secret = store.pair("Mozilla/5.0 (iPhone ...")
        store.authenticate(secret)       # the Device, or None
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        #: Held by each method: a sync caller (the ``router devices``
        #: command, a test) and the worker never share the connection.
        self._lock = threading.Lock()
        self._touched: dict[str, float] = {}
        #: The record's one worker thread, Trio's way in (:meth:`call`).
        self.worker = Worker("the devices record", grouped=False)

    async def call(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` (one of these methods) in the record's worker
        thread (:mod:`router.store.worker`); run again after a transient
        failure, ``store-unavailable`` past the budget."""
        return await self.worker.call(fn, *args)

    @classmethod
    def open(cls, target: StoreTarget | None, data_dir: Path) -> DeviceStore:
        def too_new(version: int) -> Exception:
            return Refusal("devices-too-new", f"the devices record was written by a newer router (schema "
                           f"{version}); upgrade this one")

        if target is not None and target.kind == "postgresql":
            return cls(open_migrated(target.location, "devices", STEPS, too_new=too_new))
        directory = Path(data_dir if target is None else target.location)
        directory.mkdir(parents=True, exist_ok=True)
        db = SqliteDatabase(directory / DEVICES_FILE, "devices")
        try:
            migrate(db, STEPS, too_new=too_new)
        except BaseException:
            db.close()
            raise
        return cls(db)

    def __repr__(self) -> str:
        return f"<DeviceStore {self._db.dialect}>"

    @property
    def database(self) -> Database:
        """The record's database (``router store copy`` reads and writes its
        table whole)."""
        return self._db

    def close(self) -> None:
        """Close the connection once no call runs in the worker thread;
        calls after it are refused."""
        with self.worker.held(), self._lock:
            self.worker.close_held()
            self._db.close()

    # ------------------------------------------------------------------ writes

    def pair(self, user_agent: str, now: float | None = None) -> tuple[Device, str]:
        """A new device named from ``user_agent``, and its secret (shown once)."""
        secret = secrets.token_urlsafe(SECRET_BYTES)
        agent = user_agent[:512]
        base = name_from_agent(agent)
        stamp = _ms(now)
        device_id = f"dev-{secrets.token_hex(8)}"
        with self._lock, self._db.transaction() as db:
            taken = {row[0] for row in db.execute("SELECT name FROM devices").fetchall()}
            name = base if base not in taken else next(f"{base}-{n}" for n in range(2, 10_000)
                                                       if f"{base}-{n}" not in taken)
            db.execute("INSERT INTO devices (id, name, secret_hash, user_agent, created_at, last_used_at) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (device_id, name, hash_secret(secret), agent, stamp, stamp))
        self._touched[device_id] = stamp / 1000
        return Device(id=device_id, name=name, user_agent=agent, created_at=stamp, last_used_at=stamp), secret

    def rename(self, name: str, new: str) -> Device:
        if type(new) is not str or not NAME.fullmatch(new):
            raise Refusal("bad-device-name", "a device name is 1 to 48 letters, digits, spaces, dots, dashes or "
                          "underscores, starting with a letter or digit")
        with self._lock, self._db.transaction() as db:
            device = self._named(db, name)
            if new != name and db.execute("SELECT 1 FROM devices WHERE name = ?", (new,)).fetchone():
                raise Refusal("device-name-taken", f"another device is named {new!r}; pick another name")
            db.execute("UPDATE devices SET name = ? WHERE id = ?", (new, device.id))
        return attrs.evolve(device, name=new)

    def revoke(self, name: str, now: float | None = None) -> Device:
        """Revoke the device named ``name`` (revoking twice is harmless)."""
        with self._lock, self._db.transaction() as db:
            device = self._named(db, name)
            if device.revoked_at is None:
                device = attrs.evolve(device, revoked_at=_ms(now))
                db.execute("UPDATE devices SET revoked_at = ? WHERE id = ?", (device.revoked_at, device.id))
        return device

    # ------------------------------------------------------------------ reads

    def authenticate(self, secret: str, now: float | None = None) -> Device | None:
        """The live device whose secret is ``secret``, its last use written
        when due; None for anything else."""
        if type(secret) is not str or not 16 <= len(secret) <= 256:
            return None
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM devices WHERE secret_hash = ? AND revoked_at IS NULL",
                                   (hash_secret(secret),)).fetchone()
            if row is None:
                return None
            device = _device(row)
            moment = time.time() if now is None else now
            if moment - self._touched.get(device.id, 0.0) >= TOUCH_EVERY:
                self._touched[device.id] = moment
                with self._db.transaction() as db:
                    db.execute("UPDATE devices SET last_used_at = ? WHERE id = ?", (_ms(moment), device.id))
                device = attrs.evolve(device, last_used_at=_ms(moment))
        return device

    def devices(self) -> list[Device]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM devices ORDER BY created_at, name").fetchall()
        return [_device(row) for row in rows]

    def revoked_among(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are revoked (or gone) in the record."""
        wanted = sorted(set(ids))
        if not wanted:
            return set()
        marks = ", ".join("?" for _ in wanted)
        with self._lock:
            live = {row[0] for row in self._db.execute(
                f"SELECT id FROM devices WHERE revoked_at IS NULL AND id IN ({marks})", wanted).fetchall()}
        return set(wanted) - live

    def _named(self, db: Database, name: str) -> Device:
        row = db.execute(f"SELECT {_COLUMNS} FROM devices WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise Refusal("unknown-device", f"no device is named {name!r}; `router devices` lists them",
                          device=name)
        return _device(row)


@attrs.frozen
class StreamBookStatistics:
    """The devices with live streams open, the streams, and the devices revoked."""

    devices: int
    streams: int
    revoked: int


class StreamBook:
    """Sans-IO: each device's open streams, by a handle the caller cancels.

    ``open(id, handle)`` when a stream starts, ``close(id, handle)`` when it
    ends (every exit); ``revoked(id)`` hands back the handles to cancel and
    forgets them; ``watched()`` the ids that have streams open."""

    def __init__(self) -> None:
        self._open: dict[str, set[Hashable]] = {}
        self._revoked: set[str] = set()

    def __repr__(self) -> str:
        return f"<StreamBook devices={len(self._open)} streams={sum(map(len, self._open.values()))}>"

    def statistics(self) -> StreamBookStatistics:
        return StreamBookStatistics(devices=len(self._open), streams=sum(map(len, self._open.values())),
                                    revoked=len(self._revoked))
    def open(self, device_id: str, handle: Hashable) -> bool:
        """Record an open stream; False when the device is known revoked
        here (the caller refuses it)."""
        if device_id in self._revoked:
            return False
        self._open.setdefault(device_id, set()).add(handle)
        return True

    def close(self, device_id: str, handle: Hashable) -> None:
        handles = self._open.get(device_id)
        if handles is not None:
            handles.discard(handle)
            if not handles:
                del self._open[device_id]

    def revoked(self, device_id: str) -> list[Hashable]:
        self._revoked.add(device_id)
        return list(self._open.pop(device_id, ()))

    def is_revoked(self, device_id: str) -> bool:
        return device_id in self._revoked

    def watched(self) -> list[str]:
        return sorted(self._open)
