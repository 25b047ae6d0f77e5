"""``router mcp``: an MCP server on stdio with the router inside.

This is the embedding the plug-in's ``.mcp.json`` asks for: the process
Claude Code starts as a plug-in's MCP server. It runs the main job (:class:`router.serve.MainJob`:
the host's store, the in-process echo daemon, the session registry and the
user-turn router; no HTTP API unless ``--port``), serves the mod link of the
Claude Code session named by ``--claude-session``, or by Claude Code itself
with ``--claude-session-from-env`` (the plug-in's way; so that session becomes a
``claude-code`` session of the router), and answers MCP over stdin/stdout
with these tools:

``list_sessions``
    the board: every session of every local router, as ``GET /sessions``
    lists it (``router.board.service``);
``send_message {session, text, event_id?, card?, wait?, router?}``
    a delivery (exactly once per ``event_id``; minted when absent), answered
    as the API answers it, by the router that holds the session (forwarded
    over its socket when another does); a refusal or an unanswered delivery
    is a tool error whose text starts with the code (and names the event id
    to resend);
``read_messages {session, router?}``
    the session's transcript (``ContainerMessage`` objects);
``abort {session, operation_id?, router?}``
    stop a container session's turn, as ``POST /sessions/<id>/abort``;
``web_search {query}``
    the plug-in layer's search (the broker, under its deadline);
``limits_report``
    every configured limit and its count, as ``router limits`` reports it.
``list_asks``, ``answer_ask {ask, decision}``
    the permission asks of Claude Code sessions waiting on the person, and
    an answer to one, across every router of this user (``router.asks``).

Its in-process echo ``root`` is hidden from the board (every router has
one; this router is on the board for its Claude Code session), so
``router send root`` means ``router serve``'s; its own MCP client still
reaches it by name when no other router lists a ``root``.

Each answer is one JSON text. **Stdout is the wire**: the process moves its
own stdout to stderr before anything else runs (a stray print can never
corrupt the wire) and logs to stderr. The wire's ends are non-blocking
streams of Trio's own, so SIGINT and SIGTERM stop the server at once even
while the client is quiet; either, or the client closing stdin, stops the
job in order; it exits 0, or 130 after SIGINT (with one line on stderr).

Data: ``--data-dir``, else ``<the router's data dir>/mcp/<the Claude Code
session id, or "standalone">``: Claude Code starts one MCP server per
session, and the host's store admits one host, so each embedded router
keeps its own record.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import attrs
import trio

from router._trio import sole_error
from router.errors import Refusal, is_code
from router.serve import INTERRUPTED, JobConfig, MainJob, StartFailed, add_common, setup_logging
from wire.json import JsonError, dumps, loads

if TYPE_CHECKING:  # its module loads with the server
    from router.mcp_wire import McpWireStatistics

__all__ = ["TOOLS", "configure", "run"]

log = logging.getLogger("router.mcp")

#: The longest line read from the client (ours: a message of the router's
#: longest text, as JSON-RPC, fits many times over).
MAX_LINE_BYTES: Final = 16 * 1024 * 1024

_ID = {"type": "string", "minLength": 1}
_ROUTER = {"type": "string", "minLength": 1, "description": "the router that holds the session, by the name "
           "list_sessions shows (only when several hold one of that id)"}


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


#: Where Claude Code names the session to a plug-in's MCP server (2.1.332).
CLAUDE_SESSION_VARIABLE: Final = "CLAUDE_CODE_SESSION_ID"

#: name -> (description, input schema).
TOOLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "list_sessions": (
        "List every session of every router of yours on this machine (the board): id, kind (container or "
        "claude-code), state (idle, working, stopped, unreachable, closed), harness, model and cwd where known, "
        "lastActivity (ms since the epoch) and the router that holds it.",
        _object({}),
    ),
    "send_message": (
        "Send a message to a session on the board. Exactly once per event_id: to retry an unanswered send, send "
        "it again with the same event_id. Set card for a message that is not the person's own words, and wait to "
        "get a container session's reply.",
        _object({"session": _ID, "text": {"type": "string", "minLength": 1}, "event_id": _ID,
                 "card": {"type": "boolean"}, "wait": {"type": "boolean"}, "router": _ROUTER}, "session", "text"),
    ),
    "read_messages": (
        "Read a session's transcript (messages with id, role, parts).",
        _object({"session": _ID, "router": _ROUTER}, "session"),
    ),
    "abort": (
        "Stop a container session's running turn (or, with operation_id, that one operation, queued or running).",
        _object({"session": _ID, "operation_id": _ID, "router": _ROUTER}, "session"),
    ),
    "web_search": (
        "Search the web through the router's search sources (the plug-in layer's broker, under its deadline): "
        "results with title, url and snippet.",
        _object({"query": {"type": "string", "minLength": 1}}, "query"),
    ),
    "limits_report": (
        "Every configured limit and what it has counted so far (what `router limits` reports).",
        _object({}),
    ),
    # The asks (router.asks): across every router of this user, as `router asks`.
    "list_asks": (
        "List the permission asks of Claude Code sessions waiting on the person, across every router of "
        "theirs on this machine: id, session, tool, input, summary, since.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
    "answer_ask": (
        "Answer a permission ask allow or deny, as the person told you to. The first answer wins; a second, "
        "or one after the ask's deadline, is refused (ask-answered, ask-expired).",
        {
            "type": "object",
            "properties": {"ask": _ID, "decision": {"type": "string", "enum": ["allow", "deny"]}},
            "required": ["ask", "decision"],
            "additionalProperties": False,
        },
    ),
}


class ToolRefused(Refusal):
    """A tool call refused: its name, its arguments, or the router's answer
    (``code: message`` is the call's error text)."""


def _check(name: str, arguments: dict[str, Any]) -> None:
    """Refuse (``bad-arguments``) arguments that are not the tool's
    (:func:`router.mcp_wire.tool_arguments`: a cattrs converter)."""
    from router.mcp_wire import tool_arguments

    checked = tool_arguments(name, arguments)
    if isinstance(checked, Refusal):
        raise ToolRefused(checked.code, checked.message)


def _refused_body(body: Any, fallback: str) -> ToolRefused:
    """The tool error for a router's refusal body ``{error, message, eventId?}``."""
    if type(body) is dict and is_code(body.get("error")) and type(body.get("message")) is str:
        extra = f" (eventId {body['eventId']})" if type(body.get("eventId")) is str else ""
        return ToolRefused(body["error"], body["message"] + extra)
    return ToolRefused("not-a-router", fallback)


async def _forwarded(board: Any, arguments: dict[str, Any], method: str, route: str,
                     body: dict[str, Any] | None) -> Any:
    """The answer of the router that holds the session, when another does
    (None: serve it here). A refusal is :class:`ToolRefused`."""
    if board is None:
        return None
    session = arguments["session"]
    try:
        reached = await board.holder(session, named=arguments.get("router"))
        if reached is None:
            return None
        status, content = await board.forward(reached, method, f"/sessions/{quote(session, safe='')}/{route}",
                                              b"" if body is None else dumps(body).encode(), FORWARD_HEADERS)
    except Refusal as refused:
        raise ToolRefused(refused.code, refused.message) from None
    try:
        answer = loads(content.decode("utf-8"))
    except (UnicodeDecodeError, JsonError, RecursionError):
        raise ToolRefused("not-a-router", f"router {reached.name} answered {status} with no JSON") from None
    if status != 200:
        raise _refused_body(answer, f"router {reached.name} answered {status}")
    return answer


#: What a forwarded call names itself as: the holder's ``cli`` channel
#: (the MCP server is a program acting for the person, as the CLI is).
FORWARD_HEADERS: Final = {"content-type": "application/json", "x-router-channel": "cli"}


async def call_tool(router: Any, name: str, arguments: dict[str, Any], *, layer: Any = None, board: Any = None) -> Any:
    """One tool call against the router (and, with ``board``, the other
    local routers; with ``layer``, the plug-in layer): its JSON answer, or
    :class:`ToolRefused`."""
    from router.turns.requests import send_request_from_tool

    if name not in TOOLS:
        raise ToolRefused("unknown-tool", f"there is no tool {name!r}; the tools are {', '.join(TOOLS)}")
    send = None
    if name == "send_message":
        # One model for a send, the API's and this tool's; ``router`` (which
        # router holds the session) is this tool's own, checked with the rest.
        send = send_request_from_tool({key: value for key, value in arguments.items() if key != "router"})
        if isinstance(send, Refusal):
            raise ToolRefused(send.code, send.message)
        holder = arguments.get("router")
        if "router" in arguments and (type(holder) is not str or not holder):
            raise ToolRefused("bad-arguments", "'router' is a non-empty string (a name list_sessions shows)")
    else:
        _check(name, arguments)
    if name in ("web_search", "limits_report"):
        return await _plugin_tool(layer, name, arguments)
    try:
        if name == "list_sessions":
            if board is None:
                return {"sessions": await router.list()}
            return (await board.listing()).to_json()
        if name in ("list_asks", "answer_ask"):
            return await _ask_tool(name, arguments)
        return await _session_tool(router, board, name, arguments, send)
    except Refusal as refusal:
        if isinstance(refusal, ToolRefused):
            raise
        raise ToolRefused(refusal.code, refusal.message, **refusal.data) from None


async def _session_tool(router: Any, board: Any, name: str, arguments: dict[str, Any], send: Any) -> Any:
    from router.turns.core import Answered
    from router.turns.router import new_event_id

    if name == "read_messages":
        forwarded = await _forwarded(board, arguments, "GET", "messages", None)
        return forwarded if forwarded is not None else await router.messages(arguments["session"])
    if name == "abort":
        operation = arguments.get("operation_id")
        forwarded = await _forwarded(board, arguments, "POST", "abort", {"operationId": operation} if operation else {})
        return forwarded if forwarded is not None else await router.abort(arguments["session"], operation)
    assert send is not None
    # The event id is minted here when absent, so a forwarded send and a
    # resend of it name the same delivery.
    send = attrs.evolve(send, event_id=send.event_id or new_event_id())
    forwarded = await _forwarded(board, arguments, "POST", "messages", send.api_body())
    if forwarded is not None:
        return forwarded
    reply, answer = await router.send(send.session, send.text, **send.send_arguments())
    if not isinstance(reply, Answered):
        raise _refused_body(answer, "the router refused")
    return answer


async def _plugin_tool(layer: Any, name: str, arguments: dict[str, Any]) -> Any:
    if layer is None:
        raise ToolRefused("no-plugin-layer", "this server runs no plug-in layer")
    answer = await (layer.search(arguments["query"]) if name == "web_search" else layer.report())
    if isinstance(answer, Refusal):
        raise ToolRefused(answer.code, answer.message)
    return answer if name == "web_search" else {"report": answer}


async def _ask_tool(name: str, arguments: dict[str, Any]) -> Any:
    """``list_asks`` and ``answer_ask``: through every local router's socket
    (``router.asks.remote``), so a session answers another session's ask."""
    from router.asks.remote import answer_anywhere, survey_asks

    if name == "list_asks":
        found, left_out = await survey_asks(os.environ)
        return {"asks": found, **({"leftOut": left_out} if left_out else {})}
    status, body = await answer_anywhere(os.environ, arguments["ask"], arguments["decision"], by="mcp")
    if status != 0:
        raise ToolRefused(body.get("error", "ask-refused"), body.get("message", "the answer was refused"))
    return body


#: What ``initialize`` answers besides the version and the capabilities.
SERVER_INFO: Final = {"name": "router", "version": "0.1.0"}
INSTRUCTIONS: Final = ("Every session of yours on this machine: list them, send a message (exactly once per "
                       "event_id), read one, stop a turn; search the web; report the limits.")


def tool_list() -> list[dict[str, Any]]:
    """What ``tools/list`` answers: every tool, its description and input schema."""
    return [{"name": name, "description": description, "inputSchema": schema}
            for name, (description, schema) in TOOLS.items()]


async def tool_answer(router: Any, name: str, arguments: dict[str, Any], *, layer: Any = None,
                      board: Any = None) -> tuple[str, bool]:
    """One tool call's answer: (its text, whether it is a tool error)."""
    try:
        value = await call_tool(router, name, arguments, layer=layer, board=board)
    except Refusal as refused:
        return f"{refused.code}: {refused.message}", True
    except Exception:
        log.exception("tool %s failed", name)
        return "internal: the router failed on this call (logged)", True
    return dumps(value), False


# --------------------------------------------------------------------------- stdio on Trio streams


class StdioServer:
    """MCP on a pair of Trio streams (:class:`router.mcp_wire.McpServerWire`
    decides; this reads, writes and runs the calls): each tool call in a
    task of its own under a cancel scope (a ``notifications/cancelled``
    cancels it), each answer written whole under one lock. The client
    closing its end stops the calls still running and returns."""

    def __init__(self, router: Any, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, *,
                 layer: Any = None, board: Any = None) -> None:
        from router.mcp_wire import McpServerWire

        self.router, self.layer, self.board = router, layer, board
        self.wire = McpServerWire(tool_list(), server_info=SERVER_INFO, instructions=INSTRUCTIONS,
                                  max_line=MAX_LINE_BYTES)
        self._receive, self._send = receive, send
        self._lock = trio.StrictFIFOLock()
        self._calls: dict[int | str, trio.CancelScope] = {}
        self._served = trio.CancelScope()

    def __repr__(self) -> str:
        return f"<StdioServer {self.wire!r}>"

    def statistics(self) -> McpWireStatistics:
        return self.wire.statistics()

    async def run(self) -> None:
        """Serve until the client closes its end (or its reading end)."""
        with self._served:
            async with trio.open_nursery() as nursery:
                while data := await self._receive.receive_some(65536):
                    self.wire.receive_data(data)
                    await self._flush()
                    self._start_calls(nursery)
                self.wire.close()
                await self._flush()
                nursery.cancel_scope.cancel()  # the client is gone: nobody waits for the rest

    def _start_calls(self, nursery: trio.Nursery) -> None:
        from router.mcp_wire import Cancelled

        while (event := self.wire.next_call()) is not None:
            if isinstance(event, Cancelled):
                scope = self._calls.get(event.id)
                if scope is not None:
                    scope.cancel()
                continue
            scope = self._calls[event.id] = trio.CancelScope()
            nursery.start_soon(self._call, event, scope)

    async def _call(self, call: Any, scope: trio.CancelScope) -> None:
        try:
            with scope:
                text, is_error = await tool_answer(self.router, call.name, call.arguments, layer=self.layer,
                                                   board=self.board)
                self.wire.tool_result(call.id, text, is_error=is_error)
                await self._flush()
        finally:
            if self._calls.get(call.id) is scope:
                del self._calls[call.id]

    async def _flush(self) -> None:
        async with self._lock:
            out = self.wire.data_to_send()
            if not out:
                return
            try:
                await self._send.send_all(out)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.info("the client closed its end of the wire")
                self._served.cancel()


def take_stdio() -> tuple[int, int]:
    """Move the wire off fds 0 and 1: returns private duplicates of them,
    and leaves fd 0 reading the null device and fd 1 writing to stderr."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return wire_in, wire_out


async def serve_stdio(job: MainJob, wire_in: int, wire_out: int) -> None:
    """Serve MCP on the two descriptors until the client closes its end."""
    receive = trio.lowlevel.FdStream(wire_in)
    send = trio.lowlevel.FdStream(wire_out)
    try:
        await StdioServer(job.router, receive, send, layer=job.layer, board=job.board).run()
    finally:
        for stream in (receive, send):
            try:
                os.set_blocking(stream.fileno(), True)  # the description may be a terminal's
            except OSError:
                pass
            await stream.aclose()


# --------------------------------------------------------------------------- the command


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--claude-session", metavar="ID", action="append", default=[],
                        help="serve the mod link of this Claude Code session (repeatable)")
    parser.add_argument("--claude-session-from-env", action="store_true",
                        help="serve the mod link of the Claude Code session that started this process "
                        "($CLAUDE_CODE_SESSION_ID, which Claude Code gives a plug-in's MCP server)")
    parser.add_argument("--port", type=int, default=None,
                        help="also serve the HTTP API on 127.0.0.1:PORT (0 picks one; its URL goes to stderr, its "
                        "token is the api-token file of the settings directory)")
    add_common(parser)


#: glibc's ``mallopt`` parameter for the most malloc arenas (``M_ARENA_MAX``).
_M_ARENA_MAX: Final = -8


def one_malloc_arena() -> bool:
    """Have glibc's malloc keep one arena for every thread of this process
    (``MALLOC_ARENA_MAX=1``), before any thread starts; whether it was set.

    glibc gives each thread that allocates its own arena, and memory freed
    in one stays resident there: the store's worker threads (SQLite, the
    survey of the other routers) held 0.9 MiB of a ``router mcp`` that way.
    Its threads take turns under the GIL, so one arena costs it nothing it
    would feel. Not glibc (musl, macOS): nothing to set."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError, AttributeError):
        return False
    import ctypes  # trio has imported it already

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return mallopt is not None and mallopt(_M_ARENA_MAX, 1) == 1


def run(args: argparse.Namespace) -> int:
    from router.dirs import default_data_dir

    wire_in, wire_out = take_stdio()  # before anything can print
    one_malloc_arena()  # before the job's threads
    setup_logging(args.log_level, "router mcp")
    if args.claude_session_from_env:
        # Claude Code substitutes nothing in a plug-in's .mcp.json arguments; it names the
        # session in the MCP server's environment (seen with 2.1.332, tests/e2e_mod).
        session = os.environ.get(CLAUDE_SESSION_VARIABLE, "")
        if not session:
            print(f"router mcp: --claude-session-from-env, but ${CLAUDE_SESSION_VARIABLE} is not set", file=sys.stderr)
            return 2
        args.claude_session.append(session)
    records = None
    if args.data_dir is None:
        # Claude Code starts one MCP server per session: each gets stores of
        # its own, but they all append their turns to the one records file
        # (the one `router serve` and `router limits` use by default), so
        # a limit counts every session's turns, not just this server's.
        shared = Path(default_data_dir(os.environ))
        leaf = args.claude_session[0] if args.claude_session else "standalone"
        args.data_dir = str(shared / "mcp" / leaf)
        records = shared / "usage.jsonl"
    from router.host import ROOT_SESSION
    from router.serve import daemon_token, job_config

    try:
        token = daemon_token("mcp", args, os.environ)
    except Refusal as refused:
        print(f"router mcp: {refused}", file=sys.stderr)
        return 2
    if args.daemon is not None and token is None:
        print("router mcp: no-daemon-token: --daemon needs the daemon's token ($ROUTER_DAEMON_TOKEN or "
              "--daemon-token-file FILE)", file=sys.stderr)
        return 2
    config = job_config(args, os.environ, token=token, port=args.port, claude_sessions=tuple(args.claude_session), records=records,
                        local="mcp", hidden=(ROOT_SESSION,))
    try:
        return trio.run(_main, config, wire_in, wire_out)
    except StartFailed as exc:
        print(f"router mcp: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"router mcp: {exc}", file=sys.stderr)
        return 2


async def _main(config: JobConfig, wire_in: int, wire_out: int) -> int:
    from router.modlink.errors import ModLinkRefused

    job = MainJob(config)
    got: list[int] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:
                try:
                    await nursery.start(job.run)
                except ModLinkRefused as refused:
                    raise StartFailed(refused.code, refused.message) from None
                if job.url is not None:
                    # Not the token: stderr is often a log file others can read.
                    print(f"router mcp: API on {job.url}/ (its token: the api-token file of "
                          f"{config.settings_dir})", file=sys.stderr, flush=True)
                served = trio.CancelScope()

                async def on_signal() -> None:
                    async for received in signals:
                        log.info("signal %s: stopping", signal.Signals(received).name)
                        got.append(received)
                        served.cancel()
                        return

                nursery.start_soon(on_signal)
                with served:
                    await serve_stdio(job, wire_in, wire_out)
                await job.aclose()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            sole = sole_error(group)
            if isinstance(sole, ModLinkRefused):
                raise StartFailed(sole.code, sole.message) from None
            if isinstance(sole, (StartFailed, OSError)):
                raise sole from None
            raise
    if signal.SIGINT in got:
        print("router mcp: interrupted: stopped", file=sys.stderr, flush=True)
        return INTERRUPTED
    return 0
