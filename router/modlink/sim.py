"""A simulator of the Claude Code mod, for tests and benchmarks.

It behaves as ``hooks/mod-protocol.ts`` of claude-envoy 1.19.0 describes the mod,
over the real Unix socket (httpx with a Unix-socket transport, which runs on
Trio through anyio):

- It refuses to run below ``MOD_MIN_CLAUDE_VERSION`` (the real mod never
  connects then), and when the environment names no socket path.
- On start it posts ``hello`` (then ``model``), naming itself in
  ``MOD_INSTANCE_HEADER`` on every post. A 409 (``MOD_STATUS_TAKEN``) on any
  post stops it for good: it does not retry.
- It long-polls ``POST /requests`` and answers each request on a post of its
  own (``POST /results``), while events go out in order, one post in flight
  at a time, batched while one is out (the mod's ``flush``). An event and a
  result may therefore cross, as they do in the mod.
- Turns are scripted: a turn is a list of steps, a step a list of chunks
  (text, a :class:`SimulatedToolCall`, or a ``trio.Event`` the turn waits on, so a
  test can hold a turn open). Each chunk adds to the step and sends a
  ``step`` snapshot (the whole step so far), at most ten a second by default.

What the mod posts follows the real Claude Code 2.1.332, as recorded in
``tests/fixtures/mod-events/`` (``record.py`` there; ``tests/modlink/test_sim.py``
holds the simulator to those recordings):

- a typed prompt's row has origin ``composer`` in an interactive session and
  ``unclassified`` in ``-p`` (``interactive=False``);
- a step's answer is one ``response`` row per content block (its text, each
  tool call), all before the step's ``done`` snapshot; each tool's
  ``tool-result`` row comes after it, before the next step;
- every turn of an interactive session ends ``turn-complete``, then a
  ``notice`` row (a ``system`` row named ``turn_duration``); ``-p`` writes none;
- a row the mod appends mid-turn comes back as stored: ``role: "user"``,
  ``isMeta: true``;
- a prompt the plug-in submits comes back by the ``prompt`` door under the
  plug-in's name (:data:`PLUGIN_NAME`, the manifest's, not ``mod-protocol.ts``'s);
  not as the person's words, it is framed (:func:`framed_prompt`);
- ``/clear`` (:meth:`ModSimulator.clear`, or ``command.run`` of ``clear``)
  sends ``session-end``, ``session-id`` and its three ``command`` rows, and no
  second ``hello``;
- in ``-p`` a message into a session whose turn is over is refused (the
  engine's ``$.prompt.submit`` fails: "no session is bound in this process"),
  while the pointer prompt submitted at a turn's end is taken.

The rest, as ``mod-protocol.ts`` describes the mod:

- ``session.message`` is written as a row of the running turn (an ``append``
  by the ``note`` door, stamped ``wrote: "message"``) or, when idle, as a
  prompt that starts a turn (``asUser`` for the person's own words). It is
  idempotent by ``eventId``: a replay is answered from the record and writes
  nothing. A refusal (``deny_writes``) is not recorded, so a resend may land.
- Each step's request reads every row written before it started; at a turn's
  end the rows no request read get one ``unread_row_prompt``, submitted as the
  plugin (no ``asUser``) and stamped ``wrote: "pointer"``.
- ``session.model``, ``config.list``, ``config.set``, ``command.list``,
  ``command.run``, ``model.fork`` and ``set-effort`` are answered plausibly.
"""

from __future__ import annotations

from router._httpx import unix_transport
import logging
import math
import os
import uuid
from typing import Any, Callable, Mapping, Sequence, Union

import attrs
import httpx
import trio

from wire.json import ABSENT, JsonValue, dumps, loads
from wire.mod import (
    MOD_INSTANCE_HEADER,
    MOD_MIN_CLAUDE_VERSION,
    MOD_POLL_HOLD_MS,
    MOD_ROUTE_EVENTS,
    MOD_ROUTE_REQUESTS,
    MOD_ROUTE_RESULTS,
    MOD_STATUS_TAKEN,
    MOD_URL_BASE,
    ModAppendEvent,
    ModAppendMessage,
    ModAppendOrigin,
    ModCommandInfo,
    ModCommandRunArgs,
    ModConfigProvider,
    ModConfigRow,
    ModConfigSetArgs,
    ModEvent,
    ModHelloEvent,
    ModModelEvent,
    ModModelForkArgs,
    ModRequest,
    ModRequestsBody,
    ModSessionEndEvent,
    ModSessionIdEvent,
    ModSessionMessageArgs,
    ModSetEffortArgs,
    ModStepEvent,
    ModStepPart,
    ModStepText,
    ModStepToolCall,
    ModTurnCompleteEvent,
    ModTurnStartEvent,
    ModUnreadMessage,
    ModUnreadPerson,
    ModWireError,
    converter,
    mod_version_at_least,
    parse,
    resolve_mod_socket_path,
    unread_row_prompt,
)

__all__ = ["PLUGIN_NAME", "ModSimulator", "Row", "Step", "TakenPrompt", "SimulatedToolCall", "framed_prompt"]

log = logging.getLogger("router.modlink.sim")

@attrs.frozen(kw_only=True)
class SimulatedToolCall:
    """A tool call the model makes in a step: its block streams as one chunk,
    and its result row comes after the step, once ``gate`` (when given) is
    set: the tool runs until then."""

    name: str
    input: Mapping[str, Any] = attrs.field(factory=dict)
    result: str = ""
    gate: trio.Event | None = None
    id: str = attrs.field(factory=lambda: f"toolu_sim_{uuid.uuid4().hex[:12]}")


#: One step of a scripted turn: its chunks, each a piece of text, a tool
#: call, or an event the turn waits on before going on.
Step = Sequence[Union[str, SimulatedToolCall, trio.Event]]

#: The plug-in's name, as its manifest spells it (``plugin/.claude-plugin/plugin.json``):
#: Claude Code stamps it on the rows of the prompts the plug-in submits.
PLUGIN_NAME = "router"

#: Why ``-p`` refuses a prompt once its turn is over: the sentence the mod's
#: deny carries (recorded, ``tests/fixtures/mod-events/print-idle.jsonl``).
PRINT_MODE_REFUSAL = (
    "router: $.prompt.submit is not available in this mode: no session is bound in this process "
    "(the REPL has not mounted and no headless session is built); catch it and carry on"
)

#: The ``/clear`` rows Claude Code 2.1.332 writes (recorded, ``clear.jsonl``).
_CLEAR_CAVEAT = (
    "<local-command-caveat>The command below was run directly in Claude Code, not sent to you as a request, "
    "and its output goes straight to the user. It's recorded here as context for later messages.</local-command-caveat>"
)
_CLEAR_NAME = (
    "<command-name>/clear</command-name>\n            <command-message>clear</command-message>\n"
    "            <command-args></command-args>"
)


def framed_prompt(text: str) -> str:
    """A prompt the plug-in submitted, not as the person's words, as its row
    comes back (recorded, ``idle-prompts.jsonl``)."""
    return (
        f"The {PLUGIN_NAME} plugin sent a message:\n{text}\n\nThis is how Claude Code surfaces a prompt a plugin "
        "submits between turns — it starts this turn in the user's place. Address the message above."
    )

#: ``mod-protocol.ts``'s rate for ``step`` snapshots: at most ten a second.
SNAPSHOT_INTERVAL = 0.1


@attrs.frozen(kw_only=True)
class TakenPrompt:
    """A prompt the simulated session took: its text, whether it is the
    person's own words, and the mod's stamp (``None`` for one typed at the
    terminal)."""

    text: str
    as_user: bool
    wrote: str | None


@attrs.frozen(kw_only=True)
class Row:
    """A row the simulator appended into a running turn."""

    uuid: str
    event_id: str | None
    message: ModUnreadMessage


def _default_reply(prompt: str) -> list[list[str]]:
    first_line = prompt.strip().splitlines()[0] if prompt.strip() else ""
    words = f"I read: {first_line[:60]}".split(" ")
    return [[word + " " for word in words[:-1]] + [words[-1]]]


class _Taken(Exception):
    """A post was answered 409: another mod instance holds the link."""


class ModSimulator:
    """A simulated Claude Code mod for one session (see the module docstring).

    ``stopped`` says why :meth:`run` returned: ``too-old``,
    ``no-socket-path``, ``taken`` (409), ``disconnected`` (the server went
    away), or ``None`` while running or when cancelled.
    """

    def __init__(
        self,
        session_id: str,
        *,
        env: Mapping[str, str] | None = None,
        claude_version: str = MOD_MIN_CLAUDE_VERSION,
        instance: str | None = None,
        interactive: bool = True,
        model: str = "claude-sonnet-4-5",
        snapshot_interval: float = SNAPSHOT_INTERVAL,
        reply: Callable[[str], Sequence[Step]] = _default_reply,
        deny_writes: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.env = os.environ if env is None else env
        self.claude_version = claude_version
        self.instance = instance or uuid.uuid4().hex[:12]
        self.interactive = interactive
        self.model = model
        self.snapshot_interval = snapshot_interval
        self.reply = reply
        self.deny_writes = deny_writes
        self.effort: Any = None
        self.stopped: str | None = None
        # What the simulated session did, for tests to read.
        self.prompts: list[TakenPrompt] = []
        self.rows: list[Row] = []
        self.requests_seen: list[ModRequest] = []
        self.turns_completed = 0
        self._record: dict[str, JsonValue] = {}
        self._unread: list[ModUnreadMessage] = []
        self._config = {
            row.key: row
            for row in (
                ModConfigRow(
                    key="theme",
                    label="Theme",
                    kind="choice",
                    value="dark",
                    options=("dark", "light", "dark-daltonized"),
                    provider=ModConfigProvider(plugin="claude-code", tier="user"),
                    is_locked=False,
                ),
                ModConfigRow(
                    key="autoCompactEnabled",
                    label="Auto-compact",
                    description="Compact the conversation when the context fills",
                    kind="boolean",
                    value=True,
                    provider=ModConfigProvider(plugin="claude-code", tier="user"),
                    is_locked=False,
                ),
                ModConfigRow(
                    key="cleanupPeriodDays",
                    label="Transcript retention (days)",
                    kind="number",
                    value=30,
                    provider=ModConfigProvider(plugin="claude-code", tier="policy"),
                    is_locked=True,
                ),
            )
        }
        self._commands = (
            ModCommandInfo(name="clear", description="Clear the conversation", source="builtin"),
            ModCommandInfo(name="compact", description="Compact the conversation", source="builtin"),
            ModCommandInfo(name="model", description="Choose the model", source="builtin"),
            ModCommandInfo(
                name="envoy", description="Envoy's own command", source="plugin", plugin=PLUGIN_NAME
            ),
        )
        self._outbox: list[JsonValue] = []
        self._outbox_lot = trio.lowlevel.ParkingLot()
        self._flushed_lot = trio.lowlevel.ParkingLot()
        self._in_flight = 0
        self._turn_send, self._turn_recv = trio.open_memory_channel[tuple[str, Sequence[Step] | None]](math.inf)
        self._turns_queued = 0
        self._idle_lot = trio.lowlevel.ParkingLot()
        self._client: httpx.AsyncClient | None = None
        self._cancel: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return (
            f"<ModSimulator {self.instance} stopped={self.stopped!r} busy={self.busy} "
            f"prompts={len(self.prompts)} rows={len(self.rows)} unread={len(self._unread)}>"
        )

    # ----------------------------------------------------------------- driving it

    @property
    def busy(self) -> bool:
        """Whether a turn is running or about to (a prompt was taken)."""
        return self._turns_queued > 0

    def type_prompt(self, text: str, steps: Sequence[Step] | None = None) -> None:
        """The person types ``text`` at the terminal; the turn runs ``steps``
        (or the default reply)."""
        self.prompts.append(TakenPrompt(text=text, as_user=True, wrote=None))
        self._emit_row(
            door="prompt",
            origin=ModAppendOrigin(kind="composer" if self.interactive else "unclassified"),
            text=text,
            wrote=ABSENT,
        )
        self._submit(text, steps)

    async def wait_idle(self) -> None:
        """Until no turn runs or waits, and every event went out."""
        while self.busy and self.stopped is None:
            await self._idle_lot.park()
        await self.flushed()

    async def flushed(self) -> None:
        """Until every event emitted so far has been posted."""
        while (self._outbox or self._in_flight) and self.stopped is None:
            await self._flushed_lot.park()

    def clear(self) -> str:
        """``/clear``: the conversation ends and the process goes on under a
        new session id; the socket stays where it is."""
        self.emit(ModSessionEndEvent(reason="clear"))
        self.session_id = str(uuid.uuid4())
        self.emit(ModSessionIdEvent(session_id=self.session_id))
        self._emit_row(door="command", origin=ModAppendOrigin(kind="unclassified"), text=_CLEAR_CAVEAT, wrote=ABSENT, is_meta=True)
        self._emit_row(door="command", origin=ModAppendOrigin(kind="unclassified"), text=_CLEAR_NAME, wrote=ABSENT)
        self._emit_row(
            door="command",
            origin=ModAppendOrigin(kind="engine"),
            text="<local-command-stdout></local-command-stdout>",
            wrote=ABSENT,
            type_="system",
            name="local_command",
        )
        return self.session_id

    def emit(self, event: ModEvent) -> None:
        """Queue an event for the next post to ``/events``."""
        self._outbox.append(converter.unstructure(event))
        self._outbox_lot.unpark_all()

    def stop(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()

    # ----------------------------------------------------------------- running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, say hello, and serve the link until cancelled, refused
        (409) or disconnected. ``task_status.started()`` once ``hello`` was
        answered (or at once when the simulator refuses to run)."""
        if not mod_version_at_least(self.claude_version, MOD_MIN_CLAUDE_VERSION):
            log.info("Claude Code %s is older than %s: the mod does not connect", self.claude_version, MOD_MIN_CLAUDE_VERSION)
            self.stopped = "too-old"
            task_status.started()
            return
        path = resolve_mod_socket_path(self.session_id, self.env).path
        if path is None:
            self.stopped = "no-socket-path"
            task_status.started()
            return
        transport = unix_transport(path)
        timeout = httpx.Timeout(10.0, read=MOD_POLL_HOLD_MS / 1000 + 30.0)
        started = False
        try:
            async with httpx.AsyncClient(transport=transport, base_url=MOD_URL_BASE, timeout=timeout) as client:
                self._client = client
                with trio.CancelScope() as self._cancel:
                    self.emit(
                        ModHelloEvent(
                            session_id=self.session_id, claude_version=self.claude_version, interactive=self.interactive
                        )
                    )
                    self.emit(ModModelEvent(model=self.model))
                    await self._post_outbox()
                    task_status.started()
                    started = True
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._sender, name="modsim-sender")
                        nursery.start_soon(self._poller, nursery, name="modsim-poller")
                        nursery.start_soon(self._turn_runner, name="modsim-turns")
        except* _Taken:
            log.info("another mod instance holds the link: mod %s stops", self.instance)
            self.stopped = "taken"
        except* (httpx.TransportError, OSError):
            self.stopped = "disconnected"
        finally:
            self._client = None
            self._wake_all()
        if not started:
            task_status.started()

    def _wake_all(self) -> None:
        self._idle_lot.unpark_all()
        self._flushed_lot.unpark_all()

    async def _post(self, route: str, body: JsonValue, *, read_timeout: float | None = None) -> JsonValue:
        assert self._client is not None
        extra = {} if read_timeout is None else {"timeout": httpx.Timeout(10.0, read=read_timeout)}
        response = await self._client.post(
            route,
            content=dumps(body).encode(),
            headers={MOD_INSTANCE_HEADER: self.instance, "content-type": "application/json"},
            **extra,
        )
        if response.status_code == MOD_STATUS_TAKEN:
            raise _Taken()
        if response.status_code != 200:
            log.warning("POST %s answered %s: %s", route, response.status_code, response.text[:200])
            return None
        return loads(response.text)

    async def _post_outbox(self) -> None:
        batch, self._outbox = self._outbox, []
        if not batch:
            return
        self._in_flight += 1
        try:
            await self._post(MOD_ROUTE_EVENTS, {"events": batch})
        finally:
            self._in_flight -= 1
        if not self._outbox:
            self._flushed_lot.unpark_all()

    async def _sender(self) -> None:
        # One post in flight at a time; what is emitted meanwhile goes next.
        while True:
            while not self._outbox:
                await self._outbox_lot.park()
            await self._post_outbox()

    async def _poller(self, nursery: trio.Nursery) -> None:
        while True:
            body = await self._post(MOD_ROUTE_REQUESTS, {})
            if body is None:
                await trio.sleep(0.1)  # a refused poll: do not spin on it
                continue
            results = self._answer_all(body)
            if results:
                # Results go out on a post of their own, so the next poll
                # leaves at once.
                nursery.start_soon(self._post, MOD_ROUTE_RESULTS, {"results": results})

    def _answer_all(self, body: JsonValue) -> list[JsonValue]:
        try:
            requests = parse(body, ModRequestsBody).requests
        except ModWireError:
            requests = None
        if requests is None:
            # Answer what can be answered: a request with an id gets an error.
            out: list[JsonValue] = []
            for item in body.get("requests", []) if type(body) is dict else []:
                try:
                    requests_one = parse(item, ModRequest)
                except ModWireError as exc:
                    if type(item) is dict and type(item.get("id")) is str:
                        out.append({"id": item["id"], "ok": False, "error": f"malformed request: {exc}"})
                    continue
                out.append(self._answer(requests_one))
            return out
        return [self._answer(request) for request in requests]

    def _answer(self, request: ModRequest) -> JsonValue:
        self.requests_seen.append(request)
        try:
            value = self._handle(request)
        except _CallFailed as exc:
            return {"id": request.id, "ok": False, "error": str(exc)}
        return {"id": request.id, "ok": True, "value": value}

    # ----------------------------------------------------------------- calls

    def _handle(self, request: ModRequest) -> JsonValue:
        args = request.args
        if request.call == "session.message":
            assert isinstance(args, ModSessionMessageArgs)
            return self._message(args)
        if request.call == "session.model":
            return self.model
        if request.call == "config.list":
            return converter.unstructure(tuple(self._config.values()))
        if request.call == "command.list":
            return converter.unstructure(self._commands)
        if request.call == "set-effort":
            assert isinstance(args, ModSetEffortArgs)
            self.effort = args.effort
            return {"effort": self.effort}
        if request.call == "config.set":
            assert isinstance(args, ModConfigSetArgs)
            return self._config_set(args)
        if request.call == "command.run":
            assert isinstance(args, ModCommandRunArgs)
            return self._command(args)
        if request.call == "model.fork":
            assert isinstance(args, ModModelForkArgs)
            return {"isAnswered": True, "text": f"({self.model}, forked) {args.prompt[:80]}"}
        raise _CallFailed(f"unknown call {request.call}")

    def _message(self, args: ModSessionMessageArgs) -> JsonValue:
        event_id = None if args.event_id is ABSENT else args.event_id
        if event_id is not None and event_id in self._record:
            return self._record[event_id]  # a replay: answered from the record, nothing written
        as_ = "row" if self.busy else "prompt"
        if self.deny_writes is not None:
            return {"deny": self.deny_writes, "as": as_}  # not recorded: a resend may land
        if as_ == "prompt" and not self.interactive:
            return {"deny": PRINT_MODE_REFUSAL, "as": as_}  # -p, its turn over: not recorded either
        text = "\n".join(
            block["text"] for block in args.content if block.get("type") == "text" and type(block.get("text")) is str
        ) or args.message.text
        result = self._message_row(args, text, event_id) if as_ == "row" else self._message_prompt(args, text)
        if event_id is not None:
            self._record[event_id] = result
        return result

    def _message_row(self, args: ModSessionMessageArgs, text: str, event_id: str | None) -> JsonValue:
        """A message while busy: as stored, the text blocks, a user-side row
        the person does not see as typed."""
        row_uuid = self._emit_row(
            door="note",
            origin=ModAppendOrigin(kind="plugin", name=PLUGIN_NAME),
            content=[block for block in args.content if block.get("type") == "text"] or None,
            text=text,
            wrote="message",
            is_meta=True,
        )
        self.rows.append(Row(uuid=row_uuid, event_id=event_id, message=args.message))
        self._unread.append(args.message)
        return {"as": "row", "uuid": row_uuid}

    def _message_prompt(self, args: ModSessionMessageArgs, text: str) -> JsonValue:
        """A message while idle: a prompt, submitted."""
        as_user = isinstance(args.message, ModUnreadPerson)
        self.prompts.append(TakenPrompt(text=text, as_user=as_user, wrote="message"))
        self._emit_row(
            door="prompt",
            origin=ModAppendOrigin(kind="plugin", name=PLUGIN_NAME, as_user=True if as_user else ABSENT),
            content=args.content if as_user else None,
            text=framed_prompt(text),
            wrote="message",
        )
        self._submit(text, None)
        return {"as": "prompt"}

    def _config_set(self, args: ModConfigSetArgs) -> JsonValue:
        row = self._config.get(args.key)
        if row is None:
            return {"deny": f"no setting named {args.key}"}
        if row.is_locked:
            return {"deny": f"{args.key} is locked by {row.provider.tier} settings"}
        expected = {"boolean": bool, "text": str, "choice": str, "number": (int, float)}[row.kind]
        if type(args.value) is bool and row.kind != "boolean" or not isinstance(args.value, expected):
            return {"deny": f"{args.key} takes a {row.kind} value"}
        if row.kind == "choice" and row.options is not ABSENT and args.value not in row.options:
            return {"deny": f"{args.key} is one of {', '.join(row.options)}"}
        self._config[args.key] = attrs.evolve(row, value=args.value)
        return {"value": args.value}

    def _command(self, args: ModCommandRunArgs) -> JsonValue:
        name = args.command.lstrip("/")
        if name == "clear":
            self.clear()
            return {}
        if name == "model" and args.args is not ABSENT and args.args:
            self.model = args.args
            self.emit(ModModelEvent(model=self.model))
            return {"text": f"Set model to {self.model}"}
        if any(command.name == name for command in self._commands):
            return {"text": f"/{name} ran", "context": [f"The user ran /{name}."]}
        raise _CallFailed(f"unknown command /{name}")

    # ----------------------------------------------------------------- turns

    def _emit_row(
        self,
        *,
        door: str,
        origin: ModAppendOrigin,
        text: str | None = None,
        content: Sequence[JsonValue] | None = None,
        wrote: Any,
        type_: str = "user",
        is_meta: bool = False,
        name: str | None = None,
    ) -> str:
        """Emit one row as ``session.append`` hands it: ``role`` is the
        request role a row of its type goes under (a ``system`` row named
        ``local_command`` goes under ``user``; a notice under none)."""
        row_uuid = str(uuid.uuid4())
        blocks = tuple(content) if content is not None else ({"type": "text", "text": text or ""},)
        role: Any = "assistant" if type_ == "assistant" else ABSENT if name == "turn_duration" else "user"
        self.emit(
            ModAppendEvent(
                uuid=row_uuid,
                door=door,  # type: ignore[arg-type]
                origin=origin,
                message=ModAppendMessage(
                    type=type_,  # type: ignore[arg-type]
                    content=blocks,
                    role=role,
                    is_meta=True if is_meta else ABSENT,
                    name=ABSENT if name is None else name,
                ),
                wrote=wrote,
            )
        )
        return row_uuid

    def _submit(self, text: str, steps: Sequence[Step] | None) -> None:
        self._turns_queued += 1
        self._turn_send.send_nowait((text, steps))

    async def _turn_runner(self) -> None:
        async for text, steps in self._turn_recv:
            try:
                await self._run_turn(text, self.reply(text) if steps is None else steps)
            finally:
                self.turns_completed += 1
                if self._unread:
                    pointer = unread_row_prompt(self._unread)
                    self._unread = []
                    self.prompts.append(TakenPrompt(text=pointer, as_user=False, wrote="pointer"))
                    self._emit_row(
                        door="prompt",
                        origin=ModAppendOrigin(kind="plugin", name=PLUGIN_NAME),
                        text=framed_prompt(pointer),
                        wrote="pointer",
                    )
                    self._submit(pointer, None)
                self._turns_queued -= 1
                if not self.busy:
                    self._idle_lot.unpark_all()

    async def _run_turn(self, prompt: str, steps: Sequence[Step]) -> None:
        turn_id = str(uuid.uuid4())
        self.emit(ModTurnStartEvent(turn_id=turn_id))
        effort = ABSENT if self.effort is None else self.effort
        for index, chunks in enumerate(steps):
            # The step's request reads the conversation as it stands now.
            self._unread = []
            parts: list[ModStepPart] = []
            tools: list[SimulatedToolCall] = []
            for chunk in chunks:
                if isinstance(chunk, trio.Event):
                    await chunk.wait()
                    continue
                if isinstance(chunk, SimulatedToolCall):
                    tools.append(chunk)
                    parts.append(ModStepToolCall(id=chunk.id, name=chunk.name, args=dumps(dict(chunk.input))))
                elif parts and isinstance(parts[-1], ModStepText):
                    parts[-1] = ModStepText(text=parts[-1].text + chunk)
                else:
                    parts.append(ModStepText(text=chunk))
                self.emit(self._snapshot(turn_id, index, parts, effort, done=False))
                if self.snapshot_interval > 0:
                    await trio.sleep(self.snapshot_interval)
                else:
                    await trio.lowlevel.checkpoint()
            # One response row per content block, before the step's last snapshot.
            for part in parts:
                self._emit_row(
                    door="response",
                    origin=ModAppendOrigin(kind="model", model=self.model),
                    content=[_block_of(part, tools)],
                    wrote=ABSENT,
                    type_="assistant",
                )
            stop = "tool_use" if tools else "end_turn"
            self.emit(self._snapshot(turn_id, index, parts, effort, done=True, stop_reason=stop))
            for tool in tools:
                if tool.gate is not None:
                    await tool.gate.wait()  # the tool runs until the test lets it end
                self._emit_row(
                    door="tool-result",
                    origin=ModAppendOrigin(kind="tool", tool=tool.name),
                    content=[{"tool_use_id": tool.id, "type": "tool_result", "content": tool.result, "is_error": False}],
                    wrote=ABSENT,
                )
        self.emit(ModTurnCompleteEvent(turn_id=turn_id, stop_reason="answer"))
        if self.interactive:
            self._emit_row(
                door="notice", origin=ModAppendOrigin(kind="engine"), content=[], wrote=ABSENT, type_="system", name="turn_duration"
            )

    def _snapshot(
        self, turn_id: str, index: int, parts: Sequence[ModStepPart], effort: Any, *, done: bool, stop_reason: Any = ABSENT
    ) -> ModStepEvent:
        # The whole step so far, not a delta (``mod-protocol.ts``, ``step``).
        return ModStepEvent(
            turn_id=turn_id,
            index=index,
            model=self.model,
            effort=effort,
            parts=tuple(parts),
            done=done,
            stop_reason=stop_reason,
        )


def _block_of(part: ModStepPart, tools: Sequence[SimulatedToolCall]) -> JsonValue:
    """The content block a step part is, as its response row carries it."""
    if isinstance(part, ModStepToolCall):
        tool = next(each for each in tools if each.id == part.id)
        return {"type": "tool_use", "id": tool.id, "name": tool.name, "input": dict(tool.input)}
    assert isinstance(part, ModStepText)
    return {"type": "text", "text": part.text}


class _CallFailed(Exception):
    """The simulated call answers ``ok: false`` with this text."""
