"""``router acp``: the router as an ACP agent on stdio, so any ACP client
attaches to any session on the board, or starts one in a worktree of a
listed project (docs/acp.md).

Theory of operation
-------------------
Nothing runs here but the ACP side: every session is reached through the
running routers' API on their private Unix sockets, as ``router send``
does (router/board/client.py finds the router holding a session).

- ``initialize``: protocol version 1, ``loadSession``, ``sessionCapabilities.list``.
- ``session/list``: the board (every router of this user), one
  ``SessionInfo`` a session (``title``: its kind and state).
- ``session/load``: the session's live view (``GET /sessions/<id>/live``):
  its snapshot is replayed as ``session/update``s before the answer, then a
  task streams its items as updates (:class:`router.acp.UpdateConverter`)
  and another watches the session's asks (``GET /asks`` every
  :data:`ASK_POLL` seconds): each new one goes to the client as
  ``session/request_permission``, and the option chosen is answered
  through the API (``POST /sessions/<id>/asks/<ask>``); every other surface
  sees the ask at the same time, and the first answer wins. An ask that
  leaves the list before the client chose (another surface answered, or it
  expired) withdraws the client's request (``$/cancel_request``).
- ``session/prompt``: a delivery with a new event id
  (``POST /sessions/<id>/messages``, ``wait``), exactly once: the router is
  idempotent on the id. The reply's outcome is the stop reason (``done`` ->
  ``end_turn``, ``aborted`` or a cancel asked -> ``cancelled``); anything
  else is an error answer with the router's code and sentence. The answer
  waits (at most :data:`TURN_END_WAIT` s) for the live view's ``turn-end``
  of the operation, so the client has every update first.
- ``session/cancel``: ``POST /sessions/<id>/abort``.
- ``session/new``: a session in its own git worktree, started by the one
  ``router serve`` of this user (``POST /sessions``, docs/sessions.md):
  ``cwd`` must be a listed project's folder (else the router's refusal,
  ``not-a-project``, is the error answer); ``_meta`` may name its
  ``harness`` (else the router's default), ``name``, ``branch`` and
  ``where``. The answer is ``{sessionId}`` (the session's board id, with
  ``_meta.router``: its name, project, branch, worktree, harness, where),
  and the session is attached as by ``session/load``: ``session/prompt``
  it as any other.

Error handling: a router that cannot be reached or refuses is an error
answer with its code and sentence; the stdio connection lives on.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any, Final, Mapping
from urllib.parse import quote

import attrs
import httpx
import trio

from router._httpx import unix_transport
from router.acp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Notification, Request
from router.acp.peer import PeerClosed, RpcError, RpcPeer
from router.acp.updates import UpdateConverter
from router.board.client import BASE_URL, CLI_CHANNEL, holder, survey
from router.errors import Refusal

__all__ = ["ASK_POLL", "AcpServer", "TURN_END_WAIT"]

log = logging.getLogger("router.acp")

PROTOCOL_VERSION: Final = 1
#: Seconds between looks at the session's asks (ours: an ask waits minutes;
#: half a second is as soon as a person would notice).
ASK_POLL: Final = 0.5
#: Seconds a prompt's answer waits for the live view's ``turn-end`` (ours).
TURN_END_WAIT: Final = 5.0
#: The keys of ``session/new``'s ``_meta`` handed to ``POST /sessions``.
NEW_META: Final = ("harness", "name", "branch", "where")
#: The router's error code for a refusal (JSON-RPC's implementation-defined range).
REFUSED: Final = -32000


@attrs.define
class _Attached:
    session: str
    socket: str
    converter: UpdateConverter = attrs.field(factory=UpdateConverter)
    #: The cancel scopes of its tasks (the live view, the asks): a new
    #: ``session/load`` of the same session cancels them.
    scopes: list[trio.CancelScope] = attrs.field(factory=list)

    def scope(self) -> trio.CancelScope:
        scope = trio.CancelScope()
        self.scopes.append(scope)
        return scope
    ended: dict[str, trio.Event] = attrs.field(factory=dict)
    asked: set[str] = attrs.field(factory=set)
    #: The asks whose ``session/request_permission`` waits on the client:
    #: the scope of each (cancelled when another surface answers first).
    pending: dict[str, trio.CancelScope] = attrs.field(factory=dict)
    cancelled: bool = False


def _client(socket: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=unix_transport(socket), base_url=BASE_URL,
                             headers=CLI_CHANNEL, timeout=None)


def _refused(answer: Any, status: int) -> RpcError:
    if type(answer) is dict and type(answer.get("error")) is str:
        return RpcError(REFUSED, f"{answer['error']}: {answer.get('message')}", answer)
    return RpcError(REFUSED, f"the router answered {status}", answer)


class AcpServer:
    """The ACP agent side of ``router acp`` on a peer's streams."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream,
                 env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.peer = RpcPeer(send, receive, on_request=self._request, on_notification=self._notification,
                            name="ACP client")
        self.attached: dict[str, _Attached] = {}
        self._nursery: trio.Nursery | None = None

    def __repr__(self) -> str:
        return f"<AcpServer attached={sorted(self.attached)} {self.peer!r}>"

    async def run(self) -> None:
        """Serve until the client closes its end."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.peer.pump()
            nursery.cancel_scope.cancel()

    # ------------------------------------------------------------------ requests

    async def _request(self, request: Request) -> Any:
        params = request.params if type(request.params) is dict else {}
        if request.method == "initialize":
            return {"protocolVersion": PROTOCOL_VERSION, "authMethods": [],
                    "agentCapabilities": {"loadSession": True, "sessionCapabilities": {"list": {}}},
                    "agentInfo": {"name": "router", "title": "router: the sessions on your board", "version": "1"}}
        if request.method == "session/list":
            return await self._list()
        if request.method == "session/load":
            return await self._load(self._session_id(params))
        if request.method == "session/prompt":
            return await self._prompt(self._session_id(params), params.get("prompt"))
        if request.method == "session/new":
            return await self._new(params)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")

    @staticmethod
    def _session_id(params: dict[str, Any]) -> str:
        session = params.get("sessionId")
        if type(session) is not str or not session:
            raise RpcError(INVALID_PARAMS, "sessionId is a non-empty string")
        return session

    def _notification(self, notification: Notification) -> None:
        params = notification.params if type(notification.params) is dict else {}
        if notification.method == "session/cancel" and type(params.get("sessionId")) is str:
            attached = self.attached.get(params["sessionId"])
            if attached is not None and self._nursery is not None:
                attached.cancelled = True
                self._nursery.start_soon(self._abort, attached)

    async def _list(self) -> Any:
        board = await survey(self.env)
        sessions = []
        for item in board.sessions():
            if type(item.get("id")) is not str:
                continue
            info: dict[str, Any] = {"sessionId": item["id"], "cwd": item.get("cwd") or "/",
                                    "title": f"{item.get('kind')} session, {item.get('state')}"}
            sessions.append(info)
        return {"sessions": sessions}

    async def _holder(self, session: str) -> str:
        try:
            found, _ = await holder(self.env, session)
        except Refusal as refused:
            raise RpcError(REFUSED, f"{refused.code}: {refused.message}") from None
        return found.socket

    # ------------------------------------------------------------------ a new session

    async def _serve_socket(self) -> str:
        """The socket of the one ``router serve`` of this user (the router
        that starts sessions in worktrees), as ``router new`` finds it."""
        try:
            board = await survey(self.env)
        except Refusal as refused:
            raise RpcError(REFUSED, f"{refused.code}: {refused.message}") from None
        serving = [each for each in board.reached if each.info.get("command") == "serve"]
        if len(serving) != 1:
            names = ", ".join(each.name for each in serving)
            raise RpcError(REFUSED, "no-router: no `router serve` of yours is running; start one" if not serving
                           else f"ambiguous-router: {len(serving)} `router serve` run ({names})")
        return serving[0].socket

    async def _new(self, params: dict[str, Any]) -> Any:
        """``session/new``: a session in a new worktree of the listed project
        whose folder ``cwd`` is (``POST /sessions``), attached as by
        ``session/load``."""
        cwd = params.get("cwd")
        if type(cwd) is not str or not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, "cwd is an absolute path: a listed project's folder")
        meta = params.get("_meta") if type(params.get("_meta")) is dict else {}
        body: dict[str, Any] = {"project": cwd}
        for key in NEW_META:
            value = meta.get(key)
            if value is not None:
                if type(value) is not str or not value:
                    raise RpcError(INVALID_PARAMS, f"_meta.{key} is a non-empty string")
                body[key] = value
        socket = await self._serve_socket()
        try:
            async with _client(socket) as client:
                response = await client.post("/sessions", json=body)
        except httpx.HTTPError as exc:
            raise RpcError(REFUSED, f"cannot-connect: {socket}: {exc}") from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        made = response.status_code in (200, 201) and type(answer) is dict and type(answer.get("session")) is str
        if not made:
            raise _refused(answer, response.status_code)
        session = answer["session"]
        await self._attach(session, socket)
        return {"sessionId": session, "_meta": {"router": {key: answer.get(key) for key in
                                                           ("name", "project", "branch", "worktree", "harness",
                                                            "where")}}}

    # ------------------------------------------------------------------ attaching

    async def _load(self, session: str) -> Any:
        return await self._attach(session, await self._holder(session))

    async def _attach(self, session: str, socket: str) -> Any:
        attached = self.attached.get(session)
        if attached is not None:
            for scope in attached.scopes:
                scope.cancel()
        attached = _Attached(session, socket)
        assert self._nursery is not None
        try:
            await self._nursery.start(self._live, attached)
        except RpcError:
            raise
        self.attached[session] = attached
        self._nursery.start_soon(self._asks, attached)
        return {}

    async def _live(self, attached: _Attached, task_status: trio.TaskStatus[None]) -> None:
        """The live view: the snapshot replayed (before ``started``), then
        the items, as updates. A failure before the snapshot is the load's
        error answer; after it, a log line (the client keeps what it has)."""
        state = {"started": False}

        def started() -> None:
            state["started"] = True
            task_status.started()

        try:
            await self._follow(attached, started)
        except (httpx.HTTPError, RpcError) as exc:
            if not state["started"]:
                raise RpcError(REFUSED, f"the live view of {attached.session!r} failed: {exc}") from None
            log.warning("session %s: the live view ended: %s", attached.session, exc)
        if not state["started"]:
            task_status.started()

    async def _follow(self, attached: _Attached, started: Any) -> None:
        first = True
        with attached.scope():
            async with _client(attached.socket) as client:
                async with client.stream("GET", f"/sessions/{quote(attached.session, safe='')}/live") as response:
                    if response.status_code != 200:
                        raise RpcError(REFUSED, f"the router answered {response.status_code} for the live view")
                    async for event in _sse(response):
                        kind = event.get("type") if type(event) is dict else None
                        if kind == "snapshot":
                            await self._updates(attached, attached.converter.snapshot(event.get("messages") or []))
                            if first:
                                first = False
                                started()
                            continue
                        if kind == "turn-end" and type(event.get("id")) is str:
                            attached.ended.setdefault(event["id"], trio.Event()).set()
                        await self._updates(attached, attached.converter.item(event))

    async def _updates(self, attached: _Attached, updates: list[dict[str, Any]]) -> None:
        for update in updates:
            try:
                await self.peer.notify("session/update", {"sessionId": attached.session, "update": update})
            except PeerClosed:
                return

    # ------------------------------------------------------------------ a prompt

    async def _prompt(self, session: str, prompt: Any) -> Any:
        attached = self.attached.get(session)
        if attached is None:
            raise RpcError(INVALID_PARAMS, f"session {session!r} is not loaded here: session/load it first")
        text = _prompt_text(prompt)
        event_id = str(uuid.uuid4())
        attached.converter.own.add(event_id)
        attached.cancelled = False
        ended = attached.ended.setdefault(event_id, trio.Event())
        async with _client(attached.socket) as client:
            response = await client.post(f"/sessions/{quote(session, safe='')}/messages",
                                         json={"text": text, "eventId": event_id, "wait": True})
        answer = _json_or_none(response)
        reply = answer.get("reply") if type(answer) is dict else None
        if response.status_code == 200 and (reply is None or reply.get("status") == "done"):
            await self._turn_seen(ended, reply)
            return {"stopReason": "end_turn"}
        if attached.cancelled or (type(reply) is dict and reply.get("reason") == "aborted"):
            await self._turn_seen(ended, reply)
            return {"stopReason": "cancelled"}
        if type(reply) is dict:
            raise RpcError(REFUSED, f"unanswered: {reply.get('reason')}", reply)
        raise _refused(answer, response.status_code)

    @staticmethod
    async def _turn_seen(ended: trio.Event, reply: Any) -> None:
        if reply is None:
            return  # no operation of its own (a Claude Code session): nothing to wait for
        with trio.move_on_after(TURN_END_WAIT):
            await ended.wait()

    async def _abort(self, attached: _Attached) -> None:
        try:
            async with _client(attached.socket) as client:
                await client.post(f"/sessions/{quote(attached.session, safe='')}/abort", json={})
        except httpx.HTTPError as exc:
            log.warning("session %s: the abort did not reach the router: %s", attached.session, exc)

    # ------------------------------------------------------------------ asks

    async def _asks(self, attached: _Attached) -> None:
        with attached.scope():
            async with trio.open_nursery() as nursery:
                async with _client(attached.socket) as client:
                    while True:
                        try:
                            response = await client.get("/asks")
                            waiting = response.json().get("asks", []) if response.status_code == 200 else []
                            listed = response.status_code == 200
                        except (httpx.HTTPError, ValueError, AttributeError):
                            waiting, listed = [], False
                        ids = set()
                        for ask in waiting:
                            if type(ask) is dict and ask.get("session") == attached.session \
                                    and type(ask.get("id")) is str:
                                ids.add(ask["id"])
                                if ask["id"] not in attached.asked:
                                    attached.asked.add(ask["id"])
                                    attached.pending[ask["id"]] = trio.CancelScope()
                                    nursery.start_soon(self._ask, attached, ask)
                        if listed:  # answered elsewhere (or expired): the client's request is withdrawn
                            for id in set(attached.pending) - ids:
                                attached.pending.pop(id).cancel()
                        await trio.sleep(ASK_POLL)

    async def _ask(self, attached: _Attached, ask: dict[str, Any]) -> None:
        """One ask to the client; its choice answered through the API (the
        first answer of any surface wins: a later one is refused there)."""
        tool_call = {"toolCallId": ask.get("toolUseId") or ask["id"], "title": ask.get("summary") or ask.get("tool"),
                     "rawInput": ask.get("input"), "status": "pending"}
        scope = attached.pending.get(ask["id"]) or trio.CancelScope()
        answer = None
        try:
            pending = await self.peer.start("session/request_permission", {
                "sessionId": attached.session, "toolCall": tool_call,
                "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "deny", "name": "Deny", "kind": "reject_once"}]})
            with scope:
                answer = await pending.wait()
        except (RpcError, PeerClosed) as exc:
            log.info("session %s: the client did not answer ask %s: %s", attached.session, ask["id"], exc)
            return
        finally:
            attached.pending.pop(ask["id"], None)
        if scope.cancelled_caught:
            # Another surface answered first: the client's request is withdrawn.
            self.peer.forget(pending)
            try:
                await self.peer.notify("$/cancel_request", {"requestId": pending.id})
            except PeerClosed:
                pass
            return
        outcome = answer.get("outcome") if type(answer) is dict else None
        if type(outcome) is not dict or outcome.get("outcome") != "selected" \
                or outcome.get("optionId") not in ("allow", "deny"):
            return  # cancelled: the other surfaces may still answer
        try:
            async with _client(attached.socket) as client:
                response = await client.post(
                    f"/sessions/{quote(attached.session, safe='')}/asks/{quote(ask['id'], safe='')}",
                    json={"decision": outcome["optionId"], "by": "acp"})
        except httpx.HTTPError as exc:
            log.warning("session %s: the answer to ask %s did not reach the router: %s", attached.session,
                        ask["id"], exc)
            return
        if response.status_code != 200:
            log.info("session %s: ask %s: %s", attached.session, ask["id"], response.text[:200])


async def _sse(response: httpx.Response) -> Any:
    """The ``data:`` of each server-sent event, as JSON."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            try:
                yield json.loads("\n".join(data))
            except ValueError:
                pass
            data = []


async def serve_stdio(env: Mapping[str, str]) -> None:
    """``router acp``: ACP on this process's stdin and stdout."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    async with stdin, stdout:
        await AcpServer(stdout, stdin, env).run()


def _prompt_text(prompt: Any) -> str:
    """The text of a ``session/prompt``'s content blocks, joined; raises
    :class:`RpcError` when ``prompt`` is not a list."""
    if type(prompt) is not list:
        raise RpcError(INVALID_PARAMS, "prompt is a list of content blocks")
    return "".join(block["text"] for block in prompt
                   if type(block) is dict and block.get("type") == "text" and type(block.get("text")) is str)


def _json_or_none(response: Any) -> Any:
    """The response's JSON body, or None when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return None
