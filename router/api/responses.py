"""The API's answers: JSON bodies, and a refusal at one status from one table.

A refusal at the HTTP edge is ``{"error": code, "message": sentence,
...data}`` (:meth:`router.errors.Refusal.to_json`, the one spelling of a
refusal at every JSON edge), at the status :data:`STATUS` names for its
code; a code not in the table answers :data:`DEFAULT_STATUS`. A route
refuses by raising the :class:`~router.errors.Refusal`: the app's one
handler (:func:`router.api.guards.install`) answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Mapping

from router.asks import ASK_STATUS
from router.errors import Refusal
from router.plugins.channels import WEB_OFF_STATUS
from router.notify import NOTIFY_STATUS
from router.remote import REMOTE_STATUS
from wire.json import dumps

if TYPE_CHECKING:  # the table and status_of serve the private socket's front (router.api.front) without Quart
    from quart import Response

__all__ = ["DEFAULT_STATUS", "STATUS", "json_response", "refusal_response", "status_of"]

#: The status of a refusal whose code :data:`STATUS` does not name: the
#: request is well formed and understood, but the router's state says no
#: (the plug-in layer's launch refusals, a session action it cannot do).
#: A bug is never a refusal: it answers 500 ``internal``.
DEFAULT_STATUS: Final = 409

#: Refusal code -> HTTP status.
STATUS: Final[Mapping[str, int]] = {
    "bad-body": 400,
    "not-json": 400,
    "bad-delivery": 400,
    "empty-message": 400,
    "bad-query": 400,
    "bad-session": 400,
    "bad-upgrade": 400,
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
    "too-many-streams": 429,
    "too-many-connections": 503,
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
    # The store failed transiently past its retries (router/_transient.py).
    "store-unavailable": 503,
    "mod-error": 502,
    # Sessions in git worktrees (router.api.routes.places, docs/sessions.md);
    # their other refusals (unsaved-work, branch-exists ...) answer 409.
    "bad-session-id": 400,
    "bad-name": 400,
    "bad-where": 400,
    "bad-branch": 400,
    "unknown-ref": 400,
    "unknown-harness": 400,
    "not-a-repository": 400,
    "unknown-project": 404,
    "not-a-project": 404,
    "unknown-place": 404,
    "worktree-gone": 410,
    "git-failed": 500,
    "tmux-failed": 500,
    "bad-projects": 500,
    # An answer to a permission ask (router.asks).
    **ASK_STATUS,
    # Pairing, devices and the remote gate (router.remote, docs/remote.md).
    **REMOTE_STATUS,
    # Notifications (router.notify, docs/notifications.md).
    **NOTIFY_STATUS,
}


def status_of(code: str, default: int = DEFAULT_STATUS) -> int:
    return STATUS.get(code, default)


def json_response(value: Any, status: int = 200) -> Response:
    from quart import Response

    return Response(dumps(value), status=status, content_type="application/json")


def refusal_response(refusal: Refusal) -> Response:
    """``refusal`` answered: its JSON at its code's status."""
    return json_response(refusal.to_json(), status_of(refusal.code))
