"""ACP, the Agent Client Protocol (JSON-RPC 2.0 on stdio, protocol version 1),
both ways: the daemon's ``acp`` adapter drives an ACP agent, and
``router acp`` is one (docs/acp.md).

The schema is the Python package ``agent-client-protocol`` 0.12.1's generated
models (``acp.schema``, from the protocol's JSON schema v1.19.0); only its
models are used: its transport is asyncio, ours is :mod:`router.acp.peer` on
Trio around the sans-IO :mod:`router.acp.jsonrpc`.
"""

from __future__ import annotations

from typing import Any

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "acp.meta": "PROTOCOL_VERSION",
    "router.acp.jsonrpc": (
        "INTERNAL_ERROR INVALID_PARAMS INVALID_REQUEST METHOD_NOT_FOUND PARSE_ERROR ErrorResponse "
        "JsonRpcConnection LocalProtocolError Malformed Notification Request Response"
    ),
    "router.acp.peer": "PeerClosed PendingCall RpcError RpcPeer RpcPeerStatistics",
    "router.acp.projection": "STOP_REASONS TurnProjection outcome_of parse_update usage_of",
}

__all__ = sorted([*names(_FACE), "permission_request"])
__getattr__, __dir__ = face(__name__, _FACE)


def permission_request(params: Any) -> dict[str, Any] | str:
    """``session/request_permission``'s params, checked against the schema:
    ``{"sessionId", "tool": {"toolCallId", "title", "input"}, "options":
    [{"optionId", "name", "kind"}]}``, or the reason they are not valid."""
    from acp.schema import RequestPermissionRequest
    from pydantic import ValidationError

    from wire.json import is_json

    try:
        request = RequestPermissionRequest.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"session/request_permission does not match the ACP schema at {where or 'the top'}: " \
               f"{first.get('msg', exc)}"
    call = request.tool_call
    raw = call.raw_input if is_json(call.raw_input) else None
    return {
        "sessionId": request.session_id,
        "tool": {"toolCallId": call.tool_call_id, "title": call.title, "input": raw},
        "options": [{"optionId": o.option_id, "name": o.name, "kind": str(getattr(o.kind, "value", o.kind))}
                    for o in request.options],
    }
