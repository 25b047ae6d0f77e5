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

from wire.json import JsonError, dumps, loads

__all__ = ["FILE", "Place", "Places"]

FILE: Final = "places.json"

_converter = cattrs.Converter(forbid_extra_keys=False)


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
        out = {}
        for key, item in (value.get("places") or {}).items() if type(value) is dict else ():
            try:
                out[key] = _converter.structure(item, Place)
            except Exception:  # noqa: BLE001 - a damaged entry is left out, the rest read
                continue
        return out

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
