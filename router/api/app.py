"""The HTTP API's routes: a Quart-Trio app over the user-turn router.

Routes (JSON unless said otherwise; every refusal is ``{"error": code,
"message": sentence}`` with a status that fits, see :data:`STATUS`):

=======================================  ==================================================
``GET /healthz``                         ``{"ok": true}``
``GET /``                                the page: the board and a session's view (HTML;
                                         served with its shell by router/api/shell.py)
``GET /sessions``                        the board: ``{"sessions": [{id, kind, state, harness,
                                         model?, cwd?, lastActivity, router, ...}], skipped?}``
                                         (``?scope=router``: this router's own only)
``GET /board/live``                      server-sent events: the board's snapshot, then
                                         each session that appears, changes or goes
``POST /sessions {id?, instance?}``      create a container session (201)
``POST /sessions/<id>/messages``         ``{text, eventId?, kind?, messageId?, wait?}`` →
                                         the delivery's answer
``GET /sessions/<id>/messages``          ``{session, kind, messages}``
``GET /sessions/<id>/live``              server-sent events: a snapshot, then live items
``POST /sessions/<id>/abort``            ``{operationId?}`` → ``{session, aborted}``
``POST /sessions/<id>/cancel-park``      ``{}`` → ``{session, cancelled}``: end a park
                                        (the provider's usage limit; docs/limits.md)
``POST /sessions/<id>/resume``           ``{}`` → ``{session, resumed}``: a session a
                                         limit stopped takes deliveries again
``POST /sessions/<id>/asks/<ask>``       ``{decision}``: answer a permission ask of the
                                         session, forwarded to the router holding it
=======================================  ==================================================

A send, an abort, a resume, a read of the messages or the live view for a
session another local router holds is forwarded to it over its private
socket (:class:`router.board.service.LocalBoard`; a live view is relayed as
it streams, ``Last-Event-ID`` passed on; ``?router=NAME`` names the router
when several hold a session of that id).

``list``, ``send`` and ``read`` (messages and live) go through the plug-in
layer's channel dispatch (``PluginLayer.dispatch``): the channel is named by
the ``x-router-channel`` header, ``webui`` when absent (``router send``
names ``cli``), so a switched-off channel refuses ``channel-off`` (503) with
its recovery command. Creating and aborting are not channel operations.

Guards, for a server on a loopback port that a browser can reach: the
``Host`` header must name the loopback address and port the server listens
on (``bad-host``, 421: a DNS-rebinding page cannot read or write through
it); on the TCP port every route but ``GET /healthz`` and the page's shell
(``GET /``, its manifest, worker and icons: :data:`OPEN_ROUTES`; they hold
no data) takes ``Authorization: Bearer TOKEN`` (``no-token`` /
``bad-token``, 401; :mod:`router.board.access`), checked after the
``Host``, so a token sent to another host's name is refused 421; and every ``POST`` must be ``Content-Type: application/json``
(``bad-content-type``, 415: a cross-site form cannot post without a CORS
preflight, which this server never grants).

A delivery's answer (``POST .../messages``): 200 with the answer
(``status`` ``delivered`` or ``dropped``, ``fromRecord``, and ``reply``
when ``wait`` asked for a container session's result); 503 with the
``eventId`` when it went unanswered (resend the same ``eventId``); a
refusal otherwise.

Error handling: a :class:`~router.errors.Refusal` a route raises is answered
with its code, sentence and data, at the status :data:`STATUS` names; a bug
in a route is logged and answered 500 ``internal``; the server goes on. The
live stream ends with a ``lagged`` event on any :class:`router._fanout.Lagged`
(the live view's or the host's events).
"""

from __future__ import annotations

import logging
import uuid
from urllib.parse import quote
from typing import Any, AsyncIterator, Awaitable, Callable, Final, Mapping

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from router import asks
from router._fanout import Lagged
from router.api.shell import OPEN_ROUTES as SHELL_ROUTES, shell_blueprint
from router.board.access import check_bearer
from router.board.service import FORWARDED_HEADER, LocalBoard
from router.errors import Refusal
from router.plugins.broker import Answer
from router.plugins.channels import WEB_OFF_STATUS
from router.plugins.layer import PluginLayer

from router.turns.core import Answered, Unanswered
from router.turns.requests import SendRequest, send_request_from_body
from router.turns.router import TurnRouter
from wire.json import JsonError, dumps, loads

__all__ = ["ApiConfig", "BadBody", "STATUS", "make_app", "parse_body", "status_of"]

log = logging.getLogger("router.api")

#: The largest request body (ours: a message of ``MAX_TEXT_CHARS`` with room).
MAX_BODY_BYTES: Final = 1024 * 1024
#: The header that names the channel a request comes through.
CHANNEL_HEADER: Final = "x-router-channel"
DEFAULT_CHANNEL: Final = "webui"

#: Refusal code -> HTTP status. Codes not here: 409 for the plug-in layer's
#: launch refusals, 500 otherwise.
STATUS: Final[Mapping[str, int]] = {
    "bad-body": 400,
    "not-json": 400,
    "bad-delivery": 400,
    "bad-query": 400,
    "bad-session": 400,
    "unknown-operation": 400,
    "bad-host": 421,
    "no-token": 401,
    "bad-token": 401,
    "ambiguous-session": 409,
    "unknown-router": 404,
    "holder-unreachable": 503,
    "bad-content-type": 415,
    "too-large": 413,
    "not-found": 404,
    "unknown-session": 404,
    "method-not-allowed": 405,
    "event-id-conflict": 409,
    # A limit stopped the session: unanswered (with the eventId), but not
    # for resending now; the person resumes the session first.
    "session-stopped": 409,
    "session-exists": 409,
    "abort-unsupported": 409,
    "harness-unsupported": 409,
    "no-host": 409,
    "limit-reached": 429,
    "limit-check-failed": 429,
    "channel-off": WEB_OFF_STATUS,
    "channel-failed": 500,
    "internal": 500,
    # Unanswered deliveries: resend with the same eventId.
    "no-answer": 503,
    "row-refused": 503,
    "mod-not-connected": 503,
    "link-closed": 503,
    "session-closed": 503,
    "inbox-full": 503,
    "host-not-running": 503,
    "mod-error": 502,
}


def status_of(code: str, default: int = 500) -> int:
    return STATUS.get(code, default)


def _error(code: str, message: str, status: int | None = None, **extra: Any) -> Response:
    body = {"error": code, "message": message, **extra}
    return Response(dumps(body), status=status or status_of(code), content_type="application/json")


def _refusal_body(refusal: Refusal) -> dict[str, Any]:
    """A refusal at the HTTP edge: ``{...data, "error": code, "message"}``."""
    return {**refusal.data, "error": refusal.code, "message": refusal.message}


def _refused(refusal: Refusal, default: int = 500) -> Response:
    return _json(_refusal_body(refusal), status_of(refusal.code, default))


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status=status, content_type="application/json")


@attrs.frozen(kw_only=True)
class CoreAnswer:
    """What the core answered a channel operation: a status and a body, or
    (``live``) leave to open the session's live view."""

    status: int = 200
    body: Any = None
    live: str | None = None


@attrs.frozen(kw_only=True)
class ApiConfig:
    #: The harness a new session's launch must route to: the one that runs
    #: on this router's host (``echo`` for the in-process daemon).
    harness: str = "echo"
    #: The launcher in force (None: none; one daemon): with one, a launch
    #: may route to any harness a daemon runs (not the mod link's).
    launcher: str | None = None
    #: The instance ``POST /sessions`` launches when the body names none.
    default_instance: str = "default"
    #: Seconds of quiet before the live stream's keep-alive comment.
    live_keepalive: float = 15.0


class BadBody(Refusal):
    """A request body that is not JSON or not the route's shape
    (``bad-body``); a route catches it to name the shape it takes."""

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__("bad-body", message, **data)


_BadBody = BadBody


def parse_body(
    raw: bytes,
    spec: Mapping[str, Callable[[Any], bool]],
    *,
    required: tuple[str, ...] = (),
    empty_ok: bool = False,
) -> dict[str, Any]:
    """A request body as an object of ``spec``'s fields (see
    :func:`_fields`); an empty body is ``{}`` when ``empty_ok``. Raises
    :class:`BadBody`, and nothing else, on any other input."""
    if empty_ok and not raw.strip():
        return {}
    try:
        body = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, JsonError, RecursionError) as exc:
        raise BadBody(f"the body is not JSON text: {exc}") from None
    return _fields(body, spec, required)


def _fields(body: Any, spec: Mapping[str, Callable[[Any], bool]], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``body`` checked as an object with only ``spec``'s keys, each passing
    its check; raises :class:`BadBody` naming what is wrong."""
    if type(body) is not dict:
        raise _BadBody("the body must be a JSON object")
    unknown = sorted(set(body) - set(spec))
    if unknown:
        raise _BadBody(f"unknown field(s) {', '.join(map(repr, unknown))}; the fields are {', '.join(spec)}")
    for name in required:
        if name not in body:
            raise _BadBody(f"{name!r} is required")
    for name, value in body.items():
        if not spec[name](value):
            raise _BadBody(f"{name!r} has the wrong type or value")
    return body


def _is_str(value: Any) -> bool:
    return type(value) is str


#: The routes the TCP port serves without a token: they hold no data.
OPEN_ROUTES: Final = frozenset({"/healthz"}) | SHELL_ROUTES  # the page and its shell: router/api/shell.py


def make_app(router: TurnRouter, layer: PluginLayer, config: ApiConfig, allowed_hosts: Callable[[], set[str]], *,
             token: str | None = None, board: LocalBoard | None = None) -> QuartTrio:
    """The app. ``allowed_hosts()`` names the ``Host`` values to accept
    (known once the port is bound); ``token``, when given, is required on
    every route but :data:`OPEN_ROUTES`; ``board``, when given, lists every
    local router's sessions and forwards to their holders."""
    app = QuartTrio("router.api")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = 60

    # ------------------------------------------------------------------ the core's caller

    async def core(operation: str, args: Mapping[str, Any]) -> CoreAnswer:
        try:
            if operation == "list":
                if board is None:
                    return CoreAnswer(body={"sessions": await router.list()})
                if args.get("scope") == "router":
                    return CoreAnswer(body={"sessions": await board.own()})
                return CoreAnswer(body=(await board.listing()).to_json())
            if operation == "read":
                if args.get("live"):
                    await router.session(args["session"])  # refuse before the stream starts
                    return CoreAnswer(live=args["session"])
                return CoreAnswer(body=await router.messages(args["session"]))
            if operation == "send":
                return await _send(args)
        except Refusal as refusal:
            return CoreAnswer(status=status_of(refusal.code), body=_refusal_body(refusal))
        raise AssertionError(f"the channel passed {operation!r}")  # pass_through allows list/send/read only

    async def _send(args: Mapping[str, Any]) -> CoreAnswer:
        send = SendRequest.from_args(args)
        reply, body = await router.send(send.session, send.text, **send.send_arguments())
        if isinstance(reply, Answered):
            return CoreAnswer(body=body)
        default = 503 if isinstance(reply, Unanswered) else 409
        return CoreAnswer(status=status_of(reply.code, default), body=body)

    async def dispatch(operation: str, args: Mapping[str, Any]) -> CoreAnswer | Response:
        channel = request.headers.get(CHANNEL_HEADER, DEFAULT_CHANNEL).strip() or DEFAULT_CHANNEL
        answer = await layer.dispatch(channel, operation, args, core)
        if isinstance(answer, Refusal):
            return _error(answer.code, answer.message, status_of(answer.code, 500))
        assert isinstance(answer, Answer)
        if not isinstance(answer.value, CoreAnswer):
            log.error("the %s channel answered %r, not the core's answer", channel, answer.value)
            return _error("channel-failed", f"the {channel} channel answered something other than the core's answer")
        return answer.value

    def respond(answer: CoreAnswer | Response) -> Response:
        if isinstance(answer, Response):
            return answer
        return _json(answer.body, answer.status)

    async def json_body(
        spec: Mapping[str, Callable[[Any], bool]], *, required: tuple[str, ...] = (), empty_ok: bool = False
    ) -> dict[str, Any]:
        raw = await request.get_data(cache=False)
        assert isinstance(raw, bytes)
        return parse_body(raw, spec, required=required, empty_ok=empty_ok)

    # ------------------------------------------------------------------ guards

    @app.before_request
    async def guard() -> Response | None:
        refused = refusal_at_the_door()
        if refused is None:
            return None
        response = _error(refused.code, refused.message)
        if refused.code in ("no-token", "bad-token"):
            response.headers["WWW-Authenticate"] = "Bearer"
        # Refusal before its body was read: the connection is not reused
        # (a keep-alive connection with an unread body in it was seen to
        # hang the next request on it).
        response.headers["Connection"] = "close"
        return response

    def refusal_at_the_door() -> Refusal | None:
        host = request.headers.get("host", "")
        if host not in allowed_hosts():
            return Refusal(
                "bad-host",
                f"this server answers requests for {' or '.join(sorted(allowed_hosts()))} only, not {host!r}",
            )
        if token is not None and not (request.method in ("GET", "HEAD") and request.path in OPEN_ROUTES):
            refused = check_bearer(request.headers, token)
            if refused is not None:
                return refused
        if request.method == "POST":
            mimetype = (request.mimetype or "").lower()
            if mimetype != "application/json":
                return Refusal(
                    "bad-content-type", f"POST takes Content-Type: application/json, not {mimetype or 'none'!r}"
                )
        return None

    # ------------------------------------------------------------------ routes

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"ok": True})

    app.register_blueprint(shell_blueprint())  # GET / and the page's shell; POST /render

    @app.get("/sessions")
    async def list_sessions() -> Response:
        scope = request.args.get("scope")
        if scope not in (None, "router", "board"):
            return _error("bad-query", f"scope is 'router' or 'board', not {scope!r}")
        return respond(await dispatch("list", {"scope": scope} if scope else {}))

    @app.get("/board/live")
    async def board_live() -> Response:
        if board is None:
            return _error("not-found", "this router serves no board")
        resumed = request.headers.get("last-event-id")
        response = Response(_board_events(board, resumed), content_type="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        response.timeout = None
        return response

    async def elsewhere(session: str, route: str, body: Mapping[str, Any] | None = None, *,
                        stream: bool = False) -> Response | None:
        """The holder's answer when another local router holds ``session``
        (forwarded there, see :mod:`router.board.service`: ``POST`` with
        ``body``, else ``GET``; ``stream`` for a live view); None to serve
        it here."""
        if board is None or request.headers.get(FORWARDED_HEADER):
            return None
        path = f"/sessions/{quote(session, safe='')}/{route}"
        try:
            reached = await board.holder(session, named=request.args.get("router") or None)
            if reached is None:
                return None
            headers = {key: request.headers[key] for key in (CHANNEL_HEADER, "last-event-id") if key in request.headers}
            if stream:
                status, kind, chunks = await board.forward_stream(reached, path, headers)
                response = Response(chunks, status=status, content_type=kind,
                                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
                response.timeout = None
                return response
            if body is None:
                status, content = await board.forward(reached, "GET", path, b"", headers)
            else:
                headers["content-type"] = "application/json"
                status, content = await board.forward(reached, "POST", path, dumps(dict(body)).encode(), headers)
        except Refusal as refused:
            extra = {"eventId": body["eventId"]} if body is not None and "eventId" in body else {}
            return _error(refused.code, refused.message, status_of(refused.code, 409), **extra)
        return Response(content, status=status, content_type="application/json")

    @app.post("/sessions")
    async def create_session() -> Response:
        try:
            body = await json_body({"id": _is_str, "instance": _is_str, "harness": _is_str}, empty_ok=True)
        except _BadBody as exc:
            return _error("bad-body", f"POST /sessions takes {{id?, instance?, harness?}}: {exc.message}")
        instance = body.get("instance", config.default_instance)
        session_id = body.get("id") or str(uuid.uuid4())
        launch = await layer.launch(instance, session=session_id)
        if isinstance(launch, Refusal):
            return _error(launch.code, launch.message, status_of(launch.code, 409))
        launched = config.launcher is not None and launch.reach.get("via") != "mod-link"
        if launch.harness != config.harness and not launched:
            return _error(
                "harness-unsupported",
                f"instance {instance!r} routes to the {launch.harness!r} harness, but this router runs its "
                f"sessions on the {config.harness!r} harness; route the instance there with `router routes set`",
            )
        try:
            created = await router.create(session_id, launch=launch, harness=body.get("harness"))
        except Refusal as refusal:
            return _refused(refusal)
        return _json({**created, "instance": instance, "harness": launch.harness}, 201)

    @app.post("/sessions/<session>/messages")
    async def send(session: str) -> Response:
        send = send_request_from_body(await request.get_data(cache=False), session)
        if isinstance(send, Refusal):
            return _error(send.code, send.message)
        forwarded = await elsewhere(session, "messages", send.api_body())
        if forwarded is not None:
            return forwarded
        return respond(await dispatch("send", send.to_args()))

    @app.get("/sessions/<session>/messages")
    async def read(session: str) -> Response:
        forwarded = await elsewhere(session, "messages")
        if forwarded is not None:
            return forwarded
        return respond(await dispatch("read", {"session": session}))

    @app.get("/sessions/<session>/live")
    async def live(session: str) -> Response:
        forwarded = await elsewhere(session, "live", stream=True)  # the board's: another router's session
        if forwarded is not None:
            return forwarded
        answer = await dispatch("read", {"session": session, "live": True})
        if isinstance(answer, Response) or answer.live is None:
            return respond(answer)
        response = Response(
            _events(router, session, request.headers.get("last-event-id"), config.live_keepalive),
            content_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        response.timeout = None
        return response

    @app.post("/sessions/<session>/abort")
    async def abort(session: str) -> Response:
        try:
            body = await json_body({"operationId": _is_str}, empty_ok=True)
        except _BadBody as exc:
            return _error("bad-body", f"POST /sessions/<id>/abort takes {{operationId?}}: {exc.message}")
        forwarded = await elsewhere(session, "abort", body)
        if forwarded is not None:
            return forwarded
        try:
            return _json(await router.abort(session, body.get("operationId")))
        except Refusal as refusal:
            return _refused(refusal)

    async def session_action(session: str, route: str, act: Callable[[str], Awaitable[dict[str, Any]]]) -> Response:
        """``POST /sessions/<id>/<route> {}``: ``act(session)`` here, or at
        the router that holds the session; a refusal 409 unless it names one."""
        try:
            await json_body({}, empty_ok=True)
        except _BadBody as exc:
            return _error("bad-body", f"POST /sessions/<id>/{route} takes {{}}: {exc.message}")
        forwarded = await elsewhere(session, route, {})
        if forwarded is not None:
            return forwarded
        try:
            return _json(await act(session))
        except Refusal as refusal:
            return _refused(refusal, 409)

    @app.post("/sessions/<session>/resume")
    async def resume(session: str) -> Response:
        return await session_action(session, "resume", router.resume)

    @app.post("/sessions/<session>/cancel-park")
    async def cancel_park(session: str) -> Response:
        """End the park the provider's usage limit put the session in
        (docs/limits.md): ``{session, cancelled[, dropped, was]}``."""
        return await session_action(session, "cancel-park", router.cancel_park)

    # ------------------------------------------------------------------ asks (router.asks)
    # GET /asks: {"asks": [ask, ...]} waiting on a person, oldest first
    # (?all=1: the answered and expired ones kept too); POST /asks/<id>
    # {"decision": "allow" | "deny", "by"?}: the ask as answered, or a refusal
    # (404 unknown-ask, 409 ask-answered / ask-expired, 400 bad-decision).

    @app.get("/asks")
    async def list_asks() -> Response:
        every = request.args.get("all", "") not in ("", "0")
        return _json({"asks": asks.list_asks(router.registry.sessions(), every=every)})

    async def ask_body() -> dict[str, Any]:
        try:
            return await json_body({"decision": _is_str, "by": _is_str}, required=("decision",))
        except _BadBody as exc:
            raise Refusal("bad-body", f"POST /asks/<id> takes {{decision, by?}}: {exc.message}") from None

    def answered_here(ask: str, body: Mapping[str, Any]) -> Response:
        by = body.get("by") or request.headers.get(CHANNEL_HEADER, "http").strip() or "http"
        try:
            answered = asks.answer_ask(router.registry.sessions(), ask, body["decision"], by=by)
        except Refusal as refusal:
            return _json(_refusal_body(refusal), asks.ASK_STATUS.get(refusal.code, 409))
        return _json({"ask": answered})

    @app.post("/asks/<ask>")
    async def answer_ask(ask: str) -> Response:
        return answered_here(ask, await ask_body())

    @app.post("/sessions/<session>/asks/<ask>")
    async def answer_session_ask(session: str, ask: str) -> Response:
        """An ask of ``session`` answered through any router of the board
        (forwarded to the router that holds the session, as a send is)."""
        body = await ask_body()
        forwarded = await elsewhere(session, f"asks/{quote(ask, safe='')}", body)
        if forwarded is not None:
            return forwarded
        return answered_here(ask, body)

    # ------------------------------------------------------------------ errors

    @app.errorhandler(Refusal)
    async def refused(exc: Refusal) -> Response:
        return _refused(exc)

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        code = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}.get(exc.code or 0, "bad-body")
        text = {
            404: f"{request.path} is not a route of the router's API (see GET /)",
            405: f"{request.method} is not allowed on {request.path}",
            413: f"the body is larger than {MAX_BODY_BYTES} bytes",
        }.get(exc.code or 0, exc.description or "the request was refused")
        return _error(code, text, exc.code or 400)

    @app.errorhandler(Exception)
    async def crashed(exc: Exception) -> Response:
        log.exception("API route %s failed", request.path, exc_info=exc)
        return _error("internal", "the router failed on this request; it was logged, and the router goes on")

    return app


#: Seconds of quiet after which the live stream sends a comment line, so a
#: proxy or a client with an idle timeout keeps it open (ours: under the 30
#: to 60 s idle timeouts proxies commonly default to).
KEEPALIVE_SECONDS: Final = 15.0
#: The comment line itself (an SSE line starting ``:`` is ignored by readers).
KEEPALIVE: Final = b": keep-alive\n\n"


def _sse(data: Any, event: str | None = None, id: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    if id is not None:
        head += f"id: {id}\n"
    return f"{head}data: {dumps(data)}\n\n".encode()


async def _board_events(board: LocalBoard, resumed: str | None) -> AsyncIterator[bytes]:
    """The board's live stream as server-sent events (``event:`` its type):
    ``snapshot`` first, then ``session-added``, ``session-changed``,
    ``session-removed`` and ``routers-skipped``. Every event has an id
    (``<stream>-<n>``), but the board is state, not history: this router
    keeps no past events, so a client that reconnects with
    ``Last-Event-ID`` gets ``reset`` and then a fresh snapshot, which is
    everything it missed."""
    stream = uuid.uuid4().hex[:8]
    if resumed is not None:
        yield f"id: {stream}-0\n".encode() + _sse({"type": "reset", "lastEventId": resumed}, "reset")
    n = 0
    async for event in board.watch():
        n += 1
        yield f"id: {stream}-{n}\n".encode() + _sse(event, event["type"])


async def _events(
    router: TurnRouter, session: str, since: str | None = None, keepalive: float = KEEPALIVE_SECONDS
) -> AsyncIterator[bytes]:
    """The live view as server-sent events, each with an ``id``.

    A fresh stream: ``snapshot`` first, then one ``data:`` event per item.
    A resumed one (``since``, the client's ``Last-Event-ID``, that the
    view can resume from): the items the client missed, then the live ones,
    nothing twice. An id the server cannot resume from: ``reset`` (with the
    code ``stale-event-id`` or ``bad-event-id``), then the fresh stream.
    ``lagged`` (then the end) when the stream fell behind, ``closed`` when
    the session closed; a comment line after ``keepalive`` seconds of quiet.
    A client that hangs up cancels this (Quart-Trio cancels the response),
    which ends the subscription."""
    try:
        async with router.live(session, since) as stream:
            if stream.reset is not None:
                yield _sse({"type": "reset", "error": stream.reset.code, "message": stream.reset.message}, "reset")
            if stream.snapshot is not None:
                yield _sse({"type": "snapshot", **stream.snapshot}, "snapshot", stream.snapshot_id)
            for id, item in stream.replay:
                yield _sse(item, id=id)
            while True:
                pairs: list[tuple[str, Any]] | None = None
                quiet = True
                with trio.move_on_after(keepalive):
                    pairs = await stream.receive()  # cancel-safe: a batch is never half taken
                    quiet = False
                if quiet:
                    yield KEEPALIVE
                    continue
                if pairs is None:
                    break
                for id, item in pairs:
                    yield _sse(item, id=id)
        yield _sse({"type": "closed", "session": session}, "closed")
    except Lagged as lagged:
        yield _sse({"type": "lagged", "error": lagged.code, "message": lagged.message}, "lagged")
    except Refusal as refusal:
        yield _sse({**_refusal_body(refusal), "type": "error"}, "error")
