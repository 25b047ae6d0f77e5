"""The process-per-turn adapter (the "CLI adapter"): any agent CLI that runs
one turn per process and prints JSON lines (Claude Code's ``claude -p
--output-format stream-json``, Codex's ``codex exec --json``, or your own).

This is the Trio form of the reference's ``cliAdapter`` (npm
``agents@0.32.0``, ``dist/harness/container/runtime/index.js``). A CLI is
described by a :class:`CliPreset`:

- ``command``: the argv, stdin and extra environment of one turn, given the
  prompt, the session's settings and the state earlier turns reported (such
  as the CLI's own session id to resume);
- ``parser``: a sans-IO reader of that turn's stdout, one line in, a
  :class:`CliUpdate` out (container events, state updates, the outcome), and
  the outcome from the exit status when no line gave one;
- ``state_dirs``: where the CLI keeps its sessions, relative to ``$HOME``.

Theory of operation
-------------------

Each harness session gets its own ``$HOME`` (``<homes>/<sha256(session)[:32]>``),
so sessions sharing a container never see each other's CLI state. A turn
starts one process in its own process group, writes the prompt to its stdin
and closes it, and reads stdout line by line; every line goes through the
parser and its events are emitted at once, in order. State updates are
merged into the session's state and persisted as ``{"kind": "state",
"values": {...}}`` entries the moment they change. Everything the CLI writes
under ``state_dirs`` is shipped as ``{"kind": "file", ...}`` entries by a
:class:`FileMirror` every :data:`SYNC_INTERVAL` seconds during the turn and
once after it. In a new container both kinds of entries come back in
``restore``: the files are written back before the first turn and the state
is folded again, so ``--resume <id>`` finds the CLI's own session files and
the CLI never knows it moved.

The turn's outcome is the last one a line reported (Claude Code's ``result``
line, Codex's ``turn.completed``), else the parser's verdict on the exit
status with the tail of stderr, so a CLI that fails to start or dies says why.

Abort is Trio cancellation of :meth:`CliSession.run`. The cleanup runs
shielded: the CLI gets ``SIGINT`` (what a person's Ctrl-C sends, and what
Claude Code answers by ending the turn and saving its session), its stdout
is still read (the lines it prints while stopping are emitted and its
session id and files persisted) for at most ``kill_after`` seconds, then
the whole process group gets ``SIGKILL``. ``Cancelled`` then propagates and
the daemon settles the operation ``unanswered``/``aborted``.

Error handling: a line the parser cannot read is logged (``warn``) and
skipped, never fatal; a CLI that cannot be started settles the turn
``unanswered`` with the OS error; a failed state sync is logged.

Resource handling: nothing outlives :meth:`CliSession.run`: the process and
its group are reaped (killed if they must be) and the pipes closed before it
returns or raises, cancelled or not. File system work (the mirror) runs in a
worker thread under a shield, so a sync that started always completes and
persists what it read.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import attrs
import trio

from router.daemon.adapter import AdapterContext, AdapterTurn
from wire.container import (
    AdapterInfo,
    ContainerOutcome,
    ContainerSettings,
    Unanswered,
    input_text,
)
from wire.json import JsonValue
from wire.lines import LineSplitter

__all__ = [
    "CliAdapter",
    "CliCommand",
    "CliExit",
    "CliParser",
    "CliPreset",
    "CliSession",
    "CliTurn",
    "CliUpdate",
    "FileMirror",
    "KILL_AFTER",
    "SYNC_INTERVAL",
    "fold_state",
    "home_for",
    "usage_event",
]

#: Seconds a CLI has to exit after ``SIGINT`` before its process group is
#: killed. The reference's ``KILL_AFTER_MS = 5e3``.
KILL_AFTER = 5.0

#: Seconds between state syncs while a turn runs. The reference's
#: ``syncIntervalMs`` default, 5 seconds.
SYNC_INTERVAL = 5.0

#: Bytes of stderr kept for the failure reason. The reference keeps the last
#: 4096 characters.
STDERR_TAIL = 4096

#: Seconds stderr may stay open after the CLI has exited before the turn
#: stops reading it. It normally ends with the CLI (what the CLI wrote is
#: already in the pipe); only a process the CLI left behind holding it open
#: makes the wait last. Ours (the reference waits for stderr's end without
#: limit: Node's ``close`` event).
STDERR_AFTER_EXIT = 1.0

#: Most bytes of one file in one persisted entry: the reference's
#: ``PIECE_BYTES`` (128 KiB, about 171 K characters once base64-encoded, well
#: inside ``MAX_CHUNK_CHARS``).
PIECE_BYTES = 128 * 1024

#: A stdout line longer than this is dropped (and logged) rather than held:
#: no CLI line of interest is near it, and memory must stay bounded.
MAX_LINE_BYTES = 64 * 1024 * 1024

#: Where session homes go when neither the adapter nor ``$ROUTER_CLI_HOMES``
#: says: the reference's default, ``~/.harness/sessions``.
HOMES_ENV = "ROUTER_CLI_HOMES"
#: The working directory when neither the adapter nor ``$ROUTER_CLI_CWD``
#: says: the reference's ``/workspace`` when it exists, else a ``workspace``
#: directory in the session's home (a scratch workspace per session).
CWD_ENV = "ROUTER_CLI_CWD"
DEFAULT_CWD = "/workspace"

#: The daemon's secret never reaches a CLI (the daemon removes it from its
#: own environment too; this is belt and braces).
_SECRET_ENV = ("CF_HARNESS_TOKEN",)

#: String values a CLI reported in earlier turns, such as its session id.
CliState = Mapping[str, str]


# --------------------------------------------------------------------------
# What a preset is given and gives back


@attrs.frozen(kw_only=True)
class CliTurn:
    """What a preset's ``command`` and ``parser`` get for one turn."""

    operation_id: str
    #: The prompt's text; image parts are not passed to CLIs (the reference
    #: does the same).
    prompt: str
    settings: ContainerSettings
    state: CliState
    #: The session's ``$HOME``.
    home: str
    #: The environment the CLI inherits: the daemon's (less its secret) and
    #: the adapter's ``env``, before the command's own ``env``.
    environ: Mapping[str, str] = attrs.field(factory=dict, repr=False)


@attrs.frozen(kw_only=True)
class CliCommand:
    """How to start one turn."""

    argv: tuple[str, ...]
    #: Written to stdin, which is then closed. ``None``: stdin is closed at once.
    stdin: str | None = None
    #: Added to the environment.
    env: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class CliUpdate:
    """What one stdout line meant."""

    events: tuple[JsonValue, ...] = ()
    #: Merged into the session's state and persisted.
    state: Mapping[str, str] | None = None
    #: The turn's outcome, when the line reports it.
    outcome: ContainerOutcome | None = None


@attrs.frozen(kw_only=True)
class CliExit:
    """How the process ended."""

    #: The exit status, or ``None`` when a signal ended it.
    code: int | None
    #: The signal that ended it, or ``None``.
    signal: int | None
    #: The tail of its stderr (:data:`STDERR_TAIL` bytes, decoded).
    stderr: str

    def describe(self, program: str) -> str:
        """``claude exited with status 1: <stderr>``, for failure reasons."""
        if self.code is not None:
            how = f"{program} exited with status {self.code}"
        elif self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = str(self.signal)
            how = f"{program} was ended by {name}"
        else:
            how = f"{program} ended"
        return f"{how}: {self.stderr.strip() or 'no output'}"


class CliParser(Protocol):
    """Reads one turn's output. Sans-IO: no awaits, no clock but its own."""

    def line(self, text: str) -> CliUpdate: ...

    def end(self, exit: CliExit) -> ContainerOutcome:
        """The outcome when no line reported one, from how the process ended."""
        ...


@attrs.frozen(kw_only=True)
class CliPreset:
    """A CLI's description (the reference's ``CliAdapterOptions``)."""

    #: Reported in ``hello``, such as ``"claude-code"``.
    id: str
    version: str = "1"
    command: Callable[[CliTurn], CliCommand]
    parser: Callable[[CliTurn], CliParser]
    #: Directories under ``$HOME`` where the CLI keeps its sessions.
    state_dirs: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# Sans-IO pieces


def _text(line: bytes) -> str:
    """A CLI's output line as text: UTF-8 (undecodable bytes replaced),
    without the ``\r`` of a CRLF."""
    return line.decode("utf-8", errors="replace").removesuffix("\r")


def usage_event(figures: object) -> dict[str, Any]:
    """A ``usage`` event from a CLI's token figures (``input_tokens`` and
    ``output_tokens``, as both Claude Code and Codex name them): the
    figures that are numbers, under the wire's names."""
    event: dict[str, Any] = {"type": "usage"}
    if isinstance(figures, dict):
        for source, target in (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens")):
            value = figures.get(source)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                event[target] = value
    return event


def fold_state(entries: Iterable[JsonValue]) -> dict[str, str]:
    """The session state folded from persisted ``{"kind": "state"}`` entries,
    later values winning; string values only (as the reference's ``foldState``)."""
    state: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kind") != "state":
            continue
        values = entry.get("values")
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(key, str) and isinstance(value, str):
                state[key] = value
    return state


def home_for(homes: str | os.PathLike[str], session: str) -> Path:
    """A session's home: ``<homes>/<first 32 hex digits of sha256(session)>``
    (the reference's ``homeFor``; any session id makes a safe name)."""
    return Path(homes) / hashlib.sha256(session.encode("utf-8")).hexdigest()[:32]


def _is_file_entry(value: JsonValue) -> bool:
    return (
        isinstance(value, dict)
        and value.get("kind") == "file"
        and isinstance(value.get("path"), str)
        and isinstance(value.get("offset"), int)
        and not isinstance(value.get("offset"), bool)
        and value["offset"] >= 0
        and isinstance(value.get("data"), str)
    )


class FileMirror:
    """Mirrors a CLI's state directories into persisted entries and back
    (the reference's ``FileMirror``).

    Session files are append-only logs, so a file that grew ships only the
    bytes it gained; a file that is new, shrank, or changed without growing
    ships whole. Data travels base64-encoded in pieces of at most
    :data:`PIECE_BYTES` bytes. Entries are
    ``{"kind": "file", "path": <relative to the home, "/"-separated>,
    "offset": <byte offset>, "data": <base64>}``, applied in order.

    Blocking file I/O: call it from a worker thread.
    """

    def __init__(self, root: str | os.PathLike[str], dirs: Sequence[str]) -> None:
        self._root = os.path.abspath(root)
        self._dirs = tuple(dirs)
        #: path -> (size, mtime_ns) as last shipped or restored.
        self._seen: dict[str, tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"<FileMirror {self._root} dirs={list(self._dirs)} files={len(self._seen)}>"

    def inside(self, path: str) -> str | None:
        """``path`` under the root, or ``None`` when it would escape it."""
        full = os.path.normpath(os.path.join(self._root, path))
        if full == self._root or full.startswith(self._root + os.sep):
            return full
        return None

    def restore(self, entries: Iterable[JsonValue]) -> None:
        """Replace the mirrored directories with the entries, applied in
        order; entries that are not file entries are skipped. Whatever the
        directories held before (a reset session's old files) is removed."""
        import shutil

        for directory in self._dirs:
            path = self.inside(directory)
            if path is not None and path != self._root:
                shutil.rmtree(path, ignore_errors=True)
        for entry in entries:
            if not _is_file_entry(entry):
                continue
            path = self.inside(entry["path"])
            if path is None or path == self._root:
                continue
            data = base64.b64decode(entry["data"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            offset = entry["offset"]
            mode = "wb" if offset == 0 or not os.path.exists(path) else "r+b"
            with open(path, mode) as handle:
                if offset > 0:
                    handle.truncate(offset)
                    handle.seek(offset)
                handle.write(data)
        # What was restored is already persisted: only later changes ship.
        self._seen = {}
        for file in self._files():
            info = os.stat(file)
            self._seen[file] = (info.st_size, info.st_mtime_ns)

    def collect(self) -> list[dict[str, Any]]:
        """The changes since the last call (or the restore), as entries."""
        entries: list[dict[str, Any]] = []
        for file in self._files():
            try:
                info = os.stat(file)
            except OSError:
                continue
            seen = self._seen.get(file)
            if seen == (info.st_size, info.st_mtime_ns):
                continue
            # Grown: ship the new bytes. New, shrunk, or rewritten: ship it whole.
            start = seen[0] if seen is not None and info.st_size > seen[0] else 0
            try:
                with open(file, "rb") as handle:
                    handle.seek(start)
                    data = handle.read(max(0, info.st_size - start))
            except OSError:
                continue
            relative = os.path.relpath(file, self._root).replace(os.sep, "/")
            pieces = [data[at : at + PIECE_BYTES] for at in range(0, len(data), PIECE_BYTES)] or [b""]
            for index, piece in enumerate(pieces):
                entries.append(
                    {
                        "kind": "file",
                        "path": relative,
                        "offset": start + index * PIECE_BYTES,
                        "data": base64.b64encode(piece).decode("ascii"),
                    }
                )
            self._seen[file] = (start + len(data), info.st_mtime_ns)
        return entries

    def _files(self) -> list[str]:
        files: list[str] = []
        for directory in self._dirs:
            path = self.inside(directory)
            if path is None:
                continue
            for parent, _dirs, names in os.walk(path):
                for name in names:
                    full = os.path.join(parent, name)
                    if os.path.isfile(full) and not os.path.islink(full):
                        files.append(full)
        return sorted(files)


# --------------------------------------------------------------------------
# The Trio layer


def _leaves(group: BaseException) -> Iterable[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        for inner in group.exceptions:
            yield from _leaves(inner)
    else:
        yield group


def _raise_bare_cancelled(group: BaseExceptionGroup) -> None:
    """Re-raise the ``Cancelled`` of a group made of nothing else."""
    leaves = list(_leaves(group))
    if leaves and all(isinstance(leaf, trio.Cancelled) for leaf in leaves):
        raise leaves[0] from None


class CliAdapter:
    """An adapter for an agent CLI described by a :class:`CliPreset`.

    ``program`` replaces ``argv[0]`` (default: the preset's name, found on
    ``PATH``). ``homes`` is where session homes are made (default
    ``$ROUTER_CLI_HOMES``, else ``~/.harness/sessions``). ``cwd`` is the
    working directory (default ``$ROUTER_CLI_CWD``, else ``/workspace`` when
    it exists, else a ``workspace`` directory in each session's home). ``env``
    is added to every turn's environment, after the preset's own.
    """

    def __init__(
        self,
        preset: CliPreset,
        *,
        program: str | None = None,
        homes: str | os.PathLike[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        kill_after: float = KILL_AFTER,
        sync_interval: float = SYNC_INTERVAL,
    ) -> None:
        self.preset = preset
        self.program = program
        self.homes = homes
        self.cwd = cwd
        self.env = dict(env or {})
        self.kill_after = kill_after
        self.sync_interval = sync_interval
        # The reference reports these three for every CLI: sessions resume
        # in a new container, forks copy a home, the model is a setting.
        self._info = AdapterInfo(id=preset.id, version=preset.version, capabilities=("resume", "fork", "model"))

    def __repr__(self) -> str:
        return f"<CliAdapter {self.preset.id} program={self.program or 'PATH'}>"

    @property
    def info(self) -> AdapterInfo:
        return self._info

    def _homes(self) -> Path:
        if self.homes is not None:
            return Path(self.homes)
        configured = os.environ.get(HOMES_ENV)
        if configured:
            return Path(configured)
        return Path.home() / ".harness" / "sessions"

    def _cwd(self, home: Path) -> Path:
        if self.cwd is not None:
            return Path(self.cwd)
        configured = os.environ.get(CWD_ENV)
        if configured:
            return Path(configured)
        if os.path.isdir(DEFAULT_CWD):
            return Path(DEFAULT_CWD)
        return home / "workspace"

    async def open(self, context: AdapterContext) -> "CliSession":
        home = home_for(self._homes(), context.session)
        cwd = self._cwd(home)
        mirror = FileMirror(home, self.preset.state_dirs)

        def prepare() -> None:
            home.mkdir(parents=True, exist_ok=True)
            cwd.mkdir(parents=True, exist_ok=True)
            mirror.restore(context.restore)

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(prepare)
        return CliSession(self, context, home=home, cwd=cwd, mirror=mirror)


@attrs.define
class _TurnRecord:
    """What one turn's output said so far."""

    outcome: ContainerOutcome | None = None
    lines: int = 0
    unreadable: int = 0


class CliSession:
    """One open CLI session: its home, its state, one process per turn."""

    def __init__(self, adapter: CliAdapter, context: AdapterContext, *, home: Path, cwd: Path, mirror: FileMirror) -> None:
        self._adapter = adapter
        self._preset = adapter.preset
        self._context = context
        self.home = home
        self.cwd = cwd
        self._mirror = mirror
        self._state: dict[str, str] = fold_state(context.restore)
        self._settings = context.settings
        self._sync_lock = trio.Lock()
        #: The running turn's process, for ``statistics`` and tests.
        self.process: trio.Process | None = None
        self.turns = 0

    def __repr__(self) -> str:
        running = f" pid={self.process.pid}" if self.process is not None and self.process.returncode is None else ""
        return f"<CliSession {self._preset.id} home={self.home} turns={self.turns} state={self._state}{running}>"

    @property
    def state(self) -> Mapping[str, str]:
        return dict(self._state)

    @property
    def settings(self) -> ContainerSettings:
        return self._settings

    async def configure(self, settings: ContainerSettings) -> None:
        self._settings = settings

    async def close(self) -> None:
        # Turns sync before they return; nothing else is in flight.
        async with self._sync_lock:
            pass

    # -- a turn -------------------------------------------------------------

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        # What the CLI inherits: the daemon's environment (less its secret)
        # and the adapter's own additions, before the command's.
        environ = {key: value for key, value in os.environ.items() if key not in _SECRET_ENV}
        environ.update(self._adapter.env)
        cli_turn = CliTurn(
            operation_id=turn.operation_id,
            prompt=input_text(turn.input),
            settings=self._settings,
            state=dict(self._state),
            home=str(self.home),
            environ=environ,
        )
        command = self._preset.command(cli_turn)
        parser = self._preset.parser(cli_turn)
        argv = list(command.argv)
        if not argv:
            raise ValueError(f"the {self._preset.id} preset gave an empty command")
        if self._adapter.program is not None:
            argv[0] = self._adapter.program
        env = {**environ, **command.env, **self._adapter.env, "HOME": str(self.home)}
        self.turns += 1
        try:
            process = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=str(self.cwd),
                env=env,
                # Its own process group, so that cleanup reaches whatever it
                # started (a tool's shell, say) and a Ctrl-C at the daemon's
                # terminal is not delivered to it behind our back.
                start_new_session=True,
            )
        except OSError as exc:
            return Unanswered(reason=f"{self._preset.id}: could not start {argv[0]}: {exc.strerror or exc}")
        self.process = process
        record = _TurnRecord()
        splitter = LineSplitter(max_line=MAX_LINE_BYTES)
        stderr_tail = bytearray()
        try:
            try:
                async with trio.open_nursery() as nursery:
                    stderr_ended = trio.Event()
                    nursery.start_soon(self._feed_stdin, process, command.stdin)
                    nursery.start_soon(self._drain_stderr, process, stderr_tail, stderr_ended)
                    nursery.start_soon(self._sync_periodically)
                    await self._read_stdout(process, splitter, parser, record)
                    await process.wait()
                    # What it wrote to stderr before it exited may still be
                    # in the pipe: read it to the end (the failure reason).
                    with trio.move_on_after(STDERR_AFTER_EXIT):
                        await stderr_ended.wait()
                    nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                # An abort reaches the caller as the bare ``Cancelled`` it
                # is, not wrapped in this nursery's group, so the daemon (and
                # any ``except trio.Cancelled``) sees cancellation as such.
                _raise_bare_cancelled(group)
                raise
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    await self._stop(process, splitter, parser, record)
                for stream in (process.stdin, process.stdout, process.stderr):
                    if stream is not None:
                        await stream.aclose()
                await process.wait()
                self.process = None
                await self._sync()
        # Not cancelled: the process ended on its own.
        if record.outcome is not None:
            return record.outcome
        code = process.returncode
        exit = CliExit(
            code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            stderr=bytes(stderr_tail).decode("utf-8", errors="replace"),
        )
        return parser.end(exit)

    async def _feed_stdin(self, process: trio.Process, text: str | None) -> None:
        assert process.stdin is not None
        try:
            if text:
                await process.stdin.send_all(text.encode("utf-8"))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the CLI exited (or closed stdin) before reading it all
        finally:
            with trio.CancelScope(shield=True):
                await process.stdin.aclose()

    @staticmethod
    async def _drain_stderr(process: trio.Process, tail: bytearray, ended: trio.Event | None = None) -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            tail += chunk
            if len(tail) > STDERR_TAIL:
                del tail[: len(tail) - STDERR_TAIL]
        if ended is not None:
            ended.set()

    async def _read_stdout(self, process: trio.Process, splitter: LineSplitter, parser: CliParser, record: _TurnRecord) -> None:
        assert process.stdout is not None
        async for chunk in process.stdout:
            self._lines([_text(line) for line in splitter.feed(chunk)], parser, record)
        last = splitter.close()
        self._lines([] if last is None else [_text(last)], parser, record)

    async def _stop(self, process: trio.Process, splitter: LineSplitter, parser: CliParser, record: _TurnRecord) -> None:
        """Interrupt, read what the CLI says while it stops, kill it if it
        will not. Called shielded."""
        try:
            process.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
        with trio.move_on_after(self._adapter.kill_after):
            async with trio.open_nursery() as nursery:
                # stderr keeps draining so a chatty CLI cannot block on it.
                nursery.start_soon(self._drain_stderr, process, bytearray())
                try:
                    await self._read_stdout(process, splitter, parser, record)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                await process.wait()
                nursery.cancel_scope.cancel()
        self._kill_group(process)
        await process.wait()

    @staticmethod
    def _kill_group(process: trio.Process) -> None:
        # The group id is the leader's pid (start_new_session); killing the
        # group also reaches a tool's shell the CLI left behind.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass

    def _lines(self, lines: list[str], parser: CliParser, record: _TurnRecord) -> None:
        for text in lines:
            if not text.strip():
                continue
            record.lines += 1
            try:
                update = parser.line(text)
            except Exception as exc:  # a parser must never take the turn down
                record.unreadable += 1
                self._context.log("warn", f"unreadable {self._preset.id} output: {exc}")
                continue
            for event in update.events:
                try:
                    self._context.emit(event)
                except ValueError as exc:
                    self._context.log("warn", f"dropped an event that is not a container event: {exc}")
            if update.state:
                self._remember(update.state)
            if update.outcome is not None:
                record.outcome = update.outcome

    def _remember(self, update: Mapping[str, str]) -> None:
        if all(self._state.get(key) == value for key, value in update.items()):
            return
        self._state.update(update)
        self._context.persist([{"kind": "state", "values": dict(update)}])

    async def _sync_periodically(self) -> None:
        while True:
            await trio.sleep(self._adapter.sync_interval)
            await self._sync()

    async def _sync(self) -> None:
        """Persist what changed under the state directories. Shielded: a
        collect that started ships what it read, or it would never ship."""
        if not self._preset.state_dirs:
            return
        with trio.CancelScope(shield=True):
            async with self._sync_lock:
                try:
                    entries = await trio.to_thread.run_sync(self._mirror.collect)
                except OSError as exc:
                    self._context.log("warn", f"state sync failed: {exc}")
                    return
                if entries:
                    self._context.persist(entries)
