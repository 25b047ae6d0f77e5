"""The channel operations (``list``, ``send``, ``read``) through the plug-in
layer's channel dispatch (``PluginLayer.dispatch``).

The channel is named by the ``x-router-channel`` header, ``webui`` when
absent (``router send`` names ``cli``), so a switched-off channel refuses
``channel-off`` (503) with its recovery command. The layer calls
:func:`core` back with the operation; what the core answers comes back as a
:class:`CoreAnswer`. Creating and aborting are not channel operations.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Mapping

import attrs
from quart import Response, request

from router.api.context import ApiContext, current
from router.api.responses import json_response, status_of
from router.errors import Refusal
from router.plugins.broker import ModuleAnswer
from router.turns.core import Answered, DeliveryUnanswered
from router.turns.requests import SendRequest

__all__ = ["CHANNEL_HEADER", "DEFAULT_CHANNEL", "CoreAnswer", "dispatch", "respond"]

log = logging.getLogger("router.api")

#: The header that names the channel a request comes through.
CHANNEL_HEADER: Final = "x-router-channel"
DEFAULT_CHANNEL: Final = "webui"


@attrs.frozen(kw_only=True)
class CoreAnswer:
    """What the core answered a channel operation: a status and a body, or
    (``live``) leave to open the session's live view."""

    status: int = 200
    body: Any = None
    live: str | None = None


async def _core(api: ApiContext, operation: str, args: Mapping[str, Any]) -> CoreAnswer:
    """The operation done by the router (the channel passed it on)."""
    try:
        if operation == "list":
            return await _list(api, args)
        if operation == "read":
            if args.get("live"):
                await api.router.session(args["session"])  # refuse before the stream starts
                return CoreAnswer(live=args["session"])
            return CoreAnswer(body=await api.router.messages(args["session"]))
        if operation == "send":
            return await _send(api, args)
    except Refusal as refusal:
        return CoreAnswer(status=status_of(refusal.code), body=refusal.to_json())
    raise AssertionError(f"the channel passed {operation!r}")  # pass_through allows list/send/read only


async def _list(api: ApiContext, args: Mapping[str, Any]) -> CoreAnswer:
    if api.board is None:
        return CoreAnswer(body={"sessions": await api.router.list()})
    if args.get("scope") in ("router", "unshared"):
        return CoreAnswer(body={"sessions": await api.board.own(shared=args.get("scope") == "router")})
    return CoreAnswer(body=(await api.board.listing()).to_json())


async def _send(api: ApiContext, args: Mapping[str, Any]) -> CoreAnswer:
    send = SendRequest.from_args(args)
    reply, body = await api.router.send(send.session, send.text, **send.send_arguments())
    if isinstance(reply, Answered):
        return CoreAnswer(body=body)
    # DeliveryUnanswered: resend with the same eventId (503 unless its code says);
    # refused: not for resending.
    return CoreAnswer(status=status_of(reply.code, 503 if isinstance(reply, DeliveryUnanswered) else 409), body=body)


async def dispatch(operation: str, args: Mapping[str, Any]) -> CoreAnswer:
    """``operation`` through this request's channel. Raises the channel's
    refusal."""
    api = current()
    channel = request.headers.get(CHANNEL_HEADER, DEFAULT_CHANNEL).strip() or DEFAULT_CHANNEL

    async def core(operation: str, args: Mapping[str, Any]) -> CoreAnswer:
        return await _core(api, operation, args)

    answer = await api.layer.dispatch(channel, operation, args, core)
    if isinstance(answer, Refusal):
        raise answer
    assert isinstance(answer, ModuleAnswer)
    if not isinstance(answer.value, CoreAnswer):
        log.error("the %s channel answered %r, not the core's answer", channel, answer.value)
        raise Refusal("channel-failed", f"the {channel} channel answered something other than the core's answer")
    return answer.value


def respond(answer: CoreAnswer) -> Response:
    return json_response(answer.body, answer.status)
