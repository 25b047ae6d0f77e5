"""The ACP adapter: any agent that speaks the Agent Client Protocol (JSON-RPC
2.0 on stdio, protocol version 1) runs a session.

``router daemon --adapter acp -- COMMAND ARGS…`` starts ``COMMAND ARGS…``
as the agent of each session (docs/acp.md has the mapping table and the
agents tested).

Theory of operation
-------------------
One agent process per adapter session, started on the session's first turn
(and again on the turn after it died). It is ``initialize``d (protocol
version 1, no file system or terminal offered: the agent uses its own), then
its ACP session is made: ``session/load`` of the ACP session id this session
persisted (``{"kind": "acp-session", "sessionId": ...}``) when the agent
advertises ``loadSession``, so a session restored in a new daemon resumes
its conversation, else ``session/new`` (and its id is persisted). What the
agent replays while loading is not shown again: the transcript has it.

A turn is one ``session/prompt``; the agent's ``session/update``s become
container events through :class:`router.acp.TurnProjection` and the stop
reason settles the operation. The agent's stdout is read only while a turn
(or the start) runs, by a pump task in the turn's own nursery; between turns
nothing is read, and a pipe the agent fills then simply waits.

``session/request_permission`` becomes an *ask*: the adapter emits a
``raw`` event ``{"type": "ask", "askId", "tool", "input", "summary",
"toolCallId", "options"}`` (docs/container-protocol.md, "Asks") and waits
for :meth:`AcpSession.answer` (the host's ``answer`` message) up to
``ask_deadline`` seconds. ``allow`` selects the agent's ``allow_once``
option (else ``allow_always``), ``deny`` its ``reject_once`` (else
``reject_always``); no answer in time answers ``cancelled``, as ACP's
``RequestPermissionOutcome`` says a client does when it cannot ask. Every
ask's end is emitted too (``{"type": "ask-ended", "askId", "state"}``).

Abort is Trio cancellation of :meth:`AcpSession.run`. The cleanup, shielded:
every permission request still open is answered ``cancelled`` (ACP: the
client must do so after ``session/cancel``), ``session/cancel`` is sent,
and the prompt's answer is awaited (the pump runs again) for at most
``cancel_grace`` seconds; an agent that does not answer by then is killed
and started again on the next turn.

The agent's other requests (``fs/*``, ``terminal/*``: never offered) are
answered "method not found".

Error handling: an agent that cannot start, does not answer ``initialize``
within ``start_deadline``, speaks another protocol version, refuses
``session/new``, or dies mid-turn settles the turn ``unanswered`` with the
reason and the tail of its stderr (its words); the next turn starts it
again. Malformed output is logged and answered as JSON-RPC says; a flood of
updates is read as fast as it comes, each parsed or dropped.

Resource handling: :meth:`AcpSession.close` ends the agent (stdin closed,
then ``SIGTERM``, then ``SIGKILL`` of its process group after
``kill_after`` seconds) and reaps it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from typing import Any, Final, Sequence

import attrs
import trio

from router.acp import (
    PROTOCOL_VERSION,
    Notification,
    PeerClosed,
    Request,
    RpcError,
    RpcPeer,
    RpcPeerStatistics,
    TurnProjection,
    outcome_of,
    parse_update,
    permission_request,
    usage_of,
)
from router.acp import METHOD_NOT_FOUND
from router.daemon.adapter import AdapterContext, AdapterTurn
from router.daemon.adapters.process_per_turn import CWD_ENV
from wire.container import AdapterInfo, ContainerOutcome, ContainerSettings, Unanswered, input_text

__all__ = ["AcpSessionStatistics", "ASK_DEADLINE", "AcpAdapter", "AcpSession", "START_DEADLINE", "agent_from_settings", "from_cli",
           "session_entry"]

#: Seconds the agent has to answer ``initialize`` and make (or load) its
#: session (ours: claude-code-acp 0.16.2 starts in about two seconds on a
#: loaded machine; a cold npx fetch is not our business).
START_DEADLINE: Final = 60.0
#: Seconds an ask waits for a person: asks.json's default deadline
#: (router.asks ``AskPolicy``).
ASK_DEADLINE: Final = 120.0
#: Seconds an aborted turn's agent has to answer ``session/cancel`` before it
#: is killed: the CLI adapter's ``KILL_AFTER`` (the reference's 5 s).
CANCEL_GRACE: Final = 5.0
KILL_AFTER: Final = 5.0
#: Bytes of the agent's stderr kept for a failure's reason (the CLI adapter's).
STDERR_TAIL: Final = 4096
#: The daemon's secret never reaches an agent (the daemon removes it too).
_SECRET_ENV: Final = ("CF_HARNESS_TOKEN",)

_CLIENT_CAPABILITIES: Final = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}


def session_entry(session_id: str) -> dict[str, Any]:
    """The persisted entry naming the agent's ACP session."""
    return {"kind": "acp-session", "sessionId": session_id}


def _restored_session(entries: Sequence[Any]) -> str | None:
    found = None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("kind") == "acp-session" and type(entry.get("sessionId")) is str:
            found = entry["sessionId"]
    return found


class AgentFailed(Exception):
    """The agent could not run the turn; the message says why."""


@attrs.define
class _Ask:
    id: str
    request_id: Any
    options: list[dict[str, Any]]
    answered: trio.Event = attrs.field(factory=trio.Event)
    decision: str | None = None


class AcpAdapter:
    """Runs ``command`` (an argv) as each session's ACP agent. ``env`` is
    added to its environment; ``cwd`` is its working directory and the ACP
    sessions' (default: the daemon's)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        id: str = "acp",
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        start_deadline: float = START_DEADLINE,
        ask_deadline: float = ASK_DEADLINE,
        cancel_grace: float = CANCEL_GRACE,
        kill_after: float = KILL_AFTER,
    ) -> None:
        if not command:
            raise ValueError("the ACP adapter needs the agent's command")
        self.command = tuple(command)
        self.env = dict(env or {})
        self.cwd = cwd
        self.start_deadline = start_deadline
        self.ask_deadline = ask_deadline
        self.cancel_grace = cancel_grace
        self.kill_after = kill_after
        # No "steer": ACP v1 has one prompt at a time (a second waits: followUp).
        self.info = AdapterInfo(id=id, version=str(PROTOCOL_VERSION), capabilities=("resume",))

    def __repr__(self) -> str:
        return f"<AcpAdapter {list(self.command)}>"

    async def open(self, context: AdapterContext) -> "AcpSession":
        return AcpSession(self, context)


@attrs.frozen
class AcpSessionStatistics:
    """What an :class:`AcpSession` did: agent starts, turns, asks open, whether
    it is ready, updates dropped, and its peer's figures (None: no agent)."""

    starts: int
    turns: int
    asks: int
    ready: bool
    dropped_updates: int
    peer: RpcPeerStatistics | None


class AcpSession:
    """One harness session's ACP agent (see the module docstring)."""

    def __init__(self, adapter: AcpAdapter, context: AdapterContext) -> None:
        self._adapter = adapter
        self._context = context
        self._settings = context.settings
        self.acp_session: str | None = _restored_session(context.restore)
        self.process: trio.Process | None = None
        self.peer: RpcPeer | None = None
        self.agent_info: dict[str, Any] | None = None
        self.load_session = False
        self._ready = False
        self._turn: TurnProjection | None = None
        self._loading = False
        self._asks: dict[str, _Ask] = {}
        self._stderr = bytearray()
        self.starts = 0
        self.turns = 0
        self.dropped_updates = 0

    def __repr__(self) -> str:
        pid = self.process.pid if self.process is not None else None
        return (f"<AcpSession {self._context.session!r} acp={self.acp_session!r} pid={pid} ready={self._ready} "
                f"turns={self.turns} asks={len(self._asks)}>")

    def statistics(self) -> AcpSessionStatistics:
        return AcpSessionStatistics(starts=self.starts, turns=self.turns, asks=len(self._asks), ready=self._ready,
                                    dropped_updates=self.dropped_updates,
                                    peer=None if self.peer is None else self.peer.statistics())
    async def configure(self, settings: ContainerSettings) -> None:
        self._settings = settings

    # ------------------------------------------------------------------ the agent process

    def _cwd(self) -> str:
        # As the CLI adapters: the adapter's, else $ROUTER_CLI_CWD, else the daemon's.
        return self._adapter.cwd or os.environ.get(CWD_ENV) or os.getcwd()

    async def _spawn(self) -> None:
        environ = {key: value for key, value in os.environ.items() if key not in _SECRET_ENV}
        environ.update(self._adapter.env)
        self._stderr.clear()
        try:
            self.process = await trio.lowlevel.open_process(
                list(self._adapter.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=self._cwd(), env=environ, start_new_session=True,
            )
        except OSError as exc:
            raise AgentFailed(f"could not start {self._adapter.command[0]}: {exc.strerror or exc}") from None
        assert self.process.stdin is not None and self.process.stdout is not None
        self.starts += 1
        self.peer = RpcPeer(self.process.stdin, self.process.stdout, on_request=self._on_request,
                            on_notification=self._on_notification, name=f"ACP agent {self._adapter.command[0]}")
        self._ready = False

    async def _drain_stderr(self) -> None:
        process = self.process
        if process is None or process.stderr is None:
            return
        try:
            async for chunk in process.stderr:
                self._stderr += chunk
                if len(self._stderr) > STDERR_TAIL:
                    del self._stderr[: len(self._stderr) - STDERR_TAIL]
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def _words(self) -> str:
        """How the agent ended and the tail of its stderr, for a reason."""
        code = self.process.returncode if self.process is not None else None
        if code is None:
            how = "the agent closed its output"
        elif code < 0:
            try:
                how = f"the agent was ended by {signal.Signals(-code).name}"
            except ValueError:
                how = f"the agent was ended by signal {-code}"
        else:
            how = f"the agent exited with status {code}"
        tail = bytes(self._stderr).decode("utf-8", errors="replace").strip()
        return f"{how}: {tail[-1000:] or 'no output'}"

    async def _start(self) -> None:
        """Start the agent, initialize it, make or load its session. Runs
        inside a nursery whose pump reads the agent."""
        assert self.peer is not None
        with trio.fail_after(self._adapter.start_deadline):
            answer = await self.peer.call("initialize", {
                "protocolVersion": PROTOCOL_VERSION, "clientCapabilities": _CLIENT_CAPABILITIES,
                "clientInfo": {"name": "router", "version": "1"},
            })
            if type(answer) is not dict or answer.get("protocolVersion") != PROTOCOL_VERSION:
                version = answer.get("protocolVersion") if type(answer) is dict else answer
                raise AgentFailed(f"the agent speaks ACP protocol version {version!r}; the router speaks "
                                  f"{PROTOCOL_VERSION}")
            capabilities = answer.get("agentCapabilities")
            self.load_session = type(capabilities) is dict and capabilities.get("loadSession") is True
            info = answer.get("agentInfo")
            self.agent_info = info if type(info) is dict else None
            await self._open_acp_session()
        self._ready = True

    async def _open_acp_session(self) -> None:
        assert self.peer is not None
        if self.acp_session is not None and self.load_session:
            self._loading = True
            try:
                await self.peer.call("session/load", {"sessionId": self.acp_session, "cwd": self._cwd(),
                                                      "mcpServers": []})
                return
            except RpcError as exc:
                self._context.log("warn", f"the agent could not load ACP session {self.acp_session}: "
                                          f"{exc.message}; starting a new one")
            finally:
                self._loading = False
        elif self.acp_session is not None:
            self._context.log("warn", "the agent cannot load sessions (no loadSession): the conversation "
                                      "starts again in a new ACP session")
        answer = await self.peer.call("session/new", {"cwd": self._cwd(), "mcpServers": []})
        if type(answer) is not dict or type(answer.get("sessionId")) is not str:
            raise AgentFailed(f"session/new answered no sessionId: {str(answer)[:200]}")
        self.acp_session = answer["sessionId"]
        self._context.persist([session_entry(answer["sessionId"])])

    async def _ensure_agent(self, nursery: trio.Nursery) -> None:
        if self.process is not None and self.process.returncode is None and self.peer is not None \
                and not self.peer.closed and self._ready:
            nursery.start_soon(self.peer.pump, name="acp-pump")
            nursery.start_soon(self._drain_stderr, name="acp-stderr")
            return
        await self._stop_agent()
        await self._spawn()
        assert self.peer is not None
        nursery.start_soon(self.peer.pump, name="acp-pump")
        nursery.start_soon(self._drain_stderr, name="acp-stderr")
        try:
            await self._start()
        except trio.TooSlowError:
            raise AgentFailed(f"the agent did not answer initialize and session/new within "
                              f"{self._adapter.start_deadline:g} s") from None
        except RpcError as exc:
            detail = f": {str(exc.data)[:300]}" if exc.data is not None else ""
            raise AgentFailed(f"the agent refused to start a session: {exc.message} ({exc.code}){detail}") from None

    async def _stop_agent(self) -> None:
        """End the agent process (if any) and reap it. Shielded."""
        process, self.process, self.peer, self._ready = self.process, None, None, False
        if process is None:
            return
        with trio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            if process.returncode is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
                with trio.move_on_after(self._adapter.kill_after):
                    await process.wait()
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            await process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()

    async def close(self) -> None:
        await self._stop_agent()

    # ------------------------------------------------------------------ what the agent sends

    def _on_notification(self, notification: Notification) -> None:
        if notification.method != "session/update":
            return
        update = parse_update(notification.params)
        if isinstance(update, str):
            self.dropped_updates += 1
            self._context.log("warn", update)
            return
        if self._loading or self._turn is None or update.session_id != self.acp_session:
            return  # a replay while loading, or an update between turns
        for event in self._turn.update(update):
            self._context.emit(event)

    async def _on_request(self, request: Request) -> Any:
        if request.method == "session/request_permission":
            return await self._permission(request)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method} (the router offers no fs or terminal)")

    async def _permission(self, request: Request) -> Any:
        parsed = permission_request(request.params)
        if isinstance(parsed, str):
            raise RpcError(-32602, parsed)
        ask = _Ask(id=f"acp-{uuid.uuid4().hex}", request_id=request.id, options=parsed["options"])
        tool = parsed["tool"]
        part = self._turn.tool(tool["toolCallId"]) if self._turn is not None else None
        self._asks[ask.id] = ask
        self._context.emit({"type": "raw", "value": {
            "type": "ask", "askId": ask.id, "tool": tool["title"] or (part or {}).get("toolName") or "tool",
            "input": tool["input"] if tool["input"] is not None else (part or {}).get("input", {}),
            "summary": tool["title"] or "", "toolCallId": tool["toolCallId"],
            "options": [{"optionId": o["optionId"], "name": o["name"], "kind": o["kind"]} for o in ask.options],
            "deadline": self._adapter.ask_deadline,
        }})
        # Cancelled here (an abort), the ask stays for ``_cancel`` to answer.
        with trio.move_on_after(self._adapter.ask_deadline):
            await ask.answered.wait()
        self._asks.pop(ask.id, None)
        option = _option_for(ask.options, ask.decision)
        state = "expired" if ask.decision is None else "answered"
        self._context.emit({"type": "raw", "value": {"type": "ask-ended", "askId": ask.id, "state": state,
                                                      **({"decision": ask.decision} if ask.decision else {})}})
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}

    def answer(self, ask_id: str, decision: str) -> bool:
        """A person's answer to an ask (``allow`` or ``deny``); False when no
        such ask waits here."""
        ask = self._asks.get(ask_id)
        if ask is None or ask.answered.is_set() or decision not in ("allow", "deny"):
            return False
        ask.decision = decision
        ask.answered.set()
        return True

    def waiting_asks(self) -> list[str]:
        return list(self._asks)

    # ------------------------------------------------------------------ a turn

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        self.turns += 1
        projection = TurnProjection(turn.operation_id, lambda: time.time_ns() // 1_000_000)
        pending = None
        try:
            async with trio.open_nursery() as nursery:
                await self._ensure_agent(nursery)
                assert self.peer is not None
                self._turn = projection
                pending = await self.peer.start("session/prompt", {
                    "sessionId": self.acp_session, "prompt": [{"type": "text", "text": input_text(turn.input)}]})
                answer = await pending.wait()
                nursery.cancel_scope.cancel()
        except AgentFailed as exc:
            await self._stop_agent()
            return Unanswered(reason=f"{exc}; {self._words()}" if self.process is None else str(exc))
        except (PeerClosed, RpcError) as exc:
            return await self._failed_turn(projection, exc)
        except trio.Cancelled:
            await self._cancel(projection, pending)
            raise
        except BaseExceptionGroup as group:
            return await self._grouped(group, projection, pending)
        finally:
            self._turn = None
        return self._settle(projection, answer)

    async def _grouped(self, group: BaseExceptionGroup, projection: TurnProjection, pending: Any) -> ContainerOutcome:
        cancelled, rest = group.split(trio.Cancelled)
        if rest is None and cancelled is not None:
            await self._cancel(projection, pending)
            raise cancelled.exceptions[0] from None
        assert rest is not None
        first = rest.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        if isinstance(first, AgentFailed):
            process_gone = self.process is not None and self.process.returncode is not None
            words = f"; {self._words()}" if process_gone else ""
            await self._stop_agent()
            return Unanswered(reason=f"{first}{words}")
        if isinstance(first, (PeerClosed, RpcError)):
            return await self._failed_turn(projection, first)
        raise group

    async def _failed_turn(self, projection: TurnProjection, exc: BaseException) -> ContainerOutcome:
        for event in projection.finish(aborted=True):
            self._context.emit(event)
        if isinstance(exc, RpcError):
            return Unanswered(reason=f"the agent failed the prompt: {exc.message} ({exc.code})")
        # The agent died mid-turn: its words, then it starts again next turn.
        with trio.CancelScope(shield=True):
            if self.process is not None:
                with trio.move_on_after(1.0):
                    await self.process.wait()
            words = self._words()
            await self._stop_agent()
        return Unanswered(reason=words)

    def _settle(self, projection: TurnProjection, answer: Any) -> ContainerOutcome:
        for event in projection.finish():
            self._context.emit(event)
        if type(answer) is not dict or type(answer.get("stopReason")) is not str:
            return Unanswered(reason=f"session/prompt answered no stopReason: {str(answer)[:200]}")
        usage = usage_of(answer)
        if usage is not None:
            self._context.emit(usage)
        return outcome_of(answer["stopReason"], projection.text)

    async def _cancel(self, projection: TurnProjection, pending: Any) -> None:
        """An aborted turn (shielded): open asks answered ``cancelled``,
        ``session/cancel``, the prompt's answer awaited for a grace, else the
        agent is killed."""
        with trio.CancelScope(shield=True):
            peer = self.peer
            for ask in list(self._asks.values()):
                self._asks.pop(ask.id, None)
                self._context.emit({"type": "raw", "value": {"type": "ask-ended", "askId": ask.id,
                                                              "state": "cancelled"}})
                if peer is not None:
                    try:
                        await peer.respond(ask.request_id, {"outcome": {"outcome": "cancelled"}})
                    except (PeerClosed, Exception):  # noqa: BLE001 - answered already, or the agent is gone
                        pass
            answered = False
            if peer is not None and pending is not None and self.acp_session is not None:
                try:
                    await peer.notify("session/cancel", {"sessionId": self.acp_session})
                    with trio.move_on_after(self._adapter.cancel_grace):
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(peer.pump, name="acp-pump-cancel")
                            try:
                                await pending.wait()
                            except (PeerClosed, RpcError):
                                pass
                            answered = pending.done.is_set() and not peer.closed
                            nursery.cancel_scope.cancel()
                except PeerClosed:
                    pass
            for event in projection.finish(aborted=True):
                self._context.emit(event)
            if not answered:
                await self._stop_agent()


def agent_from_settings(name: str, settings_dir: Any) -> tuple[list[str], dict[str, str]]:
    """The agent ``acp:NAME`` names in ``plugins.json``:
    ``options.harness.acp.agents.NAME``, an argv (a list of strings) or
    ``{"command": [...], "env": {...}}``. Raises :class:`Refusal`
    ``acp-agent-unknown`` (no such agent) or ``invalid-settings``."""
    from router.errors import Refusal
    from router.plugins.settings import SettingsDir

    document = SettingsDir(settings_dir).read("plugins.json")
    if isinstance(document, Refusal):
        raise document
    agents = _configured_agents(document.value)
    entry = agents.get(name)
    if entry is None:
        known = ", ".join(sorted(agents)) or "none"
        raise Refusal("acp-agent-unknown",
                      f"no ACP agent {name!r} in {document.name} (options.harness.acp.agents; known: {known}); "
                      f"add one with `router plugins set`, or run `router daemon --adapter acp -- COMMAND ARGS`")
    command, env = (entry.get("command"), entry.get("env") or {}) if type(entry) is dict else (entry, {})
    if not (type(command) is list and command and all(type(part) is str for part in command)) or not (
            type(env) is dict and all(type(v) is str for v in env.values())):
        raise Refusal("invalid-settings", f"options.harness.acp.agents.{name} is an argv (a list of strings) or "
                                          '{"command": [strings], "env": {name: string}}')
    return list(command), dict(env)


def _configured_agents(value: Any) -> dict[str, Any]:
    """``options.harness.acp.agents`` of a ``plugins.json`` document, or
    ``{}`` where any step of that path is missing or not an object."""
    for key in ("options", "harness", "acp", "agents"):
        value = value.get(key) if type(value) is dict else None
    return value if type(value) is dict else {}


def from_cli(spec: str, argv: Sequence[str], environ: dict[str, str]) -> AcpAdapter:
    """The adapter ``router daemon --adapter acp -- COMMAND ARGS…`` or
    ``--adapter acp:NAME`` asks for. Raises :class:`Refusal`
    ``acp-agent-missing`` (no command after ``--``), ``acp-agent-unknown``."""
    from router.errors import Refusal
    from router.dirs import default_settings_dir

    command = list(argv[1:] if argv[:1] == ["--"] else argv)
    if spec == "acp":
        if not command:
            raise Refusal("acp-agent-missing", "--adapter acp runs the agent named after --: "
                                               "router daemon --adapter acp -- COMMAND ARGS…")
        return AcpAdapter(command)
    name = spec.removeprefix("acp:")
    agent, env = agent_from_settings(name, default_settings_dir(environ))
    return AcpAdapter(agent + command, id=f"acp:{name}", env=env)


def _option_for(options: list[dict[str, Any]], decision: str | None) -> str | None:
    """The option id a decision selects: allow -> allow_once (else
    allow_always), deny -> reject_once (else reject_always)."""
    if decision is None:
        return None
    kinds = ("allow_once", "allow_always") if decision == "allow" else ("reject_once", "reject_always")
    for kind in kinds:
        for option in options:
            if option["kind"] == kind:
                return str(option["optionId"])
    return None
