"""The places' record: every session ``router new`` made, ended or not.

``places.json`` in the router's data directory (the one ``router serve``
and every ``router mcp`` of the user share: ``usage.jsonl``'s), one object
per session keyed by its id on the board: its name, project, branch,
base, worktree, where it runs, its tmux session and Claude Code session
id (local), its first prompt's event id and whether it went in, and when
it ended. Written whole, atomically (0600), under an ``flock`` so two
routers never lose each other's write; read by the board to show each
session's project, branch and worktree, and by a restarted router to adopt
the places it made.

Each entry is structured strictly (:func:`read_place`, on the wires'
``Builder``): a string is a string, a count a whole number, a boolean a
boolean, ``null`` only where the field may be absent; nothing is coerced
(``"1"`` is not ``1``). Keys are the attribute names as written (snake_case),
and a key this version does not know is kept out of the way (a newer
router's record stays readable). An entry that does not structure is a
``bad-place`` refusal naming its path, and is left out: the rest are read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Mapping

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

from router.errors import Refusal
from router.plugins.models import refusal_from
from wire._convert import Builder
from wire.json import JsonError, dumps, loads

__all__ = ["FILE", "Place", "Places", "read_place"]

FILE: Final = "places.json"


@attrs.frozen(kw_only=True)
class Place:
    id: str
    name: str
    project: str
    project_path: str
    branch: str
    base: str
    worktree: str
    where: str
    harness: str
    tmux: str | None = None
    claude_session: str | None = None
    prompt: str | None = None
    prompt_event: str | None = None
    prompted: bool = False
    created_at: int = 0
    ended_at: int | None = None

    def board_fields(self) -> dict[str, Any]:
        """What the board shows of it beside the session's own listing."""
        return {"name": self.name, "project": self.project, "branch": self.branch, "base": self.base,
                "worktree": self.worktree, "where": self.where}

    def to_json(self) -> dict[str, Any]:
        out = {**self.board_fields(), "session": self.id, "harness": self.harness}
        if self.tmux is not None:
            out["tmux"] = self.tmux
        if self.ended_at is not None:
            out["endedAt"] = self.ended_at
        return out


class PlaceShapeError(ValueError):
    """A stored place's value of the wrong type."""


def _make_converter() -> cattrs.Converter:
    """Strict leaves; every field written as it is named, ``None`` as
    ``null`` (as the record has always been written), and read back so."""
    builder = Builder(PlaceShapeError, tags={}, detailed=True, spell=str)
    conv = builder.conv
    attrs.resolve_types(Place)
    builder.register(Place, make_dict_structure_fn(Place, conv), conv.get_unstructure_hook(Place))
    return conv


_converter: Final = _make_converter()


def read_place(key: str, value: object) -> Place | Refusal:
    """The entry ``places[key]`` as a :class:`Place`, or ``bad-place`` naming
    the failing path (``places.json: places["s1"].created_at: ...``)."""
    try:
        return _converter.structure(value, Place)
    except Exception as exc:  # noqa: BLE001 - every structuring error refuses
        return refusal_from(exc, what=FILE, code="bad-place", at=f"places[{dumps(key)}]")


class Places:
    """The record at ``folder / places.json`` (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        self._lock = folder / f".{FILE}.lock"

    def __repr__(self) -> str:
        return f"<Places {self.path}>"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> dict[str, Place]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            value = loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, JsonError):
            return {}
        entries = value.get("places") if type(value) is dict else None
        read = {key: read_place(key, item) for key, item in entries.items()} if type(entries) is dict else {}
        # A damaged entry (a bad-place refusal) is left out; the rest are read.
        return {key: place for key, place in read.items() if type(place) is Place}

    def _write(self, places: Mapping[str, Place]) -> None:
        temporary = self.path.with_name(f".{FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(dumps({"places": {k: _converter.unstructure(v) for k, v in places.items()}}).encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    def all(self) -> dict[str, Place]:
        """Every place, ended ones included, by session id."""
        return self._read()

    def live(self) -> dict[str, Place]:
        return {key: place for key, place in self._read().items() if place.ended_at is None}

    def get(self, key: str) -> Place | None:
        """The place of session id ``key``, or the live one named ``key``."""
        places = self._read()
        if key in places:
            return places[key]
        named = [place for place in places.values() if place.name == key and place.ended_at is None]
        return named[0] if len(named) == 1 else None

    def put(self, place: Place) -> None:
        with self._locked():
            places = self._read()
            places[place.id] = place
            self._write(places)

    def update(self, key: str, change: Callable[[Place], Place]) -> Place | None:
        with self._locked():
            places = self._read()
            if key not in places:
                return None
            places[key] = change(places[key])
            self._write(places)
            return places[key]
