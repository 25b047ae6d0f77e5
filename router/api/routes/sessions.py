"""Sessions: the board's list, creating one, and one session's messages,
live view, abort, resume and cancel-park.

A route for a session another local router holds is forwarded to it
(:mod:`router.api.forward`); ``list``, ``send`` and ``read`` go through the
plug-in layer's channel dispatch (:mod:`router.api.dispatch`).

``<id>`` is any session id the board lists, URL-encoded (``/`` included:
the routes take ``<path:session>``). ``POST /sessions`` refuses an id that
cannot be one (``bad-session-id``: :func:`router.worktrees.session_id_refusal`)
and a ``harness`` that is unknown, off, or not the launcher's at the launch,
not at the first message; a body with ``project`` starts a session in a git
worktree (:mod:`router.api.routes.places`).
"""

from __future__ import annotations

import uuid
from typing import Any, Awaitable, Callable

from quart import Blueprint, Response, request

from router.api.bodies import AbortBody, CreateSessionBody, EmptyBody, converter, read_body
from router.api.context import current
from router.api.dispatch import dispatch, respond
from router.api.events import live_events
from router.api.forward import elsewhere
from router.api.guards import credential
from router.api.responses import json_response
from router.api.streams import stream_response
from router.errors import Refusal
from router.turns.requests import send_request_from_body
from router.worktrees import launch_harness_refusal, session_id_refusal
from wire.json import JsonError, loads

__all__ = ["blueprint"]

blueprint = Blueprint("sessions", __name__)


@blueprint.get("/sessions")
async def list_sessions() -> Response:
    scope = request.args.get("scope")
    if scope not in (None, "router", "unshared", "board"):
        raise Refusal("bad-query", f"scope is 'router', 'unshared' or 'board', not {scope!r}")
    return respond(await dispatch("list", {"scope": scope} if scope else {}))


@blueprint.post("/sessions")
async def create_session() -> Response:
    api = current()
    raw = await request.get_data(cache=False)
    if _names_a_project(raw):  # a session in a new git worktree (docs/sessions.md)
        from router.api.routes.places import new_session

        return await new_session(raw)
    body = read_body(raw, CreateSessionBody, "POST /sessions")
    instance = body.instance if body.instance is not None else api.config.default_instance
    session_id = body.id if body.id is not None else str(uuid.uuid4())  # an empty id is refused, not replaced
    refused = session_id_refusal(session_id)
    if refused is None and body.harness is not None:  # at launch, not at the first message
        refused = launch_harness_refusal(api.layer, api.config.launcher, body.harness)
    if refused is not None:
        raise refused
    launch = await api.layer.launch(instance, session=session_id)
    if isinstance(launch, Refusal):
        raise launch
    launched = api.config.launcher is not None and launch.reach.get("via") != "mod-link"
    if launch.harness != api.config.harness and launch.harness not in api.config.also and not launched:
        raise Refusal(
            "harness-unsupported",
            f"instance {instance!r} routes to the {launch.harness!r} harness, but this router runs its "
            f"sessions on the {api.config.harness!r} harness; route the instance there with `router routes set`",
        )
    created = await api.router.create(session_id, launch=launch, harness=body.harness)
    return json_response({**created, "instance": instance, "harness": launch.harness}, 201)


def _names_a_project(raw: bytes) -> bool:
    """Whether a ``POST /sessions`` body is an object with ``project``."""
    try:
        value = loads(raw.decode("utf-8")) if raw.strip() else None
    except (UnicodeDecodeError, JsonError, RecursionError):
        return False
    return type(value) is dict and "project" in value


@blueprint.post("/sessions/<path:session>/messages")
async def send(session: str) -> Response:
    send = send_request_from_body(await request.get_data(cache=False), session)
    if isinstance(send, Refusal):
        raise send
    forwarded = await elsewhere(session, "messages", send.api_body())
    if forwarded is not None:
        return forwarded
    return respond(await dispatch("send", send.to_args()))


@blueprint.get("/sessions/<path:session>/messages")
async def read(session: str) -> Response:
    forwarded = await elsewhere(session, "messages")
    if forwarded is not None:
        return forwarded
    return respond(await dispatch("read", {"session": session}))


@blueprint.get("/sessions/<path:session>/live")
async def live(session: str) -> Response:
    forwarded = await elsewhere(session, "live", stream=True)  # the board's: another router's session
    if forwarded is not None:
        return forwarded
    answer = await dispatch("read", {"session": session, "live": True})
    if answer.live is None:
        return respond(answer)
    api = current()
    slot = api.streams.take(credential())
    return stream_response(
        live_events(api.router, session, request.headers.get("last-event-id"), api.config.live_keepalive), slot)


@blueprint.post("/sessions/<path:session>/abort")
async def abort(session: str) -> Response:
    body = read_body(await request.get_data(cache=False), AbortBody, "POST /sessions/<id>/abort")
    forwarded = await elsewhere(session, "abort", converter.unstructure(body))
    if forwarded is not None:
        return forwarded
    return json_response(await current().router.abort(session, body.operation_id))


async def _session_action(session: str, route: str, act: Callable[[str], Awaitable[dict[str, Any]]]) -> Response:
    """``POST /sessions/<id>/<route> {}``: ``act(session)`` here, or at the
    router that holds the session."""
    read_body(await request.get_data(cache=False), EmptyBody, f"POST /sessions/<id>/{route}")
    forwarded = await elsewhere(session, route, {})
    if forwarded is not None:
        return forwarded
    return json_response(await act(session))


@blueprint.post("/sessions/<path:session>/resume")
async def resume(session: str) -> Response:
    """A session a limit stopped takes deliveries again:
    ``{session, resumed}``."""
    return await _session_action(session, "resume", current().router.resume)


@blueprint.post("/sessions/<path:session>/cancel-park")
async def cancel_park(session: str) -> Response:
    """End the park the provider's usage limit put the session in
    (docs/limits.md): ``{session, cancelled[, dropped, was]}``."""
    return await _session_action(session, "cancel-park", current().router.cancel_park)
