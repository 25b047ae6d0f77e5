"""The loader: switches plug-in modules on from this tree, and nowhere else.

Theory of operation
-------------------

A module of kind ``K`` named ``N`` is the file
``<root>/<K>/<N>/__init__.py``, where ``<root>`` is this package's directory
(``router/plugins``). The root comes from this file's own location; tests may
pass another (a temporary copy of the tree), nothing else does, and no
setting can name a path.

Kind and module names hold hyphens (``usage-source``, ``claude-code``), so a
module is not importable by a dotted name: the loader reads and executes the
file itself, under a private module name that is new for every load. For each
name, in order (the first failing check refuses, with its code):

1. the name matches ``^[a-z][a-z0-9-]*$`` (``bad-name``);
2. ``<root>``, ``<root>/<K>``, ``<root>/<K>/<N>`` and ``__init__.py`` exist,
   are a directory or a regular file as expected (``missing`` otherwise) and
   are not symlinks (``symlink``); the ancestors of ``<root>`` are not
   checked;
3. just before the import, ``realpath(__init__.py)`` is still the expected
   path (``symlink``); the file is then opened with ``O_NOFOLLOW`` and its
   bytes are what gets executed, so the last component cannot be swapped for
   a link after the check either;
4. its code compiles and its top-level code runs without raising
   (``load-failed``, naming the exception: a module that is not there is
   never reported as one that crashed, and the other way round);
5. it has every export of its kind, the functions are callable and the
   kind's async functions are ``async def`` (``missing-export``);
6. ``INTERFACE_VERSION`` is the kind's interface version
   (``interface-version``).

At steps 2 and 3 a path that cannot be read for another reason (a permission
error, say) refuses as ``unreadable``.

A refusal refuses the whole kind for that load: the kind keeps the modules it
had before (none, on its first load), and ``log`` gets
``{"event": "plugin-refused", "kind", "name", "code", "message", "kept"}``.
An unknown kind refuses only itself (``unknown-kind``); a settings value that
is not an object refuses every kind (``invalid-plugins``).

Loads run one at a time, and off the Trio thread: :meth:`Loader.load_async`
waits its turn on the loader's ``trio.Lock``, then checks and executes the
files in a worker thread under a process-wide ``threading.Lock`` (so no
other load, from any thread, runs at once), and applies the outcome on the
Trio thread in one step with no checkpoint (so no task sees a load half
applied). :meth:`Loader.load` is the synchronous entry point (the commands,
tests), under the same process-wide lock.

What the checks do not protect against
--------------------------------------

- A module runs with the router's authority once imported. The checks keep
  the loader inside this tree; they do not sandbox the module.
- A module's top-level code runs at step 4, before the export and interface
  checks: a module refused ``missing-export`` or ``interface-version`` has
  still run. In the router its top-level code runs in a worker thread
  (:meth:`Loader.load_async`), so a slow import does not stall the loop; it
  must still be safe to run off the main thread.
- Someone who can write this tree can change the module between the checks
  and the read, or change what it imports. The checks catch mistakes and
  stale links, not a writer racing the router as the same user.
- Only ``__init__.py`` is checked. Submodules it imports relatively (at top
  level: the private module name is registered only while the top-level code
  runs) are found by Python's ordinary import, which follows symlinks and
  writes ``__pycache__``.
- Every load executes the file again (nothing is cached by name), so a
  changed module is seen at the next load; a module object already handed
  out keeps the code it was loaded with.
"""

from __future__ import annotations

import errno
import importlib.util
import inspect
import itertools
import logging
import os
import stat
import sys
import threading
import types
from typing import Any, Callable, Iterable, Mapping

import attrs
import trio

from wire.json import dumps

from router.plugins.kinds import KINDS, Kind, is_name
from router.plugins.models import KindSwitch, KindSwitches, read_settings
from router.errors import CarriesRefusal, Refusal

__all__ = [
    "DEFAULT_ROOT",
    "LoadResult",
    "LoadedModule",
    "Loader",
    "RefusedPlugin",
    "check_paths",
    "import_module",
]

#: This package's directory: the only tree modules are loaded from. Not
#: resolved, so a symlink standing in for it is seen (and refused) at step 2.
DEFAULT_ROOT = os.path.dirname(os.path.abspath(__file__))

_logger = logging.getLogger("router.plugins")

#: One load at a time in the whole process (see the module docstring).
_LOAD_LOCK = threading.Lock()
_serial = itertools.count(1)

Log = Callable[[dict[str, Any]], None]


def default_log(entry: dict[str, Any]) -> None:
    _logger.warning("%s", dumps(entry))


@attrs.frozen
class LoadedModule:
    """One module the loader switched on."""

    kind: str
    name: str
    module: types.ModuleType = attrs.field(repr=False)

    def function(self, name: str) -> Callable[..., Any]:
        return getattr(self.module, name)


@attrs.frozen(kw_only=True)
class RefusedPlugin(CarriesRefusal):
    """A kind the loader refused: the module (or the kind's whole setting),
    the :class:`~router.errors.Refusal`, and the names the kind kept."""

    kind: str
    #: The module that failed, or ``None`` when the kind's setting as a whole
    #: was refused (not an object, not a list, an unknown kind).
    name: str | None
    #: Why: its code and sentence (data left out).
    refusal: Refusal
    #: The names the kind kept switched on.
    kept: tuple[str, ...]

    def log_entry(self) -> dict[str, Any]:
        return {
            "event": "plugin-refused",
            "kind": self.kind,
            "name": self.name,
            "code": self.code,
            "message": self.message,
            "kept": list(self.kept),
        }


@attrs.frozen
class LoadResult:
    #: kind -> the names switched on after this load, for every kind.
    loaded: Mapping[str, tuple[str, ...]]
    refused: tuple[RefusedPlugin, ...]


# --------------------------------------------------------------------------- checks


def _lstat(path: str) -> os.stat_result | Refusal:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return Refusal(code="missing", message=f"{path} does not exist")
    except OSError as exc:
        return Refusal(code="unreadable", message=f"{path} cannot be read: {exc.strerror or exc}")


def check_paths(kind: str, name: str, *, root: str | None = None) -> Refusal | None:
    """Steps 1 and 2: the name, and every path component from the root down.

    ``None`` when ``<root>/<kind>/<name>/__init__.py`` is a real file in real
    directories; otherwise the refusal. Imports nothing.
    """
    if not is_name(name):
        return Refusal(
            code="bad-name",
            message=f'"{name}" is not a module name: use lower-case letters, digits '
            "and hyphens, starting with a letter",
        )
    root = os.path.abspath(root or DEFAULT_ROOT)
    steps = [
        (root, True),
        (os.path.join(root, kind), True),
        (os.path.join(root, kind, name), True),
        (os.path.join(root, kind, name, "__init__.py"), False),
    ]
    for path, want_dir in steps:
        st = _lstat(path)
        if isinstance(st, Refusal):
            if st.code == "missing":
                return Refusal(
                    code="missing",
                    message=f'no {kind} module "{name}" in the plug-in tree: {path} does not exist',
                )
            return st
        if stat.S_ISLNK(st.st_mode):
            return Refusal(
                code="symlink",
                message=f"{path} is a symlink; plug-in modules load only from real "
                "directories and files in the plug-in tree",
            )
        if want_dir and not stat.S_ISDIR(st.st_mode):
            return Refusal(code="missing", message=f"{path} is not a directory")
        if not want_dir and not stat.S_ISREG(st.st_mode):
            return Refusal(code="missing", message=f"{path} is not a regular file")
    return None


def _read_module_source(root: str, kind: str, name: str) -> bytes | Refusal:
    """Step 3: the real path is the expected one; read the bytes without
    following a link in the last component."""
    path = os.path.join(root, kind, name, "__init__.py")
    # Ancestors of the root are not checked (they may be links, like /tmp on
    # some systems), so the expectation resolves them and nothing below.
    expected = os.path.join(
        os.path.realpath(os.path.dirname(root)), os.path.basename(root), kind, name, "__init__.py"
    )
    try:
        real = os.path.realpath(path, strict=True)
    except (FileNotFoundError, NotADirectoryError):
        return Refusal(code="missing", message=f"{path} disappeared before it was imported")
    except OSError as exc:
        return Refusal(code="unreadable", message=f"{path} cannot be resolved: {exc.strerror or exc}")
    if real != expected:
        return Refusal(
            code="symlink",
            message=f"{path} resolves to {real}, outside the plug-in tree's expected path",
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Refusal(code="symlink", message=f"{path} became a symlink before it was imported")
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return Refusal(code="missing", message=f"{path} disappeared before it was imported")
        return Refusal(code="unreadable", message=f"{path} cannot be read: {exc.strerror or exc}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Refusal(code="missing", message=f"{path} is not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        return Refusal(code="unreadable", message=f"{path} cannot be read: {exc.strerror or exc}")
    finally:
        os.close(fd)


def _private_name(kind: str, name: str) -> str:
    # New for every load, so nothing is ever reused from sys.modules.
    return f"_router_plugin__{kind.replace('-', '_')}__{name.replace('-', '_')}__{next(_serial)}"


def _execute(root: str, kind: str, name: str, source: bytes) -> types.ModuleType | Refusal:
    """Step 4: compile and run the module's top-level code."""
    directory = os.path.join(root, kind, name)
    path = os.path.join(directory, "__init__.py")
    private = _private_name(kind, name)
    spec = importlib.util.spec_from_file_location(
        private, path, submodule_search_locations=[directory]
    )
    assert spec is not None  # a .py path always gets a spec
    module = importlib.util.module_from_spec(spec)
    # Registered while the top-level code runs, so relative imports of the
    # module's own submodules, dataclasses and attrs (which look their class's
    # module up) work; removed after, so loads do not pile up in sys.modules.
    sys.modules[private] = module
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        where = ""
        if isinstance(exc, SyntaxError) and exc.lineno:
            where = f" at line {exc.lineno}"
        return Refusal(
            code="load-failed",
            message=f'the {kind} module "{name}" failed while it was imported{where}: '
            f"{type(exc).__name__}: {exc}",
        )
    finally:
        for key in [k for k in sys.modules if k == private or k.startswith(private + ".")]:
            del sys.modules[key]
    return module


def _check_exports(kind: Kind, name: str, module: types.ModuleType) -> Refusal | None:
    """Steps 5 and 6."""
    for export in kind.exports:
        if not hasattr(module, export):
            return Refusal(
                code="missing-export",
                message=f'the {kind.name} module "{name}" does not export {export}; '
                f"a {kind.name} module exports {', '.join(kind.exports)}",
            )
    for fn in kind.functions:
        value = getattr(module, fn.name)
        if not callable(value):
            return Refusal(
                code="missing-export",
                message=f'{fn.name} of the {kind.name} module "{name}" is not a function',
            )
        if fn.is_async and not inspect.iscoroutinefunction(value):
            return Refusal(
                code="missing-export",
                message=f'{fn.name} of the {kind.name} module "{name}" must be an async function '
                "(the broker cancels it at its deadline)",
            )
    version = module.INTERFACE_VERSION
    if type(version) is not int or version != kind.interface:
        return Refusal(
            code="interface-version",
            message=f'the {kind.name} module "{name}" is written for interface {version!r}; '
            f"this router's {kind.name} interface is {kind.interface}",
        )
    return None


def import_module(kind: str, name: str, *, root: str | None = None) -> LoadedModule | Refusal:
    """Run every check for one module and import it. Does not take the load
    lock; :meth:`Loader.load` does."""
    spec = KINDS.get(kind)
    if spec is None:
        return Refusal(code="unknown-kind", message=f'"{kind}" is not a plug-in kind')
    root = os.path.abspath(root or DEFAULT_ROOT)
    refusal = check_paths(kind, name, root=root)
    if refusal is not None:
        return refusal
    source = _read_module_source(root, kind, name)
    if isinstance(source, Refusal):
        return source
    module = _execute(root, kind, name, source)
    if isinstance(module, Refusal):
        return module
    refusal = _check_exports(spec, name, module)
    if refusal is not None:
        return refusal
    return LoadedModule(kind, name, module)


# --------------------------------------------------------------------------- loader


@attrs.define
class _Plan:
    """What one load will do: kind -> its new modules, and the refusals."""

    modules: dict[str, tuple[LoadedModule, ...]] = attrs.field(factory=dict)
    refused: list[RefusedPlugin] = attrs.field(factory=list)

    def refuse(self, loader: "Loader", kind: str, name: str | None, refusal: Refusal) -> None:
        kept = tuple(m.name for m in loader.modules(kind)) if kind in KINDS else ()
        self.refused.append(RefusedPlugin(kind=kind, name=name, kept=kept,
                                          refusal=Refusal(code=refusal.code, message=refusal.message)))


class Loader:
    """Loads the switched-on modules of each kind, and keeps what it loaded.

    ``root`` is for tests only (a temporary copy of the tree); ``log`` gets
    one dict per refusal.
    """

    def __init__(self, *, root: str | None = None, log: Log | None = None) -> None:
        self._root = os.path.abspath(root or DEFAULT_ROOT)
        self._log = log or default_log
        self._modules: dict[str, tuple[LoadedModule, ...]] = {k: () for k in KINDS}
        self._refused: dict[str, RefusedPlugin] = {}
        self._loads = 0
        self._async_lock = trio.Lock()

    @property
    def root(self) -> str:
        return self._root

    def __repr__(self) -> str:
        on = {k: [m.name for m in v] for k, v in self._modules.items() if v}
        return f"<Loader loads={self._loads} on={on} refused={sorted(self._refused)}>"

    def modules(self, kind: str) -> tuple[LoadedModule, ...]:
        """The switched-on modules of ``kind``, in the setting's order. A
        tuple: what a caller holds never changes under it after a reload."""
        return self._modules[kind]

    def module(self, kind: str, name: str) -> LoadedModule | None:
        return next((m for m in self._modules[kind] if m.name == name), None)

    def loaded(self) -> dict[str, list[str]]:
        """kind -> the names actually switched on."""
        return {k: [m.name for m in v] for k, v in self._modules.items()}

    def refused(self, kind: str) -> RefusedPlugin | None:
        """Why the last load that touched ``kind`` refused it, if it did."""
        return self._refused.get(kind)

    def load(self, plugins: object, *, only: Iterable[str] | None = None) -> LoadResult:
        """Load the modules ``plugins`` (the settings' ``plugins`` object)
        switches on. With ``only``, just those kinds are touched; the others
        keep what they have. A kind absent from ``plugins`` is switched off.

        Blocking (it stats, reads and executes files): the synchronous entry
        point, for commands and tests. Trio code awaits :meth:`load_async`."""
        with _LOAD_LOCK:
            return self._commit(self._plan(plugins, only))

    async def load_async(self, plugins: object, *, only: Iterable[str] | None = None) -> LoadResult:
        """:meth:`load` for Trio code: the files are checked and executed in
        a worker thread, so the loop goes on meanwhile; the outcome is
        applied on the Trio thread, all kinds at once, so a task reading
        :meth:`modules` sees the loader before the load or after it, never
        halfway. Loads of one loader queue on a ``trio.Lock`` (in order,
        holding no thread while they wait); the process-wide lock still
        keeps any two loads from running at once.

        Not cancellable once its thread has started (a module's top-level
        code cannot be interrupted): a cancellation is delivered after the
        load is applied."""
        async with self._async_lock:
            plan = await trio.to_thread.run_sync(self._plan_locked, plugins, only)
            return self._commit(plan)

    def _plan_locked(self, plugins: object, only: Iterable[str] | None) -> _Plan:
        with _LOAD_LOCK:
            return self._plan(plugins, only)

    def _plan(self, plugins: object, only: Iterable[str] | None) -> _Plan:
        """Everything a load decides, changing nothing: which kinds get
        which modules, and the refusals (each with what its kind keeps).
        ``plugins`` is structured by the settings converter (each kind's
        setting checked by its kind) unless it already was."""
        switches = plugins if isinstance(plugins, KindSwitches) else read_settings(plugins, KindSwitches)
        plan = _Plan()
        kinds = [KINDS[k] for k in (only if only is not None else KINDS)]
        if switches.by_kind is None:
            for kind in kinds:
                plan.refuse(self, kind.name, None, Refusal(
                    code="invalid-plugins",
                    message="the plugins setting is not an object of kind to module names; "
                    "every kind keeps what it had"))
            return plan
        if only is None:
            for key, switch in switches.by_kind.items():
                if key not in KINDS and switch.refusal is not None:
                    plan.refuse(self, key, None, switch.refusal)
        for kind in kinds:
            self._plan_kind(plan, kind, switches.get(kind.name))
        return plan

    def _plan_kind(self, plan: _Plan, kind: Kind, switch: KindSwitch | None) -> None:
        if switch is not None and switch.refusal is not None:
            plan.refuse(self, kind.name, switch.bad, switch.refusal)
            return
        if switch is None or not switch.names:  # absent or off
            plan.modules[kind.name] = ()
            return
        loaded = []
        for name in switch.names:
            result = import_module(kind.name, name, root=self._root)
            if isinstance(result, Refusal):
                plan.refuse(self, kind.name, name, result)
                return
            loaded.append(result)
        plan.modules[kind.name] = tuple(loaded)

    def _commit(self, plan: _Plan) -> LoadResult:
        """Apply a plan: no checkpoint, so no Trio task sees it half done."""
        self._loads += 1
        for kind, modules in plan.modules.items():
            self._modules[kind] = modules
            self._refused.pop(kind, None)
        for entry in plan.refused:
            if entry.kind in self._modules:
                self._refused[entry.kind] = entry
            self._log(entry.log_entry())
        return LoadResult(self._snapshot(), tuple(plan.refused))

    def _snapshot(self) -> dict[str, tuple[str, ...]]:
        return {k: tuple(m.name for m in v) for k, v in self._modules.items()}
