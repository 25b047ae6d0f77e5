"""Settings: the plug-in layer's files, their revisions, and how they change.

The settings directory (``--settings DIR``, else ``$ROUTER_SETTINGS_DIR``,
else ``$XDG_CONFIG_HOME/router``, else ``~/.config/router``) holds:

``plugins.json``
    ``{"plugins": {kind: names}, "options": {kind: {name: object}}}``: which
    modules are switched on, and each module's options;
``routes.json``
    ``{"models": {model: {"provider"}}, "instances": {instance: route}}``;
``limits.json``
    ``{"limits": {...}}``: the tree the limit checks read;
``changes.jsonl``
    one line per change: when, who (``actor``), which file, the old and new
    revisions, and the old and new values of what changed.

A file that does not exist reads as its default (``router.plugins.defaults``).

Revisions
---------

A file's revision is the first 16 hex digits of the SHA-256 of its bytes
(the revision of a file that does not exist is that of no bytes). It is
computed, never stored, so it cannot go stale: a hand edit changes it as
surely as a write through the router, and a counter stored in the file could
be left unchanged by a hand edit. A writer names the revision it read; the
write is refused ``stale-revision`` unless the file still has those exact
bytes. Two contents that are byte-identical share a revision, which is
right: a patch made against those bytes applies to them.

Writing
-------

Check-then-write is one critical section across processes: an exclusive
``flock`` on ``.settings.lock`` in the directory, held while the file is
read, the revision compared, the patch applied, the new file written and the
change logged. Of two writers holding the same revision, exactly one writes;
the other is refused ``stale-revision``.

A file is written atomically: a temporary file in the same directory is
written and fsynced, renamed over the file, and the directory fsynced, so a
crash leaves the old file or the new one, never a torn one. The change line
is appended (one ``write`` on an ``O_APPEND`` descriptor, then fsync) after
the rename; a crash between the two loses the line, never the setting.

Every decision (what a patch means, whether it is allowed) is a plain
function below, over values, with no I/O.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import fcntl
import getpass
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Mapping, TypeVar

import attrs

from wire.json import JsonError, dumps, loads

from router.dirs import default_data_dir, default_settings_dir  # re-exported: their names here stay
from router.plugins.defaults import DOCUMENTS
from router.plugins.kinds import KINDS, check_kind_setting, is_name, names_of, unknown_kind
from router.plugins.models import MAX_DEPTH, MAX_SETTINGS_BYTES, LimitsPatch, PluginsDocument, PluginsPatch, RoutesPatch, nests_deeper, read_capped, read_settings, structure
from router.errors import Refusal
from router.plugins.usage import iso, read_json_lines, utc_now

__all__ = [
    "Document",
    "SettingsDir",
    "apply_plugins_patch",
    "default_data_dir",
    "default_settings_dir",
    "parse_change",
    "parse_patch",
    "plugins_value",
    "redact",
    "revision_of",
    "settings_of",
]

T = TypeVar("T")

LOCK_NAME = ".settings.lock"
CHANGES_NAME = "changes.jsonl"

#: Option keys whose values are never shown or logged.
SECRET_WORDS = ("token", "secret", "password", "api_key", "apikey")


def revision_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def default_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        return f"uid {os.getuid()}"


def redact(value: Any) -> Any:
    """``value`` with every secret-looking key's value replaced."""
    if type(value) is dict:
        return {
            k: "<redacted>" if any(w in k.lower() for w in SECRET_WORDS) and v is not None
            else redact(v)
            for k, v in value.items()
        }
    if type(value) is list:
        return [redact(v) for v in value]
    return value


#: Typed settings by (class, file, revision, exists): a revision names the
#: file's bytes, so the same bytes structure to the same value. A launch
#: reads three files; this keeps it from structuring every instance of an
#: unchanged ``routes.json`` again. Bounded: cleared when it fills.
_TYPED: dict[tuple[type, str, str, bool], Any] = {}
_TYPED_MAX: Final = 32


def settings_of(document: "Document | Refusal", cls: type[T]) -> T:
    """A document's typed settings (:func:`~router.plugins.models.read_settings`).
    A document that cannot be read structures as ``null`` does: for
    ``plugins.json``, every kind refused (each keeps what it had)."""
    if isinstance(document, Refusal):
        return read_settings(None, cls)
    key = (cls, document.name, document.revision, document.exists)
    typed = _TYPED.get(key)
    if typed is None:
        if len(_TYPED) >= _TYPED_MAX:
            _TYPED.clear()
        typed = _TYPED[key] = read_settings(document.value, cls)
    return typed


def plugins_value(document: "Document | Refusal") -> Any:
    """What the loader is given from ``plugins.json``: its ``plugins`` object
    (an absent key is ``{}``: every kind off), or ``None`` when the file is
    not an object or cannot be read, which the loader refuses for every kind
    (each keeps what it had)."""
    if isinstance(document, Refusal) or type(document.value) is not dict:
        return None
    return document.value.get("plugins", {})


@attrs.frozen(kw_only=True)
class Document:
    """One settings file as read: its value and its revision."""

    name: str
    value: Any
    revision: str
    exists: bool


Compute = Callable[[Any], "tuple[Any, dict[str, Any]] | Refusal"]


class SettingsDir:
    """The settings directory: reads documents, and writes them under the
    lock with a revision check, atomically, logging every change."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"<SettingsDir {str(self.path)!r}>"

    def read(self, name: str) -> Document | Refusal:
        """The document ``name`` (``plugins.json`` ...), or ``invalid-settings``
        when the file is there but is not JSON."""
        path = self.path / name
        try:
            data = read_capped(path)
        except FileNotFoundError:
            return Document(name=name, value=copy.deepcopy(dict(DOCUMENTS[name])),
                            revision=revision_of(b""), exists=False)
        except OSError as exc:
            return Refusal(code="unreadable-settings",
                           message=f"{path} cannot be read: {exc.strerror or exc}")
        if data is None:
            return Refusal(code="invalid-settings",
                           message=f"{path} is larger than {MAX_SETTINGS_BYTES} bytes; fix it by hand")
        try:
            value = loads(data.decode("utf-8"))
        except (UnicodeDecodeError, JsonError) as exc:
            return Refusal(
                code="invalid-settings",
                message=f"{path} is not JSON ({exc}); fix it by hand, or move it away to start "
                "from the defaults",
            )
        if nests_deeper(value):
            return Refusal(
                code="invalid-settings",
                message=f"{path} nests deeper than {MAX_DEPTH} levels; fix it by hand, or move it "
                "away to start from the defaults",
            )
        return Document(name=name, value=value, revision=revision_of(data), exists=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def update(
        self,
        name: str,
        revision: object,
        compute: Compute,
        *,
        actor: str | None = None,
        now: dt.datetime | None = None,
    ) -> Document | Refusal:
        """Apply ``compute`` to the document if it is still at ``revision``.

        ``compute(value)`` answers ``(new value, changes)`` or a refusal; it
        runs inside the lock, so it must be quick and must not write.
        Blocking: call from a worker thread in async code.
        """
        with self._locked():
            current = self.read(name)
            if isinstance(current, Refusal):
                return current
            if revision != current.revision:
                return Refusal(
                    code="stale-revision",
                    message=f"{name} changed since revision {revision!r} (it is now "
                    f"{current.revision}); run `router {name.removesuffix('.json')}` again and "
                    "make the patch against what it shows",
                )
            result = compute(copy.deepcopy(current.value))
            if isinstance(result, Refusal):
                return result
            value, changes = result
            data = (dumps(value) + "\n").encode()
            self._write_atomically(self.path / name, data)
            new_revision = revision_of(data)
            self._append_change({
                "at": iso(now or utc_now()),
                "actor": actor or default_actor(),
                "file": name,
                "old_revision": current.revision,
                "new_revision": new_revision,
                "changes": changes,
            })
            return Document(name=name, value=value, revision=new_revision, exists=True)

    def ensure(self, name: str) -> Document | Refusal:
        """Write the default document if the file does not exist yet (what
        ``router serve`` does on a first start)."""
        current = self.read(name)
        if isinstance(current, Refusal) or current.exists:
            return current
        return self.update(
            name, current.revision,
            lambda value: (value, {"created": "from the defaults"}),
            actor="router (defaults)",
        )

    def changes(self) -> list[dict[str, Any]]:
        """Every change line (a partial last line is skipped)."""
        return read_json_lines(self.path / CHANGES_NAME)

    def _write_atomically(self, path: Path, data: bytes) -> None:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _append_change(self, entry: Mapping[str, Any]) -> None:
        line = (dumps(dict(entry)) + "\n").encode()
        fd = os.open(self.path / CHANGES_NAME,
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- patches

#: What each command's patch is, its model, and the code of a fault inside
#: its values (a fault in the envelope is ``invalid-patch``).
PATCH_SHAPES: Final[Mapping[str, tuple[Any, str, str]]] = {
    "plugins": (PluginsPatch, "invalid-patch",
                '{"revision", "plugins"?: {kind: value|null}, "options"?: {kind: {name: object|null}}}'),
    "routes": (RoutesPatch, "invalid-routes",
               '{"revision", "instances"?: {name: route|null}, "models"?: {name: {"provider"}|null}}'),
    "limits": (LimitsPatch, "invalid-limits", '{"revision", "limits"?: {...}, "reset"?: [[key, ...], ...]}'),
}


def parse_patch(patch: object, what: str) -> Any:
    """A ``router <what> set`` patch as its model, or the refusal naming the
    failing path (``invalid-patch``, or the command's own code for a fault
    inside a value)."""
    cls, inner, shape = PATCH_SHAPES[what]
    parsed = structure(patch, cls, what=f"the {what} patch", code="invalid-patch", inner_code=inner)
    if isinstance(parsed, Refusal) and parsed.code == "invalid-patch":
        return Refusal(code="invalid-patch",
                       message=f"{parsed.message}; a {what} patch is {shape}, with the revision "
                       f"`router {what}` shows")
    return parsed


def parse_change(patch: object, what: str, current: object, document: type) -> Any:
    """A patch's model, once the patch and the stored value it applies to
    (``document``, the file's model) both have their shapes; else the
    refusal (``invalid-settings`` for the stored value)."""
    parsed = parse_patch(patch, what)
    if isinstance(parsed, Refusal):
        return parsed
    stored = structure(current, document, what=f"{what}.json", code="invalid-settings")
    if isinstance(stored, Refusal):
        return Refusal(code="invalid-settings", message=f"{stored.message}; fix it by hand")
    return parsed


ModuleExists = Callable[[str, str], Refusal | None]


def _unknown_plugin(kind_name: str, name: str, missing: Refusal) -> Refusal:
    return Refusal(code="unknown-plugin",
                   message=f'there is no {kind_name} module "{name}" in the plug-in tree '
                   f"({missing.code}: {missing.message})")


def _patch_kind(plugins: dict[str, Any], kind_name: str, value: Any,
                module_exists: ModuleExists) -> dict[str, Any] | Refusal:
    """Set one kind's setting in ``plugins``; its change, or a refusal."""
    kind = KINDS.get(kind_name)
    if kind is None:
        return unknown_kind(kind_name)
    old = copy.deepcopy(plugins.get(kind_name))
    if value is None:
        plugins.pop(kind_name, None)
        return {"old": old, "new": None}
    refusal = check_kind_setting(kind, value)
    if refusal is not None:
        return refusal
    for name in names_of(kind, value):
        missing = module_exists(kind_name, name)
        if missing is not None:
            return _unknown_plugin(kind_name, name, missing)
    plugins[kind_name] = copy.deepcopy(value)
    return {"old": old, "new": copy.deepcopy(value)}


def _patch_options(options: dict[str, Any], kind_name: str, per_module: Mapping[str, Any],
                   module_exists: ModuleExists, changes: dict[str, Any]) -> Refusal | None:
    """Set or remove each module's options of one kind in ``options``."""
    if kind_name not in KINDS:
        return unknown_kind(kind_name)
    kind_options = options.get(kind_name)
    if type(kind_options) is not dict:
        kind_options = options[kind_name] = {}
    for name, value in per_module.items():
        if not is_name(name):
            return Refusal(code="bad-name", message=f'"{name}" is not a module name')
        old = kind_options.get(name)
        if value is None:
            kind_options.pop(name, None)
        else:
            missing = module_exists(kind_name, name)
            if missing is not None:
                return _unknown_plugin(kind_name, name, missing)
            kind_options[name] = copy.deepcopy(dict(value))
        changes[f"options.{kind_name}.{name}"] = {"old": redact(old), "new": redact(value)}
    if not kind_options:
        options.pop(kind_name)
    return None


def apply_plugins_patch(
    current: object, patch: object, *, module_exists: ModuleExists
) -> tuple[dict[str, Any], dict[str, Any]] | Refusal:
    """The new ``plugins.json`` value and its changes, or a refusal.

    ``patch`` is ``{"revision", "plugins"?: {kind: value | null},
    "options"?: {kind: {name: object | null}}}``: only the kinds (and
    modules' options) it names change; ``null`` removes one. A list
    replaces the kind's whole list. ``module_exists(kind, name)`` answers
    ``None`` for a module in the tree, else why not (it imports nothing).
    """
    parsed = parse_change(patch, "plugins", current, PluginsDocument)
    if isinstance(parsed, Refusal):
        return parsed
    if not parsed.plugins and not any(parsed.options.values()):
        return Refusal(code="empty-patch",
                       message="the patch changes nothing: name at least one kind under plugins "
                       "or one module under options")
    # An object: parse_change structured it as a PluginsDocument.
    new: dict[str, Any] = copy.deepcopy(current)  # type: ignore[assignment]
    plugins = new.setdefault("plugins", {})
    options = new.setdefault("options", {})
    changes: dict[str, Any] = {}
    for kind_name, value in parsed.plugins.items():
        change = _patch_kind(plugins, kind_name, value, module_exists)
        if isinstance(change, Refusal):
            return change
        changes[f"plugins.{kind_name}"] = change
    for kind_name, per_module in parsed.options.items():
        refusal = _patch_options(options, kind_name, per_module, module_exists, changes)
        if refusal is not None:
            return refusal
    return new, changes
